/* SPDX-License-Identifier: MIT */
/* Unit tests for conf.c: every type, the file format, printing, etc/tractd.conf. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/conf.h"

#define ETC_FILE "etc/tractd.conf"
#define MAX_KEYS 64

static const char *const env_vars[] = {
	"RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR", "STATE_DIRECTORY", "XDG_STATE_HOME",
	"CACHE_DIRECTORY", "XDG_CACHE_HOME", "HOME",
};

static char tmpdir[64];

static void clear_env(void)
{
	for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++)
		assert_int_equal(unsetenv(env_vars[i]), 0);
}

static int setup_group(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_conf.XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	clear_env();
	return 0;
}

static int teardown_group(void **state)
{
	char path[128];

	(void)state;
	snprintf(path, sizeof(path), "%s/tractd.conf", tmpdir);
	unlink(path);
	return rmdir(tmpdir);
}

/* conf_print's output, malloc'd. */
static char *print_conf(const struct conf *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);

	assert_non_null(fp);
	conf_print(c, fp);
	assert_int_equal(fclose(fp), 0);
	return buf;
}

/* The value conf_print writes for key, in value[len]. */
static void printed_value(const struct conf *c, const char *key, char *value, size_t len)
{
	char *text = print_conf(c), *line, *end;
	char needle[64];

	snprintf(needle, sizeof(needle), "\n%s = ", key);
	line = strstr(text, needle);
	assert_non_null(line);
	line += strlen(needle);
	end = strchr(line, '\n');
	assert_non_null(end);
	snprintf(value, len, "%.*s", (int)(end - line), line);
	free(text);
}

/* The keys of `key = value` lines in text, in order; returns their number. */
static size_t keys_of(const char *text, char keys[][64], size_t max)
{
	size_t n = 0;

	for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
		size_t klen = strspn(line, "abcdefghijklmnopqrstuvwxyz_");

		/* "key =" alone is an empty value (data_roots's default). */
		if (klen && !strncmp(line + klen, " =", 2) &&
		    (line[klen + 2] == ' ' || line[klen + 2] == '\n' || !line[klen + 2])) {
			assert_true(n < max);
			snprintf(keys[n++], 64, "%.*s", (int)klen, line);
		}
		if (!strchr(line, '\n'))
			break;
	}
	return n;
}

static const char *write_conf(const char *text, size_t len)
{
	static char path[128];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/tractd.conf", tmpdir);
	fp = fopen(path, "w");
	assert_non_null(fp);
	assert_int_equal(fwrite(text, 1, len, fp), len);
	assert_int_equal(fclose(fp), 0);
	return path;
}

static void test_defaults(void **state)
{
	struct conf c;

	(void)state;
	clear_env();
	conf_defaults(&c);
	assert_string_equal(c.listen_unix, "/run/tractd/tractd.sock");
	assert_string_equal(c.listen_tcp, "off");
	assert_string_equal(c.state_dir, "/var/lib/tractd");
	assert_string_equal(c.data_roots, "");   /* server paths off */
	assert_int_equal(c.max_request_bytes, 16ull << 20);
	assert_int_equal(c.max_upload_bytes, 16ull << 30);
	assert_int_equal(c.max_queued_jobs, 256);
	assert_int_equal(c.max_queued_jobs_per_user, 32);
	assert_int_equal(c.max_seeds_per_job, 10000000);
	assert_int_equal(c.max_connections_per_user, 32);
	assert_int_equal(c.max_connections_per_address, 64);
	assert_int_equal(c.header_timeout_seconds, 30);
	assert_int_equal(c.max_unauthenticated_connections, 128);
	assert_string_equal(c.tokens_file, "");   /* no tokens: TCP refuses to start */
	assert_string_equal(c.admin_group, "");
	assert_int_equal(c.spool_max_bytes, 50ull << 30);
	assert_int_equal(c.result_ttl_seconds, 7 * 86400);
	assert_string_equal(c.device, "");
	assert_int_equal(c.gpu_memory_budget, 0);
	assert_int_equal(c.volume_cache_bytes, 0);
	assert_string_equal(c.pipeline_cache, "");
	assert_string_equal(c.log_level, "info");
}

