/* SPDX-License-Identifier: MIT */
/*
 * jobs: the daemon's job registry, job states and result spool.
 *
 * Owns every job (its validated spec, state, progress and error), the
 * queue, the fair scheduler, the waits of followers, the counters, and the
 * spool directory where each job's tractogram is written as it is produced.
 * A finished result stays in the spool until it expires (age or spool size)
 * or its job is deleted; clients that disconnect fetch it later. Every job
 * has a record in the spool (spool.h), written when it is submitted, starts
 * and ends, so jobs outlive a restart: finished ones are served again, those
 * the daemon died under read as failed ("interrupted"). No GPU: the worker
 * (worker.h) takes the jobs one at a time and reports back through the
 * functions at the end of this header.
 *
 * Thread-safety: every function may be called from any thread (the HTTP
 * threads, the worker); one mutex guards the registry, a condition variable
 * wakes followers when a job makes progress. Logs each job's start, end and
 * failure at info level as "job=<id> <event> owner=<owner>".
 *
 * Scheduling is fair between owners: the worker takes the oldest queued job
 * of the owner whose last job started longest ago (never: first), so one
 * user's long queue does not starve another's single job.
 */
#ifndef TRACTD_JOBS_H
#define TRACTD_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine/engine.h"
#include "base/errbuf.h"
#include "engine/gpu.h"
#include "job/jobspec.h"
#include "server/job_info.h"

struct jobs;
struct job;

/* The registry's settings, and the worker's (worker_start). */
struct jobs_config {
	const char *state_dir;        /* the spool is <state_dir>/spool */
	uint64_t max_queued_jobs;
	uint64_t max_queued_jobs_per_user;   /* queued jobs of one owner at most */
	uint64_t max_queued_bytes_per_user;  /* their documents' bytes at most */
	uint64_t max_seeds_per_job;   /* checked again once per-voxel seeds are counted */
	uint64_t max_job_host_memory; /* input images' host bytes, checked again at start;
				       * also what warm volumes' host copies may hold */
	uint64_t spool_max_bytes;
	uint64_t result_ttl_seconds;
	struct gpu_options gpu;       /* the options of every device opened */
	struct gpu_device_choice devices[GPU_MAX_DEVICES];   /* none: the best one */
	size_t n_devices;
	uint64_t gpu_memory_budget;   /* per job, 0 = engine default */
	uint64_t max_dispatch_steps;  /* per GPU submit, 0 = engine default */
	uint64_t volume_cache_bytes;  /* 0 = a quarter of the device memory */
	double gpu_spare_idle_seconds;   /* idle this long, the worker frees its spare
					  * work buffers (gpu_drop_spares) */
	int fit_threads;              /* model fitting threads, 0 = one per CPU */
};

struct jobs_status {
	uint64_t queued, running;
	uint64_t done_total, failed_total, cancelled_total;
	uint64_t seeds_total, streamlines_total;
	double track_seconds_total;
	uint64_t cache_hits, cache_misses, cache_entries, cache_bytes, cache_budget;
	uint64_t job_budget;         /* GPU memory a job may use (resident_budget) */
	uint64_t cache_host_bytes;   /* host copies of the warm volumes */
	uint64_t gpu_spare_bytes;    /* the devices' spare work buffers (jobs_set_spare_bytes) */
	uint64_t spool_bytes;
	struct gpu_limits device;    /* the first device's (jobs_set_devices) */
	size_t devices;              /* devices a job's seeds are shared out over */
};

/* Creates the spool and reloads the jobs of an earlier run (spool.h); the
 * jobs wait for a worker (worker_start). */
int jobs_start(const struct jobs_config *cfg, struct jobs **ret, struct errbuf *err);

/* Fails queued jobs ("shutting down"), refuses new ones and tells the
 * worker to stop: the running job stops within a chunk (worker_free joins
 * it). The registry stays readable (HTTP threads may still be answering)
 * until jobs_free. Accepts NULL. */
void jobs_stop(struct jobs *jobs);

/* Stops if needed and frees everything; no other thread may use jobs any
 * more (the worker is freed first). Finished results stay on disk. Accepts
 * NULL. */
void jobs_free(struct jobs *jobs);

/* Queues spec (taken over: freed by jobs, also on failure) for owner and
 * fills *ret. spec_json (copied; may be NULL) is the job document as
 * submitted, kept in the job's record. arrival (may be NULL) holds the
 * events before the registry (submitted, validated), which the job's
 * timing starts with; queued is set here. -EAGAIN when max_queued_jobs are
 * waiting, or max_queued_jobs_per_user of owner's; -ESHUTDOWN when stopping;
 * -ENOSPC when the record cannot be written for want of space. */
