/* SPDX-License-Identifier: MIT */
/*
 * tctl_job: turns a job file written for `tractd run` into a job for the
 * daemon (proto/API.md, POST /v1/jobs). Inputs -- every string member of
 * "inputs" but the options that name no file (sh_basis, sh_frame,
 * bvecs_convention), so that file inputs added to the schema later need no
 * change here, and
 * "seeds.roi", "seeds.points_file", every string member of "seeds.interface"
 * (its tissue maps) and of "stopping" but criterion (its maps), and every
 * string of "regions"' include and exclude (mask images; spheres are
 * objects) -- are paths relative to the job file's directory; each is
 * hashed (SHA-256, streamed: volumes can be gigabytes), uploaded only when
 * the daemon does not have that content yet, and replaced by its volume id.
 * Values that already are volume ids are left alone. output.path is taken
 * out (the daemon refuses it) and kept as `track`'s default output.
 * Everything else is the daemon's to validate: the document goes as written.
 */
#include <errno.h>
#include <libgen.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tctl.h"
#include "tctl_interrupt.h"
#include "tctl_job.h"
#include "tctl_msg.h"

#define HASH_CHUNK ((size_t)1 << 20)
#define VOLUMES_PATH "/v1/volumes"

static int out_of_memory(void)
{
	msg_error("out of memory");
	return TCTL_EXIT_LOCAL;
}

bool job_is_volume_id(const char *s)
{
	size_t prefix = sizeof(VOLUME_ID_PREFIX) - 1;

	if (strlen(s) != VOLUME_ID_LEN || strncmp(s, VOLUME_ID_PREFIX, prefix) != 0)
		return false;
	for (const char *c = s + prefix; *c; c++)
		if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
			return false;
	return true;
}

/* Relative paths in a job start at the job file's directory, as for
 * `tractd run`. NULL when out of memory. */
static char *join_path(const char *dir, const char *path)
{
	char *joined;

	if (path[0] == '/')
		return strdup(path);
	if (asprintf(&joined, "%s/%s", dir, path) < 0)
		return NULL;
	return joined;
}

static char *directory_of(const char *path)
{
	char *copy = strdup(path), *dir;

	if (!copy)
		return NULL;
	/* dirname may modify its argument and return a pointer into it. */
	dir = strdup(dirname(copy));
	free(copy);
	return dir;
}

/* A missing, empty or non-string output.path is left for the daemon to
 * judge: it stays in the document. */
static int take_output_path(struct job_file *job)
{
	json_t *output = json_object_get(job->doc, "output");
	const char *path = json_string_value(json_object_get(output, "path"));

	if (!path || !*path)
		return TCTL_EXIT_OK;
	job->output_path = join_path(job->dir, path);
	if (!job->output_path)
		return out_of_memory();
	if (json_object_del(output, "path") < 0)
		return out_of_memory();
	return TCTL_EXIT_OK;
}

int job_file_load(const char *path, struct job_file *ret)
{
	bool from_stdin = strcmp(path, "-") == 0;
	json_error_t error;
	FILE *f;

	*ret = (struct job_file){ 0 };
	f = from_stdin ? stdin : fopen(path, "rb");
	if (!f) {
		msg_error("cannot read %s: %s", path, strerror(errno));
		return TCTL_EXIT_LOCAL;
	}
	/* The daemon refuses duplicate keys too; jansson would keep the last. */
	ret->doc = json_loadf(f, JSON_REJECT_DUPLICATES, &error);
	/* Only read from: a close error loses nothing. */
	if (!from_stdin)
		(void)fclose(f);
	if (!ret->doc) {
		msg_error("%s:%d:%d: %s", from_stdin ? "standard input" : path, error.line,
			  error.column, error.text);
		return TCTL_EXIT_LOCAL;
	}
	ret->dir = from_stdin ? strdup(".") : directory_of(path);
	if (!ret->dir)
		return out_of_memory();
	return take_output_path(ret);
}

int job_file_adopt(json_t *doc, struct job_file *ret)
{
	*ret = (struct job_file){ .doc = doc, .dir = strdup(".") };
	if (!ret->dir)
		return out_of_memory();
	return take_output_path(ret);
}

