/* SPDX-License-Identifier: MIT */
/* Unit tests for store.c: ids, kinds, limits, atomic publication, concurrency. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "server/store.h"
#include "tmpdir.h"

#define MAX_BYTES (1u << 20)
#define N_THREADS 8

struct fixture {
	char root[64];
	char volumes[96];
	struct store *store;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_store.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->volumes, sizeof(f->volumes), "%s/volumes", f->root);
	assert_int_equal(store_open(f->root, &f->store, NULL), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	store_close(f->store);
	assert_int_equal(tmpdir_remove(f->root), 0);
	free(f);
	return 0;
}

/* Entries in volumes/, temporary files included. */
static int count_files(const struct fixture *f)
{
	DIR *d = opendir(f->volumes);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return n;
}

/* One upload in pieces of at most piece bytes; returns finish's result. */
static int upload(struct store *s, const void *data, size_t len, size_t piece,
		  struct store_entry *e, struct errbuf *err)
{
	const unsigned char *p = data;
	struct store_writer *w;
	int rc = store_writer_new(s, MAX_BYTES, &w, err);

	if (rc < 0)
		return rc;
	for (size_t off = 0; off < len; off += piece) {
		rc = store_writer_append(w, p + off, len - off < piece ? len - off : piece, err);
		if (rc < 0) {
			store_writer_abort(w);
			return rc;
		}
	}
	return store_writer_finish(w, e, err);
}

static void *read_file(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	void *buf;
	long n;

	assert_non_null(fp);
	assert_int_equal(fseek(fp, 0, SEEK_END), 0);
	n = ftell(fp);
	assert_true(n > 0);
	rewind(fp);
	buf = malloc((size_t)n);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
	fclose(fp);
	*len = (size_t)n;
	return buf;
}

/* A minimal single-file header: only the bytes the store looks at. */
static void fake_nifti(unsigned char *buf, size_t len, int version)
{
	memset(buf, 0, len);
	if (version == 1) {
		buf[0] = 0x5c;   /* sizeof_hdr = 348, little-endian */
		buf[1] = 0x01;
		memcpy(buf + 344, "n+1", 4);
	} else {
		buf[0] = 0x1c;   /* sizeof_hdr = 540 */
		buf[1] = 0x02;
		memcpy(buf + 4, "n+2\0\r\n\032\n", 8);
	}
}

static const char bvals[] = "0 1000 1000 2000\n";

static void test_same_bytes_same_id(void **state)
{
	struct fixture *f = *state;
	struct store_entry a, b;

	assert_int_equal(upload(f->store, bvals, strlen(bvals), 5, &a, NULL), 1);
	assert_int_equal(upload(f->store, bvals, strlen(bvals), 3, &b, NULL), 0);
	assert_string_equal(a.id, b.id);
	assert_int_equal(a.bytes, strlen(bvals));
	assert_int_equal(b.kind, STORE_TEXT);
	assert_int_equal(count_files(f), 1);
}

static void test_id_matches_sha256sum(void **state)
{
	struct fixture *f = *state;
	char path[160], cmd[200], line[128], expect[STORE_ID_LEN + 1];
	struct store_entry e;
	FILE *p;

	assert_int_equal(upload(f->store, bvals, strlen(bvals), 64, &e, NULL), 1);
	assert_int_equal(store_lookup(f->store, e.id, &e, path, sizeof(path), NULL), 0);
	snprintf(cmd, sizeof(cmd), "sha256sum '%s'", path);
	p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(line, sizeof(line), p));
	assert_int_equal(pclose(p), 0);
	snprintf(expect, sizeof(expect), "sha256:%.64s", line);
	assert_string_equal(e.id, expect);
	/* The digest of "abc" from FIPS 180-2, independent of any tool. */
	assert_int_equal(upload(f->store, "abc", 3, 1, &e, NULL), 1);
	assert_string_equal(e.id, "sha256:ba7816bf8f01cfea414140de5dae2223"
				  "b00361a396177a9cb410ff61f20015ad");
}

