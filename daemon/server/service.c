/* SPDX-License-Identifier: MIT */
/* service: listening sockets, signals and sd_notify (see service.h). */
#include "server/service.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "base/log.h"

#define BACKLOG 64
#define LOOPBACK "127.0.0.1"
#define STATUS_MAX 256

static void sockets_reset(struct service_sockets *s)
{
	s->unix_fd = -1;
	s->tcp_fd = -1;
	s->unix_path[0] = '\0';
}

void service_close_sockets(struct service_sockets *s)
{
	/* Unlinked first, so that no client finds a socket nobody accepts on. */
	if (s->unix_path[0])
		unlink(s->unix_path);
	if (s->unix_fd >= 0)
		close(s->unix_fd);
	if (s->tcp_fd >= 0)
		close(s->tcp_fd);
	sockets_reset(s);
}

static int set_nonblocking(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* ---- sockets from the service manager ---- */

static int adopt_socket(int fd, struct service_sockets *s, struct errbuf *err)
{
	bool is_unix = sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0;
	int *slot = is_unix ? &s->unix_fd : &s->tcp_fd;
	int rc;

	if (!is_unix && sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, 1, 0) <= 0)
		return errbuf_set(err, -EINVAL, "",
				  "file descriptor %d from the service manager is not a listening "
				  "stream socket (Unix, IPv4 or IPv6)", fd);
	if (*slot >= 0)
		return errbuf_set(err, -EINVAL, "",
				  "the service manager passed more than one %s socket",
				  is_unix ? "Unix" : "TCP");
	rc = set_nonblocking(fd);
	if (rc < 0)
		return errbuf_set(err, rc, "", "cannot make file descriptor %d non-blocking: %s",
				  fd, strerror(-rc));
	*slot = fd;
	return 0;
}

static int adopt_sockets(int n, struct service_sockets *s, struct errbuf *err)
{
	for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + n; fd++) {
		int rc = adopt_socket(fd, s, err);

		if (rc < 0) {
			/* They are all ours now (the environment is unset): none may leak. */
			for (int i = SD_LISTEN_FDS_START; i < SD_LISTEN_FDS_START + n; i++)
				close(i);
			sockets_reset(s);
			return rc;
		}
	}
	log_debug("using %d socket(s) from the service manager", n);
	return 0;
}

/* ---- the Unix socket ---- */

/* The socket's directory, when it is missing (e.g. /run/tractd without systemd's
 * RuntimeDirectory=). 0755 whatever the umask: clients must reach the socket. */
static int make_parent(const char *path, struct errbuf *err)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	if (mkdir(dir, 0755) == 0) {
		if (chmod(dir, 0755) < 0)
			return errbuf_set(err, -errno, "listen_unix", "cannot chmod %s: %s", dir,
					  strerror(errno));
	} else if (errno != EEXIST) {
		return errbuf_set(err, -errno, "listen_unix", "cannot create directory %s: %s", dir,
				  strerror(errno));
	}
	return 0;
}

/* 1 when a server accepts connections on sa, 0 when nobody does. */
static int is_live(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int rc;

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno == EAGAIN)
		rc = 1;   /* EAGAIN: alive, with its backlog full */
	else if (errno == ECONNREFUSED || errno == ENOENT)
		rc = 0;
	else
		rc = -errno;
	close(fd);
	return rc;
}

/* Removes what a crashed server left at the path; refuses to touch a live
 * server's socket or anything that is not a socket. */