int jobs_submit(struct jobs *jobs, struct jobspec *spec, const char *spec_json, const char *owner,
		const struct job_timing *arrival, struct job_info *ret, struct errbuf *err);

/* -ENOENT for an unknown id. */
int jobs_get(struct jobs *jobs, const char *id, struct job_info *ret);

/* All jobs, newest first; *ret is malloc'd (free it). */
int jobs_list(struct jobs *jobs, struct job_info **ret, size_t *n);

/* Queued or running: cancels (returns 0, *ret is the job). Finished: deletes
 * the job and its result (returns 1). -ENOENT for an unknown id. */
int jobs_cancel(struct jobs *jobs, const char *id, struct job_info *ret);

/* Waits until the job has more than have_bytes in the spool, or has ended,
 * or timeout_ms passed; fills *ret either way. -ENOENT for an unknown id. */
int jobs_wait(struct jobs *jobs, const char *id, uint64_t have_bytes, int timeout_ms,
	      struct job_info *ret);

/* The spool file of a job (exists once the job has started). */
int jobs_result_path(struct jobs *jobs, const char *id, char *path, size_t len);

void jobs_status(struct jobs *jobs, struct jobs_status *ret);

/* owner's own cache hits (reuses of volumes its earlier jobs used) and
 * misses (loads, and first uses of volumes others loaded): what it may be
 * told without learning of other users' jobs. */
void jobs_owner_cache(struct jobs *jobs, const char *owner, uint64_t *hits, uint64_t *misses);

/* Expires finished results past result_ttl_seconds or spool_max_bytes (as
 * each job's end does): the daemon's main loop calls it every few seconds,
 * so results expire on time on an idle daemon too. */
void jobs_expire(struct jobs *jobs);

/* ---- for the worker: the one thread that runs jobs ---------------------- */

/* The job the worker runs: id, owner and spec stay valid until jobs_finish. */
struct jobs_running {
	struct job *job;
	const char *id, *owner;
	const struct jobspec *spec;
};

/* Waits up to seconds for a queued job: true when there is one (or the
 * registry is stopping), false when none came. Marks nothing. */
bool jobs_wait_queued(struct jobs *jobs, double seconds);

/* Waits for the next job (the scheduler's pick) and marks it running
 * (recorded, followers woken); false once the registry is stopping. */
bool jobs_next(struct jobs *jobs, struct jobs_running *ret);

/* Publish a running job's progress and wake its followers; they return
 * whether the job should go on (false: cancelled, or the daemon stops).
 * stage is a string literal ("load", a fit stage), kept by the job;
 * result_bytes is the result's length in the spool so far (ftell), or
 * negative to leave it as it was (within a chunk, not yet flushed). */
bool jobs_publish_stage(struct jobs *jobs, struct job *job, const char *stage, double fraction);
bool jobs_publish_progress(struct jobs *jobs, struct job *job, uint64_t done, uint64_t total,
			   uint64_t streamlines, long result_bytes);
void jobs_publish_seeds(struct jobs *jobs, struct job *job, uint64_t seeds_total);

/* The worker's events of the job's timing (job_info.h), at timing_now()
 * time at; started, first_output and done the registry sets itself. */
void jobs_mark(struct jobs *jobs, struct job *job, enum job_event event, double at);

/* The daemon's peak resident memory while the job ran, told before
 * jobs_finish. */
void jobs_set_host_peak(struct jobs *jobs, struct job *job, uint64_t bytes);

/* The job ended with r (0, -ECANCELED or an error in err) and stats: its
 * state, counters, record and log line; the worker lets go of it. */
void jobs_finish(struct jobs *jobs, struct job *job, int r, const struct engine_stats *stats,
		 const struct errbuf *err);

/* A write of the result that failed for want of space in the spool becomes
 * -ENOSPC on "output" (the client's "insufficient_storage"); any other r is
 * returned as it is. write_errno: the errno of the failed write, if known. */
int jobs_check_spool_full(struct jobs *jobs, int r, int write_errno, struct errbuf *err);

/* The warm volume cache's statistics (volume_cache.h): a hit or a miss of
 * owner's job, and what the cache holds. */
void jobs_count_cache(struct jobs *jobs, const char *owner, bool hit);
void jobs_set_cache_usage(struct jobs *jobs, uint64_t entries, uint64_t bytes,
			  uint64_t host_bytes);

/* The bytes the devices' spare work buffers hold, for jobs_status. */
void jobs_set_spare_bytes(struct jobs *jobs, uint64_t bytes);

/* The devices the worker opened: the first one's limits, their number, and
 * the GPU budgets of the cache and of a job on it, for jobs_status. */
void jobs_set_devices(struct jobs *jobs, const struct gpu_limits *first, size_t n_devices,
		      uint64_t cache_budget, uint64_t job_budget);

#endif
