/* SPDX-License-Identifier: MIT */
/*
 * worker: the GPU thread of the daemon. Takes the registry's next job
 * (jobs.h), runs it through the runner (run/runner.h) with its volumes from
 * the warm cache (volume_cache.h) into the job's spool file, publishes its
 * progress and hands its outcome back.
 *
 * Owns the thread, a Vulkan context per configured device (kept between
 * jobs with their compiled pipelines and the spares of their work buffers,
 * which go back to the driver once no job has come for
 * gpu_spare_idle_seconds) and the volume cache. A lost device
 * fails the job it ran; the cache goes with it and the contexts are opened
 * again for the next job. The contexts and the cache are touched by the
 * worker thread only (and by worker_start and worker_free before and after
 * it). Logs each job's start, and the device's loss and reopening.
 */
#ifndef TRACTD_WORKER_H
#define TRACTD_WORKER_H

#include "base/errbuf.h"
#include "server/jobs.h"

struct worker;

/* Opens the GPU (cfg's devices, or the best one), tells jobs about it and
 * starts the thread, which runs jobs' jobs until jobs stops. */
int worker_start(const struct jobs_config *cfg, struct jobs *jobs, struct worker **ret,
		 struct errbuf *err);

/* Once the thread runs: stops the registry (jobs_stop: the running job
 * stops within a chunk) and joins the thread. Then frees the cache and the
 * contexts. The registry outlives the worker. Accepts NULL. */
void worker_free(struct worker *worker);

#endif