static int remove_stale(const struct sockaddr_un *sa, struct errbuf *err)
{
	const char *path = sa->sun_path;
	struct stat st;
	int live;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : errbuf_set(err, -errno, "listen_unix", "%s: %s", path,
							 strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return errbuf_set(err, -EEXIST, "listen_unix",
				  "%s exists and is not a socket; not replacing it", path);
	live = is_live(sa);
	if (live > 0)
		return errbuf_set(err, -EADDRINUSE, "listen_unix",
				  "another server is already listening on %s", path);
	if (live < 0)
		return errbuf_set(err, live, "listen_unix", "cannot probe %s: %s", path,
				  strerror(-live));
	if (unlink(path) < 0 && errno != ENOENT)
		return errbuf_set(err, -errno, "listen_unix",
				  "cannot remove the stale socket %s: %s", path, strerror(errno));
	log_debug("removed the stale socket %s", path);
	return 0;
}

static int bind_unix_at(int fd, const struct sockaddr_un *sa, const struct service_listen *l,
			struct errbuf *err)
{
	const char *path = sa->sun_path;
	int rc;

	if (bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0) {
		if (errno != EADDRINUSE)
			return errbuf_set(err, -errno, "listen_unix", "cannot bind %s: %s", path,
					  strerror(errno));
		rc = remove_stale(sa, err);
		if (rc < 0)
			return rc;
		if (bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0)
			return errbuf_set(err, -errno, "listen_unix", "cannot bind %s: %s", path,
					  strerror(errno));
	}
	/* bind() applied the umask; connecting needs write access, so until this
	 * chmod the socket is at most as open as intended, never more; and the
	 * group is set before the mode opens it to the group. */
	if (l->unix_gid != (gid_t)-1 && chown(path, (uid_t)-1, l->unix_gid) < 0) {
		rc = errbuf_set(err, -errno, "socket_group", "cannot give %s to group %u: %s", path,
				(unsigned)l->unix_gid, strerror(errno));
		unlink(path);
		return rc;
	}
	if (chmod(path, l->unix_mode) < 0 || listen(fd, BACKLOG) < 0) {
		rc = errbuf_set(err, -errno, "listen_unix", "cannot listen on %s: %s", path,
				strerror(errno));
		unlink(path);
		return rc;
	}
	return 0;
}

static int open_unix(const struct service_listen *l, struct service_sockets *s,
		     struct errbuf *err)
{
	const char *path = l->unix_path;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return errbuf_set(err, -ENAMETOOLONG, "listen_unix",
				  "%s is longer than the %zu bytes a socket path can have", path,
				  sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	rc = make_parent(path, err);
	if (rc < 0)
		return rc;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errbuf_set(err, -errno, "listen_unix", "cannot create a socket: %s",
				  strerror(errno));
	rc = bind_unix_at(fd, &sa, l, err);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	s->unix_fd = fd;
	snprintf(s->unix_path, sizeof(s->unix_path), "%s", path);
	log_debug("listening on %s", path);
	return 0;
}

/* ---- TCP ---- */

struct host_port {
	char host[128];
	char port[8];
};

/* 0..65535; 0 asks the kernel for a free port. */
static bool is_port(const char *s)
{
	size_t n = strspn(s, "0123456789");

	return n > 0 && n <= 5 && !s[n] && atoi(s) <= 65535;
}

/* "PORT" (loopback), "HOST:PORT" or "[V6]:PORT". An IPv6 address must be in
 * brackets, so that "::1:80" is refused rather than misread. */
static int split_address(const char *spec, struct host_port *hp, struct errbuf *err)
{
	const char *host = LOOPBACK, *port = spec, *sep;
	size_t host_len = strlen(LOOPBACK);
	bool ok;

	if (*spec == '[') {
		sep = strstr(spec, "]:");
		host = spec + 1;
		host_len = sep ? (size_t)(sep - host) : 0;
		port = sep ? sep + 2 : "";
	} else if ((sep = strchr(spec, ':'))) {
		host = spec;
		host_len = (size_t)(sep - spec);
		port = sep + 1;
	}
	ok = host_len > 0 && host_len < sizeof(hp->host) && is_port(port) &&
	     !memchr(host, '[', host_len) && (*spec == '[' || !memchr(host, ':', host_len));
	if (!ok)
		return errbuf_set(err, -EINVAL, "listen_tcp",
				  "'%.100s' is not PORT, HOST:PORT or [IPV6]:PORT", spec);
	snprintf(hp->host, sizeof(hp->host), "%.*s", (int)host_len, host);
	snprintf(hp->port, sizeof(hp->port), "%s", port);
	return 0;
}

/* A listening socket on ai, or -errno. */
static int listen_on(const struct addrinfo *ai)
{
	static const int one = 1;
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			ai->ai_protocol);
	int rc;

	if (fd < 0)
		return -errno;
	/* Restarts must not wait for the previous instance's TIME_WAIT. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, BACKLOG) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

static int open_tcp(const char *spec, struct service_sockets *s, struct errbuf *err)
{
	const struct addrinfo hints = {
		.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
	};
	struct addrinfo *list;
	struct host_port hp;
	int rc = split_address(spec, &hp, err);

	if (rc < 0)
		return rc;
	rc = getaddrinfo(hp.host, hp.port, &hints, &list);
	if (rc != 0)
		return errbuf_set(err, -EADDRNOTAVAIL, "listen_tcp", "cannot resolve %s: %s",
				  hp.host, gai_strerror(rc));
	/* The first address that works: one TCP socket, as a name may resolve to
	 * both 127.0.0.1 and ::1. */
	rc = -EADDRNOTAVAIL;
	for (const struct addrinfo *ai = list; ai && rc < 0; ai = ai->ai_next)
		rc = listen_on(ai);
	freeaddrinfo(list);
	if (rc < 0)
		return errbuf_set(err, rc, "listen_tcp", "cannot listen on %s: %s", spec,
				  strerror(-rc));
	s->tcp_fd = rc;
	log_debug("listening on TCP %s", spec);
	return 0;
}

/* ---- the interface ---- */

int service_open_sockets(const struct service_listen *l, struct service_sockets *ret,
			 struct errbuf *err)
{
	bool want_unix = l->unix_path && *l->unix_path;
	bool want_tcp = l->tcp && strcmp(l->tcp, "off") != 0;
	int n = sd_listen_fds(1);
	int rc = 0;

	sockets_reset(ret);
	if (n < 0)
		return errbuf_set(err, n, "",
				  "cannot take the sockets from the service manager: %s",
				  strerror(-n));
	if (n > 0)
		return adopt_sockets(n, ret, err);
	if (!want_unix && !want_tcp)
		return errbuf_set(err, -EINVAL, "listen_unix",
				  "nothing to listen on: listen_unix is empty and listen_tcp "
				  "is off");
	if (want_unix)
		rc = open_unix(l, ret, err);
	if (rc == 0 && want_tcp)
		rc = open_tcp(l->tcp, ret, err);
	if (rc < 0)
		service_close_sockets(ret);
	return rc;
}

int service_signal_fd(struct errbuf *err)
{
	sigset_t set;
	int rc, fd;

	if (sigemptyset(&set) < 0 || sigaddset(&set, SIGTERM) < 0 || sigaddset(&set, SIGINT) < 0 ||
	    sigaddset(&set, SIGHUP) < 0)
		return errbuf_set(err, -EINVAL, "", "cannot build the signal set");
	rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (rc != 0)
		return errbuf_set(err, -rc, "", "cannot block signals: %s", strerror(rc));
	fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0)
		return errbuf_set(err, -errno, "", "cannot create a signalfd: %s", strerror(errno));
	return fd;
}

