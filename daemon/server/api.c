/* SPDX-License-Identifier: MIT */
/*
 * api: routes, request bodies, JSON answers and streamed tractograms on
 * libmicrohttpd (see api.h and proto/API.md).
 *
 * MHD calls the access handler several times per request: once with the
 * headers (we allocate a struct request and decide what the body is for),
 * then with pieces of the body (bounded: JSON into memory up to
 * max_request_bytes, uploads straight into a store writer up to
 * max_upload_bytes), then once more with no data, when we answer.
 */
#include "server/api.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <pthread.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/infile.h"
#include "base/log.h"
#include "base/timing.h"
#include "server/admission.h"
#include "server/api_error.h"
#include "server/redact.h"
#include "server/route.h"
#include "engine/stats_json.h"
#include "formats/tractogram_read.h"

#define STREAM_BLOCK_BYTES (256u << 10)
/* MHD reads each piece of a chunked answer (a streamed tractogram) into the
 * connection's memory pool, whatever the response's block size: its default
 * 32 KiB made a 70 MiB result 2,300 callbacks (a job lookup and a pread
 * each), served at about 1 GB/s on the 2-core lavapipe host; a pool of the
 * stream block serves it at about 2.5 GB/s. MHD maps a pool this large, so
 * the pages an idle connection does not use are never touched (60 idle
 * connections: the same resident memory as with 32 KiB). */
#define CONNECTION_POOL_BYTES STREAM_BLOCK_BYTES
#define FOLLOW_WAIT_MS 1000
/* Each connection is a thread: the limit bounds threads and descriptors.
 * max_connections_per_user (Unix) and max_connections_per_address (TCP)
 * are what binds first, so one client cannot reach it alone. */
#define CONNECTION_LIMIT 512
/* Once its headers are in, a request may take long: an upload that stalls
 * for a while, ?wait=stream following a job that writes nothing for
 * minutes. Before that (and between keep-alive requests) the shorter
 * header_timeout_seconds applies, so idle and half-sent connections go. */
#define REQUEST_TIMEOUT_S 600

/* Answers counted per status class for /metrics. */
enum { STATUS_SLOTS = 600 };

struct api;

/* What on_request's closure says: which socket a request came in on. */
struct listener {
	struct api *api;
	bool tcp;
};

/* Open connections of one uid on the Unix socket. */
struct peer_count {
	uid_t uid;
	unsigned n;
};

/* A TCP connection that has not yet sent a request with a valid token. Its
 * socket stays MHD's: it is only shut down from here, under pending_lock,
 * which MHD's close notification takes before the descriptor goes. */
struct pending_conn {
	struct MHD_Connection *conn;
	int fd;
	uint64_t deadline_ms;     /* accept time plus header_timeout_s */
};

struct api {
	struct api_config cfg;
	struct listener unix_listener, tcp_listener;
	struct MHD_Daemon *unix_daemon;
	struct MHD_Daemon *tcp_daemon;
	atomic_uint_fast64_t answers[STATUS_SLOTS];
	/* At most CONNECTION_LIMIT connections are open on the Unix socket, so
	 * at most as many uids have one: the table never grows. */
	pthread_mutex_t peers_lock;
	struct peer_count peers[CONNECTION_LIMIT];
	size_t n_peers;
	atomic_uint_fast64_t refused_connections;
	/* TCP connections without a valid token yet, oldest first; the reaper
	 * closes them at their deadline, a new one past the cap closes the
	 * oldest. Fixed size: MHD admits no more than CONNECTION_LIMIT. */
	pthread_mutex_t pending_lock;
	pthread_cond_t pending_wake;   /* stopping (CLOCK_MONOTONIC) */
	struct pending_conn pending[CONNECTION_LIMIT];
	size_t n_pending;
	bool reaper_stopping;
	bool reaper_started;
	pthread_t reaper;
	atomic_uint_fast64_t unauthenticated_closed;
};

enum body_kind { BODY_NONE, BODY_JSON, BODY_UPLOAD };


struct request {
	struct identity who;
	enum body_kind kind;
	char *body;               /* BODY_JSON */
	size_t body_len;
	bool body_too_large;
	struct store_writer *upload;   /* BODY_UPLOAD */
	bool upload_quota_binds;       /* the quota left is below max_upload_bytes */
	int upload_error;
	struct errbuf upload_err;
	double arrived;           /* timing_now() when its headers were in */
};

/* ---- answers -------------------------------------------------------------- */

static enum MHD_Result queue(struct api *api, struct MHD_Connection *conn, unsigned status,
			     struct MHD_Response *resp)
{
	enum MHD_Result r;

	if (!resp)
		return MHD_NO;
	r = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	if (status < STATUS_SLOTS)
		atomic_fetch_add(&api->answers[status], 1);
	return r;
}

static enum MHD_Result answer_text(struct api *api, struct MHD_Connection *conn, unsigned status,
				   const char *content_type, char *text /* taken */)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text,
								    MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	return queue(api, conn, status, resp);
}

/* A JSON answer with one extra header (header may be NULL). */
static enum MHD_Result answer_json_with(struct api *api, struct MHD_Connection *conn,
					unsigned status, json_t *doc /* taken */, const char *header,
					const char *value)
{
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	struct MHD_Response *resp;

	json_decref(doc);
	if (!text)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	if (header)
		MHD_add_response_header(resp, header, value);
	return queue(api, conn, status, resp);
}

static enum MHD_Result answer_json(struct api *api, struct MHD_Connection *conn, unsigned status,
				   json_t *doc /* taken */)
{
	return answer_json_with(api, conn, status, doc, NULL, NULL);
}

/* The error document of e, field and message, with one extra header when
 * header is not NULL. */
static enum MHD_Result answer_error_va(struct api *api, struct MHD_Connection *conn,
				       enum api_error e, const char *header, const char *value,
				       const char *field, const char *fmt, va_list ap)
	__attribute__((format(printf, 7, 0)));

static enum MHD_Result answer_error_va(struct api *api, struct MHD_Connection *conn,
				       enum api_error e, const char *header, const char *value,
				       const char *field, const char *fmt, va_list ap)
{
	char message[600], told[700];

	vsnprintf(message, sizeof(message), fmt, ap);
	/* The log keeps the paths, for whoever runs the server. */
	log_debug("answer %u %s: %s: %s", api_error_status(e), api_error_code(e),
		  field ? field : "", message);
	redact_server_paths(message, api->cfg.state_dir, told, sizeof(told));
	return answer_json_with(api, conn, api_error_status(e),
				json_pack("{s:{s:s, s:s, s:s}}", "error", "code", api_error_code(e),
					  "field", field ? field : "", "message", told),
				header, value);
}

static enum MHD_Result answer_error(struct api *api, struct MHD_Connection *conn, enum api_error e,
				    const char *field, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static enum MHD_Result answer_error(struct api *api, struct MHD_Connection *conn, enum api_error e,
				    const char *field, const char *fmt, ...)
{
	enum MHD_Result r;
	va_list ap;

	va_start(ap, fmt);
	r = answer_error_va(api, conn, e, NULL, NULL, field, fmt, ap);
	va_end(ap);
	return r;
}

/* An error about job id, which the answer names in X-Tractd-Job as a
 * tractogram answer does: a ?wait=stream client learns which job failed. */
static enum MHD_Result answer_job_error(struct api *api, struct MHD_Connection *conn,
					const char *id, enum api_error e, const char *field,
					const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

static enum MHD_Result answer_job_error(struct api *api, struct MHD_Connection *conn,
					const char *id, enum api_error e, const char *field,
					const char *fmt, ...)
{
	enum MHD_Result r;
	va_list ap;

	va_start(ap, fmt);
	r = answer_error_va(api, conn, e, "X-Tractd-Job", id, field, fmt, ap);
	va_end(ap);
	return r;
}

static enum MHD_Result answer_empty(struct api *api, struct MHD_Connection *conn, unsigned status)
{
	return queue(api, conn, status,
		     MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT));
}

/* ---- identity ------------------------------------------------------------ */

/* Owner names end up in logs, messages and the store's owner directories:
 * letters, digits, '.', '_', '-', '$', not starting with '.' or '-' (so
 * never "." or ".."), no longer than JOB_OWNER_LEN. Token names are checked
 * the same way by tokens.c. */
static bool is_owner_name(const char *name)
{
	size_t n = strlen(name);

	return n > 0 && n <= JOB_OWNER_LEN && name[0] != '.' && name[0] != '-' &&
	       strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-$") == n;
}

/* Whether user (with primary group gid) is a member of group, per the group
 * database (getgrouplist), which also covers supplementary groups. */
static bool user_in_group(const char *user, gid_t gid, gid_t group)
{
	int n = 64;
	gid_t *groups = NULL;
	bool member = false;

	for (int tries = 0; tries < 3 && !member; tries++) {
		gid_t *grown = realloc(groups, sizeof(*groups) * (size_t)n);
		int got = n;

		if (!grown)
			break;
		groups = grown;
		if (getgrouplist(user, gid, groups, &got) >= 0) {
			for (int i = 0; i < got; i++)
				member |= groups[i] == group;
			break;
		}
		/* Too small: got is the size needed. */
		n = got > n ? got : 2 * n;
	}
	free(groups);
	return member;
}

/* A Unix peer's files are opened with its credentials as the kernel has
 * them: uid, gid and the process's groups (SO_PEERGROUPS). More groups than
 * fit are dropped, which can only deny. */
static void peer_account(int fd, const struct ucred *cred, struct identity *who)
{
	socklen_t len = sizeof(who->account.groups);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, who->account.groups, &len) < 0)
		len = 0;
	who->account.uid = cred->uid;
	who->account.gid = cred->gid;
	who->account.n_groups = (int)(len / sizeof(gid_t));
	who->has_account = true;
}

