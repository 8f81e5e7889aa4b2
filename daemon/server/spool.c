/* SPDX-License-Identifier: MIT */
/* spool: job records in the result spool (see spool.h). */
#include "server/spool.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fdio.h"
#include "base/log.h"
#include "engine/stats_json.h"

#define RECORD_VERSION 1
#define RECORD_EXT ".job"
#define RESULT_EXT ".tractogram"
#define RECORD_TMP ".rec-XXXXXX"
/* Temporary files of the API's format conversion (api.c): unlinked at
 * creation, so one can only remain if the daemon died between the two calls. */
#define CONVERT_TMP_PREFIX ".convert-"
/* A record holds the job document, bounded by max_request_bytes; this only
 * keeps a runaway file from exhausting memory at start. */
#define RECORD_MAX_BYTES (256u << 20)

void spool_result_name(const char *id, char *name, size_t len)
{
	snprintf(name, len, "%s" RESULT_EXT, id);
}

void spool_record_name(const char *id, char *name, size_t len)
{
	snprintf(name, len, "%s" RECORD_EXT, id);
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* "j-" and 16 lowercase hex digits, as jobs.c draws them: only such names
 * are ours, and only they may become paths. */
static bool valid_job_id(const char *id, size_t len)
{
	if (len != JOB_ID_LEN || strncmp(id, "j-", 2) != 0)
		return false;
	for (size_t i = 2; i < len; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}

/* ---- writing -------------------------------------------------------------- */

/* The record's own members of the statistics: the timings (each its own
 * key, as records have held them) and the grid that conversions use. */
static json_t *stats_json(const struct engine_stats *s)
{
	json_t *dim = json_array(), *affine = json_array();

	for (int i = 0; dim && i < 3; i++)
		json_array_append_new(dim, json_integer(s->grid_dim[i]));
	for (int i = 0; affine && i < 16; i++)
		json_array_append_new(affine, json_real(s->grid_affine[i / 4][i % 4]));
	return stats_json_new(s, json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:o, s:o}",
					   "load_seconds", s->load_seconds,
					   "upload_seconds", s->upload_seconds,
					   "compile_seconds", s->compile_seconds,
					   "track_seconds", s->track_seconds,
					   "kernel_seconds", s->kernel_seconds,
					   "encode_seconds", s->encode_seconds,
					   "write_seconds", s->write_seconds,
					   "grid_dim", dim, "grid_affine", affine));
}

/* A JSON string of text. Error messages quote what clients sent, cut to
 * fit (possibly inside a UTF-8 sequence), and JSON strings must be UTF-8:
 * such text is kept with '?' for every non-ASCII byte rather than lose the
 * record. */
