/* SPDX-License-Identifier: MIT */
/*
 * tctl_http: the only user of libcurl. Talks to tractd over its Unix socket
 * (URL http://localhost/..., the socket given by CURLOPT_UNIX_SOCKET_PATH) or
 * over TCP with --server, on one easy handle so that polling reuses its
 * connection. JSON requests; volume uploads streamed from a file (never held
 * in memory: volumes can be gigabytes); downloads streamed to a file. Every
 * outcome becomes an exit code here, with its message: HTTP 4xx -> 3 with
 * the server's "FIELD: MESSAGE", 5xx and unusable answers -> 4, no
 * connection -> 5, local files -> 6, a signal -> 128 + signal.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tctl.h"
#include "tctl_http.h"
#include "tctl_interrupt.h"
#include "tctl_msg.h"
#include "tctl_print.h"

/* JSON answers of tractd are small; anything larger is not tractd talking. */
#define BODY_LIMIT ((size_t)64 << 20)
#define METER_INTERVAL_NS 100000000L

struct http_client {
	CURL *curl;
	char *base_url;      /* "http://localhost" on the socket, else the server URL */
	char *socket_path;   /* NULL over TCP */
	char *auth_header;   /* "Authorization: Bearer TOKEN" over TCP with a token, else NULL */
	long connect_timeout_ms;
	bool interruptible;
	char curl_error[CURL_ERROR_SIZE];
};

enum http_method { HTTP_GET, HTTP_HEAD, HTTP_POST, HTTP_DELETE };

/* One request: what to send, and where a 2xx body goes. */
struct request {
	enum http_method method;
	const char *path;
	const char *json;                  /* POST body, or NULL */
	const struct http_file *upload;    /* POST body from a file, or NULL */
	const struct http_file *download;  /* 2xx body into a file; NULL: into memory */
};

/* What the callbacks gather while a request runs. */
struct transfer {
	struct http_client *client;
	const struct request *req;
	char *body;           /* the answer in memory (always, for error answers) */
	size_t body_len;
	size_t body_cap;
	bool body_too_large;
	bool out_of_memory;
	uint64_t file_bytes;  /* sent from the upload, or written to the download */
	int file_errno;       /* reading the upload or writing the download failed */
	bool file_shrank;
	struct timespec meter_drawn;   /* when the meter was last drawn */
	curl_off_t meter_bytes;        /* and the count it showed */
};

static int out_of_memory(void)
{
	msg_error("out of memory");
	return TCTL_EXIT_LOCAL;
}

static const char *address(const struct http_client *c)
{
	return c->socket_path ? c->socket_path : c->base_url;
}

static const char *curl_message(const struct http_client *c, CURLcode rc)
{
	return c->curl_error[0] ? c->curl_error : curl_easy_strerror(rc);
}

static bool keep_body(struct transfer *t, const char *data, size_t len)
{
	size_t cap = t->body_cap ? t->body_cap : 4096;
	char *grown;

	if (len > BODY_LIMIT - t->body_len) {
		t->body_too_large = true;
		return false;
	}
	while (cap < t->body_len + len)
		cap *= 2;
	if (cap != t->body_cap) {
		grown = realloc(t->body, cap);
		if (!grown) {
			t->out_of_memory = true;
			return false;
		}
		t->body = grown;
		t->body_cap = cap;
	}
	memcpy(t->body + t->body_len, data, len);
	t->body_len += len;
	return true;
}

static bool is_success(long status)
{
	return status >= 200 && status < 300;
}

/* A 2xx body goes to the download file when there is one; error bodies are
 * always kept in memory, to be read as JSON. */
