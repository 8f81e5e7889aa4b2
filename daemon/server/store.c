/* SPDX-License-Identifier: MIT */
/* store: content-addressed volume storage on disk (see store.h). */
#include "server/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <openssl/evp.h>

#include "base/fdio.h"

#define ID_PREFIX "sha256:"
#define ID_PREFIX_LEN (sizeof(ID_PREFIX) - 1)
#define HEX_LEN 64
#define DIGEST_LEN 32
#define VOLUMES_DIR "volumes"
#define OWNERS_DIR ".owners"   /* hidden: never taken for a volume's file */
#define TMP_NAME ".tmp-XXXXXX"
#define NAME_MAX_LEN (HEX_LEN + 8)   /* hex digits and the longest extension */

_Static_assert(STORE_ID_LEN == ID_PREFIX_LEN + HEX_LEN, "an id is the prefix and the hex digest");

/* Where the format magics sit: NIfTI-1 ends its 348-byte header with "n+1\0";
 * NIfTI-2 puts "n+2\0" (then "\r\n\032\n") right after the 4-byte sizeof_hdr.
 * libnifti accepts a file on those four bytes, so they are what we check. */
#define NIFTI1_MAGIC_AT 344
#define NIFTI2_MAGIC_AT 4
#define MAGIC_LEN 4
#define HEAD_LEN (NIFTI1_MAGIC_AT + MAGIC_LEN)

static const struct {
	const char *name;
	const char *ext;
} kinds[] = {
	[STORE_NIFTI] = { "nifti", ".nii" },
	[STORE_NIFTI_GZ] = { "nifti-gz", ".nii.gz" },
	[STORE_TEXT] = { "text", ".txt" },
	[STORE_MIF] = { "mif", ".mif" },
	[STORE_MIF_GZ] = { "mif-gz", ".mif.gz" },
	[STORE_NPY] = { "npy", ".npy" },
};

#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

struct store {
	int dir_fd;     /* <root>/volumes, for fsync and the *at() calls */
	pthread_mutex_t owners_lock;   /* claims and forgets */
	char dir[];     /* its path, for mkstemp and the paths handed out */
};

struct store_writer {
	struct store *store;
	int fd;
	bool tmp_exists;        /* the temporary file is still to be removed */
	EVP_MD_CTX *md;
	uint64_t bytes;
	uint64_t max_bytes;
	int error;              /* first failure; later calls repeat it */
	bool text;              /* every byte so far is printable ASCII or whitespace */
	unsigned char head[HEAD_LEN];   /* the first bytes, where the magics are */
	char tmp[];             /* path of the temporary file */
};

const char *store_kind_name(enum store_kind kind)
{
	return (unsigned)kind < N_KINDS ? kinds[kind].name : "unknown";
}

/* ---- opening ---- */

/* mkdir -p: a fresh account may lack ~/.local/state, the default's parent. */
static int make_dirs(const char *path, mode_t mode, struct errbuf *err)
{
	char *copy = strdup(path);
	int rc = 0;

	if (!copy)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	for (char *p = copy + 1; rc == 0; p++) {
		char c = *p;

		if (c != '/' && c != '\0')
			continue;
		*p = '\0';
		if (mkdir(copy, mode) < 0 && errno != EEXIST)
			rc = errbuf_set(err, -errno, "", "cannot create directory %s: %s", copy,
					strerror(errno));
		if (c == '\0')
			break;
		*p = c;
	}
	free(copy);
	return rc;
}

/* Uploads cut off by the daemon's death (SIGKILL, crash) leave their
 * temporary files: nothing can finish them, so they go at start. */
static void remove_stale_uploads(int dir_fd)
{
	int fd = dup(dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d)))
		if (strncmp(e->d_name, ".tmp-", 5) == 0)
			unlinkat(dir_fd, e->d_name, 0);
	closedir(d);
}

