/* SPDX-License-Identifier: MIT */
/*
 * engine: runs one validated tracking job on one GPU context and streams the
 * streamlines to the job's output format (output.h: TRK or TCK).
 *
 * Owns, for the duration of engine_run(), the job's host volumes, sphere, seed
 * generator and GPU buffers (all released before it returns). Plans the work
 * from the device limits: seeds are processed in chunks whose per-seed buffers
 * fit one storage-buffer binding, one allocation and the memory budget, and
 * each chunk's streamlines in batches whose point slots fit likewise. Output
 * is in (seed index, direction index) order and bit-identical whatever the
 * chunk and batch sizes, because every random draw is keyed by the global seed
 * index (philox.h). Logs progress at debug level and failures not at all (the
 * caller reports the errbuf).
 */
#ifndef TRACTD_ENGINE_H
#define TRACTD_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "errbuf.h"
#include "fit.h"
#include "gpu.h"
#include "jobspec.h"
#include "seeds.h"

/* Called after each seed chunk is written, with the chunks in seed order
 * (on the calling thread with one device). Returning false cancels the job:
 * engine_run then returns -ECANCELED. */
typedef bool engine_progress_fn(void *userdata, uint64_t seeds_done, uint64_t seeds_total,
				uint64_t streamlines);

/* The default bound on one submit's work, in streamline steps: a few
 * milliseconds on a discrete GPU, well under a second on lavapipe, so that
 * no single submit of a huge chunk runs into a driver's GPU-hang timeout
 * (TDR) on a slow device, whatever the chunk size. */
#define ENGINE_MAX_DISPATCH_STEPS (1ull << 22)

struct engine_options {
	uint64_t max_chunk_seeds;   /* 0: as many as the limits allow */
	uint64_t max_dispatch_steps; /* tracking steps one GPU submit may run at most
				     * (items x max_steps); 0: ENGINE_MAX_DISPATCH_STEPS */
	uint64_t memory_budget;     /* bytes of GPU memory a job may use; 0: default */
	double chunk_seconds;       /* > 0: size chunks to take about this long, so that
				     * progress, streaming and cancellation stay responsive */
	engine_progress_fn *progress;   /* may be NULL */
	void *progress_userdata;
	FILE *seeds_file;           /* TCK jobs with output.save_seeds: where the seeds
				     * text (tckgen -output_seeds) goes; NULL refuses them */
};

struct engine_stats {
	uint64_t seeds;
	uint64_t streamlines;       /* written to the output */
	uint64_t points;
	uint64_t chunks;            /* seed chunks */
	uint64_t batches;           /* streamline batches */
	uint64_t submits;           /* kernel submits (each within max_dispatch_steps) */
	double load_seconds;        /* reading inputs, seeds, sphere */
	double upload_seconds;
	double compile_seconds;     /* pipelines compiled during this job */
	double track_seconds;       /* GPU work and transfers */
	double kernel_seconds;      /* of which: waiting for the tracking kernels */
	double write_seconds;       /* TRK encoding and writing */
	const char *odf_storage;    /* engine_resident_storage() of the inputs used */
	uint64_t gpu_input_bytes;   /* engine_resident_bytes() of them */
	/* The reference grid the tractogram was written on (dims, voxel-to-RAS+
	 * mm; zero until the writer starts). Kept because a TCK file does not
	 * carry it and the API converts finished results between formats. */
	int64_t grid_dim[3];
	double grid_affine[4][4];
};

/* What a job reads and a cache can share between jobs: the ODF or the SH
 * coefficients behind it, the stop map and the sphere, validated, on the
 * host; for a dwi job also its fit. */
struct engine_inputs;
/* The GPU copies of an engine_inputs, reusable by every job on them. */
struct engine_resident;

/* Reads and validates the job's volumes and sphere without touching the GPU,
 * so bad input fails before a device is opened. dwi inputs are fitted
 * (fit.h) with fit's threads and progress (fit may be NULL); SH coefficients
 * are kept as they are, to be sampled on the sphere when uploaded. On
 * failure returns a negative errno with err naming the input field
 * (-EINVAL, -ENOENT, -EIO, -ENOMEM, -ECANCELED). */
int engine_inputs_load(const struct jobspec *job, const struct fit_options *fit,
		       struct engine_inputs **ret, struct errbuf *err);