static void test_env_defaults(void **state)
{
	static const struct {
		const char *env[8][2];
		const char *listen_unix, *state_dir, *pipeline_cache;
	} cases[] = {
		{ { { "HOME", "/home/u" }, { "XDG_RUNTIME_DIR", "/run/user/1000" } },
		  "/run/user/1000/tractd.sock", "/home/u/.local/state/tractd",
		  "/home/u/.cache/tractd/pipelines.bin" },
		{ { { "HOME", "/home/u" }, { "XDG_STATE_HOME", "/xs" },
		    { "XDG_CACHE_HOME", "/xc" } },
		  "/run/tractd/tractd.sock", "/xs/tractd", "/xc/tractd/pipelines.bin" },
		/* systemd's directories win over everything. */
		{ { { "HOME", "/home/u" }, { "XDG_RUNTIME_DIR", "/run/user/1000" },
		    { "XDG_STATE_HOME", "/xs" }, { "XDG_CACHE_HOME", "/xc" },
		    { "RUNTIME_DIRECTORY", "/run/tractd" },
		    { "STATE_DIRECTORY", "/var/lib/tractd" },
		    { "CACHE_DIRECTORY", "/var/cache/tractd" } },
		  "/run/tractd/tractd.sock", "/var/lib/tractd", "/var/cache/tractd/pipelines.bin" },
		/* Relative and empty values are not places (XDG says so). */
		{ { { "HOME", "relative" }, { "XDG_RUNTIME_DIR", "" },
		    { "XDG_STATE_HOME", "rel" } },
		  "/run/tractd/tractd.sock", "/var/lib/tractd", "" },
		/* A socket path too long for sockaddr_un falls through. */
		{ { { "XDG_RUNTIME_DIR", "/run/user/1000/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
					 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
					 "aaaaaaaaaaaaaaaaaaaaaaaa" } },
		  "/run/tractd/tractd.sock", "/var/lib/tractd", "" },
	};
	struct conf c;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		clear_env();
		for (size_t j = 0; cases[i].env[j][0]; j++)
			assert_int_equal(setenv(cases[i].env[j][0], cases[i].env[j][1], 1), 0);
		conf_defaults(&c);
		assert_string_equal(c.listen_unix, cases[i].listen_unix);
		assert_string_equal(c.state_dir, cases[i].state_dir);
		assert_string_equal(c.pipeline_cache, cases[i].pipeline_cache);
	}
	clear_env();
}

