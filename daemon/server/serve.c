/* SPDX-License-Identifier: MIT */
/*
 * serve: `tractd serve`, the resident daemon. Reads the configuration, opens
 * (or inherits) the sockets, starts the jobs (queue, spool), their GPU
 * worker and the HTTP API, tells the supervisor it is ready, then waits for
 * a stop signal while keeping the watchdog fed and the status line current. On SIGTERM/SIGINT it
 * stops accepting, cancels the running job within a chunk, closes
 * connections and exits 0.
 *
 * Owns the daemon's top-level objects; the only module that knows them all.
 */
#include "server/serve.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "server/api.h"
#include "server/conf.h"
#include "server/jobs.h"
#include "base/log.h"
#include "server/service.h"
#include "server/store.h"
#include "server/tokens.h"
#include "server/worker.h"

#define STATUS_PERIOD_MS 2000
/* Expiring uploads stats every claim: every 10 s, not every status period. */
#define VOLUME_EXPIRY_PERIOD_S 10
#define SYSTEM_CONFIG "/etc/tractd/tractd.conf"

static const char serve_usage[] =
"Usage: tractd serve [OPTIONS]\n"
"\n"
"Runs the resident daemon: the HTTP API of proto/API.md on a Unix socket and,\n"
"when configured, on TCP. Under systemd it is socket-activated and reports\n"
"readiness, status and watchdog pings (Type=notify).\n"
"\n"
"Options:\n"
"  -c, --config FILE        configuration file (default: /etc/tractd/tractd.conf\n"
"                           when it exists; every key is in etc/tractd.conf)\n"
"      --listen-unix PATH   Unix socket (default: $RUNTIME_DIRECTORY/tractd.sock,\n"
"                           else $XDG_RUNTIME_DIR/tractd.sock)\n"
"      --listen-tcp ADDR    'off' (default), PORT (loopback) or HOST:PORT; needs\n"
"                           tokens_file (bearer tokens of TCP clients)\n"
"      --state-dir DIR      uploaded volumes and the result spool\n"
"      --set KEY=VALUE      any configuration key (repeatable)\n"
"      --print-config       print the effective configuration and exit\n"
"  -v, --verbose            debug messages\n"
"  -h, --help               this text\n"
"\n"
"Stop it with SIGTERM or SIGINT: it finishes cleanly and exits 0.\n";

enum { OPT_LISTEN_UNIX = 256, OPT_LISTEN_TCP, OPT_STATE_DIR, OPT_SET, OPT_PRINT };

static const struct option serve_options[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "listen-unix", required_argument, NULL, OPT_LISTEN_UNIX },
	{ "listen-tcp", required_argument, NULL, OPT_LISTEN_TCP },
	{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
	{ "set", required_argument, NULL, OPT_SET },
	{ "print-config", no_argument, NULL, OPT_PRINT },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ 0, 0, 0, 0 },
};

struct daemon {
	struct conf conf;
	struct store *store;
	struct jobs *jobs;
	struct worker *worker;
	struct service_sockets sockets;
	struct api *api;
	struct tokens *tokens;    /* TCP's bearer tokens; NULL without tokens_file */
	int signal_fd;
	time_t next_volume_expiry;   /* housekeeping's next scan of the uploads */
};

/* Path flags may be relative to the working directory; the configuration
 * wants them absolute. */
static int set_path(struct conf *c, const char *key, const char *path, struct errbuf *err)
{
	char cwd[1024], absolute[2100];

	/* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): getopt gives it an optarg */
	if (path[0] == '/' || !getcwd(cwd, sizeof(cwd)))
		return conf_set(c, key, path, err);
	snprintf(absolute, sizeof(absolute), "%s/%s", cwd, path);
	return conf_set(c, key, absolute, err);
}

static int set_pair(struct conf *c, const char *pair, struct errbuf *err)
{
	char key[64];
	/* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): getopt gives it an optarg */
	const char *eq = strchr(pair, '=');

	if (!eq || eq == pair || (size_t)(eq - pair) >= sizeof(key))
		return errbuf_set(err, -EINVAL, "", "--set wants KEY=VALUE, got '%s'", pair);
	memcpy(key, pair, (size_t)(eq - pair));
	key[eq - pair] = '\0';
	return conf_set(c, key, eq + 1, err);
}