/* A token whose name is a user's opens files as that user, with the
 * user's groups in the group database (only the primary one when there
 * are more than fit). */
static void token_account(const char *name, struct identity *who)
{
	struct passwd pw, *found = NULL;
	char buf[16384];
	int n = INFILE_MAX_GROUPS;

	if (getpwnam_r(name, &pw, buf, sizeof(buf), &found) != 0 || !found)
		return;
	if (getgrouplist(pw.pw_name, pw.pw_gid, who->account.groups, &n) < 0) {
		who->account.groups[0] = pw.pw_gid;
		n = 1;
	}
	who->account.uid = pw.pw_uid;
	who->account.gid = pw.pw_gid;
	who->account.n_groups = n;
	who->has_account = true;
}

/* The Unix socket's peer, from the kernel (SO_PEERCRED): its uid's user
 * name, "uid:N" when the uid has no passwd entry (or a name we would not
 * store). Admin: uid 0, or a member of admin_group (its primary gid at
 * connect time, or its user's groups in the group database). */
static int unix_identity(struct api *api, struct MHD_Connection *conn, struct identity *who)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct passwd pw, *found = NULL;
	char buf[16384];

	if (!ci || getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    len != sizeof(cred))
		return -EIO;
	/* An error (ERANGE, NSS down) reads as no entry: the uid still identifies. */
	if (getpwuid_r(cred.uid, &pw, buf, sizeof(buf), &found) != 0)
		found = NULL;
	if (found && is_owner_name(pw.pw_name))
		snprintf(who->name, sizeof(who->name), "%s", pw.pw_name);
	else
		snprintf(who->name, sizeof(who->name), "uid:%u", (unsigned)cred.uid);
	who->admin = cred.uid == 0 ||
		     (api->cfg.has_admin_group &&
		      (cred.gid == api->cfg.admin_gid ||
		       (found && user_in_group(pw.pw_name, pw.pw_gid, api->cfg.admin_gid))));
	peer_account(ci->connect_fd, &cred, who);
	return 0;
}

/* TCP: "Authorization: Bearer TOKEN" with a token of the tokens file.
 * -ENOENT when there is none, -EACCES when it is not a known token. */
static int tcp_identity(struct api *api, struct MHD_Connection *conn, struct identity *who)
{
	const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
						    MHD_HTTP_HEADER_AUTHORIZATION);
	struct token_identity t;

	if (!h)
		return -ENOENT;
	/* RFC 6750: the scheme is case-insensitive, then one or more spaces. */
	if (strncasecmp(h, "Bearer ", 7) != 0)
		return -EACCES;
	h += 7;
	h += strspn(h, " ");
	if (tokens_check(api->cfg.tokens, h, strlen(h), &t) < 0)
		return -EACCES;
	snprintf(who->name, sizeof(who->name), "%s", t.name);
	who->admin = t.admin;
	token_account(t.name, who);
	return 0;
}

static enum MHD_Result answer_unauthorized(struct api *api, struct MHD_Connection *conn, int why)
{
	const char *message = why == -ENOENT
		? "this TCP endpoint needs a token: send 'Authorization: Bearer TOKEN' "
		  "(tractctl --token or TRACTD_TOKEN)"
		: "the bearer token is not valid";

	log_debug("answer 401 %s: %s", api_error_code(ERR_UNAUTHORIZED), message);
	/* RFC 6750 3: the challenge, and error="invalid_token" for a bad one. */
	return answer_json_with(api, conn, MHD_HTTP_UNAUTHORIZED,
				json_pack("{s:{s:s, s:s, s:s}}", "error", "code",
					  api_error_code(ERR_UNAUTHORIZED), "field", "", "message",
					  message),
				MHD_HTTP_HEADER_WWW_AUTHENTICATE,
				why == -ENOENT ? "Bearer realm=\"tractd\""
					       : "Bearer realm=\"tractd\", error=\"invalid_token\"");
}

/* Whether who may see (and so fetch, cancel, delete) a job. Others' jobs
 * are answered as unknown, so ids do not reveal other users' work. */
static bool may_see(const struct identity *who, const struct job_info *info)
{
	return who->admin || strcmp(who->name, info->owner) == 0;
}

/* jobs_get for who: another owner's job is -ENOENT, like an unknown one. */
static int get_own_job(struct api *api, const struct identity *who, const char *id,
		       struct job_info *info)
{
	int r = jobs_get(api->cfg.jobs, id, info);

	return r == 0 && !may_see(who, info) ? -ENOENT : r;
}

/* ---- job JSON ----------------------------------------------------------- */

static json_t *iso_time(time_t t)
{
	char buf[32];
	struct tm tm;

	if (t == 0 || !gmtime_r(&t, &tm))
		return json_null();
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return json_string(buf);
}

/* Which API error a failed job's error stands for: the job's own input is
 * the client's to fix; the server's memory, device and files, and failures
 * not tied to the job, are "internal". */
static enum api_error job_error_kind(const struct job_info *info)
{
	switch (errbuf_kind(&info->error, info->error_code)) {
	case ERR_KIND_INPUT:
		return ERR_INVALID_INPUT;
	case ERR_KIND_TOO_LARGE:
		return ERR_TOO_LARGE_FOR_DEVICE;
	case ERR_KIND_LIMIT:   /* max_job_host_memory, when the job starts */
		return ERR_LIMIT_EXCEEDED;
	case ERR_KIND_STORAGE:
		return ERR_INSUFFICIENT_STORAGE;
	case ERR_KIND_SHUTDOWN:
		return ERR_SHUTTING_DOWN;
	case ERR_KIND_INTERRUPTED:
		return ERR_INTERRUPTED;
	case ERR_KIND_UNTIED:
	case ERR_KIND_MEMORY:
	case ERR_KIND_DEVICE:
	case ERR_KIND_OUTPUT:
		break;
	}
	return ERR_INTERNAL;
}

/* What a client is told of a failed job: its error, with the store's
 * paths as the volume ids the client knows and no other path under
 * state_dir (redact.h). Every answer that carries a job's error goes
 * through here. */
enum { JOB_MESSAGE_LEN = sizeof(((struct job_info *)0)->error.message) + 64 };

static void job_error_message(struct api *api, const struct job_info *info, char *out,
			      size_t len)
{
	redact_server_paths(info->error.message, api->cfg.state_dir, out, len);
}

/* A done job's result: its file and counts; NULL when out of memory. */
static json_t *result_json(const struct job_info *info)
{
	json_t *result = json_pack("{s:I, s:I, s:I, s:b}", "bytes", (json_int_t)info->bytes,
				   "streamlines", (json_int_t)info->streamlines, "points",
				   (json_int_t)info->points, "expired", info->expired);

	if (result && stats_json_add(result, &info->stats) < 0) {
		json_decref(result);
		return NULL;
	}
	return result;
}

/* The job's events so far, in seconds since it was submitted (to the
 * microsecond, so that clients that print fewer digits agree); null for a
 * job of an earlier run of the daemon (its clock is gone). */
