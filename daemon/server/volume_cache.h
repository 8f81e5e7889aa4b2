/* SPDX-License-Identifier: MIT */
/*
 * volume_cache: the worker's warm volumes between jobs. Owns an LRU list of
 * entries, each a job's loaded (and fitted) inputs with one upload per
 * device, under two budgets: GPU memory (cache_budget) and host memory for
 * the inputs' copies (max_job_host_memory); under gpu_memory_limit, entries
 * also give way to a job that the limit would leave less than its budget
 * (volume_cache_acquire). Remembers which owners used
 * each entry, so that a job hears of a warm cache only from its own owner's
 * earlier jobs, and counts hits and misses.
 *
 * Thread-safety: none; it belongs to the worker thread, like the GPU
 * contexts its uploads live on. What it counts goes out through the
 * callbacks of its configuration (the worker hands them to the registry).
 * Logs evictions at debug level.
 */
#ifndef TRACTD_VOLUME_CACHE_H
#define TRACTD_VOLUME_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "engine/engine.h"
#include "engine/gpu.h"
#include "job/inputs.h"
#include "job/jobspec.h"
#include "server/job_info.h"

/* What the cache holds, after each change. */
struct volume_cache_usage {
	uint64_t entries, bytes;   /* GPU bytes, on each device */
	uint64_t host_bytes;       /* the inputs' host copies */
};

struct volume_cache_config {
	/* The worker's contexts, which every entry has an upload on: the
	 * worker clears the cache before it closes them. */
	struct gpu_ctx *const *gpus;
	const size_t *n_gpus;
	uint64_t gpu_budget;            /* the entries' GPU bytes at most */
	uint64_t max_job_host_memory;   /* their host bytes at most, and a job's; 0: no bound */
	uint64_t gpu_memory_budget;     /* per job, for its upload; 0: engine default */
	/* A hit (a reuse by the same owner) or a miss (a load, or another
	 * owner's first use of a warm entry), counted as the job asks. */
	void (*counted)(void *userdata, const char *owner, bool hit);
	void (*changed)(void *userdata, const struct volume_cache_usage *usage);
	void *userdata;
};

/* A job's volumes: the inputs and one upload per device (a copy of what
 * the cache holds, or the job's own when they are not cached). */
struct volume_cache_entry {
	char *key;                  /* input files' identities, model, sphere */
	struct inputs *inputs;
	struct resident *residents[GPU_MAX_DEVICES];   /* one upload per device */
	uint64_t bytes;                                /* on each device */
	uint64_t host_bytes;        /* inputs' host copies (inputs_host_bytes) */
	uint64_t last_used;
	/* What loading and uploading took, told to an owner whose first use
	 * this is; and the owners who used it, so that a job hears of a warm
	 * cache only from its own owner's earlier jobs. */
	double load_seconds, upload_seconds;
	char (*users)[JOB_OWNER_LEN + 1];
	size_t n_users;
};

struct volume_cache_use {
	struct volume_cache_entry volumes;
	bool owned;                 /* not cached: volume_cache_release frees it */
};

struct volume_cache;

/* An empty cache; NULL when out of memory. */
struct volume_cache *volume_cache_new(const struct volume_cache_config *cfg);

/* Drops every entry and frees the cache. Accepts NULL. */
void volume_cache_free(struct volume_cache *cache);

/* The loaded and uploaded volumes of spec for owner's job into *use: from
 * the cache, or read (within max_job_host_memory), uploaded with fit and
 * cached when they fit the budgets. Other jobs' entries are evicted first,
 * least recently used first, while gpu_memory_limit would leave the job
 * less than its budget (gpu_memory_budget) on a device. timing's load and upload seconds are
 * what the job tells: 0 on a reuse by the same owner. Errors are
 * inputs_load's and resident_new_all's. */
int volume_cache_acquire(struct volume_cache *cache, const struct jobspec *spec,
			 const char *owner, const struct fit_options *fit,
			 struct volume_cache_use *use, struct engine_stats *timing,
			 struct errbuf *err);

/* After the job: frees its volumes if they were its own. */
void volume_cache_release(struct volume_cache *cache, struct volume_cache_use *use);

/* Drops every entry (the GPU was lost, or the worker stops). */
void volume_cache_clear(struct volume_cache *cache);

#endif
