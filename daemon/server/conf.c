/* SPDX-License-Identifier: MIT */
/* conf: the daemon's configuration keys, driven by one table (see conf.h). */
#include "server/conf.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "engine/gpu.h"
#include "job/jobspec.h"

enum conf_type { CONF_STRING, CONF_BOOL, CONF_SIZE, CONF_COUNT, CONF_DURATION, CONF_INT };

struct conf_key {
	const char *name;
	enum conf_type type;
	size_t offset;
	size_t size;            /* of the field: a string's capacity */
	int64_t min;            /* signed for device's -1 */
	uint64_t max;           /* unsigned for sizes up to 2^64 - 1 */
	const char *def;        /* default as written in the file; NULL: from the environment */
	const char *(*check)(const char *value);   /* strings: why value is bad, or NULL */
	const char *help;
};

/* A suffix and what it multiplies by; the first entry is 1. */
struct unit {
	char suffix;
	uint64_t factor;
};

static const struct unit size_units[] = {
	{ '\0', 1 }, { 'K', 1ull << 10 }, { 'M', 1ull << 20 }, { 'G', 1ull << 30 },
	{ 'T', 1ull << 40 }, { 0, 0 },
};
static const struct unit duration_units[] = {
	{ '\0', 1 }, { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 }, { 0, 0 },
};
static const struct unit plain_units[] = { { '\0', 1 }, { 0, 0 } };

/* ---- string checks ---- */

/* A socket path must fit sockaddr_un; one byte is left for the NUL. */
#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
_Static_assert(SUN_PATH_MAX == 107, "the message below says 107");

static const char *check_socket_path(const char *v)
{
	if (*v && *v != '/')
		return "must be an absolute path, or empty for none";
	if (strlen(v) > SUN_PATH_MAX)
		return "is longer than the 107 bytes a Unix socket path can have";
	return NULL;
}

static const char *check_path(const char *v)
{
	return *v == '/' ? NULL : "must be an absolute path";
}

static const char *check_path_or_empty(const char *v)
{
	return !*v || *v == '/' ? NULL : "must be an absolute path, or empty for none";
}

/* Each ':'-separated entry is checked here, once, so that api.c can trust
 * that every root it resolves is absolute; "" means server paths are off. */
static const char *check_path_list(const char *v)
{
	if (!*v)
		return NULL;
	for (;;) {
		size_t n = strcspn(v, ":");

		if (n == 0)
			return "must be ':'-separated absolute directories with no empty entry, "
			       "or empty for none";
		if (*v != '/')
			return "must be ':'-separated absolute directories, or empty for none";
		if (!v[n])
			return NULL;
		v += n + 1;
	}
}

static const char *check_devices(const char *v)
{
	struct gpu_device_choice choices[GPU_MAX_DEVICES];
	struct errbuf err = { 0 };
	size_t n;

	if (gpu_parse_devices(v, choices, &n, &err) < 0)
		return "must be device indices or UUIDs (`tractd devices`), comma-separated, "
		       "at most 16, or empty for the best one";
	return NULL;
}

static bool is_port(const char *s)
{
	size_t n = strspn(s, "0123456789");

	return n > 0 && n <= 5 && !s[n] && atoi(s) >= 1 && atoi(s) <= 65535;
}

/* HOST has no ':' unless bracketed, so "::1:80" cannot be misread. */
static bool is_host_port(const char *v)
{
	const char *colon;

	if (*v == '[') {
		const char *close = strchr(v, ']');

		return close && close > v + 1 && close[1] == ':' &&
		       memchr(v + 1, ':', (size_t)(close - v - 1)) && is_port(close + 2);
	}
	colon = strchr(v, ':');
	return colon && colon > v && is_port(colon + 1) &&
	       strcspn(v, " \t") == strlen(v);
}

static const char *check_listen_tcp(const char *v)
{
	if (!strcmp(v, "off") || is_port(v) || is_host_port(v))
		return NULL;
	return "must be off, PORT, HOST:PORT or [IPV6]:PORT, with PORT in 1..65535";
}

/* What getgrnam can name: POSIX portable user/group names (letters,
 * digits, '.', '_', '-', not starting with '-'), plus '$' for Samba
 * machine accounts; whether the group exists is checked at start. */