static json_t *timing_json(const struct job_timing *t)
{
	double t0 = t->at[JOB_EVENT_SUBMITTED];
	json_t *doc;

	if (t0 == 0.0)
		return json_null();
	doc = json_object();
	for (int e = 0; doc && e < JOB_EVENTS; e++)
		if (json_object_set_new(doc, job_event_name((enum job_event)e),
					t->at[e] ? json_real(round((t->at[e] - t0) * 1e6) / 1e6)
						 : json_null()) < 0) {
			json_decref(doc);
			doc = NULL;
		}
	return doc;
}

/* A done job's memory: its inputs and work buffers on the GPU (and how
 * much of the latter were an earlier job's spares), and the daemon's peak
 * resident memory while it ran (0: unknown). */
static json_t *memory_json(const struct job_info *info)
{
	return json_pack("{s:I, s:I, s:I, s:I}", "gpu_input_bytes",
			 (json_int_t)info->stats.gpu_input_bytes, "gpu_work_bytes",
			 (json_int_t)info->stats.gpu_work_bytes, "gpu_work_reused_bytes",
			 (json_int_t)info->stats.gpu_work_reused_bytes, "host_peak_bytes",
			 (json_int_t)info->host_peak_bytes);
}

static json_t *job_to_json(struct api *api, const struct job_info *info)
{
	json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:{s:I, s:I, s:I}}", "id",
				info->id, "owner", info->owner, "status",
				job_state_name(info->state), "format",
				output_format_name(info->format), "created", iso_time(info->created),
				"started", iso_time(info->started), "finished", iso_time(info->finished),
				"progress", "seeds_done", (json_int_t)info->seeds_done, "seeds_total",
				(json_int_t)info->seeds_total, "streamlines", (json_int_t)info->streamlines);
	const struct engine_stats *s = &info->stats;

	if (!doc)
		return NULL;
	json_object_set_new(json_object_get(doc, "progress"), "stage",
			    info->stage ? json_string(info->stage) : json_null());
	json_object_set_new(json_object_get(doc, "progress"), "stage_fraction",
			    json_real(info->stage ? info->stage_fraction : 0.0));
	if (info->state == JOB_DONE) {
		json_object_set_new(doc, "result", result_json(info));
		json_object_set_new(doc, "seconds", json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
				    "load", s->load_seconds, "upload", s->upload_seconds, "compile",
				    s->compile_seconds, "track", s->track_seconds, "kernels",
				    s->kernel_seconds, "encode", s->encode_seconds, "write",
				    s->write_seconds));
		json_object_set_new(doc, "memory", memory_json(info));
	} else {
		json_object_set_new(doc, "result", json_null());
		json_object_set_new(doc, "seconds", json_null());
		json_object_set_new(doc, "memory", json_null());
	}
	json_object_set_new(doc, "timing", timing_json(&info->timing));
	if (info->state == JOB_FAILED) {
		char message[JOB_MESSAGE_LEN];
		job_error_message(api, info, message, sizeof(message));
		json_object_set_new(doc, "error", json_pack("{s:s, s:s, s:s}", "code",
				    api_error_code(job_error_kind(info)), "field", info->error.field,
				    "message", message));
	}
	else
		json_object_set_new(doc, "error", json_null());
	return doc;
}

static enum MHD_Result answer_job(struct api *api, struct MHD_Connection *conn, unsigned status,
				  const struct job_info *info)
{
	return answer_json(api, conn, status, job_to_json(api, info));
}

/* ---- streamed tractograms ------------------------------------------------- */

struct follower {
	struct jobs *jobs;
	char id[JOB_ID_LEN + 1];
	int fd;
	bool streams;           /* the format is readable while it grows (not TRX) */
};

/* MHD's content reader: hands out what the spool holds and, while the job
 * runs, waits for more. A format that is useless until complete (TRX, whose
 * zip directory comes last) is handed out only once the job is done: until
 * then it waits for the job to end, not for bytes. Blocks only this
 * connection's thread. */
static ssize_t follow_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct follower *f = cls;
	struct job_info info;

	for (;;) {
		if (jobs_wait(f->jobs, f->id, f->streams ? pos : UINT64_MAX, FOLLOW_WAIT_MS,
			      &info) < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (info.bytes > pos && (f->streams || info.state == JOB_DONE)) {
			size_t n = info.bytes - pos < max ? (size_t)(info.bytes - pos) : max;
			ssize_t got;
			if (f->fd < 0) {
				char path[1200];
				jobs_result_path(f->jobs, f->id, path, sizeof(path));
				f->fd = open(path, O_RDONLY | O_CLOEXEC);
				if (f->fd < 0)
					return MHD_CONTENT_READER_END_WITH_ERROR;
			}
			got = pread(f->fd, buf, n, (off_t)pos);
			return got > 0 ? got : MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (info.state == JOB_DONE)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (info.state == JOB_FAILED || info.state == JOB_CANCELLED || info.expired)
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

static void follow_free(void *cls)
{
	struct follower *f = cls;

	if (f->fd >= 0)
		close(f->fd);
	free(f);
}

/* Queues a tractogram file's answer with the headers every one carries. */
static enum MHD_Result queue_file(struct api *api, struct MHD_Connection *conn, unsigned status,
				  struct MHD_Response *resp, const char *id,
				  enum output_format format)
{
	char disposition[80];

	snprintf(disposition, sizeof(disposition), "attachment; filename=\"%s.%s\"", id,
		 output_format_name(format));
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, disposition);
	MHD_add_response_header(resp, "X-Tractd-Job", id);
	return queue(api, conn, status, resp);
}

/* A finished result is served as a file of known length, which MHD sends
 * from the page cache (sendfile) rather than through follow_read's chunks;
 * its Content-Length is the recorded size, so a client can tell a cut
 * answer as it can by the chunked stream's end. */
static enum MHD_Result answer_finished(struct api *api, struct MHD_Connection *conn,
				       const struct job_info *info, unsigned status)
{
	struct MHD_Response *resp;
	char path[1200];
	int fd;

	jobs_result_path(api->cfg.jobs, info->id, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)   /* expired or deleted since jobs_get */
		return answer_error(api, conn, ERR_GONE, "", "the result of job %s has expired",
				    info->id);
	if (fd < 0)
		return answer_error(api, conn, ERR_INTERNAL, "", "cannot open the result of job %s: "
				    "%s", info->id, strerror(errno));
	resp = MHD_create_response_from_fd(info->bytes, fd);   /* takes fd */
	if (!resp) {
		close(fd);
		return MHD_NO;
	}
	return queue_file(api, conn, status, resp, info->id, info->format);
}

static enum MHD_Result answer_tractogram(struct api *api, struct MHD_Connection *conn,
					 const char *id, unsigned status)
{
	struct job_info info;
	struct follower *f;
	struct MHD_Response *resp;

	if (jobs_get(api->cfg.jobs, id, &info) < 0)
		return answer_error(api, conn, ERR_NOT_FOUND, "", "no job %s", id);
	if (info.state == JOB_FAILED || info.state == JOB_CANCELLED)
		return answer_error(api, conn, ERR_CONFLICT, "", "job %s %s: it has no tractogram", id,
				    job_state_name(info.state));
	if (info.expired)
		return answer_error(api, conn, ERR_GONE, "", "the result of job %s has expired", id);
	if (info.state == JOB_DONE)
		return answer_finished(api, conn, &info, status);
	f = calloc(1, sizeof(*f));
	if (!f)
		return MHD_NO;
	f->jobs = api->cfg.jobs;
	f->fd = -1;
	f->streams = output_format_streams(info.format);
	snprintf(f->id, sizeof(f->id), "%s", id);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK_BYTES, follow_read,
						 f, follow_free);
	if (!resp) {
		follow_free(f);
		return MHD_NO;
	}
	return queue_file(api, conn, status, resp, id, info.format);
}

/* ---- converted tractograms ---------------------------------------------- */

/* A finished result is converted on each request into an unlinked temporary
 * file in the spool, not cached: nothing to expire, account or clean up after
 * a crash, and a job deleted or expired meanwhile cannot leave a stale copy.
 * Conversion reads and writes the file once (about as much as serving it),
 * so repeated fetches cost I/O, never the GPU. */
static int convert_to_temp(struct api *api, const struct job_info *info, enum output_format to,
			   int *ret_fd, struct errbuf *err)
{
	char path[1200], tmp[1300];
	const struct tractogram_grid *grid = NULL;
	struct tractogram_grid g;
	FILE *in = NULL, *out = NULL;
	int fd = -1, r;

	jobs_result_path(api->cfg.jobs, info->id, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%.*s/.convert-XXXXXX", (int)(strrchr(path, '/') - path), path);
	if (info->stats.grid_dim[0] > 0) {
		/* The job's own grid, in double: TCK files carry none. */
		memcpy(g.dim, info->stats.grid_dim, sizeof(g.dim));
		memcpy(g.affine, info->stats.grid_affine, sizeof(g.affine));
		grid = &g;
	}
	in = fopen(path, "rb");
	if (!in) {
		r = errbuf_set(err, errno == ENOENT ? -ENOENT : -EIO, "", "cannot open the result "
			       "of job %s: %s", info->id, strerror(errno));
		goto out;
	}
	fd = mkstemp(tmp);
	if (fd < 0 || unlink(tmp) != 0 || !(out = fdopen(fd, "w+b"))) {
		r = errbuf_set(err, -EIO, "", "cannot create a temporary file in the spool: %s",
			       strerror(errno));
		goto out;
	}
	r = tractogram_convert(in, info->format, grid, out, to, NULL, err);
	if (!r && fflush(out) != 0)
		r = errbuf_set(err, -EIO, "", "cannot write the converted tractogram");
	if (!r && (*ret_fd = dup(fd)) < 0)
		r = errbuf_set(err, -EIO, "", "cannot keep the converted tractogram: %s",
			       strerror(errno));
out:
	if (out)
		fclose(out);
	else if (fd >= 0)
		close(fd);
	if (in)
		fclose(in);
	return r;
}

static enum MHD_Result answer_converted(struct api *api, struct MHD_Connection *conn,
					const struct job_info *info, enum output_format to)
{
	struct errbuf err = { 0 };
	struct MHD_Response *resp;
	struct stat st;
	int fd = -1, r = convert_to_temp(api, info, to, &fd, &err);

	if (r == -ENOENT)
		return answer_error(api, conn, ERR_GONE, "", "the result of job %s has expired",
				    info->id);
	if (r < 0) {
		log_warn("job=%s cannot convert to %s: %s", info->id, output_format_name(to),
			 err.message);
		return answer_error(api, conn, ERR_INTERNAL, "", "cannot convert the result of job "
				    "%s to %s: %s", info->id, output_format_name(to), err.message);
	}
	if (fstat(fd, &st) != 0) {
		close(fd);
		return answer_error(api, conn, ERR_INTERNAL, "", "cannot size the converted file");
	}
	resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);   /* takes fd */
	if (!resp) {
		close(fd);
		return MHD_NO;
	}
	return queue_file(api, conn, MHD_HTTP_OK, resp, info->id, to);
}

/* GET /v1/jobs/ID/tractogram[?format=F]: the job's own format streams as it
 * always did; another one is converted from the finished file, so it waits
 * for nothing and refuses a job still queued or running. */
static enum MHD_Result fetch_tractogram(struct api *api, struct MHD_Connection *conn,
					const struct identity *who, const char *id)
{
	const char *name = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "format");
	struct route_query q;
	struct errbuf err = { 0 };
	enum output_format want;
	struct job_info info;

	if (route_query(ROUTE_TRACTOGRAM, "GET", name, NULL, &q, &err) < 0)
		return answer_error(api, conn, ERR_INVALID_PARAMETER, err.field, "%s", err.message);
	want = q.format;
	if (get_own_job(api, who, id, &info) < 0)
		return answer_error(api, conn, ERR_NOT_FOUND, "", "no job %s", id);
	if (!q.has_format || want == info.format || info.state == JOB_FAILED ||
	    info.state == JOB_CANCELLED || info.expired)
		return answer_tractogram(api, conn, id, MHD_HTTP_OK);
	if (info.state != JOB_DONE)
		return answer_error(api, conn, ERR_CONFLICT, "format", "job %s is %s: only a finished "
				    "result converts to %s; fetch it as %s now, or as %s once it is "
				    "done", id, job_state_name(info.state), output_format_name(want),
				    output_format_name(info.format), output_format_name(want));
	return answer_converted(api, conn, &info, want);
}