/* Accepted values and how conf_print writes them back. */
static void test_good_values(void **state)
{
	static const struct {
		const char *key, *value, *printed;
	} cases[] = {
		{ "listen_unix", "/tmp/x.sock", "/tmp/x.sock" },
		{ "listen_unix", "", "" },
		{ "listen_unix", "  /spaced.sock \t", "/spaced.sock" },
		{ "listen_tcp", "off", "off" },
		{ "listen_tcp", "8470", "8470" },
		{ "listen_tcp", "1", "1" },
		{ "listen_tcp", "65535", "65535" },
		{ "listen_tcp", "0.0.0.0:8470", "0.0.0.0:8470" },
		{ "listen_tcp", "localhost:80", "localhost:80" },
		{ "listen_tcp", "[::1]:8470", "[::1]:8470" },
		{ "listen_tcp", "[::]:1", "[::]:1" },
		{ "state_dir", "/srv/tractd", "/srv/tractd" },
		{ "pipeline_cache", "", "" },
		{ "pipeline_cache", "/var/cache/t/p.bin", "/var/cache/t/p.bin" },
		{ "log_level", "debug", "debug" },
		{ "log_level", "warning", "warning" },
		{ "log_level", "error", "error" },
		{ "data_roots", "", "" },
		{ "data_roots", "/srv/mri", "/srv/mri" },
		{ "data_roots", "/srv/mri:/data/shared", "/srv/mri:/data/shared" },
		{ "data_roots", "/", "/" },
		{ "max_request_bytes", "1024", "1K" },
		{ "max_request_bytes", "1536", "1536" },
		{ "max_request_bytes", "64M", "64M" },
		{ "max_request_bytes", "65536k", "64M" },
		{ "max_upload_bytes", "1M", "1M" },
		{ "max_upload_bytes", "2048G", "2T" },
		{ "max_upload_bytes", "16T", "16T" },
		{ "spool_max_bytes", "18446744073709551615", "18446744073709551615" },
		{ "spool_max_bytes", "16777215T", "16777215T" },
		{ "gpu_memory_budget", "0", "0" },
		{ "gpu_memory_budget", "3g", "3G" },
		{ "volume_cache_bytes", "1048577", "1048577" },
		{ "max_queued_jobs", "1", "1" },
		{ "max_queued_jobs", "1000000", "1000000" },
		{ "max_queued_jobs", "007", "7" },
		{ "max_queued_jobs_per_user", "1", "1" },
		{ "max_queued_jobs_per_user", "1000000", "1000000" },
		{ "max_seeds_per_job", "1", "1" },
		{ "max_seeds_per_job", "100000000", "100000000" },
		{ "max_connections_per_user", "1", "1" },
		{ "max_connections_per_user", "256", "256" },
		{ "max_connections_per_address", "512", "512" },
		{ "header_timeout_seconds", "1", "1" },
		{ "header_timeout_seconds", "1h", "1h" },
		{ "max_unauthenticated_connections", "384", "384" },
		{ "tokens_file", "", "" },
		{ "tokens_file", "/etc/tractd/tokens", "/etc/tractd/tokens" },
		{ "admin_group", "", "" },
		{ "admin_group", "tractd-admin", "tractd-admin" },
		{ "admin_group", "lab_gpu.2", "lab_gpu.2" },
		{ "socket_mode", "0666", "0666" },
		{ "socket_mode", "640", "640" },
		{ "result_ttl_seconds", "60", "1m" },
		{ "result_ttl_seconds", "90", "90" },
		{ "result_ttl_seconds", "90s", "90" },
		{ "result_ttl_seconds", "120m", "2h" },
		{ "result_ttl_seconds", "36h", "36h" },
		{ "result_ttl_seconds", "48h", "2d" },
		{ "result_ttl_seconds", "3650d", "3650d" },
		{ "device", "-1", "-1" },
		{ "device", "0", "0" },
		{ "device", "0,1", "0,1" },
		{ "device", "0,0", "0,0" },
		{ "device", "e22b2a88-daa7-7d6b-504d-9210f532432c,1",
		  "e22b2a88-daa7-7d6b-504d-9210f532432c,1" },
	};
	char value[1100];
	struct conf c;

	(void)state;
	conf_defaults(&c);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct errbuf err = { 0 };

		if (conf_set(&c, cases[i].key, cases[i].value, &err) != 0)
			fail_msg("%s = '%s' refused: %s", cases[i].key, cases[i].value,
				 err.message);
		printed_value(&c, cases[i].key, value, sizeof(value));
		if (strcmp(value, cases[i].printed))
			fail_msg("%s = '%s' printed as '%s', expected '%s'", cases[i].key,
				 cases[i].value, value, cases[i].printed);
	}
	assert_int_equal(conf_set(&c, "spool_max_bytes", "18446744073709551615", NULL), 0);
	assert_int_equal(c.spool_max_bytes, UINT64_MAX);
	assert_int_equal(conf_set(&c, "device", "-1", NULL), 0);
	assert_string_equal(c.device, "-1");
	assert_int_equal(conf_set(&c, "result_ttl_seconds", "2h", NULL), 0);
	assert_int_equal(c.result_ttl_seconds, 7200);
	assert_int_equal(conf_set(&c, "max_upload_bytes", "3T", NULL), 0);
	assert_int_equal(c.max_upload_bytes, 3ull << 40);
}