/* Returns -1 to go on, or an exit code. */
static int parse_serve_args(int argc, char **argv, struct conf *c, bool *print_only,
			    struct errbuf *err)
{
	const char *config = NULL;
	int opt, r = 0;

	conf_defaults(c);
	optind = 1;
	/* The config file first, so that flags override it wherever they stand. */
	while ((opt = getopt_long(argc, argv, "c:vh", serve_options, NULL)) != -1) {
		if (opt == 'c')
			config = optarg;
		else if (opt == 'h')
			return fputs(serve_usage, stdout), 0;
		else if (opt == '?')
			return 2;
	}
	if (optind != argc) {
		fprintf(stderr, "tractd: serve takes no arguments\nTry 'tractd serve --help'.\n");
		return 2;
	}
	/* The system's file is read when present; -c names another, which must exist. */
	r = conf_load_file(c, config ? config : SYSTEM_CONFIG, err);
	if (r == -ENOENT && !config)
		r = 0;
	if (r < 0) {
		/* The message names the file, line and key. */
		fprintf(stderr, "tractd: error: %s\n", err->message);
		return 3;
	}
	optind = 1;
	while (r == 0 && (opt = getopt_long(argc, argv, "c:vh", serve_options, NULL)) != -1) {
		switch (opt) {
		case OPT_LISTEN_UNIX: r = set_path(c, "listen_unix", optarg, err); break;
		case OPT_LISTEN_TCP: r = conf_set(c, "listen_tcp", optarg, err); break;
		case OPT_STATE_DIR: r = set_path(c, "state_dir", optarg, err); break;
		case OPT_SET: r = set_pair(c, optarg, err); break;
		case OPT_PRINT: *print_only = true; break;
		case 'v': r = conf_set(c, "log_level", "debug", err); break;
		default: break;
		}
	}
	if (r < 0) {
		fprintf(stderr, "tractd: error: %s%s%s\n", err->field, err->field[0] ? ": " : "",
			err->message);
		return 3;
	}
	return -1;
}

static void apply_log_level(const char *name)
{
	static const struct { const char *name; enum log_level level; } levels[] = {
		{ "error", LOG_LEVEL_ERROR }, { "warning", LOG_LEVEL_WARN },
		{ "info", LOG_LEVEL_INFO }, { "debug", LOG_LEVEL_DEBUG },
	};

	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		if (strcmp(name, levels[i].name) == 0)
			log_set_level(levels[i].level);
}

/* The gid of the group named by configuration key field, looked up once at
 * start: a group that does not exist is a configuration error, not a silent
 * default. */
static int lookup_group(const char *name, const char *field, gid_t *ret, struct errbuf *err)
{
	struct group gr, *found = NULL;
	char buf[16384];
	int r = getgrnam_r(name, &gr, buf, sizeof(buf), &found);

	if (r != 0)
		return errbuf_set(err, -r, field, "cannot look up group '%s': %s", name,
				  strerror(r));
	if (!found)
		return errbuf_set(err, -ENOENT, field, "no group '%s' on this system", name);
	*ret = gr.gr_gid;
	return 0;
}

static int resolve_admin_group(const char *name, struct api_config *ac, struct errbuf *err)
{
	if (!*name)
		return 0;
	ac->has_admin_group = true;
	return lookup_group(name, "admin_group", &ac->admin_gid, err);
}

/* The sockets of the configuration, unless systemd passes its own. */
static int open_sockets(struct daemon *d, struct errbuf *err)
{
	struct service_listen l = {
		.unix_path = d->conf.listen_unix,
		.unix_mode = (mode_t)strtoul(d->conf.socket_mode, NULL, 8),   /* checked: octal */
		.unix_gid = (gid_t)-1,
		.tcp = d->conf.listen_tcp,
	};
	int r = 0;

	if (d->conf.socket_group[0])
		r = lookup_group(d->conf.socket_group, "socket_group", &l.unix_gid, err);
	return r == 0 ? service_open_sockets(&l, &d->sockets, err) : r;
}

