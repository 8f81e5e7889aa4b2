/* SPDX-License-Identifier: MIT */
/*
 * worker: the GPU thread: the registry's jobs through the runner, volumes
 * from the warm cache (see worker.h).
 *
 * The contexts and the cache belong to the worker thread: no lock guards
 * them. What the registry shows of them (progress, cache statistics, the
 * devices) goes through jobs.h's publishing functions, which lock.
 */
#include "server/worker.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/peak_rss.h"
#include "base/timing.h"
#include "engine/resident.h"
#include "job/inputs.h"
#include "models/fit.h"
#include "run/runner.h"
#include "server/volume_cache.h"

/* Chunk length the engine aims for: how soon progress shows, streamed bytes
 * arrive and a cancellation takes effect. */
#define CHUNK_SECONDS 0.5

struct worker {
	struct jobs_config cfg;
	struct jobs *jobs;
	struct gpu_ctx *gpus[GPU_MAX_DEVICES];   /* one context per configured device */
	size_t n_gpus;
	struct volume_cache *cache;
	pthread_t thread;
	bool started;
};

/* ---- the GPU ---------------------------------------------------------------- */

/* The bytes the contexts' spare work buffers hold, for /v1/device. */
static void publish_spares(struct worker *w)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < w->n_gpus; i++)
		bytes += gpu_spare_bytes(w->gpus[i]);
	jobs_set_spare_bytes(w->jobs, bytes);
}

static void close_gpus(struct worker *w)
{
	for (size_t i = 0; i < w->n_gpus; i++)
		gpu_close(w->gpus[i]);
	w->n_gpus = 0;
	publish_spares(w);
}

/* Opens a context on each configured device (or the best one); on failure
 * none stays open. */
static int open_gpus(struct worker *w, struct errbuf *err)
{
	const struct jobs_config *cfg = &w->cfg;

	return gpu_open_devices(&cfg->gpu, cfg->devices, cfg->n_devices, w->gpus, &w->n_gpus, err);
}

static bool any_gpu_lost(const struct worker *w)
{
	for (size_t i = 0; i < w->n_gpus; i++)
		if (gpu_lost(w->gpus[i]))
			return true;
	return false;
}

/* After a submit failed for good (VK_ERROR_DEVICE_LOST), the context and
 * everything made on it are useless: the warm volumes' GPU buffers go with
 * it, and fresh contexts (all of them: a cached entry holds an upload on
 * each) serve the next job. Also retries contexts that could not be
 * reopened last time. */
static void reopen_gpu_if_lost(struct worker *w)
{
	struct errbuf err = { 0 };

	if (w->n_gpus && !any_gpu_lost(w))
		return;
	if (w->n_gpus)
		log_warn("the GPU device was lost: dropping the volume cache and recreating the "
			 "Vulkan context");
	volume_cache_clear(w->cache);
	close_gpus(w);
	if (open_gpus(w, &err) < 0) {
		log_error("cannot open the GPU again: %s%s%s (the next job tries again)",
			  err.field, err.field[0] ? ": " : "", err.message);
		return;
	}
	log_info("the Vulkan context was recreated");
}

/* A job's work buffers stay as spares for the next job of its shape while
 * jobs keep coming; once none has come for gpu_spare_idle_seconds they go
 * back to the driver, for whoever else shares the GPU. */
static void drop_spares_when_idle(struct worker *w)
{
	bool held = false;

	for (size_t i = 0; i < w->n_gpus; i++)
		held = held || gpu_spare_bytes(w->gpus[i]) > 0;
	if (!held || jobs_wait_queued(w->jobs, w->cfg.gpu_spare_idle_seconds))
		return;
	for (size_t i = 0; i < w->n_gpus; i++)
		gpu_drop_spares(w->gpus[i]);
	publish_spares(w);
	log_debug("idle for %g s: the spare work buffers were given back",
		  w->cfg.gpu_spare_idle_seconds);
}

/* After each job, the heap's free pages go back to the system: glibc keeps
 * what a job freed (its parsed seeds, its host arrays) resident, so the
 * daemon's RSS stayed megabytes above what it holds, in steps of tens of MB
 * where the threads' allocations interleaved. 0.3 ms (2.8 ms at most) after
 * the test suite's lavapipe jobs. */
static void give_back_free_memory(void)
{
	(void)malloc_trim(0);
}

/* ---- the cache's statistics, to the registry -------------------------------- */

static void cache_counted(void *userdata, const char *owner, bool hit)
{
	struct worker *w = userdata;

	jobs_count_cache(w->jobs, owner, hit);
}

static void cache_changed(void *userdata, const struct volume_cache_usage *usage)
{
	struct worker *w = userdata;

	jobs_set_cache_usage(w->jobs, usage->entries, usage->bytes, usage->host_bytes);
}

/* ---- running one job -------------------------------------------------------- */

/* One job on its way through the runner: its registry entry, its spool
 * file, and the volumes the cache lent it. */
