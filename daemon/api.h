/* SPDX-License-Identifier: MIT */
/*
 * api: the HTTP API of proto/API.md on libmicrohttpd, served on the Unix
 * socket and the TCP socket given (either may be absent), one MHD daemon per
 * socket with a thread per connection (a streaming response blocks only its
 * own thread while it follows a running job).
 *
 * Owns the MHD daemons and the per-request state (bodies are bounded by the
 * configured limits; uploads stream into the store). Turns requests into
 * calls on jobs and store, and their results and errors into JSON with the
 * HTTP status and error code of proto/errors.def. The only module that
 * speaks HTTP. Logs failed requests at debug, internal errors at error level.
 */
#ifndef TRACTD_API_H
#define TRACTD_API_H

#include <stdbool.h>
#include <stdint.h>

#include "errbuf.h"
#include "jobs.h"
#include "store.h"

struct api;

struct api_config {
	struct jobs *jobs;
	struct store *store;
	uint64_t max_request_bytes;
	uint64_t max_upload_bytes;
	/* ':'-separated absolute directories (checked by conf) whose files jobs
	 * may name; "" = none, uploads only. Copied, so the caller's may go. */
	char data_roots[1024];
};

/* Starts serving on the listening sockets (-1 = none); does not take them. */
int api_start(const struct api_config *cfg, int unix_fd, int tcp_fd, struct api **ret,
	      struct errbuf *err);

/* Stops accepting connections; requests in flight go on. */
void api_quiesce(struct api *api);

/* Ends every connection and frees everything. Accepts NULL. */
void api_stop(struct api *api);

#endif