static void check_kind(struct fixture *f, const void *data, size_t len, enum store_kind kind,
		       const char *ext, const char *name)
{
	char path[160];
	struct store_entry e, found;
	size_t stored_len;
	void *stored;

	assert_int_equal(upload(f->store, data, len, 100, &e, NULL), 1);
	assert_int_equal(e.kind, kind);
	assert_string_equal(store_kind_name(e.kind), name);
	assert_int_equal(store_lookup(f->store, e.id, &found, path, sizeof(path), NULL), 0);
	assert_string_equal(found.id, e.id);
	assert_int_equal(found.bytes, len);
	assert_int_equal(found.kind, kind);
	assert_string_equal(path + strlen(path) - strlen(ext), ext);
	assert_memory_equal(path + strlen(f->volumes) + 1, e.id + 7, 64);
	stored = read_file(path, &stored_len);
	assert_int_equal(stored_len, len);
	assert_memory_equal(stored, data, len);
	free(stored);
}

/* data[0..len) as a gzip stream into out (room for cap bytes); its length. */
static size_t gzip_bytes(const void *data, size_t len, unsigned char *out, size_t cap)
{
	z_stream z = { 0 };

	assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
	z.next_in = (unsigned char *)data;
	z.avail_in = (uInt)len;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	deflateEnd(&z);
	return z.total_out;
}

/* MRtrix3 images by their first line, plain or inflated; binary data after
 * the header do not make them "not text" refusals. */
static void test_mif_kinds(void **state)
{
	static const char head[] = "mrtrix image\ndim: 2,2,1\nvox: 1,1,1\nlayout: +0,+1,+2\n"
				   "datatype: Float32LE\nfile: . 96\nEND\n";
	struct fixture *f = *state;
	unsigned char mif[96 + 16] = { 0 }, gz[400];
	const float values[4] = { 0.5f, -1, 2, 3 };

	memcpy(mif, head, sizeof(head) - 1);
	memcpy(mif + 96, values, sizeof(values));
	check_kind(f, mif, sizeof(mif), STORE_MIF, ".mif", "mif");
	check_kind(f, gz, gzip_bytes(mif, sizeof(mif), gz, sizeof(gz)), STORE_MIF_GZ, ".mif.gz",
		   "mif-gz");
}

/* Seed point files (formats/npy.h) by their magic: binary data after a
 * text header, like a .mif. */
static void test_npy_kind(void **state)
{
	struct fixture *f = *state;
	unsigned char npy[128 + 24] = "\x93NUMPY\x01\x00\x76\x00"
		"{'descr': '<f8', 'fortran_order': False, 'shape': (1, 3), }";
	const double point[3] = { 1, 2, 3 };

	memcpy(npy + 128, point, sizeof(point));
	check_kind(f, npy, sizeof(npy), STORE_NPY, ".npy", "npy");
}

static void test_kinds(void **state)
{
	static const char text[] = "1 0 0\n0 1 0\r\n\t0 0 1\f\v";
	struct fixture *f = *state;
	unsigned char hdr[600];
	size_t len;
	void *data;

	data = read_file("tests/data/dtype_uint8.nii", &len);
	check_kind(f, data, len, STORE_NIFTI, ".nii", "nifti");
	free(data);
	data = read_file("tests/data/nifti2_4d.nii.gz", &len);
	check_kind(f, data, len, STORE_NIFTI_GZ, ".nii.gz", "nifti-gz");
	free(data);
	fake_nifti(hdr, sizeof(hdr), 1);
	check_kind(f, hdr, sizeof(hdr), STORE_NIFTI, ".nii", "nifti");
	fake_nifti(hdr, sizeof(hdr), 2);
	check_kind(f, hdr, sizeof(hdr), STORE_NIFTI, ".nii", "nifti");
	check_kind(f, text, sizeof(text) - 1, STORE_TEXT, ".txt", "text");
}