/* The fit alone of a dwi job (what engine_inputs_load does for it before
 * sampling the ODF on the sphere): loads and validates inputs.dwi, the
 * tables and the mask, and fits them. Errors as engine_inputs_load; free
 * *ret with fit_result_free. */
int engine_fit_dwi(const struct jobspec *job, const struct fit_options *fit,
		   struct fit_result *ret, struct errbuf *err);

/* The ODF the tracker samples, on the sphere's vertices, clipped at zero,
 * into *ret (free with volume_free): sampled from SH coefficients with
 * fit's threads, or copied. -EINVAL for boot jobs, -ENOMEM. */
int engine_inputs_odf(const struct engine_inputs *in, const struct fit_options *fit,
		      struct volume *ret, struct errbuf *err);
/* The DTI and CSD fit of a dwi job; NULL for other inputs. */
const struct fit_result *engine_inputs_fit(const struct engine_inputs *in);

/* Accepts NULL. */
void engine_inputs_free(struct engine_inputs *in);

/* The job's seed generator on the inputs' grid (seeds.roi or seeds.points);
 * errors as engine_inputs_load. Free with seeds_free(). */
int engine_seeds_load(const struct jobspec *job, const struct engine_inputs *in,
		      struct seeds **ret, struct errbuf *err);

struct engine_upload {
	/* tracking.odf_storage; auto takes the first of float32, float16 and
	 * SH coefficients that fits memory_budget with room to track. */
	enum jobspec_odf_storage odf_storage;
	uint64_t memory_budget;     /* bytes of GPU memory a job may use; 0: default */
	const struct fit_options *fit;  /* threads and progress for sampling SH
					 * inputs on the sphere; may be NULL */
};

/* Uploads in to the device, volumes in pages that only the memory budget
 * bounds (paged_volume.h). -E2BIG when the inputs do not fit the budget
 * (the message says how much each storage needs and what would help); GPU
 * errors with field "device". */
int engine_resident_new(struct gpu_ctx *gpu, const struct engine_inputs *in,
			const struct engine_upload *up, struct engine_resident **ret,
			struct errbuf *err);
/* engine_resident_new on n devices at once, a thread each, so that the
 * uploads overlap: ret[i] is gpus[i]'s. On failure none is kept (the first
 * device's error is reported). */
int engine_resident_new_all(struct gpu_ctx *const *gpus, size_t n, const struct engine_inputs *in,
			    const struct engine_upload *up, struct engine_resident **ret,
			    struct errbuf *err);
/* GPU bytes held. */
uint64_t engine_resident_bytes(const struct engine_resident *res);
/* How the ODF is held: "float32", "float16", "sh", or "dwi" for boot. */
const char *engine_resident_storage(const struct engine_resident *res);
/* The device must be idle for res (no engine_run using it). Accepts NULL. */
void engine_resident_free(struct gpu_ctx *gpu, struct engine_resident *res);

/* A device of a run and the inputs uploaded to it. */
struct engine_device {
	struct gpu_ctx *gpu;
	const struct engine_resident *resident;
};

/* engine_run over several devices at once (each with its own upload of the
 * same inputs): seed chunks go to whichever device is free, and each chunk's
 * streamlines are written in seed order, so the output is byte-identical
 * to a one-device run. The progress callback runs on one thread at a time,
 * not always the caller's. */
int engine_run_devices(const struct engine_device *devs, size_t n_devs, const struct jobspec *job,
		       const struct engine_inputs *in, struct seeds *seeds,
		       const struct engine_options *opts, FILE *out, struct engine_stats *stats,
		       struct errbuf *err);

/* Runs job on resident inputs and seeds; writes the tractogram to out in
 * job->output_format (seekable: the count is patched). Returns 0 or a negative errno: -E2BIG when the job does
 * not fit the device (err says how much it needs), -ECANCELED when the
 * progress callback asked to stop, other codes with err's field "device" for
 * GPU failures or "output.path" for write failures. stats may be NULL; its
 * load and upload times are the caller's to fill. */
int engine_run(struct gpu_ctx *gpu, const struct jobspec *job, const struct engine_inputs *in,
	       const struct engine_resident *res, struct seeds *seeds,
	       const struct engine_options *opts, FILE *out, struct engine_stats *stats,
	       struct errbuf *err);

#endif
