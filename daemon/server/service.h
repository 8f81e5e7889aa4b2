/* SPDX-License-Identifier: MIT */
/*
 * service: the daemon's contract with its supervisor (systemd or a shell).
 * Listening sockets, either inherited through socket activation
 * (sd_listen_fds) or created here; readiness, status and watchdog
 * notifications (sd_notify; no-ops without NOTIFY_SOCKET); the signals that
 * stop the daemon (SIGTERM, SIGINT) and their delivery as a file descriptor
 * the main loop can wait on. Logs at debug level only.
 */
#ifndef TRACTD_SERVICE_H
#define TRACTD_SERVICE_H

#include <stdint.h>
#include <sys/types.h>

#include "base/errbuf.h"

/* What the daemon listens on when systemd passes no socket. */
struct service_listen {
	const char *unix_path;   /* "" or NULL: none */
	mode_t unix_mode;        /* permissions of the socket file */
	gid_t unix_gid;          /* its group; (gid_t)-1 keeps the daemon's */
	const char *tcp;         /* "off", "PORT", "HOST:PORT" or "[V6]:PORT" */
};

struct service_sockets {
	int unix_fd;   /* -1 when none */
	int tcp_fd;    /* -1 when none */
	char unix_path[256];  /* path we created (unlinked at exit), "" when inherited */
};

/* Uses sockets passed by systemd when there are any (a Unix one and/or a TCP
 * one, told apart with sd_is_socket_unix/sd_is_socket_inet), else binds
 * listen's Unix path (its mode and group set before it listens; a stale
 * socket file removed, a live one never replaced) and its TCP address
 * ("PORT" = 127.0.0.1:PORT). Both sockets are listening and non-blocking. */
int service_open_sockets(const struct service_listen *listen, struct service_sockets *ret,
			 struct errbuf *err);
void service_close_sockets(struct service_sockets *s);

/* Blocks SIGTERM/SIGINT/SIGHUP in the calling thread (call before creating
 * other threads, so they inherit the mask) and returns a signalfd for them. */
int service_signal_fd(struct errbuf *err);

void service_notify_ready(const char *status);
void service_notify_status(const char *status);
void service_notify_stopping(void);
/* Bytes of memory the daemon may use: the host's physical memory, or the
 * memory.max of its cgroup (v2; systemd's MemoryMax=) when that is less. */
uint64_t service_memory_limit(void);

/* Microseconds between watchdog pings the supervisor expects, 0 when none. */
uint64_t service_watchdog_usec(void);
void service_notify_watchdog(void);

#endif