static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata)
{
	struct transfer *t = userdata;
	const struct http_file *sink = t->req->download;
	size_t len = size * nmemb;
	long status = 0;

	if (sink && curl_easy_getinfo(t->client->curl, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
	    is_success(status)) {
		if (fwrite(data, 1, len, sink->stream) != len) {
			t->file_errno = errno ? errno : EIO;
			return 0;
		}
		t->file_bytes += len;
		return len;
	}
	return keep_body(t, data, len) ? len : 0;
}

/* Sends at most the size announced in the request headers: a file that grew
 * since is cut there (its id then differs and is caught), one that shrank
 * cannot complete the request. */
static size_t on_upload_read(char *buf, size_t size, size_t nitems, void *userdata)
{
	struct transfer *t = userdata;
	const struct http_file *source = t->req->upload;
	uint64_t left = source->size - t->file_bytes;
	size_t want = size * nitems < left ? size * nitems : (size_t)left;
	size_t n;

	if (want == 0)
		return 0;
	n = fread(buf, 1, want, source->stream);
	if (n == 0) {
		if (ferror(source->stream))
			t->file_errno = errno ? errno : EIO;
		else
			t->file_shrank = true;
		return CURL_READFUNC_ABORT;
	}
	t->file_bytes += n;
	return n;
}

/* At most ten redraws a second, but always the last one, once. */
static bool meter_due(struct transfer *t, curl_off_t bytes, bool finished)
{
	struct timespec now;
	long elapsed_ns;

	if (bytes == t->meter_bytes)
		return false;
	if (clock_gettime(CLOCK_MONOTONIC, &now) < 0)
		return finished;
	elapsed_ns = (now.tv_sec - t->meter_drawn.tv_sec) * 1000000000L +
		     (now.tv_nsec - t->meter_drawn.tv_nsec);
	if (!finished && elapsed_ns < METER_INTERVAL_NS)
		return false;
	t->meter_drawn = now;
	t->meter_bytes = bytes;
	return true;
}

static void draw_meter(struct transfer *t, const char *label, curl_off_t now, curl_off_t total)
{
	char done_text[MSG_SIZE_LEN], total_text[MSG_SIZE_LEN];

	if (!meter_due(t, now, total > 0 && now >= total))
		return;
	if (total > 0)
		msg_progress("%s: %s of %s (%d%%)", label, msg_size((uint64_t)now, done_text),
			     msg_size((uint64_t)total, total_text), (int)(100 * now / total));
	else
		msg_progress("%s: %s", label, msg_size((uint64_t)now, done_text));
}

/* Called often during transfers and about once a second while waiting:
 * where a signal stops a transfer, and where meters are drawn. */
static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct transfer *t = userdata;
	const struct request *req = t->req;

	if (t->client->interruptible && interrupt_signal())
		return 1;
	if (req->upload && req->upload->meter)
		draw_meter(t, req->upload->meter, ulnow, ultotal);
	else if (req->download && req->download->meter && t->file_bytes)
		draw_meter(t, req->download->meter, dlnow, dltotal);
	return 0;
}

static CURLcode add_header(struct curl_slist **headers, const char *header)
{
	struct curl_slist *longer = curl_slist_append(*headers, header);

	if (!longer)
		return CURLE_OUT_OF_MEMORY;
	*headers = longer;
	return CURLE_OK;
}

static CURLcode set_method(CURL *curl, const struct request *req, struct transfer *t,
			   struct curl_slist **headers)
{
	CURLcode rc = CURLE_OK;

	switch (req->method) {
	case HTTP_GET:
		return curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
	case HTTP_HEAD:
		return curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
	case HTTP_DELETE:
		return curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "DELETE");
	case HTTP_POST:
		break;
	}
	if (req->upload) {
		rc = curl_easy_setopt(curl, CURLOPT_POST, 1L);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(curl, CURLOPT_READFUNCTION, on_upload_read);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(curl, CURLOPT_READDATA, t);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
					      (curl_off_t)req->upload->size);
		if (rc == CURLE_OK)
			rc = add_header(headers, "Content-Type: application/octet-stream");
	} else {
		/* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): JSON when no upload */
		curl_off_t len = (curl_off_t)strlen(req->json);

		rc = curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req->json);
		if (rc == CURLE_OK)
			rc = curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, len);
		if (rc == CURLE_OK)
			rc = add_header(headers, "Content-Type: application/json");
	}
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_HTTPHEADER, *headers);
	return rc;
}

static CURLcode configure(struct http_client *c, const struct request *req, struct transfer *t,
			  const char *url, struct curl_slist **headers)
{
	CURL *curl = c->curl;
	CURLcode rc;

	/* Forget the previous request's options; the connection stays open. */
	curl_easy_reset(curl);
	c->curl_error[0] = '\0';
	rc = curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, c->curl_error);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_URL, url);
	if (rc == CURLE_OK && c->socket_path)
		rc = curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, c->socket_path);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
	/* Signals are tractctl's (tctl_interrupt.c), not libcurl's to take over. */
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_USERAGENT, "tractctl/" TCTL_VERSION);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_WRITEDATA, t);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(curl, CURLOPT_XFERINFODATA, t);
	if (rc == CURLE_OK)
		rc = set_method(curl, req, t, headers);
	/* On every request: the daemon answers 401 to any without it. */
	if (rc == CURLE_OK && c->auth_header)
		rc = add_header(headers, c->auth_header);
	if (rc == CURLE_OK && c->auth_header)
		rc = curl_easy_setopt(curl, CURLOPT_HTTPHEADER, *headers);
	return rc;
}