/* ---- submitting jobs ------------------------------------------------------- */

/* The path member and field name of a file slot. */
/* ?wait=stream: the answer is the tractogram, or the job's error when it
 * fails before writing anything; for a format written whole at the end
 * (TRX), the finished file or the job's error. */
static enum MHD_Result answer_stream(struct api *api, struct MHD_Connection *conn,
				     const struct job_info *queued)
{
	struct job_info info = *queued;
	bool streams = output_format_streams(queued->format);

	while ((info.bytes == 0 || !streams) &&
	       (info.state == JOB_QUEUED || info.state == JOB_RUNNING))
		if (jobs_wait(api->cfg.jobs, queued->id, streams ? 0 : UINT64_MAX, FOLLOW_WAIT_MS,
			      &info) < 0)
			return answer_job_error(api, conn, queued->id, ERR_GONE, "",
						"job %s was deleted", queued->id);
	if (info.state == JOB_FAILED) {
		char message[JOB_MESSAGE_LEN];
		job_error_message(api, &info, message, sizeof(message));
		return answer_job_error(api, conn, info.id, job_error_kind(&info), info.error.field,
					"%s", message);
	}
	if (info.state == JOB_CANCELLED)
		return answer_job_error(api, conn, info.id, ERR_CONFLICT, "",
					"job %s was cancelled", info.id);
	return answer_tractogram(api, conn, info.id, MHD_HTTP_OK);
}

/* Which API error a job document that jobspec_parse refused stands for:
 * the parser ties every error past the document's JSON syntax to a field. */
static enum api_error parse_error_kind(int r, const struct errbuf *err)
{
	switch (errbuf_kind(err, r)) {
	case ERR_KIND_UNTIED:
		return ERR_MALFORMED_JSON;
	case ERR_KIND_MEMORY:
		return ERR_INTERNAL;
	case ERR_KIND_INPUT:
	case ERR_KIND_DEVICE:
	case ERR_KIND_TOO_LARGE:
	case ERR_KIND_LIMIT:
	case ERR_KIND_OUTPUT:
	case ERR_KIND_STORAGE:
	case ERR_KIND_SHUTDOWN:
	case ERR_KIND_INTERRUPTED:
		break;
	}
	return ERR_INVALID_PARAMETER;
}

static enum MHD_Result submit_job(struct api *api, struct MHD_Connection *conn,
				  struct request *req)
{
	const char *wait = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "wait");
	struct job_timing arrival = { .at[JOB_EVENT_SUBMITTED] = req->arrived };
	struct jobspec spec = { 0 };
	struct errbuf err = { 0 };
	struct route_query q;
	struct job_info info;
	char location[64];
	enum api_error e;
	int r;

	if (route_query(ROUTE_JOBS, "POST", NULL, wait, &q, &err) < 0)
		return answer_error(api, conn, ERR_INVALID_PARAMETER, err.field, "%s", err.message);
	if (req->body_too_large)
		return answer_error(api, conn, ERR_PAYLOAD_TOO_LARGE, "", "the job document is over "
				    "%llu bytes (max_request_bytes)",
				    (unsigned long long)api->cfg.max_request_bytes);
	/* The document is kept as text (the job's record holds it as sent): a
	 * NUL would cut it there. */
	if (req->body && strlen(req->body) != req->body_len)
		return answer_error(api, conn, ERR_MALFORMED_JSON, "", "the job document holds a "
				    "NUL byte");
	r = jobspec_parse(req->body ? req->body : "", req->body_len, NULL, &spec, &err);
	if (r < 0)
		return answer_error(api, conn, parse_error_kind(r, &err), err.field, "%s",
				    err.message);
	e = admission_check_job(&api->cfg.admission, &spec, &req->who, &err);
	if (e) {
		jobspec_free(&spec);
		return answer_error(api, conn, e, err.field, "%s", err.message);
	}
	arrival.at[JOB_EVENT_VALIDATED] = timing_now();
	r = jobs_submit(api->cfg.jobs, &spec, req->body, req->who.name, &arrival, &info, &err);
	if (r == -ENOSPC)
		return answer_error(api, conn, ERR_INSUFFICIENT_STORAGE, "", "the spool is full: "
				    "%s", err.message);
	if (r == -EAGAIN)
		return answer_error(api, conn, ERR_QUEUE_FULL, "", "%s", err.message);
	if (r == -ESHUTDOWN)
		return answer_error(api, conn, ERR_SHUTTING_DOWN, "", "%s", err.message);
	if (r < 0)
		return answer_error(api, conn, ERR_INTERNAL, "", "%s", err.message);
	if (q.stream)
		return answer_stream(api, conn, &info);
	snprintf(location, sizeof(location), "/v1/jobs/%s", info.id);
	return answer_json_with(api, conn, MHD_HTTP_ACCEPTED,
				json_pack("{s:s, s:s, s:s}", "id", info.id, "status",
					  job_state_name(info.state), "location", location),
				MHD_HTTP_HEADER_LOCATION, location);
}