int store_open(const char *root, struct store **ret, struct errbuf *err)
{
	size_t len = strlen(root) + sizeof("/" VOLUMES_DIR);
	struct store *s;
	int rc;

	*ret = NULL;
	s = malloc(sizeof(*s) + len);
	if (!s)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	snprintf(s->dir, len, "%s/%s", root, VOLUMES_DIR);
	rc = make_dirs(s->dir, 0700, err);
	if (rc == 0) {
		s->dir_fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (s->dir_fd < 0)
			rc = errbuf_set(err, -errno, "", "cannot open %s: %s", s->dir,
					strerror(errno));
		else
			remove_stale_uploads(s->dir_fd);
	}
	if (rc == 0 && pthread_mutex_init(&s->owners_lock, NULL) != 0) {
		close(s->dir_fd);
		rc = errbuf_set(err, -ENOMEM, "", "cannot create a mutex");
	}
	if (rc < 0) {
		free(s);
		return rc;
	}
	*ret = s;
	return 0;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	pthread_mutex_destroy(&s->owners_lock);
	close(s->dir_fd);
	free(s);
}

/* ---- writing ---- */

/* A full disk and a full quota are the client's "insufficient storage"
 * (-ENOSPC); other write errors are the server's (-EIO). */
static bool no_space(int e)
{
	return e == ENOSPC || e == EDQUOT;
}

static void writer_free(struct store_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp_exists)
		unlink(w->tmp);
	EVP_MD_CTX_free(w->md);
	free(w);
}

int store_writer_new(struct store *s, uint64_t max_bytes, struct store_writer **ret,
		     struct errbuf *err)
{
	size_t len = strlen(s->dir) + sizeof("/" TMP_NAME);
	struct store_writer *w;
	int rc;

	*ret = NULL;
	w = calloc(1, sizeof(*w) + len);
	if (!w)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	w->store = s;
	w->max_bytes = max_bytes;
	w->text = true;
	snprintf(w->tmp, len, "%s/%s", s->dir, TMP_NAME);
	w->fd = mkostemp(w->tmp, O_CLOEXEC);
	if (w->fd < 0) {
		rc = errbuf_set(err, no_space(errno) ? -ENOSPC : -EIO, "", "cannot create a file in "
				"%s: %s", s->dir, strerror(errno));
		writer_free(w);
		return rc;
	}
	w->tmp_exists = true;
	w->md = EVP_MD_CTX_new();
	if (!w->md || EVP_DigestInit_ex(w->md, EVP_sha256(), NULL) != 1) {
		writer_free(w);
		return errbuf_set(err, -ENOMEM, "", "cannot set up SHA-256");
	}
	*ret = w;
	return 0;
}

