/* SPDX-License-Identifier: MIT */
/*
 * runner: one tracking job from its validated spec to its tractogram, the
 * one flow that `tractd run` and the daemon's worker share: inputs (from a
 * source), seeds, the inputs on the devices, the output opened, engine_run.
 *
 * Owns the job's seeds for the length of the run, nothing else: the source
 * keeps its inputs and devices and the caller its output files, because the
 * CLI reads fresh and the worker asks its warm cache. No locking; logs
 * only tckgen's warning when seeds.select found fewer streamlines than it
 * asked for; failures go to the caller through errbuf.
 */
#ifndef TRACTD_RUNNER_H
#define TRACTD_RUNNER_H

#include <stdint.h>
#include <stdio.h>

#include "base/errbuf.h"
#include "engine/engine.h"
#include "job/inputs.h"
#include "job/jobspec.h"

/* Where a run's inputs come from and which devices hold them. */
struct runner_source {
	/* The job's inputs into *inputs (still the source's after the run)
	 * and what reading them took (timing's load_seconds; a source that
	 * uploads them at once, as a cache does, sets upload_seconds too). */
	int (*load)(void *userdata, const struct jobspec *spec, struct inputs **inputs,
		    struct engine_stats *timing, struct errbuf *err);
	/* Once the seeds read well: the devices with the inputs resident on
	 * each, into devs[0..*n_devs) (still the source's), and what that took
	 * (timing's upload_seconds). */
	int (*upload)(void *userdata, const struct jobspec *spec, const struct inputs *inputs,
		      struct engine_device devs[GPU_MAX_DEVICES], size_t *n_devs,
		      struct engine_stats *timing, struct errbuf *err);
	/* Once a device's kernels are done for the job (engine_device_done_fn):
	 * a source whose inputs there serve this job alone frees them while
	 * the tractogram is finished; NULL keeps them (a cache's). */
	engine_device_done_fn *device_done;
	void *userdata;
};

/* Where the tractogram goes, opened once the inputs are on the devices. */
struct runner_output {
	/* The tractogram's stream into *tracks and the TCK seeds' (or NULL)
	 * into *seeds; both stay the caller's to close, which it does when
	 * the run returns, after a failure too. */
	int (*open)(void *userdata, const struct jobspec *spec, FILE **tracks, FILE **seeds,
		    struct errbuf *err);
	void *userdata;
};

struct runner_job {
	const struct jobspec *spec;
	struct runner_source source;
	struct runner_output output;
	/* Progress and cancellation (the progress callback's answer), memory
	 * budget and chunking; seeds_file comes from the output. */
	struct engine_options engine;
	uint64_t max_seeds;          /* seeds a job may have, per-voxel ones counted; 0: any */
	/* Told the job's seed count once it is known; may be NULL. */
	void (*seeds_counted)(void *userdata, uint64_t count);
	void *userdata;              /* of seeds_counted */
};

/* Runs job: load, seeds, upload, output, engine_run. Fills *stats (the
 * engine's, with the source's load and upload times) and returns 0, or a
 * negative errno with err set: the source's, inputs_seeds_load's, -EINVAL
 * on "seeds.count" past max_seeds, the output's or engine_run's. */
int runner_run(const struct runner_job *job, struct engine_stats *stats, struct errbuf *err);

#endif