static void test_unsupported(void **state)
{
	static const struct {
		const char *what;
		size_t len;
		unsigned char bytes[400];
	} cases[] = {
		{ "binary", 4, { 0x00, 0x01, 0x02, 0x03 } },
		{ "text with a NUL", 5, { 'a', 'b', 0, 'c', '\n' } },
		{ "text with DEL", 3, { 'a', 0x7f, '\n' } },
		{ "UTF-8", 3, { 0xc3, 0xa9, '\n' } },
		{ "gzip magic cut short", 1, { 0x1f } },
		{ "two-file NIfTI header", 348, { [344] = 'n', 'i', '1', 0 } },
		{ "NIfTI-1 magic too early", 348, { [340] = 'n', '+', '1', 0 } },
		{ "NIfTI-1 magic in a short file", 347, { [343] = 'n', '+', '1', 0 } },
		{ "NIfTI-2 magic without NUL", 348, { [4] = 'n', '+', '2', '!' } },
	};
	struct fixture *f = *state;
	struct store_entry e;
	struct errbuf err = { 0 };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = upload(f->store, cases[i].bytes, cases[i].len, 7, &e, &err);

		if (rc != -EMEDIUMTYPE)
			fail_msg("%s: got %d, expected -EMEDIUMTYPE", cases[i].what, rc);
	}
	assert_non_null(strstr(err.message, "NIfTI"));
	assert_int_equal(count_files(f), 0);
}

static void test_empty(void **state)
{
	struct fixture *f = *state;
	struct store_entry e;
	struct errbuf err;

	assert_int_equal(upload(f->store, "", 0, 1, &e, &err), -EINVAL);
	assert_string_equal(err.message, "the upload is empty");
	assert_int_equal(count_files(f), 0);
}

static void test_over_max(void **state)
{
	struct fixture *f = *state;
	struct store_writer *w;
	struct store_entry e;
	struct errbuf err;

	/* Exactly at the limit is fine. */
	assert_int_equal(store_writer_new(f->store, 4, &w, NULL), 0);
	assert_int_equal(store_writer_append(w, "abcd", 4, NULL), 0);
	assert_int_equal(store_writer_finish(w, &e, NULL), 1);
	assert_int_equal(count_files(f), 1);

	/* Past it: the append fails, later calls repeat it, nothing is left. */
	assert_int_equal(store_writer_new(f->store, 10, &w, NULL), 0);
	assert_int_equal(store_writer_append(w, "0123456", 7, NULL), 0);
	assert_int_equal(store_writer_append(w, "7890", 4, &err), -EFBIG);
	assert_non_null(strstr(err.message, "10 bytes"));
	assert_int_equal(store_writer_append(w, "7", 1, NULL), -EFBIG);
	assert_int_equal(store_writer_finish(w, &e, &err), -EFBIG);
	assert_int_equal(count_files(f), 1);

	/* Over max, then abandoned. */
	assert_int_equal(store_writer_new(f->store, 2, &w, NULL), 0);
	assert_int_equal(store_writer_append(w, "abc", 3, NULL), -EFBIG);
	store_writer_abort(w);
	assert_int_equal(count_files(f), 1);
}

static void test_abort(void **state)
{
	struct fixture *f = *state;
	struct store_writer *w;

	assert_int_equal(store_writer_new(f->store, MAX_BYTES, &w, NULL), 0);
	assert_int_equal(count_files(f), 1);   /* the temporary file */
	assert_int_equal(store_writer_append(w, bvals, strlen(bvals), NULL), 0);
	store_writer_abort(w);
	assert_int_equal(count_files(f), 0);
	store_writer_abort(NULL);
}

static void test_lookup_malformed(void **state)
{
	static const char *const bad[] = {
		"",
		"sha256:",
		"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a0",
		"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a080",
		"sha256:9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08",
		"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a0g",
		"SHA256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"sha512:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"sha256:../../../../etc/passwd",
		"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 ",
	};
	struct fixture *f = *state;
	struct store_entry e;
	struct errbuf err;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (store_lookup(f->store, bad[i], &e, NULL, 0, &err) != -EINVAL)
			fail_msg("'%s' was accepted", bad[i]);
		assert_non_null(strstr(err.message, "64 lowercase hex digits"));
	}
}