static json_t *text_json(const char *text)
{
	json_t *s = json_string(text);
	char *copy;

	if (s)
		return s;
	copy = strdup(text);
	if (!copy)
		return NULL;
	for (char *p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	s = json_string(copy);
	free(copy);
	return s;
}

/* Everything but the job document, which spool_record_write appends as
 * submitted. */
static json_t *record_json(const struct job_info *info)
{
	char result[JOB_ID_LEN + sizeof(RESULT_EXT)];
	json_t *error = info->state == JOB_FAILED
		? json_pack("{s:i, s:s, s:o, s:o}", "errno", info->error_code, "kind",
			    errbuf_kind_name(info->error.kind), "field",
			    text_json(info->error.field), "message", text_json(info->error.message))
		: json_null();

	spool_result_name(info->id, result, sizeof(result));
	/* "o": a member that failed to build (NULL) fails the whole pack. */
	return json_pack("{s:i, s:s, s:o, s:s, s:s, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}, "
			 "s:{s:s, s:I, s:b}, s:o, s:o}",
			 "tractd_job", RECORD_VERSION, "id", info->id, "owner",
			 text_json(info->owner), "status",
			 job_state_name(info->state), "format", output_format_name(info->format),
			 "created", (json_int_t)info->created, "started", (json_int_t)info->started,
			 "finished", (json_int_t)info->finished,
			 "progress", "seeds_done", (json_int_t)info->seeds_done,
			 "seeds_total", (json_int_t)info->seeds_total,
			 "streamlines", (json_int_t)info->streamlines,
			 "points", (json_int_t)info->points,
			 "result", "file", result, "bytes", (json_int_t)info->bytes,
			 "expired", info->expired,
			 "stats", stats_json(&info->stats), "error", error);
}

/* The record's text: record_json's members, then "job" with the document
 * as submitted (JSON that jobspec_parse, or spool_record_parse, accepted),
 * byte for byte. Re-encoding it would cost a parse of up to 64 MiB at each
 * state change and write its numbers with 17 digits: a 14 MB document of
 * 1 M seed points became a 62 MB record. */
static char *record_text(const struct job_info *info, const char *spec_json, size_t *len)
{
	json_t *doc = record_json(info);
	char *head = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	static const char member[] = ",\"job\":";
	const char *spec = spec_json ? spec_json : "null";
	size_t head_len, spec_len = strlen(spec);
	char *text = NULL, *p;

	json_decref(doc);
	/* head is "{...}": its closing brace gives way to the job member. */
	head_len = head ? strlen(head) : 0;
	if (head_len >= 2 && head[head_len - 1] == '}')
		text = malloc(head_len - 1 + sizeof(member) - 1 + spec_len + 2);
	if (text) {
		p = mempcpy(text, head, head_len - 1);
		p = mempcpy(p, member, sizeof(member) - 1);
		p = mempcpy(p, spec, spec_len);
		p = mempcpy(p, "}\n", 2);
		*len = (size_t)(p - text);
	}
	free(head);
	return text;
}

/* The directory entry reaches the disk too, so a renamed record survives a
 * power cut, not only a crash of the process. */
static int sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		r = -errno;
	close(fd);
	return r;
}

int spool_record_write(const char *dir, const struct job_info *info, const char *spec_json,
		       struct errbuf *err)
{
	char tmp[1200], path[1200];
	size_t len = 0;
	char *text = record_text(info, spec_json, &len);
	bool durable = job_state_ended(info->state);   /* see spool.h */
	int fd = -1, r = 0;

	if (!text)
		return errbuf_set(err, -ENOMEM, "", "cannot encode the record of job %s", info->id);
	snprintf(tmp, sizeof(tmp), "%s/" RECORD_TMP, dir);
	snprintf(path, sizeof(path), "%s/%s" RECORD_EXT, dir, info->id);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		free(text);
		return errbuf_set(err, r, "", "cannot create a record in %s: %s", dir, strerror(-r));
	}
	r = fdio_write_all(fd, text, len);
	if (r == 0 && durable && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	free(text);
	if (r < 0) {
		unlink(tmp);
		/* EDQUOT is a full disk too, as far as the client can tell. */
		if (r == -EDQUOT)
			r = -ENOSPC;
		return errbuf_set(err, r, "", "cannot write the record of job %s: %s", info->id,
				  strerror(-r));
	}
	r = durable ? sync_dir(dir) : 0;
	if (r < 0)
		return errbuf_set(err, r, "", "cannot sync %s: %s", dir, strerror(-r));
	return 0;
}

void spool_record_remove(const char *dir, const char *id)
{
	char path[1200];

	snprintf(path, sizeof(path), "%s/%s" RECORD_EXT, dir, id);
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("job=%s cannot remove its record %s: %s", id, path, strerror(errno));
}

/* ---- reading -------------------------------------------------------------- */