/* ---- notifications ---- */

static void notify(const char *state)
{
	int rc = sd_notify(0, state);

	if (rc < 0)
		log_debug("sd_notify: %s", strerror(-rc));
}

/* STATUS= is one line: a newline in status would start another assignment. */
static void notify_with_status(const char *prefix, const char *status)
{
	char msg[STATUS_MAX + 32];
	int len = snprintf(msg, sizeof(msg), "%sSTATUS=%.*s", prefix, STATUS_MAX, status);

	for (int i = (int)strlen(prefix); i < len && msg[i]; i++)
		if (msg[i] == '\n' || msg[i] == '\r')
			msg[i] = ' ';
	notify(msg);
}

void service_notify_ready(const char *status)
{
	if (status)
		notify_with_status("READY=1\n", status);
	else
		notify("READY=1");
}

void service_notify_status(const char *status)
{
	notify_with_status("", status ? status : "");
}

void service_notify_stopping(void)
{
	notify("STOPPING=1");
}

uint64_t service_watchdog_usec(void)
{
	uint64_t usec = 0;
	int rc = sd_watchdog_enabled(0, &usec);

	if (rc < 0)
		log_debug("sd_watchdog_enabled: %s", strerror(-rc));
	return rc > 0 ? usec : 0;
}

void service_notify_watchdog(void)
{
	notify("WATCHDOG=1");
}

/* ---- memory ---- */

/* The cgroup v2 path of this process ("0::/system.slice/tractd.service"),
 * or "" when it has none (cgroup v1, no /proc). */
static void own_cgroup(char *path, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[1024];

	path[0] = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(path, len, "%s", line + 3);
			break;
		}
	fclose(f);
}

/* memory.max of the cgroup, UINT64_MAX when "max", unreadable or absent. */
static uint64_t cgroup_memory_max(void)
{
	char cg[1024], path[1200], value[32] = "";
	unsigned long long n;
	FILE *f;

	own_cgroup(cg, sizeof(cg));
	if (!cg[0])
		return UINT64_MAX;
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", cg);
	f = fopen(path, "re");
	if (!f)
		return UINT64_MAX;
	if (!fgets(value, sizeof(value), f) || sscanf(value, "%llu", &n) != 1)
		n = UINT64_MAX;
	fclose(f);
	return n;
}

uint64_t service_memory_limit(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t host = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
	uint64_t cgroup = cgroup_memory_max();

	return cgroup < host ? cgroup : host;
}