static void test_lookup_absent(void **state)
{
	static const char absent[] =
		"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
	struct fixture *f = *state;
	struct store_entry e;
	struct errbuf err;
	char path[8];

	assert_int_equal(store_lookup(f->store, absent, &e, NULL, 0, &err), -ENOENT);
	assert_non_null(strstr(err.message, absent));
	/* A path buffer that is too small is an error, not a cut path. */
	assert_int_equal(upload(f->store, bvals, strlen(bvals), 64, &e, NULL), 1);
	assert_int_equal(store_lookup(f->store, e.id, &e, path, sizeof(path), NULL),
			 -ENAMETOOLONG);
	assert_int_equal(store_lookup(f->store, e.id, &e, NULL, 0, NULL), 0);
}

static void test_two_writers_interleaved(void **state)
{
	struct fixture *f = *state;
	struct store_writer *a, *b, *c;
	struct store_entry ea, eb, ec, ref;

	assert_int_equal(store_writer_new(f->store, MAX_BYTES, &a, NULL), 0);
	assert_int_equal(store_writer_new(f->store, MAX_BYTES, &b, NULL), 0);
	assert_int_equal(store_writer_new(f->store, MAX_BYTES, &c, NULL), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(store_writer_append(a, "0 1000\n", 7, NULL), 0);
		assert_int_equal(store_writer_append(b, "1 0 0\n", 6, NULL), 0);
		assert_int_equal(store_writer_append(c, "0 1000\n", 7, NULL), 0);
	}
	assert_int_equal(store_writer_finish(b, &eb, NULL), 1);
	assert_int_equal(store_writer_finish(a, &ea, NULL), 1);
	assert_int_equal(store_writer_finish(c, &ec, NULL), 0);
	assert_string_equal(ea.id, ec.id);
	assert_string_not_equal(ea.id, eb.id);
	assert_int_equal(upload(f->store, "0 1000\n0 1000\n0 1000\n", 21, 21, &ref, NULL), 0);
	assert_string_equal(ref.id, ea.id);
	assert_int_equal(upload(f->store, "1 0 0\n1 0 0\n1 0 0\n", 18, 4, &ref, NULL), 0);
	assert_string_equal(ref.id, eb.id);
	assert_int_equal(count_files(f), 2);
}

struct racer {
	struct store *store;
	pthread_barrier_t *start;
	int rc;
	struct store_entry entry;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	struct store_writer *w = NULL;

	r->rc = store_writer_new(r->store, MAX_BYTES, &w, NULL);
	if (r->rc == 0)
		r->rc = store_writer_append(w, bvals, strlen(bvals), NULL);
	pthread_barrier_wait(r->start);
	if (r->rc == 0)
		r->rc = store_writer_finish(w, &r->entry, NULL);
	else
		store_writer_abort(w);
	return NULL;
}

/* Identical uploads finishing at once: exactly one of them is new. */
static void test_concurrent_same_bytes(void **state)
{
	struct fixture *f = *state;
	struct racer r[N_THREADS];
	pthread_t t[N_THREADS];
	pthread_barrier_t start;
	int news = 0;

	assert_int_equal(pthread_barrier_init(&start, NULL, N_THREADS), 0);
	for (int i = 0; i < N_THREADS; i++) {
		r[i] = (struct racer){ .store = f->store, .start = &start };
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < N_THREADS; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_true(r[i].rc == 0 || r[i].rc == 1);
		assert_string_equal(r[i].entry.id, r[0].entry.id);
		news += r[i].rc;
	}
	pthread_barrier_destroy(&start);
	assert_int_equal(news, 1);
	assert_int_equal(count_files(f), 1);
}