static bool is_text_byte(unsigned char c)
{
	return (c >= 0x20 && c < 0x7f) || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

/* Classifies as the bytes pass, so finishing never re-reads the file. */
static void note_content(struct store_writer *w, const unsigned char *p, size_t len)
{
	if (w->bytes < HEAD_LEN) {
		size_t n = HEAD_LEN - (size_t)w->bytes;

		memcpy(w->head + w->bytes, p, len < n ? len : n);
	}
	for (size_t i = 0; w->text && i < len; i++)
		w->text = is_text_byte(p[i]);
}

/* Records the first failure so that finish reports it too. */
static int writer_fail(struct store_writer *w, int code, struct errbuf *err, const char *why)
{
	w->error = code;
	return errbuf_set(err, code, "", "%s", why);
}

int store_writer_append(struct store_writer *w, const void *data, size_t len, struct errbuf *err)
{
	char why[160];
	int rc;

	if (w->error)
		return errbuf_set(err, w->error, "", "the upload has already failed");
	if (len > w->max_bytes - w->bytes) {
		snprintf(why, sizeof(why), "the upload is larger than the limit of %llu bytes",
			 (unsigned long long)w->max_bytes);
		return writer_fail(w, -EFBIG, err, why);
	}
	if (len == 0)
		return 0;
	note_content(w, data, len);
	if (EVP_DigestUpdate(w->md, data, len) != 1)
		return writer_fail(w, -EIO, err, "SHA-256 update failed");
	rc = fdio_write_all(w->fd, data, len);
	if (rc < 0) {
		snprintf(why, sizeof(why), "cannot write the upload: %s", strerror(-rc));
		return writer_fail(w, no_space(-rc) ? -ENOSPC : -EIO, err, why);
	}
	w->bytes += len;
	return 0;
}

static bool has_nifti_magic(const unsigned char *head, size_t n)
{
	return n >= HEAD_LEN && (!memcmp(head + NIFTI1_MAGIC_AT, "n+1", MAGIC_LEN) ||
				 !memcmp(head + NIFTI2_MAGIC_AT, "n+2", MAGIC_LEN));
}

/* An MRtrix3 image (formats/mif.h) starts with this line. */
static bool has_mif_magic(const unsigned char *head, size_t n)
{
	static const char magic[] = "mrtrix image\n";

	return n >= sizeof(magic) - 1 && !memcmp(head, magic, sizeof(magic) - 1);
}

/* A NumPy array (formats/npy.h: seeds.points_file). */
static bool has_npy_magic(const unsigned char *head, size_t n)
{
	return n >= 6 && !memcmp(head, "\x93NUMPY", 6);
}

/* A gzip upload is a volume only if what it inflates to starts as NIfTI
 * or as an MRtrix3 image: which one into *kind. */
static bool gzip_holds_volume(const char *path, enum store_kind *kind)
{
	unsigned char head[HEAD_LEN];
	gzFile gz = gzopen(path, "rb");
	int n;

	if (!gz)
		return false;
	n = gzread(gz, head, sizeof(head));
	gzclose(gz);
	if (n > 0 && has_nifti_magic(head, (size_t)n))
		*kind = STORE_NIFTI_GZ;
	else if (n > 0 && has_mif_magic(head, (size_t)n))
		*kind = STORE_MIF_GZ;
	else
		return false;
	return true;
}

static int classify(const struct store_writer *w, enum store_kind *kind, struct errbuf *err)
{
	size_t head = w->bytes < HEAD_LEN ? (size_t)w->bytes : HEAD_LEN;

	if (w->bytes == 0)
		return errbuf_set(err, -EINVAL, "", "the upload is empty");
	if (w->bytes >= 2 && w->head[0] == 0x1f && w->head[1] == 0x8b &&
	    gzip_holds_volume(w->tmp, kind))
		return 0;
	if (has_nifti_magic(w->head, head))
		*kind = STORE_NIFTI;
	else if (has_mif_magic(w->head, head))
		*kind = STORE_MIF;   /* before text: a header is text, its data need not be */
	else if (has_npy_magic(w->head, head))
		*kind = STORE_NPY;
	else if (w->text)
		*kind = STORE_TEXT;
	else
		return errbuf_set(err, -EMEDIUMTYPE, "", "the upload is neither NIfTI-1/-2 (.nii, "
				  ".nii.gz), an MRtrix3 image (.mif, .mif.gz), a NumPy .npy array "
				  "nor text");
	return 0;
}

static int digest_hex(struct store_writer *w, char hex[HEX_LEN + 1], struct errbuf *err)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[DIGEST_LEN];
	unsigned int len = 0;

	if (EVP_DigestFinal_ex(w->md, md, &len) != 1 || len != DIGEST_LEN)
		return errbuf_set(err, -EIO, "", "SHA-256 failed");
	for (unsigned int i = 0; i < DIGEST_LEN; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 0xf];
	}
	hex[HEX_LEN] = '\0';
	return 0;
}

/* The data reach the disk before the name does, so a crash never leaves a
 * volume whose bytes do not match its id. */
static int sync_file(struct store_writer *w, struct errbuf *err)
{
	int fd = w->fd;

	w->fd = -1;
	if (fsync(fd) < 0) {
		int rc = -errno;

		close(fd);
		return errbuf_set(err, no_space(-rc) ? -ENOSPC : -EIO, "", "cannot sync the upload: "
				  "%s", strerror(-rc));
	}
	if (close(fd) < 0)
		return errbuf_set(err, -EIO, "", "cannot close the upload: %s", strerror(errno));
	return 0;
}

/* Moves the file to name unless that exists: 1 when moved, 0 when it existed.
 * RENAME_NOREPLACE makes that one atomic step, so concurrent uploads of the
 * same bytes agree on which one was new; filesystems without it (NFS) get
 * link(), which fails on an existing name just the same. */