/* Refused values: the error names the key and says why; nothing changes. */
static void test_bad_values(void **state)
{
	static const struct {
		const char *key, *value, *reason;
	} cases[] = {
		{ "listen_unix", "relative.sock", "must be an absolute path, or empty" },
		{ "listen_unix",
		  "/run/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock", "107 bytes" },
		{ "listen_unix", "/a\nb", "control characters" },
		{ "listen_tcp", "", "must be off, PORT, HOST:PORT" },
		{ "listen_tcp", "0", "PORT in 1..65535" },
		{ "listen_tcp", "65536", "PORT in 1..65535" },
		{ "listen_tcp", "123456", "PORT in 1..65535" },
		{ "listen_tcp", "localhost", "must be off" },
		{ "listen_tcp", "host:", "must be off" },
		{ "listen_tcp", ":80", "must be off" },
		{ "listen_tcp", "host:0", "must be off" },
		{ "listen_tcp", "host:http", "must be off" },
		{ "listen_tcp", "::1:80", "must be off" },
		{ "listen_tcp", "[::1]", "must be off" },
		{ "listen_tcp", "[]:80", "must be off" },
		{ "listen_tcp", "[127.0.0.1]:80", "must be off" },
		{ "listen_tcp", "[::1]80", "must be off" },
		{ "listen_tcp", "a b:80", "must be off" },
		{ "listen_tcp", "OFF", "must be off" },
		{ "state_dir", "", "absolute path" },
		{ "state_dir", "var/lib", "absolute path" },
		{ "pipeline_cache", "cache.bin", "absolute path" },
		{ "log_level", "verbose", "error, warning, info or debug" },
		{ "log_level", "", "error, warning, info or debug" },
		{ "log_level", "INFO", "error, warning, info or debug" },
		{ "data_roots", "srv/mri", "absolute directories" },
		{ "data_roots", "/srv/mri:data", "absolute directories" },
		{ "data_roots", "/srv/mri:", "no empty entry" },
		{ "data_roots", ":/srv/mri", "no empty entry" },
		{ "data_roots", "/a::/b", "no empty entry" },
		{ "data_roots", ":", "no empty entry" },
		{ "max_request_bytes", "", "must be a size" },
		{ "max_request_bytes", "-1", "must be a size" },
		{ "max_request_bytes", "+1", "must be a size" },
		{ "max_request_bytes", "1.5M", "must be a size" },
		{ "max_request_bytes", "1MB", "must be a size" },
		{ "max_request_bytes", "1 M", "must be a size" },
		{ "max_request_bytes", "1X", "must be a size" },
		{ "max_request_bytes", "0x10", "must be a size" },
		{ "max_request_bytes", "1023", "must be between 1K and 64M, got '1023'" },
		{ "max_request_bytes", "65M", "must be between 1K and 64M" },
		{ "max_upload_bytes", "17T", "must be between 1M and 16T" },
		{ "spool_max_bytes", "1K", "must be at least 1M, got '1K'" },
		{ "spool_max_bytes", "18446744073709551616", "must be at least 1M" },
		{ "spool_max_bytes", "16777216T", "must be at least 1M" },
		{ "max_queued_jobs", "0", "must be between 1 and 1000000" },
		{ "max_queued_jobs", "1000001", "must be between 1 and 1000000" },
		{ "max_queued_jobs", "1K", "must be a whole number" },
		{ "max_queued_jobs", "-3", "must be a whole number" },
		{ "max_queued_jobs_per_user", "0", "must be between 1 and 1000000" },
		{ "max_queued_jobs_per_user", "1000001", "must be between 1 and 1000000" },
		{ "max_seeds_per_job", "0", "must be between 1 and 100000000" },
		{ "max_seeds_per_job", "100000001", "must be between 1 and 100000000" },
		{ "max_connections_per_user", "0", "must be between 1 and 256" },
		{ "max_connections_per_user", "257", "must be between 1 and 256" },
		{ "max_connections_per_address", "513", "must be between 1 and 512" },
		{ "header_timeout_seconds", "0", "must be between" },
		{ "max_unauthenticated_connections", "385", "must be between 1 and 384" },
		{ "max_unauthenticated_connections", "0", "must be between" },
		{ "header_timeout_seconds", "2h", "must be between" },
		{ "tokens_file", "tokens", "must be an absolute path, or empty" },
		{ "admin_group", "-wheel", "must be a group name" },
		{ "socket_group", "a b", "must be a group name" },
		{ "socket_mode", "660x", "octal mode" },
		{ "socket_mode", "0999", "octal mode" },
		{ "socket_mode", "1777", "octal mode" },
		{ "socket_mode", "66", "octal mode" },
		{ "admin_group", "a b", "must be a group name" },
		{ "admin_group", "a/b", "must be a group name" },
		{ "result_ttl_seconds", "59", "must be between 1m and 3650d" },
		{ "result_ttl_seconds", "3651d", "must be between 1m and 3650d" },
		{ "result_ttl_seconds", "1w", "must be a duration" },
		{ "result_ttl_seconds", "1h30m", "must be a duration" },
		{ "result_ttl_seconds", "99999999999999999999", "must be between" },
		{ "device", "-2", "must be device indices or UUIDs" },
		{ "device", "0,", "must be device indices or UUIDs" },
		{ "device", ",1", "must be device indices or UUIDs" },
		{ "device", "gpu0", "must be device indices or UUIDs" },
		{ "device", "e22b2a88-daa7-7d6b-504d-9210f53243", "must be device indices or UUIDs" },
		{ "device", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "at most 16" },
		{ "device", "1e3", "must be device indices or UUIDs" },
		{ "device", "best", "must be device indices or UUIDs" },
	};
	struct conf c, before;

	(void)state;
	conf_defaults(&c);
	before = c;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct errbuf err = { 0 };
		int rc = conf_set(&c, cases[i].key, cases[i].value, &err);

		if (rc != -EINVAL || strcmp(err.field, cases[i].key) ||
		    !strstr(err.message, cases[i].reason))
			fail_msg("%s = '%s': rc %d, field '%s', message '%s'", cases[i].key,
				 cases[i].value, rc, err.field, err.message);
		assert_memory_equal(&c, &before, sizeof(c));
	}
}

