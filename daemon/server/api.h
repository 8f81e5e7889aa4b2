/* SPDX-License-Identifier: MIT */
/*
 * api: the HTTP API of proto/API.md on libmicrohttpd, served on the Unix
 * socket and the TCP socket given (either may be absent), one MHD daemon per
 * socket with a thread per connection (a streaming response blocks only its
 * own thread while it follows a running job).
 *
 * Owns the MHD daemons and the per-request state (bodies are bounded by the
 * configured limits; uploads stream into the store). Turns requests into
 * calls on admission (what a job or an upload may do), jobs and store, and
 * their results and errors into JSON with the HTTP status and error code of
 * proto/errors.def (api_error.h). The only module that
 * speaks HTTP. Logs failed requests at debug, internal errors at error level.
 *
 * Identity: on the Unix socket a request is the peer's (SO_PEERCRED: the
 * user name of its uid, "uid:N" when it has none); on TCP it is the name of
 * the bearer token it presents (no valid token: 401). A job belongs to who
 * submitted it, a volume to everyone who uploaded it; others' jobs and
 * volumes answer exactly as unknown ones do. Admins (uid 0, members of
 * admin_group, tokens marked admin) see and cancel every job and may use
 * every volume.
 */
#ifndef TRACTD_API_H
#define TRACTD_API_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/errbuf.h"
#include "server/admission.h"
#include "server/jobs.h"
#include "server/store.h"
#include "server/tokens.h"

struct api;

struct api_config {
	struct jobs *jobs;
	/* The store, data roots and the limits of jobs and uploads (copied, so
	 * the caller's may go). */
	struct admission_config admission;
	uint64_t max_request_bytes;
	/* Where the store and the spool live: never named to clients (redact.h).
	 * Copied. */
	char state_dir[1024];
	/* Open connections of one uid on the Unix socket (root: no limit), of
	 * one address on TCP; seconds a connection may stay silent before its
	 * request's headers are complete, or between keep-alive requests. */
	uint64_t max_connections_per_user;
	uint64_t max_connections_per_address;
	uint64_t header_timeout_s;
	/* TCP connections (all addresses) not yet authenticated by a request
	 * with a valid token; header_timeout_s after it opened, such a
	 * connection is closed however slowly it keeps sending. */
	uint64_t max_unauthenticated_connections;
	const struct tokens *tokens;   /* TCP's; borrowed, outlives the api */
	bool has_admin_group;
	gid_t admin_gid;               /* when has_admin_group */
};

/* Starts serving on the listening sockets (-1 = none); does not take them. */
int api_start(const struct api_config *cfg, int unix_fd, int tcp_fd, struct api **ret,
	      struct errbuf *err);

/* Stops accepting connections; requests in flight go on. */
void api_quiesce(struct api *api);

/* Ends every connection and frees everything. Accepts NULL. */
void api_stop(struct api *api);

#endif