/* ---- other routes ---------------------------------------------------------- */

static enum MHD_Result list_jobs(struct api *api, struct MHD_Connection *conn,
				 const struct identity *who)
{
	struct job_info *list;
	size_t n;
	json_t *arr;

	if (jobs_list(api->cfg.jobs, &list, &n) < 0)
		return MHD_NO;
	arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		if (may_see(who, &list[i]))
			json_array_append_new(arr, job_to_json(api, &list[i]));
	free(list);
	return answer_json(api, conn, MHD_HTTP_OK, json_pack("{s:o}", "jobs", arr));
}

static enum MHD_Result delete_job(struct api *api, struct MHD_Connection *conn,
				  const struct identity *who, const char *id)
{
	struct job_info info;
	/* The owner is checked first; ids are never reused, so the job that
	 * jobs_cancel finds is the one checked (or gone: 404 either way). */
	int r = get_own_job(api, who, id, &info);

	if (r == 0)
		r = jobs_cancel(api->cfg.jobs, id, &info);

	if (r == -ENOENT)
		return answer_error(api, conn, ERR_NOT_FOUND, "", "no job %s", id);
	if (r == 1)
		return answer_empty(api, conn, MHD_HTTP_NO_CONTENT);
	return answer_job(api, conn, MHD_HTTP_ACCEPTED, &info);
}

static json_t *volume_json(const struct store_entry *e)
{
	return json_pack("{s:s, s:I, s:s}", "id", e->id, "bytes", (json_int_t)e->bytes, "kind",
			 store_kind_name(e->kind));
}

/* Volumes are content-addressed and stored once, but each is visible only
 * to those who uploaded it (and admins): knowing an id is not proof of
 * having the data (ids appear in logs and job documents), and a 200 would
 * tell that someone else has worked on that file. */
static enum MHD_Result get_volume(struct api *api, struct MHD_Connection *conn,
				  const struct identity *who, const char *id, bool head_only)
{
	struct store_entry entry;
	struct errbuf err = { 0 };
	int r = store_lookup(api->cfg.admission.store, id, &entry, NULL, 0, &err);

	if (r == 0 && !who->admin && !store_claimed(api->cfg.admission.store, id, who->name))
		r = -ENOENT;
	if (r == -ENOENT)
		return head_only ? answer_empty(api, conn, MHD_HTTP_NOT_FOUND)
				 : answer_error(api, conn, ERR_NOT_FOUND, "", "no volume %s", id);
	if (r < 0)
		return answer_error(api, conn, ERR_NOT_FOUND, "", "%s", err.message);
	if (head_only)
		return answer_empty(api, conn, MHD_HTTP_OK);
	return answer_json(api, conn, MHD_HTTP_OK, volume_json(&entry));
}

static enum MHD_Result answer_quota_exceeded(struct api *api, struct MHD_Connection *conn,
					     const struct identity *who)
{
	return answer_error(api, conn, ERR_QUOTA_EXCEEDED, "", "the volumes of %s would take more "
			    "than %llu bytes (max_volume_bytes_per_user): delete some "
			    "(DELETE /v1/volumes/ID; GET /v1/volumes lists them)", who->name,
			    (unsigned long long)api->cfg.admission.max_volume_bytes_per_user);
}

/* GET /v1/volumes: the caller's own uploads, admins included (an admin
 * reaches others' volumes by id). */
static enum MHD_Result list_volumes(struct api *api, struct MHD_Connection *conn,
				    const struct identity *who)
{
	struct store_entry *list = NULL;
	uint64_t used = 0;
	size_t n = 0;
	json_t *arr;

	if (store_list(api->cfg.admission.store, who->name, &list, &n, &used) < 0)
		return answer_error(api, conn, ERR_INTERNAL, "", "out of memory");
	arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		if (json_array_append_new(arr, volume_json(&list[i])) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	free(list);
	return answer_json(api, conn, MHD_HTTP_OK, json_pack("{s:o, s:I, s:I}", "volumes", arr,
		"used_bytes", (json_int_t)used,
		"quota_bytes", (json_int_t)api->cfg.admission.max_volume_bytes_per_user));
}

/* DELETE /v1/volumes/ID: forgets the caller's upload (the file goes with
 * its last uploader). Another user's volume is unknown here, as for GET. */
static enum MHD_Result delete_volume(struct api *api, struct MHD_Connection *conn,
				     const struct identity *who, const char *id)
{
	if (store_forget(api->cfg.admission.store, id, who->name) < 0)
		return answer_error(api, conn, ERR_NOT_FOUND, "", "no volume %.80s", id);
	return answer_empty(api, conn, MHD_HTTP_NO_CONTENT);
}

static enum MHD_Result finish_upload(struct api *api, struct MHD_Connection *conn,
				     struct request *req)
{
	struct store_entry entry;
	struct errbuf err = { 0 };
	int r;

	if (req->upload_error == -EDQUOT ||
	    (req->upload_error == -EFBIG && req->upload_quota_binds))
		return answer_quota_exceeded(api, conn, &req->who);
	if (req->upload_error == -EFBIG)
		return answer_error(api, conn, ERR_PAYLOAD_TOO_LARGE, "", "the upload is over %llu "
				    "bytes (max_upload_bytes)",
				    (unsigned long long)api->cfg.admission.max_upload_bytes);
	if (req->upload_error == -ENOSPC)
		return answer_error(api, conn, ERR_INSUFFICIENT_STORAGE, "", "%s",
				    req->upload_err.message);
	if (req->upload_error)
		return answer_error(api, conn, ERR_INTERNAL, "", "%s", req->upload_err.message);
	r = store_writer_finish(req->upload, &entry, &err);
	req->upload = NULL;
	if (r == -ENOSPC)
		return answer_error(api, conn, ERR_INSUFFICIENT_STORAGE, "", "%s", err.message);
	if (r == -EMEDIUMTYPE || r == -EINVAL)
		return answer_error(api, conn, r == -EINVAL ? ERR_INVALID_INPUT
							    : ERR_UNSUPPORTED_MEDIA_TYPE, "", "%s",
				    err.message);
	if (r < 0)
		return answer_error(api, conn, ERR_INTERNAL, "", "%s", err.message);
	/* 201 when new to this uploader, whether or not another user had the
	 * same bytes: the answer must not tell. */
	r = store_claim(api->cfg.admission.store, entry.id, req->who.name,
			api->cfg.admission.max_volume_bytes_per_user, &err);
	if (r == -EDQUOT)
		return answer_quota_exceeded(api, conn, &req->who);
	if (r < 0)
		return answer_error(api, conn, ERR_INTERNAL, "", "%s", err.message);
	return answer_json(api, conn, r == 1 ? MHD_HTTP_CREATED : MHD_HTTP_OK, volume_json(&entry));
}

/* /v1/device's cache section. An admin sees the whole cache; anyone else
 * its budget and its own hits and misses: what is held, and others' hits,
 * would tell whether another user has run the same inputs. */
static json_t *cache_json(struct api *api, const struct identity *who,
			  const struct jobs_status *st)
{
	uint64_t hits = st->cache_hits, misses = st->cache_misses;

	if (who->admin)
		return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "budget_bytes",
				 (json_int_t)st->cache_budget, "used_bytes", (json_int_t)st->cache_bytes,
				 "host_bytes", (json_int_t)st->cache_host_bytes,
				 "entries", (json_int_t)st->cache_entries, "hits", (json_int_t)hits,
				 "misses", (json_int_t)misses);
	jobs_owner_cache(api->cfg.jobs, who->name, &hits, &misses);
	return json_pack("{s:I, s:I, s:I}", "budget_bytes", (json_int_t)st->cache_budget, "hits",
			 (json_int_t)hits, "misses", (json_int_t)misses);
}

