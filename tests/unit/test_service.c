/* SPDX-License-Identifier: MIT */
/* Unit tests for service.c: Unix and TCP sockets, socket activation,
 * sd_notify messages, the signalfd. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/service.h"
#include "tmpdir.h"

#define LISTEN_FD 3   /* SD_LISTEN_FDS_START */

static char tmpdir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_service.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(tmpdir);
}

/* A path in tmpdir; a test may hold a few of them at once. */
static const char *tmp_path(const char *name)
{
	static char paths[4][128];
	static unsigned next;
	char *path = paths[next++ % 4];

	snprintf(path, sizeof(paths[0]), "%s/%s", tmpdir, name);
	return path;
}

static struct sockaddr_un unix_addr(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	assert_true(strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	return sa;
}

static int connect_unix(const char *path)
{
	struct sockaddr_un sa = unix_addr(path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0), rc;

	assert_true(fd >= 0);
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return rc;
}

/* A listening (or, with listening false, merely bound) Unix socket at path. */
static int unix_socket_at(const char *path, int type, int listening)
{
	struct sockaddr_un sa = unix_addr(path);
	int fd = socket(AF_UNIX, type, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	if (listening)
		assert_int_equal(listen(fd, 4), 0);
	return fd;
}

static void assert_nonblocking(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	assert_true(flags >= 0);
	assert_true(flags & O_NONBLOCK);
}

static int tcp_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static int connect_tcp(int family, const char *addr, int port)
{
	struct sockaddr_storage ss = { .ss_family = (sa_family_t)family };
	socklen_t len;
	int fd = socket(family, SOCK_STREAM, 0), rc;

	assert_true(fd >= 0);
	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		s6->sin6_port = htons((uint16_t)port);
		assert_int_equal(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
		len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		s4->sin_port = htons((uint16_t)port);
		assert_int_equal(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
		len = sizeof(*s4);
	}
	rc = connect(fd, (struct sockaddr *)&ss, len);
	close(fd);
	return rc;
}

/* ---- Unix sockets ---- */

/* service_open_sockets on a Unix path and a TCP spec, the socket at the
 * default mode (0660) and the daemon's group. */
static int open_sockets(const char *unix_path, const char *tcp, struct service_sockets *ret,
			struct errbuf *err)
{
	const struct service_listen l = { .unix_path = unix_path, .unix_mode = 0660,
					   .unix_gid = (gid_t)-1, .tcp = tcp };

	return service_open_sockets(&l, ret, err);
}

static void test_unix_bind(void **state)
{
	const char *path = tmp_path("t.sock");
	struct service_sockets s;
	struct stat st;

	(void)state;
	assert_int_equal(open_sockets(path, "off", &s, NULL), 0);
	assert_true(s.unix_fd >= 0);
	assert_int_equal(s.tcp_fd, -1);
	assert_string_equal(s.unix_path, path);
	assert_nonblocking(s.unix_fd);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0660);
	assert_int_equal(connect_unix(path), 0);
	service_close_sockets(&s);
	assert_int_equal(s.unix_fd, -1);
	assert_int_equal(access(path, F_OK), -1);   /* removed at close */
}

/* socket_mode and socket_group: set on the file before it listens. */
static void test_unix_mode_and_group(void **state)
{
	const char *path = tmp_path("group.sock");
	const struct service_listen l = { .unix_path = path, .unix_mode = 0666,
					  .unix_gid = 65534, .tcp = "off" };
	struct service_sockets s;
	struct stat st;

	(void)state;
	assert_int_equal(service_open_sockets(&l, &s, NULL), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0666);
	assert_int_equal(st.st_gid, 65534);
	service_close_sockets(&s);
}

static void test_unix_live_refused(void **state)
{
	const char *path = tmp_path("live.sock");
	struct service_sockets a, b;
	struct errbuf err;

	(void)state;
	assert_int_equal(open_sockets(path, NULL, &a, NULL), 0);
	assert_int_equal(open_sockets(path, NULL, &b, &err), -EADDRINUSE);
	assert_string_equal(err.field, "listen_unix");
	assert_non_null(strstr(err.message, "another server is already listening on"));
	assert_non_null(strstr(err.message, path));
	assert_int_equal(b.unix_fd, -1);
	assert_int_equal(connect_unix(path), 0);   /* the first one is untouched */
	service_close_sockets(&a);
}

static void test_unix_stale_replaced(void **state)
{
	const char *path = tmp_path("stale.sock");
	struct service_sockets s;

	(void)state;
	/* A crashed server: the file stays, nobody listens. */
	close(unix_socket_at(path, SOCK_STREAM, 1));
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(open_sockets(path, "off", &s, NULL), 0);
	assert_int_equal(connect_unix(path), 0);
	service_close_sockets(&s);
}

static void test_unix_not_a_socket(void **state)
{
	const char *path = tmp_path("regular");
	struct service_sockets s;
	struct errbuf err;
	FILE *fp = fopen(path, "w");

	(void)state;
	assert_non_null(fp);
	assert_int_equal(fclose(fp), 0);
	assert_int_equal(open_sockets(path, "off", &s, &err), -EEXIST);
	assert_non_null(strstr(err.message, "not a socket"));
	assert_int_equal(access(path, F_OK), 0);
}

static void test_unix_parent_created(void **state)
{
	char path[128];
	struct service_sockets s;
	struct stat st;
	mode_t old = umask(077);

	(void)state;
	snprintf(path, sizeof(path), "%s/sub/t.sock", tmpdir);
	assert_int_equal(open_sockets(path, "off", &s, NULL), 0);
	umask(old);
	assert_int_equal(stat(tmp_path("sub"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0755);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	assert_int_equal(connect_unix(path), 0);
	service_close_sockets(&s);
}

static void test_unix_errors(void **state)
{
	char long_path[200];
	struct service_sockets s;
	struct errbuf err;

	(void)state;
	memset(long_path, 'a', sizeof(long_path));
	long_path[0] = '/';
	long_path[sizeof(long_path) - 1] = '\0';
	assert_int_equal(open_sockets(long_path, "off", &s, &err), -ENAMETOOLONG);
	assert_non_null(strstr(err.message, "107 bytes"));
	assert_int_equal(open_sockets("/nonexistent-dir/sub/t.sock", "off", &s, &err),
			 -ENOENT);
	assert_non_null(strstr(err.message, "/nonexistent-dir/sub"));
	assert_int_equal(open_sockets("", "off", &s, &err), -EINVAL);
	assert_non_null(strstr(err.message, "nothing to listen on"));
	assert_int_equal(open_sockets(NULL, NULL, &s, NULL), -EINVAL);
}

/* ---- TCP ---- */

static void test_tcp(void **state)
{
	static const char *const specs[] = { "0", "127.0.0.1:0", "localhost:0" };
	struct service_sockets s;

	(void)state;
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		assert_int_equal(open_sockets(NULL, specs[i], &s, NULL), 0);
		assert_int_equal(s.unix_fd, -1);
		assert_true(s.tcp_fd >= 0);
		assert_nonblocking(s.tcp_fd);
		assert_true(tcp_port(s.tcp_fd) > 0);
		if (strcmp(specs[i], "localhost:0"))
			assert_int_equal(connect_tcp(AF_INET, "127.0.0.1", tcp_port(s.tcp_fd)), 0);
		service_close_sockets(&s);
	}
	assert_int_equal(open_sockets(tmp_path("u.sock"), "off", &s, NULL), 0);
	assert_int_equal(s.tcp_fd, -1);
	service_close_sockets(&s);
}

static void test_tcp_ipv6(void **state)
{
	struct service_sockets s;
	struct errbuf err;
	int rc;

	(void)state;
	rc = open_sockets(NULL, "[::1]:0", &s, &err);
	if (rc == -EADDRNOTAVAIL || rc == -EAFNOSUPPORT)
		skip();   /* no IPv6 loopback here */
	assert_int_equal(rc, 0);
	assert_int_equal(connect_tcp(AF_INET6, "::1", tcp_port(s.tcp_fd)), 0);
	service_close_sockets(&s);
}

static void test_tcp_with_unix(void **state)
{
	const char *path = tmp_path("both.sock"), *path2 = tmp_path("both2.sock");
	struct service_sockets s, s2;
	struct errbuf err;
	char spec[32];

	(void)state;
	assert_int_equal(open_sockets(path, "127.0.0.1:0", &s, NULL), 0);
	assert_true(s.unix_fd >= 0 && s.tcp_fd >= 0);
	/* TCP failing after the Unix socket was made leaves nothing behind. */
	snprintf(spec, sizeof(spec), "127.0.0.1:%d", tcp_port(s.tcp_fd));
	assert_int_equal(open_sockets(path2, spec, &s2, &err), -EADDRINUSE);
	assert_string_equal(err.field, "listen_tcp");
	assert_int_equal(access(path2, F_OK), -1);
	assert_int_equal(s2.unix_fd, -1);
	service_close_sockets(&s);
}

static void test_tcp_bad_specs(void **state)
{
	static const char *const bad[] = {
		"", "abc", "127.0.0.1", "host:", ":80", "[::1]", "[::1]80", "::1:80", "[]:80",
		"a:b:80", "host:http", "1:65536", "123456", "-1", "h[:80",
	};
	struct service_sockets s;
	struct errbuf err;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = open_sockets(NULL, bad[i], &s, &err);

		if (rc != -EINVAL || strcmp(err.field, "listen_tcp"))
			fail_msg("'%s': rc %d, field '%s', message '%s'", bad[i], rc, err.field,
				 err.message);
	}
	/* Well-formed, but not an address of this machine (TEST-NET-1). */
	assert_int_equal(open_sockets(NULL, "192.0.2.1:8470", &s, &err), -EADDRNOTAVAIL);
	assert_string_equal(err.message,
			    "cannot listen on 192.0.2.1:8470: Cannot assign requested address");
}

/* ---- socket activation ---- */

/* Moves what occupies fd (make's jobserver, say) out of the way; -1 if free. */
static int park_fd(int fd)
{
	int saved = fcntl(fd, F_DUPFD_CLOEXEC, 100);

	if (saved >= 0)
		close(fd);
	return saved;
}

static void unpark_fd(int saved, int fd)
{
	if (saved >= 0) {
		assert_int_equal(dup2(saved, fd), fd);
		close(saved);
	}
}

static void pass_fds(int n)
{
	char pid[16], count[16];

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	snprintf(count, sizeof(count), "%d", n);
	assert_int_equal(setenv("LISTEN_PID", pid, 1), 0);
	assert_int_equal(setenv("LISTEN_FDS", count, 1), 0);
}

static void put_at(int fd, int target)
{
	if (fd == target)
		return;
	assert_int_equal(dup2(fd, target), target);
	close(fd);
}

static void test_activation_unix(void **state)
{
	const char *path = tmp_path("activated.sock");
	int saved = park_fd(LISTEN_FD);
	struct service_sockets s;

	(void)state;
	put_at(unix_socket_at(path, SOCK_STREAM, 1), LISTEN_FD);
	pass_fds(1);
	/* The configured addresses are not used when systemd passes sockets. */
	assert_int_equal(open_sockets("/nonexistent/x.sock", "127.0.0.1:1", &s, NULL), 0);
	assert_int_equal(s.unix_fd, LISTEN_FD);
	assert_int_equal(s.tcp_fd, -1);
	assert_string_equal(s.unix_path, "");   /* not ours to unlink */
	assert_nonblocking(s.unix_fd);
	assert_null(getenv("LISTEN_FDS"));
	assert_null(getenv("LISTEN_PID"));
	assert_int_equal(connect_unix(path), 0);
	service_close_sockets(&s);
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(fcntl(LISTEN_FD, F_GETFD), -1);
	unpark_fd(saved, LISTEN_FD);
}

static void test_activation_unix_and_tcp(void **state)
{
	const char *path = tmp_path("activated2.sock");
	int saved3 = park_fd(LISTEN_FD), saved4 = park_fd(LISTEN_FD + 1);
	struct service_sockets s, tcp;

	(void)state;
	assert_int_equal(open_sockets(NULL, "127.0.0.1:0", &tcp, NULL), 0);
	put_at(tcp.tcp_fd, LISTEN_FD);       /* TCP first: told apart by type, not order */
	put_at(unix_socket_at(path, SOCK_STREAM, 1), LISTEN_FD + 1);
	pass_fds(2);
	assert_int_equal(open_sockets(NULL, NULL, &s, NULL), 0);
	assert_int_equal(s.tcp_fd, LISTEN_FD);
	assert_int_equal(s.unix_fd, LISTEN_FD + 1);
	assert_int_equal(connect_tcp(AF_INET, "127.0.0.1", tcp_port(s.tcp_fd)), 0);
	assert_int_equal(connect_unix(path), 0);
	service_close_sockets(&s);
	unpark_fd(saved4, LISTEN_FD + 1);
	unpark_fd(saved3, LISTEN_FD);
}

static void test_activation_bad_fds(void **state)
{
	int saved3 = park_fd(LISTEN_FD), saved4 = park_fd(LISTEN_FD + 1);
	struct service_sockets s;
	struct errbuf err;

	(void)state;
	/* A datagram socket is not something to accept() on. */
	put_at(unix_socket_at(tmp_path("a.sock"), SOCK_STREAM, 1), LISTEN_FD);
	put_at(unix_socket_at(tmp_path("dgram.sock"), SOCK_DGRAM, 0), LISTEN_FD + 1);
	pass_fds(2);
	assert_int_equal(open_sockets(NULL, NULL, &s, &err), -EINVAL);
	assert_non_null(strstr(err.message, "not a listening stream socket"));
	assert_int_equal(s.unix_fd, -1);
	assert_int_equal(fcntl(LISTEN_FD, F_GETFD), -1);       /* closed, not leaked */
	assert_int_equal(fcntl(LISTEN_FD + 1, F_GETFD), -1);

	/* Two Unix sockets: which one is the API? */
	put_at(unix_socket_at(tmp_path("b.sock"), SOCK_STREAM, 1), LISTEN_FD);
	put_at(unix_socket_at(tmp_path("c.sock"), SOCK_STREAM, 1), LISTEN_FD + 1);
	pass_fds(2);
	assert_int_equal(open_sockets(NULL, NULL, &s, &err), -EINVAL);
	assert_non_null(strstr(err.message, "more than one Unix socket"));
	unpark_fd(saved4, LISTEN_FD + 1);
	unpark_fd(saved3, LISTEN_FD);
}

/* Sockets meant for another process (LISTEN_PID differs) are not taken. */
static void test_activation_other_pid(void **state)
{
	struct service_sockets s;

	(void)state;
	assert_int_equal(setenv("LISTEN_PID", "1", 1), 0);
	assert_int_equal(setenv("LISTEN_FDS", "1", 1), 0);
	assert_int_equal(open_sockets(tmp_path("own.sock"), "off", &s, NULL), 0);
	assert_string_equal(s.unix_path, tmp_path("own.sock"));
	service_close_sockets(&s);
}

/* ---- notifications ---- */

static void test_notify_without_socket(void **state)
{
	(void)state;
	assert_int_equal(unsetenv("NOTIFY_SOCKET"), 0);
	assert_int_equal(unsetenv("WATCHDOG_USEC"), 0);
	service_notify_ready("ready");
	service_notify_ready(NULL);
	service_notify_status("busy");
	service_notify_watchdog();
	service_notify_stopping();
	assert_int_equal(service_watchdog_usec(), 0);
}

static void test_notify_messages(void **state)
{
	static const struct {
		int what;
		const char *status, *expect;
	} cases[] = {
		{ 0, "listening on /run/tractd/tractd.sock",
		  "READY=1\nSTATUS=listening on /run/tractd/tractd.sock" },
		{ 0, NULL, "READY=1" },
		{ 1, "2 jobs queued", "STATUS=2 jobs queued" },
		{ 1, "one\nWATCHDOG=trigger", "STATUS=one WATCHDOG=trigger" },
		{ 2, NULL, "WATCHDOG=1" },
		{ 3, NULL, "STOPPING=1" },
	};
	const char *path = tmp_path("notify");
	int fd = unix_socket_at(path, SOCK_DGRAM, 0);
	char buf[512];

	(void)state;
	assert_int_equal(setenv("NOTIFY_SOCKET", path, 1), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ssize_t n;

		switch (cases[i].what) {
		case 0: service_notify_ready(cases[i].status); break;
		case 1: service_notify_status(cases[i].status); break;
		case 2: service_notify_watchdog(); break;
		default: service_notify_stopping(); break;
		}
		n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
		assert_true(n > 0);
		buf[n] = '\0';
		assert_string_equal(buf, cases[i].expect);
	}
	assert_int_equal(unsetenv("NOTIFY_SOCKET"), 0);
	close(fd);
}

static void test_watchdog_usec(void **state)
{
	char pid[16];

	(void)state;
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	assert_int_equal(setenv("WATCHDOG_USEC", "30000000", 1), 0);
	assert_int_equal(setenv("WATCHDOG_PID", pid, 1), 0);
	assert_int_equal(service_watchdog_usec(), 30000000);
	/* Meant for another process. */
	assert_int_equal(setenv("WATCHDOG_PID", "1", 1), 0);
	assert_int_equal(service_watchdog_usec(), 0);
	assert_int_equal(unsetenv("WATCHDOG_USEC"), 0);
	assert_int_equal(unsetenv("WATCHDOG_PID"), 0);
	assert_int_equal(service_watchdog_usec(), 0);
}

/* ---- signals ---- */

static void test_signal_fd(void **state)
{
	static const int signals[] = { SIGTERM, SIGINT, SIGHUP };
	struct signalfd_siginfo si;
	int fd = service_signal_fd(NULL), error;
	ssize_t n;

	(void)state;

	assert_true(fd >= 0);
	n = read(fd, &si, sizeof(si));   /* non-blocking, nothing yet */
	error = errno;
	assert_int_equal(n, -1);
	assert_int_equal(error, EAGAIN);
	for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
		assert_int_equal(raise(signals[i]), 0);   /* blocked: queued, not fatal */
		assert_int_equal(read(fd, &si, sizeof(si)), sizeof(si));
		assert_int_equal(si.ssi_signo, signals[i]);
	}
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_unix_bind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unix_mode_and_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unix_live_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unix_stale_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unix_not_a_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unix_parent_created, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unix_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tcp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tcp_ipv6, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tcp_with_unix, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tcp_bad_specs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_activation_unix, setup, teardown),
		cmocka_unit_test_setup_teardown(test_activation_unix_and_tcp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_activation_bad_fds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_activation_other_pid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_without_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_messages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watchdog_usec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_signal_fd, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