/* A document that is not an object, or whose "output" is not one, is left
 * for the daemon to refuse. */
int job_file_set_output_format(struct job_file *job, const char *format)
{
	json_t *output = json_object_get(job->doc, "output");

	if (!json_is_object(job->doc))
		return TCTL_EXIT_OK;
	if (!output) {
		output = json_object();
		/* json_object_set_new releases output when it fails. */
		if (!output || json_object_set_new(job->doc, "output", output) < 0)
			return out_of_memory();
	}
	if (json_is_object(output) && json_object_set_new(output, "format", json_string(format)) < 0)
		return out_of_memory();
	return TCTL_EXIT_OK;
}

void job_file_free(struct job_file *job)
{
	json_decref(job->doc);
	free(job->dir);
	free(job->output_path);
	for (size_t i = 0; i < job->n_uploads; i++)
		free(job->uploads[i].path);
	free(job->uploads);
	*job = (struct job_file){ 0 };
}

static int unreadable_input(FILE *f, const char *field, const char *path, const char *reason)
{
	msg_error("%s: cannot read %s: %s", field, path, reason);
	if (f)
		(void)fclose(f);
	return TCTL_EXIT_LOCAL;
}

/* Only regular files: their size is known before the upload starts. */
static int open_input(const char *field, const char *path, FILE **ret, uint64_t *size)
{
	struct stat st;
	FILE *f = fopen(path, "rb");

	if (!f)
		return unreadable_input(NULL, field, path, strerror(errno));
	if (fstat(fileno(f), &st) < 0)
		return unreadable_input(f, field, path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return unreadable_input(f, field, path, "not a regular file");
	*ret = f;
	*size = (uint64_t)st.st_size;
	return TCTL_EXIT_OK;
}

static void show_hash_progress(const char *field, uint64_t done, uint64_t size, int *shown)
{
	int percent = size ? (int)(100 * done / size) : 100;

	/* Redrawn when the percentage changes: at most a hundred times. */
	if (percent == *shown)
		return;
	*shown = percent;
	msg_progress("hashing %s: %d%%", field, percent);
}

static void format_id(const unsigned char *digest, char id[VOLUME_ID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	size_t prefix = sizeof(VOLUME_ID_PREFIX) - 1;

	memcpy(id, VOLUME_ID_PREFIX, prefix);
	for (size_t i = 0; i < 32; i++) {
		id[prefix + 2 * i] = hex[digest[i] >> 4];
		id[prefix + 2 * i + 1] = hex[digest[i] & 15];
	}
	id[VOLUME_ID_LEN] = '\0';
}

/* Feeds the file to ctx in chunks; returns an exit code. */
static int digest_stream(EVP_MD_CTX *ctx, FILE *f, uint64_t size, const char *field,
			 const char *path)
{
	unsigned char *chunk = malloc(HASH_CHUNK);
	uint64_t done = 0;
	int shown = -1, code = TCTL_EXIT_OK;
	size_t n;

	if (!chunk)
		return out_of_memory();
	while (code == TCTL_EXIT_OK && (n = fread(chunk, 1, HASH_CHUNK, f)) > 0) {
		if (EVP_DigestUpdate(ctx, chunk, n) != 1) {
			msg_error("%s: SHA-256 of %s failed (OpenSSL)", field, path);
			code = TCTL_EXIT_LOCAL;
		}
		done += n;
		show_hash_progress(field, done, size, &shown);
		if (interrupt_signal())
			code = interrupt_exit_code();
	}
	if (code == TCTL_EXIT_OK && ferror(f)) {
		msg_error("%s: cannot read %s: %s", field, path, strerror(errno));
		code = TCTL_EXIT_LOCAL;
	}
	msg_progress_end();
	free(chunk);
	return code;
}

/* The volume id of the file's bytes, which the daemon computes the same way. */
static int hash_file(FILE *f, uint64_t size, const char *field, const char *path,
		     char id[VOLUME_ID_LEN + 1])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int digest_len = 0;
	int code;

	if (!ctx)
		return out_of_memory();
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		msg_error("%s: SHA-256 is not available (OpenSSL)", field);
		return TCTL_EXIT_LOCAL;
	}
	code = digest_stream(ctx, f, size, field, path);
	if (code == TCTL_EXIT_OK && (EVP_DigestFinal_ex(ctx, digest, &digest_len) != 1 ||
				     digest_len != 32)) {
		msg_error("%s: SHA-256 of %s failed (OpenSSL)", field, path);
		code = TCTL_EXIT_LOCAL;
	}
	if (code == TCTL_EXIT_OK)
		format_id(digest, id);
	EVP_MD_CTX_free(ctx);
	return code;
}