/* TCP is authenticated or not served: the tokens file is read (and its
 * mode checked) before anything listens, whether the TCP socket comes from
 * listen_tcp or from systemd. */
static int load_tokens(struct daemon *d, struct errbuf *err)
{
	if (d->conf.tokens_file[0]) {
		int r = tokens_load(d->conf.tokens_file, &d->tokens, err);
		if (r < 0)
			return r;
	}
	if (d->sockets.tcp_fd >= 0 && !d->tokens)
		return errbuf_set(err, -EINVAL, "listen_tcp", "TCP has no authentication without "
				  "tokens: set tokens_file (`NAME TOKEN [admin]` lines, mode 0600), or "
				  "listen_tcp = off");
	return 0;
}

/* max_job_host_memory, with 0 resolved: half of what the daemon may use,
 * leaving the rest to the seed chunks, readback buffers and other jobs'
 * cached inputs. */
static uint64_t job_host_memory(const struct conf *c)
{
	return c->max_job_host_memory ? c->max_job_host_memory : service_memory_limit() / 2;
}

static int start_daemon(struct daemon *d, struct errbuf *err)
{
	struct jobs_config jc = {
		.state_dir = d->conf.state_dir,
		.max_queued_jobs = d->conf.max_queued_jobs,
		.max_queued_jobs_per_user = d->conf.max_queued_jobs_per_user,
		.max_queued_bytes_per_user = d->conf.max_queued_bytes_per_user,
		.max_seeds_per_job = d->conf.max_seeds_per_job,
		.max_job_host_memory = job_host_memory(&d->conf),
		.spool_max_bytes = d->conf.spool_max_bytes,
		.result_ttl_seconds = d->conf.result_ttl_seconds,
		.gpu = {
			.device_index = -1,
			.memory_limit = d->conf.gpu_memory_limit,
			.pipeline_cache_path = d->conf.pipeline_cache[0] ? d->conf.pipeline_cache : NULL,
		},
		.gpu_memory_budget = d->conf.gpu_memory_budget,
		.max_dispatch_steps = d->conf.max_dispatch_steps,
		.volume_cache_bytes = d->conf.volume_cache_bytes,
		.gpu_spare_idle_seconds = (double)d->conf.gpu_spare_idle_seconds,
		.fit_threads = d->conf.fit_threads,
	};
	struct api_config ac = {
		.admission = {
			.max_seeds_per_job = d->conf.max_seeds_per_job,
			.max_job_host_memory = jc.max_job_host_memory,
			.max_upload_bytes = d->conf.max_upload_bytes,
			.max_volume_bytes_per_user = d->conf.max_volume_bytes_per_user,
		},
		.max_request_bytes = d->conf.max_request_bytes,
		.max_connections_per_user = d->conf.max_connections_per_user,
		.max_connections_per_address = d->conf.max_connections_per_address,
		.header_timeout_s = d->conf.header_timeout_seconds,
		.max_unauthenticated_connections = d->conf.max_unauthenticated_connections,
	};
	int r;

	/* Before any thread exists, so that all of them inherit the blocked signals. */
	d->signal_fd = service_signal_fd(err);
	if (d->signal_fd < 0)
		return d->signal_fd;
	r = open_sockets(d, err);
	if (r == 0)
		r = load_tokens(d, err);
	if (r == 0)
		r = resolve_admin_group(d->conf.admin_group, &ac, err);
	if (r == 0)
		r = store_open(d->conf.state_dir, &d->store, err);
	/* Checked with the configuration; parsed again here into the list. */
	if (r == 0)
		r = gpu_parse_devices(d->conf.device, jc.devices, &jc.n_devices, err);
	if (r == 0)
		r = jobs_start(&jc, &d->jobs, err);
	if (r == 0)
		r = worker_start(&jc, d->jobs, &d->worker, err);
	if (r < 0)
		return r;
	_Static_assert(sizeof(ac.admission.data_roots) == sizeof(d->conf.data_roots),
		       "data_roots is copied whole");
	memcpy(ac.admission.data_roots, d->conf.data_roots, sizeof(ac.admission.data_roots));
	_Static_assert(sizeof(ac.state_dir) == sizeof(d->conf.state_dir), "state_dir is copied whole");
	memcpy(ac.state_dir, d->conf.state_dir, sizeof(ac.state_dir));
	ac.jobs = d->jobs;
	ac.admission.store = d->store;
	ac.tokens = d->tokens;
	return api_start(&ac, d->sockets.unix_fd, d->sockets.tcp_fd, &d->api, err);
}