static void test_unknown_key(void **state)
{
	struct errbuf err;
	struct conf c;

	(void)state;
	conf_defaults(&c);
	assert_int_equal(conf_set(&c, "listen", "8470", &err), -EINVAL);
	assert_string_equal(err.field, "listen");
	assert_string_equal(err.message, "unknown key");
	assert_int_equal(conf_set(&c, "", "1", NULL), -EINVAL);
}

static void test_file_format(void **state)
{
	static const char text[] =
		"# a comment\n"
		"\n"
		"   # an indented comment = with an equals sign\n"
		"listen_tcp=8470\n"
		"\tmax_queued_jobs\t=\t12\t\n"
		"log_level = debug\r\n"
		"   state_dir   =   /srv/state   \n"
		"max_queued_jobs = 13\n"      /* the last of a duplicate wins */
		"pipeline_cache =\n"
		"listen_unix = /run/a=b.sock\n"   /* '=' after the first is the value's */
		"data_roots = /srv/a:/srv/b";     /* no newline at the end */
	struct conf c;

	(void)state;
	conf_defaults(&c);
	assert_int_equal(conf_load_file(&c, write_conf(text, sizeof(text) - 1), NULL), 0);
	assert_string_equal(c.listen_tcp, "8470");
	assert_int_equal(c.max_queued_jobs, 13);
	assert_string_equal(c.log_level, "debug");
	assert_string_equal(c.state_dir, "/srv/state");
	assert_string_equal(c.pipeline_cache, "");
	assert_string_equal(c.listen_unix, "/run/a=b.sock");
	assert_string_equal(c.data_roots, "/srv/a:/srv/b");
	assert_int_equal(c.max_request_bytes, 16ull << 20);   /* untouched */
}