/* The daemon names a volume by the SHA-256 of the bytes it received: a
 * different id means the file changed between hashing and uploading. */
static int check_uploaded_id(const json_t *answer, const char *field, const char *path,
			     const char *id)
{
	const char *received = json_string_value(json_object_get(answer, "id"));

	if (!received) {
		msg_error("the daemon's answer to POST " VOLUMES_PATH " has no \"id\"");
		return TCTL_EXIT_SERVER;
	}
	if (strcmp(received, id) != 0) {
		msg_error("%s: %s changed while it was being read (hashed as %s, uploaded as %s)",
			  field, path, id, received);
		return TCTL_EXIT_LOCAL;
	}
	return TCTL_EXIT_OK;
}

static int upload_volume(struct http_client *c, FILE *f, uint64_t size, const char *field,
			 const char *path, const char *id)
{
	char meter[256];
	const struct http_file source = { .stream = f, .name = path, .size = size, .meter = meter };
	json_t *answer = NULL;
	int code;

	snprintf(meter, sizeof(meter), "uploading %s", field);
	if (fseek(f, 0, SEEK_SET) != 0) {
		msg_error("%s: cannot read %s: %s", field, path, strerror(errno));
		return TCTL_EXIT_LOCAL;
	}
	code = http_upload(c, VOLUMES_PATH, &source, &answer);
	if (code == TCTL_EXIT_OK)
		code = check_uploaded_id(answer, field, path, id);
	json_decref(answer);
	return code;
}

/* Makes sure the daemon holds the bytes of path; fills id. */
static int ensure_volume(struct http_client *c, const char *field, const char *path,
			 char id[VOLUME_ID_LEN + 1])
{
	char volume_path[sizeof(VOLUMES_PATH "/") + VOLUME_ID_LEN];
	uint64_t size = 0;
	bool present = false;
	FILE *f = NULL;
	int code = open_input(field, path, &f, &size);

	if (code != TCTL_EXIT_OK)
		return code;
	code = hash_file(f, size, field, path, id);
	if (code == TCTL_EXIT_OK) {
		/* Safe in a URL as it is: a prefix and hex digits. */
		snprintf(volume_path, sizeof(volume_path), VOLUMES_PATH "/%s", id);
		code = http_exists(c, volume_path, &present);
	}
	if (code == TCTL_EXIT_OK && !present)
		code = upload_volume(c, f, size, field, path, id);
	(void)fclose(f);
	return code;
}

/* Keeps path (taken) as the local name of volume id. */
static int remember_upload(struct job_file *job, const char *id, char *path)
{
	struct job_upload *grown = realloc(job->uploads, sizeof(*grown) * (job->n_uploads + 1));

	if (!grown) {
		free(path);
		return out_of_memory();
	}
	job->uploads = grown;
	snprintf(grown[job->n_uploads].id, sizeof(grown[job->n_uploads].id), "%s", id);
	grown[job->n_uploads++].path = path;
	return TCTL_EXIT_OK;
}