static int connect_failure(struct http_client *c, CURLcode rc)
{
	long os_errno = 0;

	if (curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK)
		os_errno = 0;
	msg_error("cannot connect to tractd at %s: %s", address(c),
		  os_errno ? strerror((int)os_errno) : curl_message(c, rc));
	if (os_errno == EACCES && c->socket_path)
		msg_note("you may not read and write the socket: see 'ls -l %s'", c->socket_path);
	else
		msg_note("is the daemon running? See 'systemctl status tractd', or start one with "
			 "'tractd serve'; --socket PATH or --server URL reach another");
	return TCTL_EXIT_CONNECT;
}

static int transport_failure(struct http_client *c, const struct transfer *t, CURLcode rc)
{
	if (rc == CURLE_ABORTED_BY_CALLBACK && interrupt_signal())
		return interrupt_exit_code();
	if (t->file_errno && t->req->upload) {
		msg_error("cannot read %s: %s", t->req->upload->name, strerror(t->file_errno));
		return TCTL_EXIT_LOCAL;
	}
	if (t->file_errno) {
		msg_error("cannot write %s: %s", t->req->download->name, strerror(t->file_errno));
		return TCTL_EXIT_LOCAL;
	}
	if (t->file_shrank) {
		msg_error("%s became shorter while it was being uploaded", t->req->upload->name);
		return TCTL_EXIT_LOCAL;
	}
	if (t->out_of_memory)
		return out_of_memory();
	if (t->body_too_large) {
		msg_error("the answer of %s is over %zu MiB: is that tractd?", address(c),
			  BODY_LIMIT >> 20);
		return TCTL_EXIT_SERVER;
	}
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	/* Only the connect timeout is set: a timeout is a failure to connect. */
	case CURLE_OPERATION_TIMEDOUT:
		return connect_failure(c, rc);
	default:
		msg_error("talking to tractd at %s: %s", address(c), curl_message(c, rc));
		return TCTL_EXIT_SERVER;
	}
}

/* Runs req; on TCTL_EXIT_OK, *status is the HTTP status and t holds the
 * answer (the caller frees t->body). */
static int perform(struct http_client *c, const struct request *req, struct transfer *t,
		   long *status)
{
	struct curl_slist *headers = NULL;
	char *url = NULL;
	CURLcode rc;
	int code;

	*t = (struct transfer){ .client = c, .req = req };
	if (asprintf(&url, "%s%s", c->base_url, req->path) < 0)
		return out_of_memory();
	rc = configure(c, req, t, url, &headers);
	if (rc == CURLE_OK)
		rc = curl_easy_perform(c->curl);
	if (rc == CURLE_OK)
		rc = curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, status);
	code = rc == CURLE_OK ? TCTL_EXIT_OK : transport_failure(c, t, rc);
	if ((req->upload && req->upload->meter) || (req->download && req->download->meter))
		msg_progress_end();
	curl_slist_free_all(headers);
	free(url);
	return code;
}

static const char *method_name(enum http_method method)
{
	static const char *const names[] = {
		[HTTP_GET] = "GET", [HTTP_HEAD] = "HEAD", [HTTP_POST] = "POST",
		[HTTP_DELETE] = "DELETE",
	};

	return names[method];
}

/* The message of a non-2xx answer: the error body's "FIELD: MESSAGE" when
 * it has one (API.md: every error is JSON); answers to HEAD have no body. */
static int status_failure(long status, const struct transfer *t)
{
	json_t *doc = json_loadb(t->body ? t->body : "", t->body_len, 0, NULL);
	char text[2048];

	if (describe_error(json_object_get(doc, "error"), text, sizeof(text)))
		msg_error("%s", text);
	else
		msg_error("the server answered HTTP %ld to %s %s", status, method_name(t->req->method),
			  t->req->path);
	json_decref(doc);
	return status >= 400 && status < 500 ? TCTL_EXIT_REJECTED : TCTL_EXIT_SERVER;
}

static int decode_object(const struct transfer *t, json_t **ret)
{
	json_error_t error;
	json_t *doc = json_loadb(t->body ? t->body : "", t->body_len, 0, &error);

	if (!doc) {
		msg_error("the server's answer to %s is not JSON: %s", t->req->path, error.text);
		return TCTL_EXIT_SERVER;
	}
	if (!json_is_object(doc)) {
		json_decref(doc);
		msg_error("the server's answer to %s is not a JSON object", t->req->path);
		return TCTL_EXIT_SERVER;
	}
	*ret = doc;
	return TCTL_EXIT_OK;
}