/* gpu_memory_limit as /v1/device tells it: null when none is set. */
static json_t *memory_limit_json(const struct gpu_limits *device)
{
	return device->memory_limit ? json_integer((json_int_t)device->memory_limit) : json_null();
}

static enum MHD_Result device_info(struct api *api, struct MHD_Connection *conn,
				   const struct identity *who)
{
	struct jobs_status st;

	jobs_status(api->cfg.jobs, &st);
	return answer_json(api, conn, MHD_HTTP_OK, json_pack(
		"{s:{s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:o, s:I}, s:o, s:{s:I, s:I}}",
		"device", "name", st.device.device_name, "type", st.device.device_type,
		"count", (json_int_t)st.devices,
		"subgroup_size", (int)st.device.subgroup_size,
		"max_binding_bytes", (json_int_t)st.device.max_binding_bytes,
		"max_alloc_bytes", (json_int_t)st.device.max_alloc_bytes,
		"device_local_bytes", (json_int_t)st.device.device_local_bytes,
		"spare_bytes", (json_int_t)st.gpu_spare_bytes,
		"gpu_memory_limit_bytes", memory_limit_json(&st.device),
		"gpu_memory_budget_bytes", (json_int_t)st.job_budget,
		"cache", cache_json(api, who, &st),
		"queue", "queued", (json_int_t)st.queued, "running", (json_int_t)st.running));
}