static int move_into_place(struct store_writer *w, const char *name)
{
	int dir_fd = w->store->dir_fd;

	if (renameat2(AT_FDCWD, w->tmp, dir_fd, name, RENAME_NOREPLACE) == 0) {
		w->tmp_exists = false;
		return 1;
	}
	if (errno == EINVAL || errno == ENOSYS) {
		if (linkat(AT_FDCWD, w->tmp, dir_fd, name, 0) == 0)
			return 1;
	}
	return errno == EEXIST ? 0 : -errno;
}

static int publish(struct store_writer *w, const char *hex, enum store_kind kind,
		   struct errbuf *err)
{
	char name[NAME_MAX_LEN + 1];
	int rc;

	snprintf(name, sizeof(name), "%s%s", hex, kinds[kind].ext);
	rc = move_into_place(w, name);
	if (rc < 0)
		return errbuf_set(err, -EIO, "", "cannot store %s in %s: %s", name, w->store->dir,
				  strerror(-rc));
	if (rc == 1 && fsync(w->store->dir_fd) < 0)
		return errbuf_set(err, -EIO, "", "cannot sync %s: %s", w->store->dir,
				  strerror(errno));
	return rc;
}

static int finish(struct store_writer *w, struct store_entry *ret, struct errbuf *err)
{
	char hex[HEX_LEN + 1];
	enum store_kind kind = STORE_TEXT;
	int rc;

	if (w->error)
		return errbuf_set(err, w->error, "", "the upload has already failed");
	rc = classify(w, &kind, err);
	if (rc == 0)
		rc = digest_hex(w, hex, err);
	if (rc == 0)
		rc = sync_file(w, err);
	if (rc == 0)
		rc = publish(w, hex, kind, err);
	if (rc < 0)
		return rc;
	snprintf(ret->id, sizeof(ret->id), ID_PREFIX "%s", hex);
	ret->bytes = w->bytes;
	ret->kind = kind;
	return rc;
}

int store_writer_finish(struct store_writer *w, struct store_entry *ret, struct errbuf *err)
{
	int rc = finish(w, ret, err);

	writer_free(w);
	return rc;
}

void store_writer_abort(struct store_writer *w)
{
	if (w)
		writer_free(w);
}

/* ---- lookup ---- */