struct run_ctx {
	struct worker *worker;
	const struct jobs_running *job;
	FILE *out;
	struct fit_options fit;
	struct volume_cache_use volumes;
	double output_opened;       /* timing_now() when the engine got the spool file */
};

static void mark(const struct run_ctx *ctx, enum job_event event, double at)
{
	jobs_mark(ctx->worker->jobs, ctx->job->job, event, at);
}

/* The spool file's size counts only once the engine has flushed it: the
 * result's readers stream up to it. */
static bool on_progress(void *userdata, const struct engine_progress *p)
{
	struct run_ctx *ctx = userdata;

	return jobs_publish_progress(ctx->worker->jobs, ctx->job->job, p->seeds_done, p->seeds_total,
				     p->streamlines, p->written ? ftell(ctx->out) : -1);
}

/* The first job of a configuration compiles its kernels: a stage of its
 * own, so that the job does not look stuck. */
static void on_compiling(void *userdata, const char *device_name)
{
	struct run_ctx *ctx = userdata;
	const char *cache = ctx->worker->cfg.gpu.pipeline_cache_path;

	log_info("job=%s compiling the GPU kernels for %s (first run of this configuration; %s%s)",
		 ctx->job->id, device_name, cache ? "cached beside " : "no pipeline_cache",
		 cache ? cache : "");
	jobs_publish_stage(ctx->worker->jobs, ctx->job->job, "compile", 0.0);
}

/* A fit_progress_fn, also called for "load". Stage names are string
 * literals from fit.c and this file, so the job may keep the pointer. */
static bool on_stage(void *userdata, const char *stage, double fraction)
{
	struct run_ctx *ctx = userdata;

	return jobs_publish_stage(ctx->worker->jobs, ctx->job->job, stage, fraction);
}

static void on_seeds(void *userdata, uint64_t count)
{
	struct run_ctx *ctx = userdata;

	jobs_publish_seeds(ctx->worker->jobs, ctx->job->job, count);
}

/* The runner's source: the warm cache, which loads and uploads at once. */
static int load_volumes(void *userdata, const struct jobspec *spec, struct inputs **inputs,
			struct engine_stats *timing, struct errbuf *err)
{
	struct run_ctx *ctx = userdata;
	int r = volume_cache_acquire(ctx->worker->cache, spec, ctx->job->owner, &ctx->fit,
				     &ctx->volumes, timing, err);
	const struct fit_result *f;
	char what[400];
	bool warn;

	*inputs = ctx->volumes.volumes.inputs;
	/* How a dwi job's gradients were read, a warning where it matters. */
	if (r == 0 && inputs_describe_gradients(*inputs, what, sizeof(what), &warn))
		log_msg(warn ? LOG_LEVEL_WARN : LOG_LEVEL_INFO, "job=%s %s", ctx->job->id, what);
	/* Which model order was fitted and why, for a dwi job. */
	f = r == 0 ? inputs_fit(*inputs) : NULL;
	if (f && fit_describe(f, what, sizeof(what)))
		log_info("job=%s %s", ctx->job->id, what);
	if (r == 0)
		mark(ctx, JOB_EVENT_LOADED, timing_now());
	return r;
}

static int lend_devices(void *userdata, const struct jobspec *spec, const struct inputs *inputs,
			struct engine_device devs[GPU_MAX_DEVICES], size_t *n_devs,
			struct engine_stats *timing, struct errbuf *err)
{
	struct run_ctx *ctx = userdata;
	const struct worker *w = ctx->worker;

	(void)spec;
	(void)inputs;
	(void)timing;
	(void)err;
	for (size_t i = 0; i < w->n_gpus; i++)
		devs[i] = (struct engine_device){ w->gpus[i], ctx->volumes.volumes.residents[i] };
	*n_devs = w->n_gpus;
	return 0;
}

/* The spool file, opened before the job started loading. */
static int open_spool_file(void *userdata, const struct jobspec *spec, FILE **tracks,
			   FILE **seeds, struct errbuf *err)
{
	struct run_ctx *ctx = userdata;

	(void)spec;
	(void)err;
	*tracks = ctx->out;
	*seeds = NULL;
	ctx->output_opened = timing_now();
	mark(ctx, JOB_EVENT_OUTPUT_OPENED, ctx->output_opened);
	return 0;
}

static int track_job(struct worker *w, const struct jobs_running *job, FILE *out,
		     struct engine_stats *stats, struct errbuf *err)
{
	struct run_ctx ctx = { .worker = w, .job = job, .out = out,
			       .fit = { .threads = w->cfg.fit_threads, .progress = on_stage,
					.userdata = &ctx } };
	struct runner_job run = {
		.spec = job->spec,
		.source = { .load = load_volumes, .upload = lend_devices, .userdata = &ctx },
		.output = { open_spool_file, &ctx },
		.engine = {
			.memory_budget = w->cfg.gpu_memory_budget,
			.max_dispatch_steps = w->cfg.max_dispatch_steps,
			.chunk_seconds = CHUNK_SECONDS,
			/* Most of the result's fsync happens while it is written. */
			.writeback = true,
			.progress = on_progress,
			.compiling = on_compiling,
			.progress_userdata = &ctx,
		},
		.max_seeds = w->cfg.max_seeds_per_job,
		.seeds_counted = on_seeds,
		.userdata = &ctx,
	};
	int r;