static void test_open_creates_parents(void **state)
{
	struct fixture *f = *state;
	char root[128];
	struct store *s;
	struct stat st;
	struct errbuf err;
	FILE *fp;

	snprintf(root, sizeof(root), "%s/a/b/state", f->root);
	assert_int_equal(store_open(root, &s, NULL), 0);
	store_close(s);
	snprintf(root, sizeof(root), "%s/a/b/state/volumes", f->root);
	assert_int_equal(stat(root, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	store_close(NULL);

	/* A file where the directory should be. */
	snprintf(root, sizeof(root), "%s/file", f->root);
	fp = fopen(root, "w");
	assert_non_null(fp);
	fclose(fp);
	assert_true(store_open(root, &s, &err) < 0);
	assert_null(s);
	assert_non_null(strstr(err.message, root));
}

/* Owners: one content, stored once, claimed by each uploader separately. */
static void test_owners(void **state)
{
	struct fixture *f = *state;
	struct store_entry e;
	struct errbuf err = { 0 };

	assert_int_equal(upload(f->store, bvals, strlen(bvals), 7, &e, NULL), 1);
	assert_false(store_claimed(f->store, e.id, "alice"));
	assert_int_equal(store_claim(f->store, e.id, "alice", UINT64_MAX, &err), 1);
	assert_int_equal(store_claim(f->store, e.id, "alice", UINT64_MAX, &err), 0);
	assert_true(store_claimed(f->store, e.id, "alice"));
	assert_false(store_claimed(f->store, e.id, "bob"));
	assert_int_equal(store_claim(f->store, e.id, "uid:1000", UINT64_MAX, &err), 1);
	assert_true(store_claimed(f->store, e.id, "uid:1000"));
	/* Names that would leave the owners' directory are refused. */
	assert_int_equal(store_claim(f->store, e.id, "../x", UINT64_MAX, &err), -EINVAL);
	assert_int_equal(store_claim(f->store, e.id, "..", UINT64_MAX, &err), -EINVAL);
	assert_int_equal(store_claim(f->store, e.id, "", UINT64_MAX, &err), -EINVAL);
	assert_false(store_claimed(f->store, e.id, ".."));
	assert_int_equal(store_claim(f->store, "sha256:xyz", "alice", UINT64_MAX, &err), -EINVAL);
	assert_false(store_claimed(f->store, "sha256:xyz", "alice"));
	/* The volume and the hidden owners' directory: still one volume file. */
	assert_int_equal(count_files(f), 2);
}

/* A claim's age, by its file's times: what store_expire reads. */
static void age_claim(const struct fixture *f, const char *owner, const char *id, time_t age)
{
	char path[512];
	struct timespec t[2] = { { time(NULL) - age, 0 }, { time(NULL) - age, 0 } };

	snprintf(path, sizeof(path), "%s/.owners/%s/%s", f->volumes, owner, id + 7);
	assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

/* Listing one owner's volumes and the bytes they take (the quota's
 * count), forgetting one (the file goes with its last owner), expiry. */
static void test_list_forget_expire(void **state)
{
	static const char other[] = "0 500 500 500 1000\n";
	struct fixture *f = *state;
	struct store_entry a, b, *list = NULL;
	struct errbuf err = { 0 };
	uint64_t used = 7;
	size_t n = 9;

	assert_int_equal(upload(f->store, bvals, strlen(bvals), 7, &a, NULL), 1);
	assert_int_equal(upload(f->store, other, strlen(other), 7, &b, NULL), 1);
	assert_int_equal(store_list(f->store, "alice", &list, &n, &used), 0);
	assert_true(n == 0 && used == 0);
	free(list);
	assert_int_equal(store_claim(f->store, a.id, "alice", UINT64_MAX, &err), 1);
	assert_int_equal(store_claim(f->store, b.id, "alice", UINT64_MAX, &err), 1);
	assert_int_equal(store_claim(f->store, a.id, "bob", UINT64_MAX, &err), 1);
	assert_int_equal(store_list(f->store, "alice", &list, &n, &used), 0);
	assert_true(n == 2 && used == strlen(bvals) + strlen(other));
	free(list);
	assert_int_equal(store_list(f->store, "bob", NULL, NULL, &used), 0);
	assert_true(used == strlen(bvals));
	/* bob still has a: alice's forget keeps the file. */
	assert_int_equal(store_forget(f->store, a.id, "alice"), 0);
	assert_int_equal(store_forget(f->store, a.id, "alice"), -ENOENT);
	assert_int_equal(store_lookup(f->store, a.id, &a, NULL, 0, NULL), 0);
	assert_int_equal(store_forget(f->store, a.id, "bob"), 0);
	assert_int_equal(store_lookup(f->store, a.id, &a, NULL, 0, NULL), -ENOENT);
	assert_int_equal(store_forget(f->store, "sha256:xyz", "bob"), -ENOENT);
	assert_int_equal(store_forget(f->store, b.id, "../alice"), -ENOENT);
	/* Expiry: a claim older than the TTL goes, a renewed one stays. */
	age_claim(f, "alice", b.id, 120);
	store_expire(f->store, 3600);
	assert_true(store_claimed(f->store, b.id, "alice"));
	store_expire(f->store, 60);
	assert_false(store_claimed(f->store, b.id, "alice"));
	assert_int_equal(store_lookup(f->store, b.id, &b, NULL, 0, NULL), -ENOENT);
	assert_int_equal(upload(f->store, other, strlen(other), 7, &b, NULL), 1);
	assert_int_equal(store_claim(f->store, b.id, "alice", UINT64_MAX, &err), 1);
	age_claim(f, "alice", b.id, 120);
	assert_int_equal(store_claim(f->store, b.id, "alice", UINT64_MAX, &err), 0);   /* renewed */
	store_expire(f->store, 60);
	assert_true(store_claimed(f->store, b.id, "alice"));
}

/* The quota is checked with the claim: a claim that would pass it is not
 * made, and its file goes unless another owner has it. */
static void test_claim_quota(void **state)
{
	static const char other[] = "0 500 500 500 1000\n";
	struct fixture *f = *state;
	struct store_entry a, b;
	struct errbuf err = { 0 };
	uint64_t quota = strlen(bvals) + strlen(other) - 1;

	assert_int_equal(upload(f->store, bvals, strlen(bvals), 7, &a, NULL), 1);
	assert_int_equal(upload(f->store, other, strlen(other), 7, &b, NULL), 1);
	assert_int_equal(store_claim(f->store, a.id, "alice", quota, &err), 1);
	assert_int_equal(store_claim(f->store, b.id, "alice", quota, &err), -EDQUOT);
	assert_false(store_claimed(f->store, b.id, "alice"));
	assert_int_equal(store_lookup(f->store, b.id, &b, NULL, 0, NULL), -ENOENT);
	/* Renewing what is already held never counts twice. */
	assert_int_equal(store_claim(f->store, a.id, "alice", quota, &err), 0);
	/* bob's claim keeps the file when alice's is refused. */
	assert_int_equal(upload(f->store, other, strlen(other), 7, &b, NULL), 1);
	assert_int_equal(store_claim(f->store, b.id, "bob", quota, &err), 1);
	assert_int_equal(store_claim(f->store, b.id, "alice", quota, &err), -EDQUOT);
	assert_int_equal(store_lookup(f->store, b.id, &b, NULL, 0, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_same_bytes_same_id, setup, teardown),
		cmocka_unit_test_setup_teardown(test_claim_quota, setup, teardown),
		cmocka_unit_test_setup_teardown(test_id_matches_sha256sum, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mif_kinds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_npy_kind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kinds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unsupported, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_over_max, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lookup_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lookup_absent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_writers_interleaved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_same_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_creates_parents, setup, teardown),
		cmocka_unit_test_setup_teardown(test_owners, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_forget_expire, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