static void metric(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A metric with one unlabelled value. */
static void metric_u64(FILE *f, const char *name, const char *type, const char *help,
		       uint64_t value)
{
	metric(f, name, type, help);
	fprintf(f, "%s %llu\n", name, (unsigned long long)value);
}

/* The cache's counters only for admins: its hits, and the bytes it holds,
 * would tell a user whether another has just run the same inputs. */
static enum MHD_Result metrics(struct api *api, struct MHD_Connection *conn,
			       const struct identity *who)
{
	struct jobs_status st;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return MHD_NO;
	jobs_status(api->cfg.jobs, &st);
	metric(f, "tractd_jobs_total", "counter", "Jobs ended, by final status.");
	fprintf(f, "tractd_jobs_total{status=\"done\"} %llu\n", (unsigned long long)st.done_total);
	fprintf(f, "tractd_jobs_total{status=\"failed\"} %llu\n", (unsigned long long)st.failed_total);
	fprintf(f, "tractd_jobs_total{status=\"cancelled\"} %llu\n",
		(unsigned long long)st.cancelled_total);
	metric_u64(f, "tractd_jobs_queued", "gauge", "Jobs waiting for the GPU.", st.queued);
	metric_u64(f, "tractd_jobs_running", "gauge", "Jobs on the GPU.", st.running);
	metric_u64(f, "tractd_seeds_total", "counter", "Seeds tracked by finished jobs.",
		   st.seeds_total);
	metric_u64(f, "tractd_streamlines_total", "counter", "Streamlines written.",
		   st.streamlines_total);
	metric(f, "tractd_track_seconds_total", "counter", "Time spent tracking.");
	fprintf(f, "tractd_track_seconds_total %.6f\n", st.track_seconds_total);
	if (who->admin) {
		metric_u64(f, "tractd_cache_hits_total", "counter",
			   "Jobs whose volumes were warm.", st.cache_hits);
		metric_u64(f, "tractd_cache_misses_total", "counter",
			   "Jobs that loaded volumes.", st.cache_misses);
		metric_u64(f, "tractd_cache_bytes", "gauge", "GPU memory held by warm volumes.",
			   st.cache_bytes);
		metric_u64(f, "tractd_cache_host_bytes", "gauge",
			   "Host memory held by warm volumes' copies.", st.cache_host_bytes);
	}
	metric_u64(f, "tractd_spool_bytes", "gauge", "Bytes of results and job records in the spool.",
		   st.spool_bytes);
	metric_u64(f, "tractd_connections_refused_total", "counter", "Unix connections closed "
		   "at once: their user had max_connections_per_user open.",
		   atomic_load(&api->refused_connections));
	metric_u64(f, "tractd_tcp_unauthenticated_closed_total", "counter", "TCP connections "
		   "closed without a request with a valid token: past header_timeout_seconds "
		   "from opening, or the oldest at max_unauthenticated_connections.",
		   atomic_load(&api->unauthenticated_closed));
	metric(f, "tractd_http_requests_total", "counter", "Answers by HTTP status.");
	for (unsigned code = 100; code < STATUS_SLOTS; code++) {
		uint64_t n = atomic_load(&api->answers[code]);
		if (n)
			fprintf(f, "tractd_http_requests_total{code=\"%u\"} %llu\n", code,
				(unsigned long long)n);
	}
	if (fclose(f) != 0) {
		free(text);
		return MHD_NO;
	}
	return answer_text(api, conn, MHD_HTTP_OK, "text/plain; version=0.0.4", text);
}

/* ---- routing (decided by route.c) ------------------------------------------ */

static enum MHD_Result answer_not_allowed(struct api *api, struct MHD_Connection *conn,
					  enum route route, const char *method, const char *url)
{
	char message[300];

	snprintf(message, sizeof(message), "%.20s is not allowed on %.200s (allowed: %s)", method,
		 url, route_allowed_methods(route));
	return answer_json_with(api, conn, MHD_HTTP_METHOD_NOT_ALLOWED,
				json_pack("{s:{s:s, s:s, s:s}}", "error", "code",
					  api_error_code(ERR_METHOD_NOT_ALLOWED), "field", "", "message",
					  message), MHD_HTTP_HEADER_ALLOW, route_allowed_methods(route));
}

static enum MHD_Result dispatch(struct api *api, struct MHD_Connection *conn, enum route route,
				const char *method, const char *id, struct request *req)
{
	struct job_info info;

	switch (route) {
	case ROUTE_NONE:
		break;
	case ROUTE_HEALTH:
		return answer_json(api, conn, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
	case ROUTE_METRICS:
		return metrics(api, conn, &req->who);
	case ROUTE_DEVICE:
		return device_info(api, conn, &req->who);
	case ROUTE_VOLUMES:
		if (strcmp(method, "GET") == 0)
			return list_volumes(api, conn, &req->who);
		return finish_upload(api, conn, req);
	case ROUTE_VOLUME:
		if (strcmp(method, "DELETE") == 0)
			return delete_volume(api, conn, &req->who, id);
		return get_volume(api, conn, &req->who, id, strcmp(method, "HEAD") == 0);
	case ROUTE_JOBS:
		if (strcmp(method, "POST") == 0)
			return submit_job(api, conn, req);
		return list_jobs(api, conn, &req->who);
	case ROUTE_JOB:
		if (strcmp(method, "DELETE") == 0)
			return delete_job(api, conn, &req->who, id);
		if (get_own_job(api, &req->who, id, &info) < 0)
			return answer_error(api, conn, ERR_NOT_FOUND, "", "no job %s", id);
		return answer_job(api, conn, MHD_HTTP_OK, &info);
	case ROUTE_TRACTOGRAM:
		return fetch_tractogram(api, conn, &req->who, id);
	}
	return answer_error(api, conn, ERR_NOT_FOUND, "", "no such resource");
}

/* Takes a piece of the request body. */
static void take_body(struct api *api, struct request *req, const char *data, size_t size)
{
	if (req->kind == BODY_UPLOAD) {
		if (!req->upload_error)
			req->upload_error = store_writer_append(req->upload, data, size,
								&req->upload_err);
		/* A failed upload's temporary file goes now, not when the client
		 * has sent the rest: on a full disk, that space is what others need. */
		if (req->upload_error) {
			store_writer_abort(req->upload);
			req->upload = NULL;
		}
		return;
	}
	if (req->body_too_large || req->body_len + size > api->cfg.max_request_bytes) {
		req->body_too_large = true;
		return;
	}
	{
		char *grown = realloc(req->body, req->body_len + size + 1);
		if (!grown) {
			req->body_too_large = true;
			return;
		}
		req->body = grown;
		memcpy(req->body + req->body_len, data, size);
		req->body_len += size;
		req->body[req->body_len] = '\0';
	}
}

/* Refused before a byte is written when the quota has nothing left. */
static void start_upload(struct api *api, struct request *req)
{
	uint64_t max = 0;

	req->kind = BODY_UPLOAD;
	req->upload_error = admission_upload_limit(&api->cfg.admission, &req->who, &max,
						   &req->upload_quota_binds, &req->upload_err);
	if (req->upload_error == 0)
		req->upload_error = store_writer_new(api->cfg.admission.store, max, &req->upload,
						     &req->upload_err);
}

static struct request *new_request(struct api *api, enum route route, const char *method,
				   const struct identity *who)
{
	struct request *req = calloc(1, sizeof(*req));

	if (!req)
		return NULL;
	req->arrived = timing_now();
	req->who = *who;
	if (route == ROUTE_VOLUMES && strcmp(method, "POST") == 0) {
		start_upload(api, req);
	} else if (route == ROUTE_JOBS && strcmp(method, "POST") == 0) {
		req->kind = BODY_JSON;
	}
	return req;
}

/* ---- unauthenticated connections on TCP ---------------------------------- */

/* MHD's connection timeout restarts with every byte, and its per-IP limit
 * counts each address alone: clients without a token, trickling a byte now
 * and then from many addresses, could hold every connection. Here such a
 * connection has a deadline from its accept that no activity moves, and
 * together they hold at most max_unauthenticated_connections. A request
 * with a valid token takes its connection off this list. */

static uint64_t monotonic_ms(void)
{
	struct timespec ts;

	/* CLOCK_MONOTONIC is always there; 0 would only make deadlines early. */
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Shuts pending[i] down and forgets it, keeping the oldest-first order. MHD
 * reads the end of the stream and closes the connection itself. With
 * pending_lock held. */
static void pending_close(struct api *api, size_t i, const char *why)
{
	struct pending_conn *p = api->pending;

	/* ENOTCONN: the client has gone already, and MHD will see it. */
	if (shutdown(p[i].fd, SHUT_RDWR) < 0 && errno != ENOTCONN)
		log_warn("http: cannot shut an unauthenticated connection: %s", strerror(errno));
	atomic_fetch_add(&api->unauthenticated_closed, 1);
	log_debug("http: a TCP connection closed: %s", why);
	memmove(&p[i], &p[i + 1], (api->n_pending - i - 1) * sizeof(*p));
	api->n_pending--;
}

/* A new TCP connection: pending until a request with a valid token. At the
 * cap the oldest pending one goes, not the newcomer: a client that sends
 * its request at once is authenticated long before it is the oldest, so
 * token holders get in however many connections others keep open. */
static void pending_enter(struct api *api, struct MHD_Connection *conn, int fd)
{
	pthread_mutex_lock(&api->pending_lock);
	if (api->n_pending >= api->cfg.max_unauthenticated_connections)
		pending_close(api, 0, "the oldest without a valid token, to make room "
			      "(max_unauthenticated_connections)");
	/* Appended in accept order: deadlines ascend, pending[0] is due first. */
	api->pending[api->n_pending++] = (struct pending_conn){
		.conn = conn, .fd = fd,
		.deadline_ms = monotonic_ms() + api->cfg.header_timeout_s * 1000u,
	};
	pthread_mutex_unlock(&api->pending_lock);
}

/* conn authenticated, or closed: off the list (a no-op when not on it). */
static void pending_leave(struct api *api, struct MHD_Connection *conn)
{
	pthread_mutex_lock(&api->pending_lock);
	for (size_t i = 0; i < api->n_pending; i++) {
		if (api->pending[i].conn != conn)
			continue;
		memmove(&api->pending[i], &api->pending[i + 1],
			(api->n_pending - i - 1) * sizeof(api->pending[0]));
		api->n_pending--;
		break;
	}
	pthread_mutex_unlock(&api->pending_lock);
}

/* The reaper thread: closes pending connections at their deadline. */
static void *pending_reaper(void *cls)
{
	struct api *api = cls;

	pthread_mutex_lock(&api->pending_lock);
	while (!api->reaper_stopping) {
		uint64_t now = monotonic_ms(), wake = now + 1000;
		struct timespec ts;

		while (api->n_pending > 0 && api->pending[0].deadline_ms <= now)
			pending_close(api, 0, "no request with a valid token within "
				      "header_timeout_seconds of opening");
		if (api->n_pending > 0 && api->pending[0].deadline_ms < wake)
			wake = api->pending[0].deadline_ms;
		ts.tv_sec = (time_t)(wake / 1000u);
		ts.tv_nsec = (long)(wake % 1000u) * 1000000L;
		/* ETIMEDOUT is the usual wake-up; spurious ones just loop. */
		(void)pthread_cond_timedwait(&api->pending_wake, &api->pending_lock, &ts);
	}
	pthread_mutex_unlock(&api->pending_lock);
	return NULL;
}

/* TCP's connection notifications: onto the pending list, and off it. */
static void tcp_on_connection(struct api *api, struct MHD_Connection *conn,
			      enum MHD_ConnectionNotificationCode toe)
{
	const union MHD_ConnectionInfo *ci;

	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		pending_leave(api, conn);
		return;
	}
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci)
		pending_enter(api, conn, ci->connect_fd);
	else
		log_error("http: MHD gives no socket for a TCP connection: it cannot be timed");
}

/* ---- requests ------------------------------------------------------------ */

/* RFC 9112 6.1: Content-Length beside Transfer-Encoding is how requests are
 * smuggled. MHD frames such a body by the chunks; a proxy in front that
 * frames by the length would forward the chunks' tail as a request of its
 * own, or the reverse. */
static bool ambiguous_framing(struct MHD_Connection *conn)
{
	return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH) &&
	       MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
					   MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

/* 400, and the connection closes after it: nothing it sends later can be
 * told apart from this request's body. */
static enum MHD_Result answer_ambiguous_framing(struct api *api, struct MHD_Connection *conn)
{
	const char *message = "a request may not have both Content-Length and "
			      "Transfer-Encoding (RFC 9112 6.1)";

	log_debug("answer 400 %s: %s", api_error_code(ERR_INVALID_PARAMETER), message);
	return answer_json_with(api, conn, MHD_HTTP_BAD_REQUEST,
				json_pack("{s:{s:s, s:s, s:s}}", "error", "code",
					  api_error_code(ERR_INVALID_PARAMETER), "field",
					  "Transfer-Encoding", "message", message),
				MHD_HTTP_HEADER_CONNECTION, "close");
}

/* MHD refuses only options it does not know: a failure is a bug of ours,
 * logged, and the connection keeps the timeout it had. */
static void set_timeout(struct MHD_Connection *conn, uint64_t seconds)
{
	if (MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
				      (unsigned int)seconds) != MHD_YES)
		log_error("http: cannot set a connection's timeout to %llu s",
			  (unsigned long long)seconds);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	const struct listener *listener = cls;
	struct api *api = listener->api;
	struct request *req = *con_cls;
	struct route_match match;
	enum route route = route_match(url, &match);
	const char *id = match.id;

	(void)version;
	if (!req) {
		struct identity who = { 0 };
		/* Who is asking comes first: on TCP nothing, not even a 404, is
		 * told to a client without a valid token. */
		int r = listener->tcp ? tcp_identity(api, conn, &who)
				      : unix_identity(api, conn, &who);

		/* Before anything else is decided: where this request's body
		 * ends, and so where the next request starts, is not known. */
		if (ambiguous_framing(conn))
			return answer_ambiguous_framing(api, conn);
		if (r < 0 && listener->tcp)
			return answer_unauthorized(api, conn, r);
		if (listener->tcp)
			pending_leave(api, conn);   /* a valid token: no deadline now */
		if (r < 0)
			return answer_error(api, conn, ERR_INTERNAL, "", "cannot read the peer's "
					    "credentials of the Unix socket");
		if (route == ROUTE_NONE)
			return answer_error(api, conn, ERR_NOT_FOUND, "", "no such resource: %.200s", url);
		if (!route_method_allowed(route, method))
			return answer_not_allowed(api, conn, route, method, url);
		req = new_request(api, route, method, &who);
		if (!req)
			return MHD_NO;
		*con_cls = req;
		/* The headers are in: the answer may take long (see REQUEST_TIMEOUT_S). */
		set_timeout(conn, REQUEST_TIMEOUT_S);
		if (req->kind != BODY_NONE)
			return MHD_YES;   /* the body follows */
	}
	if (*upload_data_size > 0) {
		take_body(api, req, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	return dispatch(api, conn, route, method, id, req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode code)
{
	struct listener *listener = cls;
	struct request *req = *con_cls;

	(void)code;
	/* Back to the short timeout while a keep-alive connection waits for its
	 * next request's headers. */
	set_timeout(conn, listener->api->cfg.header_timeout_s);
	if (!req)
		return;
	store_writer_abort(req->upload);   /* a client gone mid-upload */
	free(req->body);
	free(req);
	*con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	log_debug("http: %s", line);
}

/* ---- connections per user ------------------------------------------------ */

/* Counts uid's connection in; false when it already has its share. Root is
 * not counted: it can stop the daemon anyway, and health checks and admin
 * tools run as root. */
static bool peer_enter(struct api *api, uid_t uid)
{
	size_t i;
	bool ok = true;

	if (uid == 0)
		return true;
	pthread_mutex_lock(&api->peers_lock);
	for (i = 0; i < api->n_peers && api->peers[i].uid != uid; i++)
		;
	if (i == api->n_peers && i < CONNECTION_LIMIT)
		api->peers[api->n_peers++] = (struct peer_count){ .uid = uid, .n = 0 };
	if (i == api->n_peers || api->peers[i].n >= api->cfg.max_connections_per_user)
		ok = false;   /* the table is full only past MHD's own limit */
	else
		api->peers[i].n++;
	pthread_mutex_unlock(&api->peers_lock);
	return ok;
}

static void peer_leave(struct api *api, uid_t uid)
{
	pthread_mutex_lock(&api->peers_lock);
	for (size_t i = 0; i < api->n_peers; i++) {
		if (api->peers[i].uid != uid)
			continue;
		/* Emptied entries go, so that the table holds only uids connected now. */
		if (--api->peers[i].n == 0)
			api->peers[i] = api->peers[--api->n_peers];
		break;
	}
	pthread_mutex_unlock(&api->peers_lock);
}

/* The socket context of a Unix connection counted by peer_enter: its uid
 * plus one (NULL: not counted), so that nothing is allocated per connection. */
static void *uid_context(uid_t uid)
{
	return (void *)((uintptr_t)uid + 1);
}

/* MHD's per-IP limit does not see Unix peers: on a shared server one user's
 * idle or half-sent connections would fill CONNECTION_LIMIT and lock
 * everyone out. A connection over its uid's share is shut down at once,
 * before MHD reads from it, and MHD drops it without an answer. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct listener *listener = cls;
	const union MHD_ConnectionInfo *ci;
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (listener->tcp) {
		tcp_on_connection(listener->api, conn, toe);
		return;
	}
	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (*socket_context)
			peer_leave(listener->api, (uid_t)((uintptr_t)*socket_context - 1));
		*socket_context = NULL;
		return;
	}
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	/* A peer we cannot name could not be counted: it gets no connection. */
	if (ci && getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
	    len == sizeof(cred) && peer_enter(listener->api, cred.uid)) {
		*socket_context = cred.uid == 0 ? NULL : uid_context(cred.uid);
		return;
	}
	atomic_fetch_add(&listener->api->refused_connections, 1);
	log_debug("http: a Unix connection refused: its uid has %llu open "
		  "(max_connections_per_user), or its credentials are unreadable",
		  (unsigned long long)listener->api->cfg.max_connections_per_user);
	if (ci && shutdown(ci->connect_fd, SHUT_RDWR) < 0)
		log_warn("http: cannot shut a refused connection: %s", strerror(errno));
}

static struct MHD_Daemon *start_daemon(struct listener *listener, int fd)
{
	const struct api_config *cfg = &listener->api->cfg;

	/* poll(), not select(): queued jobs hold their inputs open, so a new
	 * connection's descriptor may be past FD_SETSIZE, which libmicrohttpd's
	 * select() loop refuses (every new client dropped). */
	return MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
				MHD_USE_ERROR_LOG | MHD_USE_ITC,
				0, NULL, NULL, on_request, listener,
				MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
				MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, listener,
				MHD_OPTION_NOTIFY_CONNECTION, on_connection, listener,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONNECTION_LIMIT,
				/* 0 is no limit: MHD's per-IP count does not see Unix peers. */
				MHD_OPTION_PER_IP_CONNECTION_LIMIT,
				listener->tcp ? (unsigned int)cfg->max_connections_per_address : 0u,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->header_timeout_s,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_POOL_BYTES,
				MHD_OPTION_END);
}

/* The locks and the reaper's condition (on the monotonic clock, as its
 * deadlines are); all or none: api_stop destroys them. */
static bool init_locks(struct api *api)
{
	pthread_condattr_t attr;
	bool cond_ok;

	if (pthread_condattr_init(&attr) != 0)
		return false;
	cond_ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
		  pthread_cond_init(&api->pending_wake, &attr) == 0;
	pthread_condattr_destroy(&attr);
	if (!cond_ok)
		return false;
	if (pthread_mutex_init(&api->pending_lock, NULL) != 0) {
		pthread_cond_destroy(&api->pending_wake);
		return false;
	}
	if (pthread_mutex_init(&api->peers_lock, NULL) != 0) {
		pthread_mutex_destroy(&api->pending_lock);
		pthread_cond_destroy(&api->pending_wake);
		return false;
	}
	return true;
}

int api_start(const struct api_config *cfg, int unix_fd, int tcp_fd, struct api **ret,
	      struct errbuf *err)
{
	struct api *api = calloc(1, sizeof(*api));

	if (!api)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	api->cfg = *cfg;
	/* The pending table has room for what MHD admits, and conf keeps the
	 * cap well under it so that authenticated connections have room too. */
	if (cfg->max_unauthenticated_connections == 0 ||
	    cfg->max_unauthenticated_connections >= CONNECTION_LIMIT) {
		free(api);
		return errbuf_set(err, -EINVAL, "max_unauthenticated_connections", "must be 1 to %u",
				  CONNECTION_LIMIT - 1);
	}
	if (!init_locks(api)) {
		free(api);
		return errbuf_set(err, -ENOMEM, "", "cannot create a mutex");
	}
	if (tcp_fd >= 0) {
		if (pthread_create(&api->reaper, NULL, pending_reaper, api) != 0) {
			api_stop(api);
			return errbuf_set(err, -EAGAIN, "", "cannot start the connection reaper");
		}
		api->reaper_started = true;
	}
	api->unix_listener = (struct listener){ .api = api, .tcp = false };
	api->tcp_listener = (struct listener){ .api = api, .tcp = true };
	/* serve.c refuses TCP without tokens; this keeps the promise here too. */
	if (tcp_fd >= 0 && tokens_count(cfg->tokens) == 0) {
		api_stop(api);
		return errbuf_set(err, -EINVAL, "listen_tcp", "TCP needs tokens (tokens_file)");
	}
	if (unix_fd >= 0 && !(api->unix_daemon = start_daemon(&api->unix_listener, unix_fd))) {
		api_stop(api);
		return errbuf_set(err, -EIO, "listen_unix", "cannot start the HTTP server on the "
				  "Unix socket");
	}
	if (tcp_fd >= 0 && !(api->tcp_daemon = start_daemon(&api->tcp_listener, tcp_fd))) {
		api_stop(api);
		return errbuf_set(err, -EIO, "listen_tcp", "cannot start the HTTP server on TCP");
	}
	*ret = api;
	return 0;
}

void api_quiesce(struct api *api)
{
	if (!api)
		return;
	if (api->unix_daemon)
		MHD_quiesce_daemon(api->unix_daemon);
	if (api->tcp_daemon)
		MHD_quiesce_daemon(api->tcp_daemon);
}

void api_stop(struct api *api)
{
	if (!api)
		return;
	if (api->unix_daemon)
		MHD_stop_daemon(api->unix_daemon);
	if (api->tcp_daemon)
		MHD_stop_daemon(api->tcp_daemon);
	/* After the daemons, whose last connections leave the tables as they close. */
	if (api->reaper_started) {
		pthread_mutex_lock(&api->pending_lock);
		api->reaper_stopping = true;
		pthread_cond_signal(&api->pending_wake);
		pthread_mutex_unlock(&api->pending_lock);
		pthread_join(api->reaper, NULL);
	}
	pthread_mutex_destroy(&api->peers_lock);
	pthread_mutex_destroy(&api->pending_lock);
	pthread_cond_destroy(&api->pending_wake);
	free(api);
}