	on_stage(&ctx, "load", 0.0);
	r = runner_run(&run, stats, err);
	if (r == 0) {
		/* The engine's start of tracking, from what its preparation took. */
		mark(&ctx, JOB_EVENT_TRACKING, ctx.output_opened + stats->prepare_seconds);
		mark(&ctx, JOB_EVENT_TRACKED, timing_now());
	}
	volume_cache_release(w->cache, &ctx.volumes);
	return r;
}

static int run_job(struct worker *w, const struct jobs_running *job, struct engine_stats *stats,
		   struct errbuf *err)
{
	char path[1200];
	FILE *out;
	int r;

	jobs_result_path(w->jobs, job->id, path, sizeof(path));
	out = fopen(path, "w+b");
	if (!out) {
		int e = errno;
		r = errbuf_set_kind(err, ERR_KIND_OUTPUT, -e, "output", "cannot create %s: %s",
				    path, strerror(e));
		return jobs_check_spool_full(w->jobs, r, e, err);
	}
	r = track_job(w, job, out, stats, err);
	/* The result reaches the disk before the record that says it is done. */
	if (r == 0 && (fflush(out) != 0 || fsync(fileno(out)) != 0))
		r = errbuf_set_kind(err, ERR_KIND_OUTPUT, -EIO, "output", "cannot write %s: %s",
				    path, strerror(errno));
	if (r == 0)
		jobs_mark(w->jobs, job->job, JOB_EVENT_SYNCED, timing_now());
	if (fclose(out) != 0 && r == 0)
		r = errbuf_set_kind(err, ERR_KIND_OUTPUT, -EIO, "output", "cannot write %s", path);
	return jobs_check_spool_full(w->jobs, r, 0, err);
}

/* The daemon's peak resident memory since the job started; 0 unknown. */
static uint64_t host_peak(void)
{
	uint64_t bytes;

	return peak_rss_read(&bytes) == 0 ? bytes : 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct jobs_running job;

	for (;;) {
		struct engine_stats stats = { 0 };
		struct errbuf err = { 0 };
		int r;

		drop_spares_when_idle(w);
		if (!jobs_next(w->jobs, &job))
			break;
		log_info("job=%s started owner=%s", job.id, job.owner);
		/* Best effort: an old kernel keeps the daemon's lifetime peak. */
		(void)peak_rss_reset();
		reopen_gpu_if_lost(w);
		if (w->n_gpus)
			r = run_job(w, &job, &stats, &err);
		else
			r = errbuf_set_kind(&err, ERR_KIND_DEVICE, -ENODEV, "device",
					    "the GPU is unavailable (it was lost and could not be "
					    "opened again)");
		jobs_set_host_peak(w->jobs, job.job, host_peak());
		publish_spares(w);
		jobs_finish(w->jobs, job.job, r, &stats, &err);
		give_back_free_memory();
		reopen_gpu_if_lost(w);
	}
	return NULL;
}

/* ---- public API ----------------------------------------------------------- */

int worker_start(const struct jobs_config *cfg, struct jobs *jobs, struct worker **ret,
		 struct errbuf *err)
{
	struct worker *w = calloc(1, sizeof(*w));
	const struct gpu_limits *limits;
	uint64_t cache_budget;
	int r;

	if (!w)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	w->cfg = *cfg;
	w->jobs = jobs;
	r = open_gpus(w, err);
	if (r < 0) {
		worker_free(w);
		return r;
	}
	limits = gpu_get_limits(w->gpus[0]);
	cache_budget = cfg->volume_cache_bytes ? cfg->volume_cache_bytes
					       : gpu_memory_bytes(limits) / 4;
	jobs_set_devices(jobs, limits, w->n_gpus, cache_budget,
			 resident_budget(limits, cfg->gpu_memory_budget));
	w->cache = volume_cache_new(&(struct volume_cache_config){
		.gpus = w->gpus, .n_gpus = &w->n_gpus, .gpu_budget = cache_budget,
		.max_job_host_memory = cfg->max_job_host_memory,
		.gpu_memory_budget = cfg->gpu_memory_budget,
		.counted = cache_counted, .changed = cache_changed, .userdata = w });
	if (!w->cache) {
		worker_free(w);
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	}
	r = pthread_create(&w->thread, NULL, worker_main, w);
	if (r != 0) {
		worker_free(w);
		return errbuf_set(err, -r, "", "cannot start the worker thread: %s", strerror(r));
	}
	w->started = true;
	*ret = w;
	return 0;
}

void worker_free(struct worker *worker)
{
	if (!worker)
		return;
	if (worker->started) {
		jobs_stop(worker->jobs);
		pthread_join(worker->thread, NULL);
	}
	volume_cache_free(worker->cache);
	close_gpus(worker);
	free(worker);
}