static const char *check_group_name(const char *v)
{
	if (!*v)
		return NULL;
	if (*v == '-' || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			       "0123456789._-$") != strlen(v))
		return "must be a group name (letters, digits, '.', '_', '-'), or empty for none";
	return NULL;
}

/* An octal permission mode of at most 0777 (no setuid, setgid or sticky
 * bits: they mean nothing on a socket). */
static const char *check_mode(const char *v)
{
	size_t n = strspn(v, "01234567");

	if (n < 3 || n > 4 || v[n] || strtoul(v, NULL, 8) > 0777)
		return "must be an octal mode of 3 or 4 digits, at most 0777 (e.g. 0660)";
	return NULL;
}

static const char *check_log_level(const char *v)
{
	static const char *const levels[] = { "error", "warning", "info", "debug" };

	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		if (!strcmp(v, levels[i]))
			return NULL;
	return "must be error, warning, info or debug";
}

/* ---- the table ---- */

/* The field's offset, or a compile error when it is not of type T: keeps the
 * table's types and struct conf's in step. Arrays are seen as pointers. */
#define OFFSET_OF(field, T)                                                         \
	(offsetof(struct conf, field) +                                             \
	 0 * sizeof(char[_Generic(((struct conf *)0)->field, T: 1, default: -1)]))
#define SIZE_OF(field) sizeof(((struct conf *)0)->field)

#define STRING(f, chk, d, h) { #f, CONF_STRING, OFFSET_OF(f, char *), SIZE_OF(f), 0, 0, d, chk, h }
#define BOOL(f, d, h) { #f, CONF_BOOL, OFFSET_OF(f, bool), SIZE_OF(f), 0, 1, d, NULL, h }
#define U64(f, t, lo, hi, d, h) { #f, t, OFFSET_OF(f, uint64_t), SIZE_OF(f), lo, hi, d, NULL, h }
#define INT(f, lo, hi, d, h) { #f, CONF_INT, OFFSET_OF(f, int), SIZE_OF(f), lo, hi, d, NULL, h }

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define TiB (1ull << 40)
#define DAY 86400ull