static void status_line(struct daemon *d, char *buf, size_t len)
{
	struct jobs_status st;

	jobs_status(d->jobs, &st);
	snprintf(buf, len, "%s; %llu job(s) queued, %llu running; %llu done", st.device.device_name,
		 (unsigned long long)st.queued, (unsigned long long)st.running,
		 (unsigned long long)st.done_total);
}

/* Expiry by the clock, not only when a job ends or a request comes: an
 * idle daemon must not keep results and uploads past their time. */
static void housekeeping(struct daemon *d)
{
	time_t now = time(NULL);

	jobs_expire(d->jobs);
	if (now < d->next_volume_expiry)
		return;
	store_expire(d->store, d->conf.volume_ttl_seconds);
	d->next_volume_expiry = now + VOLUME_EXPIRY_PERIOD_S;
}

/* Waits for SIGTERM/SIGINT; feeds the watchdog and refreshes STATUS= meanwhile. */
static void run_until_signal(struct daemon *d)
{
	uint64_t watchdog_us = service_watchdog_usec();
	int period_ms = STATUS_PERIOD_MS;
	char status[512];

	if (watchdog_us && (int)(watchdog_us / 2000) < period_ms)
		period_ms = (int)(watchdog_us / 2000);
	status_line(d, status, sizeof(status));
	service_notify_ready(status);
	log_info("ready: %s%s%s%s%s", d->sockets.unix_fd >= 0 ? "unix socket " : "",
		 d->sockets.unix_path, d->sockets.unix_fd >= 0 && d->sockets.tcp_fd >= 0 ? ", " : "",
		 d->sockets.tcp_fd >= 0 ? "tcp " : "", d->sockets.tcp_fd >= 0 ? d->conf.listen_tcp : "");
	for (;;) {
		struct pollfd p = { .fd = d->signal_fd, .events = POLLIN };
		struct signalfd_siginfo si;

		if (poll(&p, 1, period_ms) > 0 && read(d->signal_fd, &si, sizeof(si)) == sizeof(si)) {
			if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
				log_info("signal %u: stopping", si.ssi_signo);
				return;
			}
			log_info("signal %u ignored", si.ssi_signo);
		}
		service_notify_watchdog();
		housekeeping(d);
		status_line(d, status, sizeof(status));
		service_notify_status(status);
	}
}

static void stop_daemon(struct daemon *d)
{
	service_notify_stopping();
	api_quiesce(d->api);
	worker_free(d->worker);   /* stops the jobs: the running one within a chunk */
	api_stop(d->api);         /* HTTP threads end; none touches jobs after this */
	jobs_free(d->jobs);
	store_close(d->store);
	tokens_free(d->tokens);
	service_close_sockets(&d->sockets);
	if (d->signal_fd >= 0)
		close(d->signal_fd);
}

int serve_main(int argc, char **argv)
{
	struct daemon d = { .signal_fd = -1, .sockets = { .unix_fd = -1, .tcp_fd = -1 } };
	struct errbuf err = { 0 };
	bool print_only = false;
	int code = parse_serve_args(argc, argv, &d.conf, &print_only, &err);

	if (code >= 0)
		return code;
	if (print_only) {
		conf_print(&d.conf, stdout);
		return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
	}
	apply_log_level(d.conf.log_level);
	if (start_daemon(&d, &err) < 0) {
		fprintf(stderr, "tractd: error: %s%s%s\n", err.field, err.field[0] ? ": " : "",
			err.message);
		stop_daemon(&d);
		return 1;
	}
	run_until_signal(&d);
	stop_daemon(&d);
	log_info("stopped");
	return 0;
}
