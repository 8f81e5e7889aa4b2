/* SPDX-License-Identifier: MIT */
/*
 * conf: the daemon's configuration, from one table of keys (type, default,
 * bounds, description) that the config file parser, the command-line
 * overrides and `tractd serve --print-config` all use, so every key is
 * validated once. File format: `key = value` lines, `#` comments, blank
 * lines; unknown keys and bad values are errors reported as
 * "FILE:LINE: KEY: REASON". Does not log.
 */
#ifndef TRACTD_CONF_H
#define TRACTD_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/errbuf.h"

struct conf {
	char listen_unix[256];      /* Unix socket path; "" = none */
	char socket_group[64];      /* the socket's group; "" = the daemon's own */
	char socket_mode[8];        /* the socket's permissions, octal (default "0660") */
	char listen_tcp[128];       /* "off", "PORT", "HOST:PORT" or "[V6]:PORT"; default "off" */
	char tokens_file[1024];     /* TCP bearer tokens (tokens.h); "" = none, TCP refused */
	char admin_group[64];       /* Unix group whose members see every job; "" = none */
	char state_dir[1024];       /* volumes/ and spool/ live here */
	char data_roots[1024];      /* ':'-separated absolute dirs jobs may read from; "" = none */
	uint64_t max_request_bytes; /* JSON bodies (default 16M) */
	uint64_t max_upload_bytes;  /* volume uploads (default 16G) */
	uint64_t max_volume_bytes_per_user; /* one user's uploaded volumes (default 64G) */
	uint64_t volume_ttl_seconds;/* uploads expire this long after their last upload (30d) */
	uint64_t max_queued_jobs;   /* default 256 */
	uint64_t max_queued_jobs_per_user; /* default 32 */
	uint64_t max_queued_bytes_per_user; /* job documents of one user's queued jobs (256M) */
	uint64_t max_seeds_per_job; /* default 10M */
	uint64_t max_job_host_memory; /* input images' declared host bytes per job,
				       * 0 = half the memory (host's or cgroup's) */
	uint64_t max_connections_per_user;    /* Unix socket, per uid but root (default 32) */
	uint64_t max_connections_per_address; /* TCP, per client address (default 64) */
	uint64_t header_timeout_seconds;      /* silence before a request's headers (default 30) */
	uint64_t max_unauthenticated_connections; /* TCP, all addresses (default 128) */
	uint64_t spool_max_bytes;   /* results kept on disk at most (default 50G) */
	uint64_t result_ttl_seconds;/* finished results expire after (default 7 days) */
	char device[1024];          /* Vulkan devices: indices or UUIDs, comma-separated;
				     * "" or "-1" = the best one (default) */
	uint64_t gpu_memory_budget; /* per job, 0 = half the device memory */
	uint64_t gpu_memory_limit;  /* all of tractd's buffers on a device, 0 = none */
	uint64_t max_dispatch_steps;/* tracking steps per GPU submit, 0 = the engine's default */
	uint64_t volume_cache_bytes;/* GPU memory for warm volumes, 0 = a quarter of the device */
	uint64_t gpu_spare_idle_seconds; /* idle this long, spare work buffers go (default 30) */
	int fit_threads;            /* model fitting threads, 0 = one per CPU */
	char pipeline_cache[1024];  /* Vulkan pipeline cache file; "" = none */
	char log_level[16];         /* error, warning, info (default), debug */
};

/* Defaults, with paths from the environment: listen_unix is
 * $RUNTIME_DIRECTORY/tractd.sock, else $XDG_RUNTIME_DIR/tractd.sock, else
 * /run/tractd/tractd.sock; state_dir is $STATE_DIRECTORY, else
 * $XDG_STATE_HOME/tractd, else $HOME/.local/state/tractd, else /var/lib/tractd;
 * pipeline_cache is $CACHE_DIRECTORY/pipelines.bin, else
 * $XDG_CACHE_HOME/tractd/pipelines.bin, else $HOME/.cache/tractd/pipelines.bin. */
void conf_defaults(struct conf *c);

/* Reads path into c (over what is there). -ENOENT when missing. */
int conf_load_file(struct conf *c, const char *path, struct errbuf *err);

/* Applies "key=value" (command-line --set, and the dedicated flags). */
int conf_set(struct conf *c, const char *key, const char *value, struct errbuf *err);

/* Writes every key with its current value, as a valid config file. */
void conf_print(const struct conf *c, FILE *out);

#endif