static const struct conf_key keys[] = {
	STRING(listen_unix, check_socket_path, NULL,
	       "Unix socket to listen on; empty for none"),
	STRING(socket_group, check_group_name, "",
	       "group of the Unix socket (its members may connect with socket_mode 0660); "
	       "empty for the daemon's own group. Not used for a socket systemd passes "
	       "(SocketGroup= there)"),
	STRING(socket_mode, check_mode, "0660",
	       "permissions of the Unix socket, octal: 0660 lets the socket's owner and "
	       "group connect, 0666 every local user. Not used for a socket systemd passes "
	       "(SocketMode= there)"),
	STRING(listen_tcp, check_listen_tcp, "off",
	       "TCP address: off, PORT (on 127.0.0.1), HOST:PORT or [IPV6]:PORT; "
	       "needs tokens_file"),
	STRING(tokens_file, check_path_or_empty, "",
	       "bearer tokens of TCP clients, `NAME TOKEN [admin]` lines, mode 0600; "
	       "empty for none (TCP then refuses to start)"),
	STRING(admin_group, check_group_name, "",
	       "Unix group whose members (and root) see and cancel every user's jobs; "
	       "empty for none"),
	STRING(state_dir, check_path, NULL,
	       "where uploaded volumes (volumes/) and results (spool/) are kept"),
	STRING(data_roots, check_path_list, "",
	       "':'-separated absolute directories whose files jobs may name instead of "
	       "uploaded volumes; empty for none (uploads only)"),
	U64(max_request_bytes, CONF_SIZE, KiB, JOBSPEC_MAX_BYTES, "16M",
	    "largest JSON request body"),
	U64(max_upload_bytes, CONF_SIZE, MiB, 16 * TiB, "16G",
	    "largest volume upload"),
	U64(max_volume_bytes_per_user, CONF_SIZE, MiB, 1024 * TiB, "64G",
	    "disk space one user's uploaded volumes may take; an upload past it is refused "
	    "with 507 quota_exceeded"),
	U64(volume_ttl_seconds, CONF_DURATION, 60, 3650 * DAY, "30d",
	    "an uploaded volume is forgotten this long after its owner last uploaded it; "
	    "its file goes with its last owner"),
	U64(max_queued_jobs, CONF_COUNT, 1, 1000000, "256",
	    "jobs waiting to run at most; more are refused with 429"),
	U64(max_queued_jobs_per_user, CONF_COUNT, 1, 1000000, "32",
	    "jobs of one user (or token name) waiting to run at most; more are refused with 429"),
	U64(max_queued_bytes_per_user, CONF_SIZE, KiB, 1024 * TiB, "256M",
	    "bytes of job documents one user's queued jobs may hold in memory; more are "
	    "refused with 429"),
	U64(max_seeds_per_job, CONF_COUNT, 1, JOBSPEC_MAX_SEEDS, "10000000",
	    "seeds one job may track (seeds.count, explicit points, or count times the ROI's "
	    "voxels with per_voxel)"),
	U64(max_job_host_memory, CONF_SIZE, 0, 1024 * TiB, "0",
	    "host memory one job's input images may take, from their headers (voxels x "
	    "(stored size + 4)); more are refused with 422 limit_exceeded; 0 for half the "
	    "memory of the host or of the service's cgroup, whichever is less; also the host "
	    "memory the warm volumes' copies may hold between jobs"),
	U64(max_connections_per_user, CONF_COUNT, 1, 256, "32",
	    "connections one user (uid; root has no limit) may hold open on the Unix socket; "
	    "more are closed at once"),
	U64(max_connections_per_address, CONF_COUNT, 1, 512, "64",
	    "connections one client address may hold open on TCP (loopback clients share "
	    "one); more are closed at once"),
	U64(header_timeout_seconds, CONF_DURATION, 1, 3600, "30s",
	    "a connection silent this long before its request's headers are complete, or "
	    "between keep-alive requests, is closed; on TCP, a connection without an "
	    "authenticated request this long after it opened is closed however it trickles"),
	U64(max_unauthenticated_connections, CONF_COUNT, 1, 384, "128",
	    "TCP connections of all addresses that have not yet sent a request with a valid "
	    "token; at the cap the oldest of them is closed to make room, so that token "
	    "holders always get in"),
	U64(spool_max_bytes, CONF_SIZE, MiB, UINT64_MAX, "50G",
	    "disk space for finished results; the oldest expire first"),
	U64(result_ttl_seconds, CONF_DURATION, 60, 3650 * DAY, "7d",
	    "finished results expire this long after the job ends"),
	STRING(device, check_devices, "",
	       "Vulkan devices as `tractd devices` lists them, by index or UUID, "
	       "comma-separated: a job's seeds are shared out over them; empty for the best one"),
	U64(gpu_memory_budget, CONF_SIZE, 0, 1024 * TiB, "0",
	    "GPU memory one job may use; 0 for half the device memory"),
	U64(gpu_memory_limit, CONF_SIZE, 0, 1024 * TiB, "0",
	    "GPU memory tractd may allocate on each device, as if the device had this much: "
	    "jobs' inputs, work buffers, warm volumes and transfer buffers together; the "
	    "defaults of gpu_memory_budget and volume_cache_bytes are taken from it instead "
	    "of the device's memory; 0 for no limit"),
	U64(max_dispatch_steps, CONF_COUNT, 0, UINT64_MAX, "0",
	    "streamline steps one GPU submit runs at most (bounds a submit's duration, and "
	    "how often a running job's progress moves); 0 for 4194304, then sized to a "
	    "quarter of a second at the measured rate"),
	U64(volume_cache_bytes, CONF_SIZE, 0, 1024 * TiB, "0",
	    "GPU memory for volumes kept warm between jobs; 0 for a quarter of the device"),
	U64(gpu_spare_idle_seconds, CONF_DURATION, 1, 3600, "30s",
	    "a job's GPU work buffers are kept for the next job of the same shape (up to an "
	    "eighth of the device memory) until the daemon has been idle this long, then "
	    "given back for others sharing the GPU"),
	INT(fit_threads, 0, 256, "0",
	    "CPU threads for model fitting (DTI, CSD); 0 for one per CPU"),
	STRING(pipeline_cache, check_path_or_empty, NULL,
	       "Vulkan pipeline cache file; empty for none"),
	STRING(log_level, check_log_level, "info",
	       "error, warning, info or debug"),
};

#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

/* Defaults taken from the environment: the first variable that is set to an
 * absolute path, with suffix appended, else fallback. */
struct env_default {
	const char *key;
	struct {
		const char *var;
		const char *suffix;
	} from[3];
	const char *fallback;
};