void job_file_name_locally(const struct job_file *job, const char *text, char *out, size_t len)
{
	size_t used = 0;

	while (*text && used + 1 < len) {
		const struct job_upload *hit = NULL;

		for (size_t i = 0; job && i < job->n_uploads && !hit; i++)
			if (strncmp(text, job->uploads[i].id, strlen(job->uploads[i].id)) == 0)
				hit = &job->uploads[i];
		if (hit) {
			int n = snprintf(out + used, len - used, "%s", hit->path);
			used = n < 0 || (size_t)n >= len - used ? len - 1 : used + (size_t)n;
			text += strlen(hit->id);
		} else {
			out[used++] = *text++;
		}
	}
	out[used] = '\0';
}

/* value: a member that names an input. Strings that are not volume ids are
 * paths; anything else is sent unchanged for the daemon to judge. */
static int replace_path_by_id(struct job_file *job, struct http_client *c, json_t *value,
			      const char *field)
{
	const char *text = json_string_value(value);
	char id[VOLUME_ID_LEN + 1];
	char *path;
	int code;

	if (!text || !*text || job_is_volume_id(text))
		return TCTL_EXIT_OK;
	path = join_path(job->dir, text);
	if (!path)
		return out_of_memory();
	code = ensure_volume(c, field, path, id);
	if (code == TCTL_EXIT_OK)
		code = remember_upload(job, id, path);
	else
		free(path);
	if (code == TCTL_EXIT_OK && json_string_set(value, id) < 0)
		code = out_of_memory();
	return code;
}

/* Members of "inputs" that are settings, not files. */
static bool names_a_file(const char *input_key)
{
	return strcmp(input_key, "sh_basis") != 0 && strcmp(input_key, "sh_frame") != 0 &&
	       strcmp(input_key, "bvecs_convention") != 0;
}

/* Every string member of obj (at field) but criterion, a choice: the maps
 * of "stopping", the tissue maps of "seeds.interface". */
static int replace_members_by_id(struct job_file *job, struct http_client *c, json_t *obj,
				 const char *field)
{
	json_t *value;
	const char *key;
	char member[256];
	int code = TCTL_EXIT_OK;

	json_object_foreach(obj, key, value) {
		if (code != TCTL_EXIT_OK)
			break;
		if (strcmp(key, "criterion") == 0)
			continue;
		snprintf(member, sizeof(member), "%s.%s", field, key);
		code = replace_path_by_id(job, c, value, member);
	}
	return code;
}

/* The mask images among regions.include and regions.exclude: their strings. */
static int upload_region_masks(struct job_file *job, struct http_client *c)
{
	static const char *const lists[] = { "include", "exclude" };
	json_t *regions = json_object_get(job->doc, "regions"), *value;
	char field[64];
	size_t i;
	int code = TCTL_EXIT_OK;

	for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
		json_array_foreach(json_object_get(regions, lists[l]), i, value) {
			if (code != TCTL_EXIT_OK)
				return code;
			snprintf(field, sizeof(field), "regions.%s[%zu]", lists[l], i);
			code = replace_path_by_id(job, c, value, field);
		}
	}
	return code;
}

int job_file_upload_inputs(struct job_file *job, struct http_client *c)
{
	json_t *inputs = json_object_get(job->doc, "inputs"), *value;
	const char *key;
	char field[256];
	int code;

	json_object_foreach(inputs, key, value) {
		if (!names_a_file(key))
			continue;
		snprintf(field, sizeof(field), "inputs.%s", key);
		code = replace_path_by_id(job, c, value, field);
		if (code != TCTL_EXIT_OK)
			return code;
	}
	code = replace_path_by_id(job, c, json_object_get(json_object_get(job->doc, "seeds"), "roi"),
				  "seeds.roi");
	if (code == TCTL_EXIT_OK)
		code = replace_path_by_id(job, c, json_object_get(json_object_get(job->doc, "seeds"),
								  "points_file"), "seeds.points_file");
	if (code == TCTL_EXIT_OK)
		code = replace_members_by_id(job, c, json_object_get(json_object_get(job->doc,
									     "seeds"), "interface"),
					     "seeds.interface");
	if (code == TCTL_EXIT_OK)
		code = replace_members_by_id(job, c, json_object_get(job->doc, "stopping"),
					     "stopping");
	if (code == TCTL_EXIT_OK)
		code = upload_region_masks(job, c);
	return code;
}