/* A request whose 2xx answer is a JSON object. */
static int exchange_json(struct http_client *c, const struct request *req, json_t **ret)
{
	struct transfer t;
	long status = 0;
	int code = perform(c, req, &t, &status);

	if (code == TCTL_EXIT_OK)
		code = is_success(status) ? decode_object(&t, ret) : status_failure(status, &t);
	free(t.body);
	return code;
}

int http_get_json(struct http_client *c, const char *path, json_t **ret)
{
	const struct request req = { .method = HTTP_GET, .path = path };

	return exchange_json(c, &req, ret);
}

int http_post_json(struct http_client *c, const char *path, const json_t *body, json_t **ret)
{
	char *text = json_dumps(body, JSON_COMPACT);
	struct request req = { .method = HTTP_POST, .path = path, .json = text };
	int code;

	if (!text)
		return out_of_memory();
	code = exchange_json(c, &req, ret);
	free(text);
	return code;
}

int http_delete(struct http_client *c, const char *path, json_t **ret)
{
	const struct request req = { .method = HTTP_DELETE, .path = path };
	struct transfer t;
	long status = 0;
	int code = perform(c, &req, &t, &status);

	*ret = NULL;
	if (code == TCTL_EXIT_OK && status != 204)
		code = is_success(status) ? decode_object(&t, ret) : status_failure(status, &t);
	free(t.body);
	return code;
}

int http_exists(struct http_client *c, const char *path, bool *ret)
{
	const struct request req = { .method = HTTP_HEAD, .path = path };
	struct transfer t;
	long status = 0;
	int code = perform(c, &req, &t, &status);

	if (code == TCTL_EXIT_OK && status != 200 && status != 404)
		code = status_failure(status, &t);
	*ret = status == 200;
	free(t.body);
	return code;
}

int http_upload(struct http_client *c, const char *path, const struct http_file *source,
		json_t **ret)
{
	const struct request req = { .method = HTTP_POST, .path = path, .upload = source };

	return exchange_json(c, &req, ret);
}

int http_download(struct http_client *c, const char *path, const struct http_file *sink,
		  uint64_t *bytes)
{
	const struct request req = { .method = HTTP_GET, .path = path, .download = sink };
	struct transfer t;
	long status = 0;
	int code = perform(c, &req, &t, &status);

	if (code == TCTL_EXIT_OK && !is_success(status))
		code = status_failure(status, &t);
	*bytes = t.file_bytes;
	free(t.body);
	return code;
}

char *http_path(struct http_client *c, const char *prefix, const char *segment,
		const char *suffix)
{
	char *escaped = curl_easy_escape(c->curl, segment, 0), *path = NULL;

	if (!escaped || asprintf(&path, "%s%s%s", prefix, escaped, suffix) < 0) {
		path = NULL;
		out_of_memory();
	}
	curl_free(escaped);
	return path;
}

void http_ignore_interrupts(struct http_client *c)
{
	c->interruptible = false;
}

/* "http://HOST:PORT/" and "http://HOST:PORT" are the same server; paths
 * start with '/'. */
static char *base_url_of(const char *server_url)
{
	size_t len = strlen(server_url);

	while (len > 0 && server_url[len - 1] == '/')
		len--;
	return strndup(server_url, len);
}

int http_client_open(const struct http_target *target, struct http_client **ret)
{
	struct http_client *c;

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		msg_error("cannot initialise libcurl");
		return TCTL_EXIT_LOCAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		curl_global_cleanup();
		return out_of_memory();
	}
	c->interruptible = true;
	c->connect_timeout_ms = target->connect_timeout_ms;
	c->curl = curl_easy_init();
	/* On the socket the host name is a placeholder: the daemon ignores it. */
	c->base_url = target->server_url ? base_url_of(target->server_url) : strdup("http://localhost");
	if (!target->server_url)
		c->socket_path = strdup(target->socket_path);
	/* Unix sockets identify the peer by uid: a token is for TCP only. */
	if (target->server_url && target->token &&
	    asprintf(&c->auth_header, "Authorization: Bearer %s", target->token) < 0)
		c->auth_header = NULL;
	if (!c->curl || !c->base_url || (!target->server_url && !c->socket_path) ||
	    (target->server_url && target->token && !c->auth_header)) {
		http_client_close(c);
		return out_of_memory();
	}
	*ret = c;
	return TCTL_EXIT_OK;
}

void http_client_close(struct http_client *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
	free(c->base_url);
	free(c->socket_path);
	if (c->auth_header)
		explicit_bzero(c->auth_header, strlen(c->auth_header));
	free(c->auth_header);
	free(c);
	curl_global_cleanup();
}