/* A literal and its length, NUL bytes included. */
#define TEXT(s) s, sizeof(s) - 1

static void test_file_errors(void **state)
{
	static const struct {
		const char *text;
		size_t len;
		const char *message;    /* after "PATH" */
		const char *field;
	} cases[] = {
		{ TEXT("log_level = debug\nnonsense\n"),
		  ":2: expected 'key = value', got 'nonsense'", "" },
		{ TEXT("bogus = 1\n"), ":1: bogus: unknown key", "bogus" },
		{ TEXT("# c\n\nmax_queued_jobs = 0\n"),
		  ":3: max_queued_jobs: must be between 1 and 1000000, got '0'",
		  "max_queued_jobs" },
		{ TEXT("log_level = debug\n = 5\n"), ":2: expected a key before '='", "" },
		{ TEXT("log_level = debug\nlisten_tcp = 8470 # comment\n"),
		  ":2: listen_tcp: must be off, PORT, HOST:PORT or [IPV6]:PORT, with PORT in "
		  "1..65535, got '8470 # comment'", "listen_tcp" },
		{ TEXT("log_level = debug\nlog_\0level = info\n"), ":2: contains a NUL byte", "" },
	};
	struct conf c, before;

	(void)state;
	conf_defaults(&c);
	before = c;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct errbuf err = { 0 };
		const char *path = write_conf(cases[i].text, cases[i].len);
		char expect[600];

		snprintf(expect, sizeof(expect), "%s%s", path, cases[i].message);
		assert_int_equal(conf_load_file(&c, path, &err), -EINVAL);
		assert_string_equal(err.message, expect);
		assert_string_equal(err.field, cases[i].field);
		/* An error anywhere leaves the whole file unapplied. */
		assert_memory_equal(&c, &before, sizeof(c));
	}
}

static void test_file_missing(void **state)
{
	struct errbuf err;
	struct conf c;
	char path[128];

	(void)state;
	conf_defaults(&c);
	snprintf(path, sizeof(path), "%s/absent.conf", tmpdir);
	assert_int_equal(conf_load_file(&c, path, &err), -ENOENT);
	assert_non_null(strstr(err.message, path));
}

/* Every key set away from its default survives print -> parse unchanged. */
static void test_print_reparses(void **state)
{
	static const char *const set[][2] = {
		{ "listen_unix", "/tmp/t.sock" }, { "listen_tcp", "[::1]:9000" },
		{ "socket_group", "lab" }, { "socket_mode", "0666" },
		{ "state_dir", "/srv/st" }, { "data_roots", "/srv/a:/b" },
		{ "max_request_bytes", "1025" }, { "max_upload_bytes", "5T" },
		{ "max_queued_jobs", "9" }, { "spool_max_bytes", "18446744073709551615" },
		{ "max_queued_jobs_per_user", "4" }, { "max_seeds_per_job", "12345" },
		{ "tokens_file", "/etc/tractd/tokens" }, { "admin_group", "gpu-admins" },
		{ "result_ttl_seconds", "3601" }, { "device", "2" },
		{ "gpu_memory_budget", "4G" }, { "volume_cache_bytes", "123456789" },
		{ "gpu_memory_limit", "16G" },
		{ "max_dispatch_steps", "100000" }, { "gpu_spare_idle_seconds", "9" },
		{ "max_job_host_memory", "2G" }, { "max_volume_bytes_per_user", "3G" },
		{ "volume_ttl_seconds", "2d" }, { "max_queued_bytes_per_user", "5M" },
		{ "fit_threads", "3" }, { "max_connections_per_user", "5" },
		{ "max_connections_per_address", "6" }, { "header_timeout_seconds", "7" },
		{ "max_unauthenticated_connections", "8" },
		{ "pipeline_cache", "" }, { "log_level", "warning" },
	};
	struct conf c, back;
	char *text, *again, names[MAX_KEYS][64];

	(void)state;
	conf_defaults(&c);
	for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
		assert_int_equal(conf_set(&c, set[i][0], set[i][1], NULL), 0);
	text = print_conf(&c);
	/* The list above covers every key the table has. */
	assert_int_equal(keys_of(text, names, MAX_KEYS), sizeof(set) / sizeof(set[0]));

	clear_env();
	assert_int_equal(setenv("HOME", "/elsewhere", 1), 0);
	conf_defaults(&back);
	clear_env();
	assert_int_equal(conf_load_file(&back, write_conf(text, strlen(text)), NULL), 0);
	again = print_conf(&back);
	assert_string_equal(again, text);
	assert_memory_equal(&back, &c, sizeof(c));
	free(again);
	free(text);
}