static const struct env_default env_defaults[] = {
	{ "listen_unix",
	  { { "RUNTIME_DIRECTORY", "/tractd.sock" }, { "XDG_RUNTIME_DIR", "/tractd.sock" } },
	  "/run/tractd/tractd.sock" },
	{ "state_dir",
	  { { "STATE_DIRECTORY", "" }, { "XDG_STATE_HOME", "/tractd" },
	    { "HOME", "/.local/state/tractd" } },
	  "/var/lib/tractd" },
	{ "pipeline_cache",
	  { { "CACHE_DIRECTORY", "/pipelines.bin" }, { "XDG_CACHE_HOME", "/tractd/pipelines.bin" },
	    { "HOME", "/.cache/tractd/pipelines.bin" } },
	  "" },
};

static const struct conf_key *find_key(const char *name)
{
	for (size_t i = 0; i < N_KEYS; i++)
		if (!strcmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

static void *field_of(struct conf *c, const struct conf_key *k)
{
	return (char *)c + k->offset;
}

static const void *cfield_of(const struct conf *c, const struct conf_key *k)
{
	return (const char *)c + k->offset;
}

/* ---- numbers ---- */

/* Digits and at most one suffix from units (any case). 0, -EINVAL when
 * malformed, -ERANGE past 2^64 - 1. */
static int parse_unsigned(const char *s, const struct unit *units, uint64_t *ret)
{
	uint64_t v = 0;
	const struct unit *u;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*s); s++) {
		unsigned d = (unsigned)(*s - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	for (u = units; u->factor; u++)
		if (toupper((unsigned char)*s) == toupper((unsigned char)u->suffix))
			break;
	if (!u->factor || (*s && s[1]))
		return -EINVAL;
	if (v > UINT64_MAX / u->factor)
		return -ERANGE;
	*ret = v * u->factor;
	return 0;
}

/* With the largest unit that divides v, so that the file reads "16G". */
static void format_unsigned(uint64_t v, const struct unit *units, char *buf, size_t len)
{
	const struct unit *best = units;

	for (const struct unit *u = units; u->factor; u++)
		if (v && v % u->factor == 0 && u->factor > best->factor)
			best = u;
	if (best->suffix)
		/* NOLINTNEXTLINE(clang-analyzer-core.DivideZero): unit tables start at factor 1 */
		snprintf(buf, len, "%llu%c", (unsigned long long)(v / best->factor), best->suffix);
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
}

static const struct unit *units_of(enum conf_type type)
{
	switch (type) {
	case CONF_SIZE: return size_units;
	case CONF_DURATION: return duration_units;
	default: return plain_units;
	}
}

static const char *syntax_of(enum conf_type type)
{
	switch (type) {
	case CONF_SIZE: return "a size in bytes, with an optional K, M, G or T suffix";
	case CONF_DURATION: return "a duration in seconds, with an optional s, m, h or d suffix";
	case CONF_INT: return "an integer";
	default: return "a whole number";
	}
}

static int range_error(const struct conf_key *k, const char *text, struct errbuf *err)
{
	const struct unit *units = units_of(k->type);
	char lo[32], hi[32];

	if (k->type == CONF_INT) {
		snprintf(lo, sizeof(lo), "%lld", (long long)k->min);
		snprintf(hi, sizeof(hi), "%llu", (unsigned long long)k->max);
	} else {
		format_unsigned((uint64_t)k->min, units, lo, sizeof(lo));
		format_unsigned(k->max, units, hi, sizeof(hi));
	}
	if (k->max == UINT64_MAX)
		return errbuf_set(err, -EINVAL, k->name, "must be at least %s, got '%s'", lo, text);
	return errbuf_set(err, -EINVAL, k->name, "must be between %s and %s, got '%s'", lo, hi,
			  text);
}

static int syntax_error(const struct conf_key *k, const char *text, struct errbuf *err)
{
	return errbuf_set(err, -EINVAL, k->name, "must be %s, got '%.200s'", syntax_of(k->type),
			  text);
}

static int parse_u64(const struct conf_key *k, const char *text, struct conf *c,
		     struct errbuf *err)
{
	uint64_t v;
	int rc = parse_unsigned(text, units_of(k->type), &v);

	if (rc == -EINVAL)
		return syntax_error(k, text, err);
	if (rc == -ERANGE || v < (uint64_t)k->min || v > k->max)
		return range_error(k, text, err);
	memcpy(field_of(c, k), &v, sizeof(v));
	return 0;
}

static int parse_int(const struct conf_key *k, const char *text, struct conf *c,
		     struct errbuf *err)
{
	bool negative = (*text == '-');
	uint64_t magnitude;
	int64_t v;
	int rc = parse_unsigned(text + negative, plain_units, &magnitude);
	int out;

	if (rc == -EINVAL)
		return syntax_error(k, text, err);
	if (rc == -ERANGE || magnitude > INT64_MAX)
		return range_error(k, text, err);
	v = negative ? -(int64_t)magnitude : (int64_t)magnitude;
	if (v < k->min || (v > 0 && (uint64_t)v > k->max))
		return range_error(k, text, err);
	out = (int)v;
	memcpy(field_of(c, k), &out, sizeof(out));
	return 0;
}

/* ---- booleans and strings ---- */

static const struct {
	const char *word;
	bool value;
} bool_words[] = {
	{ "true", true }, { "yes", true }, { "on", true }, { "1", true },
	{ "false", false }, { "no", false }, { "off", false }, { "0", false },
};

static int parse_bool(const struct conf_key *k, const char *text, struct conf *c,
		      struct errbuf *err)
{
	for (size_t i = 0; i < sizeof(bool_words) / sizeof(bool_words[0]); i++) {
		if (!strcasecmp(text, bool_words[i].word)) {
			memcpy(field_of(c, k), &bool_words[i].value, sizeof(bool));
			return 0;
		}
	}
	return errbuf_set(err, -EINVAL, k->name,
			  "must be true or false (also yes/no, on/off, 1/0), got '%.200s'", text);
}

static bool has_control_char(const char *s)
{
	for (; *s; s++)
		if (iscntrl((unsigned char)*s))
			return true;
	return false;
}

static int parse_string(const struct conf_key *k, const char *text, struct conf *c,
			struct errbuf *err)
{
	size_t len = strlen(text);
	const char *why;

	/* A control character could not be written back as one line. */
	if (has_control_char(text))
		return errbuf_set(err, -EINVAL, k->name, "must not contain control characters");
	if (len >= k->size)
		return errbuf_set(err, -EINVAL, k->name, "is longer than %zu bytes", k->size - 1);
	why = k->check(text);
	if (why)
		return errbuf_set(err, -EINVAL, k->name, "%s, got '%.200s'", why, text);
	/* Zero-filled, so that two confs with the same values compare equal. */
	memset(field_of(c, k), 0, k->size);
	memcpy(field_of(c, k), text, len);
	return 0;
}

/* ---- per-type operations ---- */

static void format_value(const struct conf_key *k, const struct conf *c, char *buf, size_t len)
{
	const void *p = cfield_of(c, k);
	uint64_t u;
	bool b;
	int i;

	switch (k->type) {
	case CONF_STRING:
		snprintf(buf, len, "%s", (const char *)p);
		break;
	case CONF_BOOL:
		memcpy(&b, p, sizeof(b));
		snprintf(buf, len, "%s", b ? "true" : "false");
		break;
	case CONF_INT:
		memcpy(&i, p, sizeof(i));
		snprintf(buf, len, "%d", i);
		break;
	default:
		memcpy(&u, p, sizeof(u));
		format_unsigned(u, units_of(k->type), buf, len);
		break;
	}
}

static int parse_value(const struct conf_key *k, const char *text, struct conf *c,
		       struct errbuf *err)
{
	switch (k->type) {
	case CONF_STRING: return parse_string(k, text, c, err);
	case CONF_BOOL: return parse_bool(k, text, c, err);
	case CONF_INT: return parse_int(k, text, c, err);
	default: return parse_u64(k, text, c, err);
	}
}

/* ---- the interface ---- */

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

/* Trims s in place and returns its first non-blank character. */
static char *trim(char *s)
{
	char *end = s + strlen(s);

	while (is_space(*s))
		s++;
	while (end > s && is_space(end[-1]))
		*--end = '\0';
	return s;
}

int conf_set(struct conf *c, const char *key, const char *value, struct errbuf *err)
{
	const struct conf_key *k = find_key(key);
	char *copy;
	int rc;

	if (!k)
		return errbuf_set(err, -EINVAL, key, "unknown key");
	/* Same spelling as in the file, where blanks around the value drop. */
	copy = strdup(value);
	if (!copy)
		return errbuf_set(err, -ENOMEM, key, "out of memory");
	rc = parse_value(k, trim(copy), c, err);
	free(copy);
	return rc;
}

static void set_env_default(struct conf *c, const struct env_default *d)
{
	char value[1024];
	int rc;

	for (size_t i = 0; i < sizeof(d->from) / sizeof(d->from[0]) && d->from[i].var; i++) {
		const char *dir = getenv(d->from[i].var);

		/* Unset, relative or too long: try the next place. */
		if (!dir || *dir != '/' ||
		    (size_t)snprintf(value, sizeof(value), "%s%s", dir, d->from[i].suffix) >=
			    sizeof(value))
			continue;
		if (conf_set(c, d->key, value, NULL) == 0)
			return;
	}
	rc = conf_set(c, d->key, d->fallback, NULL);
	assert(rc == 0);   /* the fallbacks are constants, tested valid */
	(void)rc;
}

void conf_defaults(struct conf *c)
{
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < N_KEYS; i++) {
		if (keys[i].def) {
			int rc = conf_set(c, keys[i].name, keys[i].def, NULL);

			assert(rc == 0);   /* the table's defaults are tested valid */
			(void)rc;
		}
	}
	for (size_t i = 0; i < sizeof(env_defaults) / sizeof(env_defaults[0]); i++)
		set_env_default(c, &env_defaults[i]);
}

/* One `key = value` line; "" and '#' lines are skipped by the caller. */
static int parse_line(struct conf *c, char *line, struct errbuf *err)
{
	char *eq = strchr(line, '=');
	char *key;

	if (!eq)
		return errbuf_set(err, -EINVAL, "", "expected 'key = value', got '%.200s'", line);
	*eq = '\0';
	key = trim(line);
	if (!*key)
		return errbuf_set(err, -EINVAL, "", "expected a key before '='");
	return conf_set(c, key, eq + 1, err);
}

/* Puts "FILE:LINE: KEY: " before the reason, the key staying in field. */
static int locate_error(struct errbuf *err, const char *path, unsigned line,
			const struct errbuf *inner, int rc)
{
	if (inner->field[0])
		return errbuf_set(err, rc, inner->field, "%s:%u: %s: %s", path, line, inner->field,
				  inner->message);
	return errbuf_set(err, rc, "", "%s:%u: %s", path, line, inner->message);
}

static int parse_stream(struct conf *c, FILE *fp, const char *path, struct errbuf *err)
{
	struct errbuf inner;
	char *buf = NULL;
	size_t cap = 0;
	ssize_t len;
	unsigned line = 0;
	int rc = 0;

	while (rc == 0 && (len = getline(&buf, &cap, fp)) >= 0) {
		char *s;

		line++;
		if (strlen(buf) != (size_t)len) {
			rc = errbuf_set(&inner, -EINVAL, "", "contains a NUL byte");
			break;
		}
		buf[strcspn(buf, "\n")] = '\0';
		s = trim(buf);
		if (*s && *s != '#')
			rc = parse_line(c, s, &inner);
	}
	free(buf);
	if (rc < 0)
		return locate_error(err, path, line, &inner, rc);
	if (ferror(fp))
		return errbuf_set(err, -EIO, "", "%s: read error", path);
	return 0;
}

int conf_load_file(struct conf *c, const char *path, struct errbuf *err)
{
	struct conf next = *c;
	FILE *fp = fopen(path, "re");
	int rc;

	if (!fp)
		return errbuf_set(err, -errno, "", "%s: %s", path, strerror(errno));
	/* Into a copy: a file with an error changes nothing. */
	rc = parse_stream(&next, fp, path, err);
	fclose(fp);
	if (rc == 0)
		*c = next;
	return rc;
}

void conf_print(const struct conf *c, FILE *out)
{
	char value[1024];

	fprintf(out, "# tractd configuration: `key = value` lines, # starts a comment line.\n");
	for (size_t i = 0; i < N_KEYS; i++) {
		format_value(&keys[i], c, value, sizeof(value));
		fprintf(out, "\n# %s\n%s = %s\n", keys[i].help, keys[i].name, value);
	}
}