static int parse_stats(json_t *doc, struct engine_stats *s, struct errbuf *err)
{
	json_t *dim = NULL, *affine = NULL;
	json_int_t seeds, streamlines, points, chunks, batches;
	json_error_t je;

	/* encode_seconds is optional: records written before it existed
	 * counted encoding in write_seconds. */
	if (json_unpack_ex(doc, &je, 0, "{s:I, s:I, s:I, s:I, s:I, s:F, s:F, s:F, s:F, s:F, s?F, "
			   "s:F, s:o, s:o}", "seeds", &seeds, "streamlines", &streamlines, "points",
			   &points, "chunks", &chunks, "batches", &batches, "load_seconds",
			   &s->load_seconds, "upload_seconds", &s->upload_seconds,
			   "compile_seconds", &s->compile_seconds, "track_seconds",
			   &s->track_seconds, "kernel_seconds", &s->kernel_seconds,
			   "encode_seconds", &s->encode_seconds, "write_seconds", &s->write_seconds,
			   "grid_dim", &dim, "grid_affine", &affine) < 0)
		return errbuf_set(err, -EINVAL, "stats", "%s", je.text);
	if (seeds < 0 || streamlines < 0 || points < 0 || chunks < 0 || batches < 0 ||
	    json_array_size(dim) != 3 || json_array_size(affine) != 16)
		return errbuf_set(err, -EINVAL, "stats", "counts or grid out of range");
	s->seeds = (uint64_t)seeds;
	s->streamlines = (uint64_t)streamlines;
	s->points = (uint64_t)points;
	s->chunks = (uint64_t)chunks;
	s->batches = (uint64_t)batches;
	if (stats_json_read(doc, s, err) < 0) {
		errbuf_prefix_field(err, "stats");
		return -EINVAL;
	}
	for (size_t i = 0; i < 3; i++) {
		json_t *v = json_array_get(dim, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return errbuf_set(err, -EINVAL, "stats.grid_dim", "not a size");
		s->grid_dim[i] = json_integer_value(v);
	}
	for (size_t i = 0; i < 16; i++) {
		json_t *v = json_array_get(affine, i);
		if (!json_is_number(v))
			return errbuf_set(err, -EINVAL, "stats.grid_affine", "not a number");
		s->grid_affine[i / 4][i % 4] = json_number_value(v);
	}
	return 0;
}

/* src (UTF-8) into dst[len], cut if need be at a character boundary, so
 * that the copy is UTF-8 too. */
static void copy_utf8(char *dst, size_t len, const char *src)
{
	size_t n = strlen(src);

	if (n >= len) {
		n = len - 1;
		while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* The kind of a failure recorded before records held kinds: the one that
 * gives the answer the API derived from its errno and field then. */
static enum err_kind unrecorded_kind(int code, const char *field)
{
	switch (code) {
	case -E2BIG: return ERR_KIND_TOO_LARGE;
	case -EFBIG: return ERR_KIND_LIMIT;
	case -ESHUTDOWN: return ERR_KIND_SHUTDOWN;
	case -EINTR: return ERR_KIND_INTERRUPTED;
	}
	if (code == -ENOSPC && strcmp(field, "output") == 0)
		return ERR_KIND_STORAGE;
	if (strcmp(field, "device") == 0)
		return ERR_KIND_DEVICE;
	if (strncmp(field, "output", 6) == 0)
		return ERR_KIND_OUTPUT;
	return field[0] ? ERR_KIND_INPUT : ERR_KIND_UNTIED;
}

static int parse_error(json_t *doc, struct job_info *info, struct errbuf *err)
{
	const char *field, *message, *kind = NULL;
	json_error_t je;
	int code;

	if (json_is_null(doc))
		return info->state == JOB_FAILED
			? errbuf_set(err, -EINVAL, "error", "a failed job without its error") : 0;
	/* Only failed jobs have one (and only theirs is written back). */
	if (info->state != JOB_FAILED)
		return errbuf_set(err, -EINVAL, "error", "an error on a job that did not fail");
	if (json_unpack_ex(doc, &je, 0, "{s:i, s?s, s:s, s:s}", "errno", &code, "kind", &kind,
			   "field", &field, "message", &message) < 0)
		return errbuf_set(err, -EINVAL, "error", "%s", je.text);
	if (code >= 0)
		return errbuf_set(err, -EINVAL, "error.errno", "not a negative errno");
	if (!kind)
		info->error.kind = unrecorded_kind(code, field);
	else if (errbuf_kind_from_name(kind, &info->error.kind) < 0)
		return errbuf_set(err, -EINVAL, "error.kind", "unknown kind '%.40s'", kind);
	info->error_code = code;
	copy_utf8(info->error.field, sizeof(info->error.field), field);
	copy_utf8(info->error.message, sizeof(info->error.message), message);
	return 0;
}

static bool nonneg(json_int_t v)
{
	return v >= 0;
}

static int parse_record(const char *text, size_t len, const char *file_id,
			struct spool_record *ret, struct errbuf *err)
{
	json_error_t je;
	json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	json_t *stats, *error, *spec;
	const char *id, *owner, *status, *format, *file;
	json_int_t version, created, started, finished, seeds_done, seeds_total, streamlines,
		points, bytes;
	char want_file[JOB_ID_LEN + sizeof(RESULT_EXT)];
	struct spool_record rec = { 0 };
	int expired, r = 0;

	memset(ret, 0, sizeof(*ret));
	if (!doc)
		return errbuf_set(err, -EINVAL, "", "not JSON: %s (line %d)", je.text, je.line);
	if (json_unpack_ex(doc, &je, 0, "{s:I, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:{s:I, s:I, "
			   "s:I, s:I}, s:{s:s, s:I, s:b}, s:o, s:o, s:o}", "tractd_job", &version,
			   "id", &id, "owner", &owner, "status", &status, "format", &format, "created", &created,
			   "started", &started, "finished", &finished, "progress", "seeds_done",
			   &seeds_done, "seeds_total", &seeds_total, "streamlines", &streamlines,
			   "points", &points, "result", "file", &file, "bytes", &bytes, "expired",
			   &expired, "stats", &stats, "error", &error, "job", &spec) < 0) {
		r = errbuf_set(err, -EINVAL, "", "not a job record: %s", je.text);
		goto out;
	}
	if (version != RECORD_VERSION) {
		r = errbuf_set(err, -EINVAL, "tractd_job", "version %lld, not %d", (long long)version,
			       RECORD_VERSION);
		goto out;
	}
	if (!valid_job_id(id, strlen(id)) || (file_id && strcmp(id, file_id) != 0)) {
		r = errbuf_set(err, -EINVAL, "id", "'%.40s' is not this file's job id", id);
		goto out;
	}
	memcpy(rec.info.id, id, JOB_ID_LEN + 1);
	if (owner[0] == '\0' || strlen(owner) > JOB_OWNER_LEN) {
		r = errbuf_set(err, -EINVAL, "owner", "an empty or too long owner");
		goto out;
	}
	memcpy(rec.info.owner, owner, strlen(owner) + 1);
	spool_result_name(id, want_file, sizeof(want_file));
	/* The result is always <id>.tractogram: a record never names another path. */
	if (strcmp(file, want_file) != 0) {
		r = errbuf_set(err, -EINVAL, "result.file", "'%.60s' is not %s", file, want_file);
		goto out;
	}
	if (job_state_parse(status, &rec.info.state) < 0 ||
	    output_format_parse(format, &rec.info.format) < 0) {
		r = errbuf_set(err, -EINVAL, "status", "unknown status or format");
		goto out;
	}
	if (!nonneg(created) || !nonneg(started) || !nonneg(finished) || !nonneg(seeds_done) ||
	    !nonneg(seeds_total) || !nonneg(streamlines) || !nonneg(points) || !nonneg(bytes)) {
		r = errbuf_set(err, -EINVAL, "", "a negative time or count");
		goto out;
	}
	rec.info.created = (time_t)created;
	rec.info.started = (time_t)started;
	rec.info.finished = (time_t)finished;
	rec.info.seeds_done = (uint64_t)seeds_done;
	rec.info.seeds_total = (uint64_t)seeds_total;
	rec.info.streamlines = (uint64_t)streamlines;
	rec.info.points = (uint64_t)points;
	rec.info.bytes = (uint64_t)bytes;
	rec.info.expired = expired;
	r = parse_stats(stats, &rec.info.stats, err);
	if (r == 0)
		r = parse_error(error, &rec.info, err);
	/* As spool_record_parse's fast path: only a job that will be written
	 * again keeps its document. */
	if (r == 0 && !json_is_null(spec) &&
	    (rec.info.state == JOB_QUEUED || rec.info.state == JOB_RUNNING)) {
		rec.spec_json = json_dumps(spec, JSON_COMPACT);
		if (!rec.spec_json)
			r = errbuf_set(err, -ENOMEM, "job", "out of memory");
	}
	if (r == 0)
		*ret = rec;
out:
	json_decref(doc);
	return r;
}

/* The whole of a regular file, NUL-terminated; no symlinks followed. */
static int read_file_at(int dir_fd, const char *name, char **ret, size_t *len)
{
	int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	int r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (!S_ISREG(st.st_mode))
		r = -EINVAL;
	else if ((uint64_t)st.st_size > RECORD_MAX_BYTES)
		r = -EFBIG;
	else if (!(buf = malloc((size_t)st.st_size + 1)))
		r = -ENOMEM;
	while (r == 0 && got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			r = n < 0 ? -errno : -EIO;
		else
			got += (size_t)n;
	}
	close(fd);
	if (r < 0) {
		free(buf);
		return r;
	}
	/* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): -errno < 0 when fstat fails */
	buf[got] = '\0';
	*ret = buf;
	*len = got;
	return 0;
}

struct loaded {
	struct spool_record *records;
	size_t n, cap;
};

static int keep_record(struct loaded *l, const struct spool_record *rec)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct spool_record *grown = realloc(l->records, sizeof(*grown) * cap);
		if (!grown)
			return -ENOMEM;
		l->records = grown;
		l->cap = cap;
	}
	l->records[l->n++] = *rec;
	return 0;
}

static void load_record(int dir_fd, const char *dir, const char *name, struct loaded *l)
{
	char file_id[JOB_ID_LEN + 1];
	size_t id_len = strlen(name) - strlen(RECORD_EXT);
	struct spool_record rec;
	struct errbuf err = { 0 };
	char *text = NULL;
	size_t len = 0;
	int r;

	if (!valid_job_id(name, id_len)) {
		log_warn("spool: %s/%s is not a job record of tractd: left alone", dir, name);
		return;
	}
	memcpy(file_id, name, id_len);
	file_id[id_len] = '\0';
	r = read_file_at(dir_fd, name, &text, &len);
	if (r < 0) {
		log_warn("spool: cannot read %s/%s: %s: skipped", dir, name, strerror(-r));
		return;
	}
	r = spool_record_parse(text, len, file_id, &rec, &err);
	free(text);
	if (r < 0) {
		log_warn("spool: %s/%s is not a valid job record (%s%s%s): skipped, its result "
			 "(if any) removed", dir, name, err.field, err.field[0] ? ": " : "",
			 err.message);
		return;
	}
	if (keep_record(l, &rec) < 0) {
		log_warn("spool: out of memory: job %s skipped", rec.info.id);
		free(rec.spec_json);
	}
}

static bool has_record(const struct loaded *l, const char *id, size_t id_len)
{
	for (size_t i = 0; i < l->n; i++)
		if (strlen(l->records[i].info.id) == id_len &&
		    strncmp(l->records[i].info.id, id, id_len) == 0)
			return true;
	return false;
}

static int by_creation(const void *a, const void *b)
{
	const struct spool_record *x = a, *y = b;

	if (x->info.created != y->info.created)
		return x->info.created < y->info.created ? -1 : 1;
	return strcmp(x->info.id, y->info.id);
}

/* Results whose job has no record are nobody's: no request can reach them,
 * and they would count against nothing. The names are checked to be ours. */
static void remove_orphans(int dir_fd, const char *dir, const struct loaded *l)
{
	int fd = dup(dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	/* The dup shares the position of spool_load's scan, which is at the end. */
	rewinddir(d);
	while ((e = readdir(d))) {
		size_t id_len = strlen(e->d_name) - (has_suffix(e->d_name, RESULT_EXT)
						     ? strlen(RESULT_EXT) : 0);
		if (!has_suffix(e->d_name, RESULT_EXT) || !valid_job_id(e->d_name, id_len) ||
		    has_record(l, e->d_name, id_len))
			continue;
		if (unlinkat(dir_fd, e->d_name, 0) == 0)
			log_warn("spool: %s/%s has no job record: removed", dir, e->d_name);
	}
	closedir(d);
}

int spool_load(const char *dir, struct spool_record **ret, size_t *n, struct errbuf *err)
{
	int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct loaded l = { 0 };
	struct dirent *e;
	int fd;
	DIR *d;

	*ret = NULL;
	*n = 0;
	if (dir_fd < 0)
		return errbuf_set(err, -errno, "state_dir", "cannot open %s: %s", dir,
				  strerror(errno));
	fd = dup(dir_fd);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		int r = -errno;
		if (fd >= 0)
			close(fd);
		close(dir_fd);
		return errbuf_set(err, r, "state_dir", "cannot read %s: %s", dir, strerror(-r));
	}
	while ((e = readdir(d))) {
		const char *name = e->d_name;

		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
		    has_suffix(name, RESULT_EXT))
			continue;
		if (strncmp(name, ".rec-", 5) == 0 ||
		    strncmp(name, CONVERT_TMP_PREFIX, strlen(CONVERT_TMP_PREFIX)) == 0) {
			if (unlinkat(dir_fd, name, 0) == 0)
				log_info("spool: removed %s/%s, a temporary file of an earlier run",
					 dir, name);
		} else if (has_suffix(name, RECORD_EXT)) {
			load_record(dir_fd, dir, name, &l);
		} else {
			log_warn("spool: %s/%s is not a file of tractd: left alone", dir, name);
		}
	}
	closedir(d);
	remove_orphans(dir_fd, dir, &l);
	close(dir_fd);
	if (l.n > 1)
		qsort(l.records, l.n, sizeof(*l.records), by_creation);
	*ret = l.records;
	*n = l.n;
	return 0;
}

