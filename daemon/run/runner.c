/* SPDX-License-Identifier: MIT */
/*
 * runner: load, seeds, upload, output and engine of one job (see runner.h).
 */
#include "run/runner.h"

#include <errno.h>

#include "base/log.h"
#include "job/seeds.h"
#include "job/shard.h"

/* max_seeds_per_job bounds the seeds this run tracks: a shard's own
 * (shard.h). seeds.per_voxel multiplies by the ROI's voxels, known only
 * once the seeds are read. The count seeds.select defaults to (tckgen's
 * 1000 per streamline) is a bound: the limit lowers it instead. */
static int check_seed_count(const struct runner_job *job, struct seeds *seeds,
			    struct errbuf *err)
{
	const struct shard *shard = &job->spec->shard;

	if (shard->count)
		return shard_check_seed_limit(shard, seeds_count(seeds), job->max_seeds,
					      "seeds.count", err);
	if (!job->max_seeds || seeds_count(seeds) <= job->max_seeds)
		return 0;
	if (job->spec->seed_count_from_select) {
		seeds_limit(seeds, job->max_seeds);
		return 0;
	}
	/* A limit, as API.md tells (limit_exceeded), like the count refused at submit. */
	return errbuf_set_kind(err, ERR_KIND_LIMIT, -EINVAL, job->spec->seed_points_path ?
			       "seeds.points_file" : "seeds.count", "%llu seeds exceed "
			       "the limit of %llu seeds per job (max_seeds_per_job)",
			       (unsigned long long)seeds_count(seeds),
			       (unsigned long long)job->max_seeds);
}

/* The seeds this run tracks: a shard's, or all of them. */
static uint64_t seeds_tracked(const struct seeds *seeds)
{
	uint64_t first, end;

	seeds_range(seeds, &first, &end);
	return end - first;
}

/* tckgen's warning: the job succeeds with the streamlines it found. */
static void warn_short_selection(const struct engine_stats *stats)
{
	if (stats->streamlines < stats->select)
		log_warn("seeds.select: only %llu of %llu streamlines selected: all %llu seeds "
			 "(seeds.count) were used", (unsigned long long)stats->streamlines,
			 (unsigned long long)stats->select, (unsigned long long)stats->seeds);
}

/* Opens the output and tracks the seeds over the devices into it. */
static int track(const struct runner_job *job, const struct engine_device *devs, size_t n_devs,
		 const struct inputs *inputs, struct seeds *seeds, struct engine_stats *stats,
		 struct errbuf *err)
{
	struct engine_options opts = job->engine;
	FILE *tracks = NULL;
	int r = job->output.open(job->output.userdata, job->spec, &tracks, &opts.seeds_file, err);

	if (r < 0)
		return r;
	opts.device_done = job->source.device_done;
	opts.device_done_userdata = job->source.userdata;
	return engine_run(devs, n_devs, job->spec, inputs, seeds, &opts, tracks, stats, err);
}

int runner_run(const struct runner_job *job, struct engine_stats *stats, struct errbuf *err)
{
	const struct runner_source *src = &job->source;
	struct engine_device devs[GPU_MAX_DEVICES];
	struct engine_stats timing = { 0 };
	struct inputs *inputs = NULL;
	struct seeds *seeds = NULL;
	size_t n_devs = 0;
	int r = src->load(src->userdata, job->spec, &inputs, &timing, err);

	if (r == 0)
		r = inputs_seeds_load(job->spec, inputs, &seeds, err);
	if (r == 0)
		r = check_seed_count(job, seeds, err);
	if (r == 0)
		r = shard_seeds(&job->spec->shard, seeds, err);
	if (r == 0 && job->seeds_counted)
		job->seeds_counted(job->userdata, seeds_tracked(seeds));
	if (r == 0)
		r = src->upload(src->userdata, job->spec, inputs, devs, &n_devs, &timing, err);
	if (r == 0)
		r = track(job, devs, n_devs, inputs, seeds, stats, err);
	if (r == 0)
		warn_short_selection(stats);
	stats->load_seconds = timing.load_seconds;
	stats->upload_seconds = timing.upload_seconds;
	seeds_free(seeds);
	return r;
}