/* etc/tractd.conf with "# key = value" lines uncommented. */
static char *uncomment_etc(void)
{
	FILE *in = fopen(ETC_FILE, "r"), *out;
	char *buf = NULL, *line = NULL;
	size_t len = 0, cap = 0;

	assert_non_null(in);
	out = open_memstream(&buf, &len);
	assert_non_null(out);
	while (getline(&line, &cap, in) >= 0) {
		bool setting = false;

		if (!strncmp(line, "# ", 2)) {
			size_t klen = strspn(line + 2, "abcdefghijklmnopqrstuvwxyz_");

			setting = klen && line[2 + klen + strspn(line + 2 + klen, " ")] == '=';
		}
		fputs(setting ? line + 2 : line, out);
	}
	free(line);
	assert_false(ferror(in));
	fclose(in);
	assert_int_equal(fclose(out), 0);
	return buf;
}

/* The shipped file lists exactly the table's keys, each once, commented out,
 * with the table's defaults. */
static void test_etc_file(void **state)
{
	static const char *const env_keys[] = { "listen_unix", "state_dir", "pipeline_cache" };
	char etc_keys[MAX_KEYS][64], table_keys[MAX_KEYS][64];
	char *text = uncomment_etc(), *defaults_text;
	size_t n_etc = keys_of(text, etc_keys, MAX_KEYS), n_table;
	struct conf defaults, c;
	char a[1100], b[1100];

	(void)state;
	clear_env();
	conf_defaults(&defaults);
	defaults_text = print_conf(&defaults);
	n_table = keys_of(defaults_text, table_keys, MAX_KEYS);
	assert_int_equal(n_etc, n_table);
	for (size_t i = 0; i < n_table; i++) {
		int seen = 0;

		for (size_t j = 0; j < n_etc; j++)
			seen += !strcmp(table_keys[i], etc_keys[j]);
		if (seen != 1)
			fail_msg("%s appears %d times in " ETC_FILE, table_keys[i], seen);
	}

	/* As shipped, everything is commented out. */
	c = defaults;
	assert_int_equal(conf_load_file(&c, ETC_FILE, NULL), 0);
	assert_memory_equal(&c, &defaults, sizeof(c));

	/* Uncommented, it parses, and the values are the defaults (those from the
	 * environment are described in words instead). */
	assert_int_equal(conf_load_file(&c, write_conf(text, strlen(text)), NULL), 0);
	for (size_t i = 0; i < n_table; i++) {
		bool from_env = false;

		for (size_t j = 0; j < sizeof(env_keys) / sizeof(env_keys[0]); j++)
			from_env |= !strcmp(table_keys[i], env_keys[j]);
		printed_value(&c, table_keys[i], a, sizeof(a));
		printed_value(&defaults, table_keys[i], b, sizeof(b));
		if (!from_env && strcmp(a, b))
			fail_msg(ETC_FILE " gives %s = %s, the default is %s", table_keys[i], a, b);
	}
	free(defaults_text);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_env_defaults),
		cmocka_unit_test(test_good_values),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_unknown_key),
		cmocka_unit_test(test_file_format),
		cmocka_unit_test(test_file_errors),
		cmocka_unit_test(test_file_missing),
		cmocka_unit_test(test_print_reparses),
		cmocka_unit_test(test_etc_file),
	};

	return cmocka_run_group_tests(tests, setup_group, teardown_group);
}