void spool_records_free(struct spool_record *records, size_t n)
{
	for (size_t i = 0; records && i < n; i++)
		free(records[i].spec_json);
	free(records);
}

/* Where the job member's value lies in a record laid out as record_text
 * writes it, "...,\"job\":VALUE}": *head_len bytes before the member, the
 * value at *at, *n bytes. The member's name cannot occur unescaped inside
 * a string, and nested deeper it leaves braces open: a head that parses is
 * the record's own. false for any other layout. */
static bool split_document(const char *text, size_t len, size_t *head_len, size_t *at,
			   size_t *n)
{
	static const char member[] = ",\"job\":";
	/* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): read_file_at gave text */
	const char *p = memmem(text, len, member, sizeof(member) - 1);
	size_t end = len;

	while (end > 0 && isspace((unsigned char)text[end - 1]))
		end--;
	if (!p || end == 0 || text[end - 1] != '}')
		return false;
	*head_len = (size_t)(p - text);
	*at = *head_len + sizeof(member) - 1;
	if (end - 1 < *at)
		return false;
	*n = end - 1 - *at;
	return true;
}

/* The document of a job that will be written again, as it is in the
 * record: one JSON value, or null for none. */
static int keep_document(const char *text, size_t n, struct spool_record *rec,
			 struct errbuf *err)
{
	json_error_t je;
	json_t *doc = memchr(text, '\0', n) ? NULL
		: json_loadb(text, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	bool none = json_is_null(doc);   /* false for NULL */

	json_decref(doc);
	if (!doc)
		return errbuf_set(err, -EINVAL, "job", "not JSON");
	if (none)
		return 0;
	rec->spec_json = strndup(text, n);
	return rec->spec_json ? 0 : errbuf_set(err, -ENOMEM, "job", "out of memory");
}

/* The record without its document is parsed first: a job that ended needs
 * none (nothing writes its record again), and a restart should not parse
 * a spool's worth of documents of up to 64 MiB each only to drop them. */
int spool_record_parse(const char *text, size_t len, const char *file_id,
		       struct spool_record *ret, struct errbuf *err)
{
	static const char no_document[] = ",\"job\":null}";
	size_t head_len, at, n;
	char *head;
	int r;

	if (!split_document(text, len, &head_len, &at, &n))
		return parse_record(text, len, file_id, ret, err);
	head = malloc(head_len + sizeof(no_document));
	if (!head)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	/* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): read_file_at gave text */
	memcpy(head, text, head_len);
	memcpy(head + head_len, no_document, sizeof(no_document));
	r = parse_record(head, head_len + sizeof(no_document) - 1, file_id, ret, NULL);
	free(head);
	if (r < 0)   /* another layout: the whole text decides */
		return parse_record(text, len, file_id, ret, err);
	if (ret->info.state != JOB_QUEUED && ret->info.state != JOB_RUNNING)
		return 0;
	r = keep_document(text + at, n, ret, err);
	if (r < 0)
		memset(ret, 0, sizeof(*ret));
	return r;
}