static bool valid_id(const char *id)
{
	if (strlen(id) != STORE_ID_LEN || strncmp(id, ID_PREFIX, ID_PREFIX_LEN) != 0)
		return false;
	for (const char *p = id + ID_PREFIX_LEN; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/* The kind whose file exists, with its name in name[], or -ENOENT. */
static int find_volume(const struct store *s, const char *hex, char name[NAME_MAX_LEN + 1],
		       struct stat *st, struct errbuf *err)
{
	for (size_t k = 0; k < N_KINDS; k++) {
		snprintf(name, NAME_MAX_LEN + 1, "%s%s", hex, kinds[k].ext);
		if (fstatat(s->dir_fd, name, st, 0) == 0) {
			if (S_ISREG(st->st_mode))
				return (int)k;
		} else if (errno != ENOENT) {
			return errbuf_set(err, -EIO, "", "cannot look up %s in %s: %s", name,
					  s->dir, strerror(errno));
		}
	}
	return -ENOENT;
}

int store_lookup(struct store *s, const char *id, struct store_entry *ret, char *path,
		 size_t path_len, struct errbuf *err)
{
	char name[NAME_MAX_LEN + 1];
	struct stat st;
	int kind;

	if (!valid_id(id))
		return errbuf_set(err, -EINVAL, "",
				  "malformed volume id '%.80s': expected \"sha256:\" and 64 "
				  "lowercase hex digits", id);
	kind = find_volume(s, id + ID_PREFIX_LEN, name, &st, err);
	if (kind == -ENOENT)
		return errbuf_set(err, -ENOENT, "", "no volume %s", id);
	if (kind < 0)
		return kind;
	if (path && (size_t)snprintf(path, path_len, "%s/%s", s->dir, name) >= path_len)
		return errbuf_set(err, -ENAMETOOLONG, "", "the path of %s is too long", id);
	/* memmove: callers may look up the id of the entry they pass as ret. */
	memmove(ret->id, id, sizeof(ret->id));
	ret->bytes = (uint64_t)st.st_size;
	ret->kind = (enum store_kind)kind;
	return 0;
}

/* ---- owners ---- */

static int forget_locked(struct store *s, const char *hex, const char *owner);

/* Whether owner's claims, the one just made included, stay within quota.
 * Owners lock held, so that two uploads finishing together cannot both pass. */
static bool claims_fit(struct store *s, const char *owner, uint64_t quota)
{
	uint64_t used;

	return store_list(s, owner, NULL, NULL, &used) == 0 && used <= quota;
}

int store_claim(struct store *s, const char *id, const char *owner, uint64_t quota,
		struct errbuf *err)
{
	char path[sizeof(OWNERS_DIR) + 256 + HEX_LEN + 2];
	const char *hex = id + ID_PREFIX_LEN;
	int fd;

	if (!valid_id(id) || !*owner || strchr(owner, '/') || owner[0] == '.' ||
	    strlen(owner) > 255)
		return errbuf_set(err, -EINVAL, "", "cannot record owner %.80s of %.80s", owner, id);
	/* EEXIST: another upload of this owner or another made it first. */
	snprintf(path, sizeof(path), "%s/%s", OWNERS_DIR, owner);
	if ((mkdirat(s->dir_fd, OWNERS_DIR, 0700) < 0 && errno != EEXIST) ||
	    (mkdirat(s->dir_fd, path, 0700) < 0 && errno != EEXIST))
		return errbuf_set(err, -EIO, "", "cannot create %s/%s: %s", s->dir, path,
				  strerror(errno));
	snprintf(path, sizeof(path), "%s/%s/%s", OWNERS_DIR, owner, hex);
	pthread_mutex_lock(&s->owners_lock);
	fd = openat(s->dir_fd, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 && errno == EEXIST) {
		/* Uploaded again: the expiry starts over. */
		fd = utimensat(s->dir_fd, path, NULL, AT_SYMLINK_NOFOLLOW);
		pthread_mutex_unlock(&s->owners_lock);
		return fd < 0 ? errbuf_set(err, -EIO, "", "cannot renew %s/%s: %s", s->dir, path,
					   strerror(errno)) : 0;
	}
	if (fd >= 0 && !claims_fit(s, owner, quota)) {
		close(fd);
		(void)forget_locked(s, hex, owner);   /* and the file, if no one else has it */
		pthread_mutex_unlock(&s->owners_lock);
		return errbuf_set(err, -EDQUOT, "", "%s would be over its quota", owner);
	}
	pthread_mutex_unlock(&s->owners_lock);
	if (fd < 0)
		return errbuf_set(err, -EIO, "", "cannot create %s/%s: %s", s->dir, path,
				  strerror(errno));
	close(fd);
	return 1;
}

bool store_claimed(struct store *s, const char *id, const char *owner)
{
	char path[sizeof(OWNERS_DIR) + 256 + HEX_LEN + 2];
	struct stat st;

	if (!valid_id(id) || !*owner || strchr(owner, '/') || owner[0] == '.' ||
	    strlen(owner) > 255)
		return false;
	snprintf(path, sizeof(path), "%s/%s/%s", OWNERS_DIR, owner, id + ID_PREFIX_LEN);
	return fstatat(s->dir_fd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

/* ---- listing, forgetting, expiry ---- */

static bool valid_owner(const char *owner)
{
	return *owner && !strchr(owner, '/') && owner[0] != '.' && strlen(owner) <= 255;
}

/* Opens <owners>/<owner> (or <owners> for NULL) for reading; NULL when absent. */
static DIR *open_owners_dir(const struct store *s, const char *owner)
{
	char path[sizeof(OWNERS_DIR) + 257];
	int fd;
	DIR *d;

	snprintf(path, sizeof(path), "%s%s%s", OWNERS_DIR, owner ? "/" : "", owner ? owner : "");
	fd = openat(s->dir_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	d = fdopendir(fd);
	if (!d)
		close(fd);
	return d;
}

static bool is_hex_name(const char *name)
{
	return strlen(name) == HEX_LEN && strspn(name, "0123456789abcdef") == HEX_LEN;
}

int store_list(struct store *s, const char *owner, struct store_entry **ret, size_t *n,
	       uint64_t *bytes)
{
	DIR *d = valid_owner(owner) ? open_owners_dir(s, owner) : NULL;
	struct store_entry *list = NULL;
	size_t count = 0, cap = 0;
	uint64_t total = 0;
	struct dirent *e;
	int rc = 0;

	while (d && rc == 0 && (e = readdir(d))) {
		char name[NAME_MAX_LEN + 1];
		struct stat st;
		int kind;

		if (!is_hex_name(e->d_name))
			continue;
		kind = find_volume(s, e->d_name, name, &st, NULL);
		if (kind < 0)
			continue;
		total += (uint64_t)st.st_size;
		if (!ret)
			continue;
		if (count == cap) {
			struct store_entry *grown = realloc(list, sizeof(*list) * (cap ? 2 * cap : 16));

			if (!grown) {
				rc = -ENOMEM;
				break;
			}
			list = grown;
			cap = cap ? 2 * cap : 16;
		}
		/* is_hex_name: exactly HEX_LEN characters. */
		snprintf(list[count].id, sizeof(list[count].id), ID_PREFIX "%.64s", e->d_name);
		list[count].bytes = (uint64_t)st.st_size;
		list[count++].kind = (enum store_kind)kind;
	}
	if (d)
		closedir(d);
	if (rc < 0) {
		free(list);
		return rc;
	}
	if (ret) {
		*ret = list;
		*n = count;
	}
	if (bytes)
		*bytes = total;
	return 0;
}

/* Whether anyone still claims hex. Owners lock held. */
static bool claimed_by_anyone(const struct store *s, const char *hex)
{
	DIR *d = open_owners_dir(s, NULL);
	struct dirent *e;
	bool claimed = false;

	while (d && !claimed && (e = readdir(d))) {
		char path[sizeof(OWNERS_DIR) + 256 + HEX_LEN + 2];
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/%s", OWNERS_DIR, e->d_name, hex);
		claimed = fstatat(s->dir_fd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
	}
	if (d)
		closedir(d);
	return claimed;
}

/* Owners lock held. */
static int forget_locked(struct store *s, const char *hex, const char *owner)
{
	char path[sizeof(OWNERS_DIR) + 256 + HEX_LEN + 2], name[NAME_MAX_LEN + 1];

	snprintf(path, sizeof(path), "%s/%s/%s", OWNERS_DIR, owner, hex);
	if (unlinkat(s->dir_fd, path, 0) < 0)
		return -ENOENT;
	if (claimed_by_anyone(s, hex))
		return 0;
	/* Every kind: the id names the bytes, whichever extension they got. */
	for (size_t k = 0; k < N_KINDS; k++) {
		snprintf(name, sizeof(name), "%s%s", hex, kinds[k].ext);
		(void)unlinkat(s->dir_fd, name, 0);   /* ENOENT for the other kinds */
	}
	return 0;
}

int store_forget(struct store *s, const char *id, const char *owner)
{
	int rc;

	if (!valid_id(id) || !valid_owner(owner))
		return -ENOENT;
	pthread_mutex_lock(&s->owners_lock);
	rc = forget_locked(s, id + ID_PREFIX_LEN, owner);
	pthread_mutex_unlock(&s->owners_lock);
	return rc;
}

static void expire_owner(struct store *s, const char *owner, time_t cutoff)
{
	DIR *d = open_owners_dir(s, owner);
	int fd = d ? dirfd(d) : -1;
	struct dirent *e;

	while (d && (e = readdir(d))) {
		struct stat st;

		if (is_hex_name(e->d_name) && fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    st.st_mtime < cutoff)
			(void)forget_locked(s, e->d_name, owner);
	}
	if (d)
		closedir(d);
}

void store_expire(struct store *s, uint64_t ttl)
{
	time_t now = time(NULL);
	time_t cutoff = (uint64_t)now > ttl ? now - (time_t)ttl : 0;
	DIR *d;
	struct dirent *e;

	pthread_mutex_lock(&s->owners_lock);
	d = open_owners_dir(s, NULL);
	while (d && (e = readdir(d)))
		if (valid_owner(e->d_name))
			expire_owner(s, e->d_name, cutoff);
	if (d)
		closedir(d);
	pthread_mutex_unlock(&s->owners_lock);
}
