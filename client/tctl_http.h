/* SPDX-License-Identifier: MIT */
/*
 * tctl_http: the connection to tractd (proto/API.md) over its Unix socket or
 * TCP. Every function returns an exit code (tctl.h) and has printed the
 * reason when it is not TCTL_EXIT_OK: HTTP 4xx -> 3 with the server's
 * "FIELD: MESSAGE", 5xx or an unusable answer -> 4, no connection -> 5, a
 * local file that cannot be read or written -> 6, a signal -> 128 + signal.
 */
#ifndef TCTL_HTTP_H
#define TCTL_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct http_client;

struct http_target {
	const char *socket_path;   /* used when server_url is NULL */
	const char *server_url;    /* "http://HOST:PORT" */
	const char *token;         /* bearer token sent over TCP, or NULL */
	long connect_timeout_ms;
};

/* A file streamed as a request body, or that a response body streams into. */
struct http_file {
	FILE *stream;
	const char *name;     /* for messages */
	uint64_t size;        /* uploads: the bytes to send */
	const char *meter;    /* progress line label on a terminal, or NULL */
};

int http_client_open(const struct http_target *target, struct http_client **ret);
void http_client_close(struct http_client *c);   /* accepts NULL */

/* From now on transfers run to their end even after a signal: for the
 * request that cancels a job after Ctrl-C. */
void http_ignore_interrupts(struct http_client *c);

/* prefix + percent-escaped segment + suffix, for ids typed by users.
 * NULL when out of memory (reported). Free with free(). */
char *http_path(struct http_client *c, const char *prefix, const char *segment,
		const char *suffix);

/* GET, expecting 2xx and a JSON object. */
int http_get_json(struct http_client *c, const char *path, json_t **ret);
/* POST a JSON document, expecting 2xx and a JSON object. */
int http_post_json(struct http_client *c, const char *path, const json_t *body, json_t **ret);
/* DELETE: *ret is the JSON object answered, or NULL for 204 No Content. */
int http_delete(struct http_client *c, const char *path, json_t **ret);
/* HEAD: 200 -> true, 404 -> false; anything else is an error. */
int http_exists(struct http_client *c, const char *path, bool *ret);
/* POST the file's bytes (streamed), expecting 2xx and a JSON object. */
int http_upload(struct http_client *c, const char *path, const struct http_file *source,
		json_t **ret);
/* GET into the file (streamed); *bytes is how many were written. */
int http_download(struct http_client *c, const char *path, const struct http_file *sink,
		  uint64_t *bytes);

#endif
