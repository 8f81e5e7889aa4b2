/* SPDX-License-Identifier: MIT */
/*
 * engine: runs one validated tracking job on one or more GPU contexts and
 * streams the streamlines to the job's output format (output.h: TRK, TCK,
 * TRX).
 *
 * Reads the job's inputs (inputs.h) and their GPU copies (resident.h), which
 * the caller loads and keeps. Owns, for the duration of engine_run(), the
 * job's pipelines, work buffers and host arrays (all released before it
 * returns). Plans the work
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

#include "base/errbuf.h"
#include "engine/gpu.h"
#include "job/inputs.h"
#include "job/jobspec.h"
#include "engine/resident.h"
#include "job/seeds.h"

/* How far a run is. seeds_done only grows: after a chunk is written it is
 * the seed after the chunk (written is true and the output is flushed up to
 * there); within a chunk, after each tracking submit, the seeds before the
 * first streamline not yet tracked (written is false: their streamlines are
 * still on their way to the output). On a LOOP_LIMITED device a few of them
 * may still be resumed by a later pass. The seeds counted are the run's (a
 * shard's own: seeds_range). streamlines: written so far. */
struct engine_progress {
	uint64_t seeds_done;
	uint64_t seeds_total;
	uint64_t streamlines;
	bool written;
};

/* Called with each advance of the run (struct engine_progress). Returning
 * false cancels the job: engine_run then returns -ECANCELED. */
typedef bool engine_progress_fn(void *userdata, const struct engine_progress *progress);

/* Called before a device compiles a kernel of the run that no cache holds
 * (gpu_pipeline_cached): the first run of a configuration, which takes
 * seconds (minutes on lavapipe), at most once per device and run. */
typedef void engine_compiling_fn(void *userdata, const char *device_name);

/* Called once a device's kernels are done for the run and its work buffers
 * on the GPU are back in its spares, on a thread of its own that engine_run
 * joins before it returns (on the device's tracking thread where no thread
 * can start), while the writers may still be writing: device
 * is its index in engine_run's devs, and the callback may use that
 * device's context (nothing else does meanwhile). A caller whose inputs on
 * the device serve this job only (tractd run) frees them there, so that the
 * driver's freeing runs beside the end of the file instead of after it. */
typedef void engine_device_done_fn(void *userdata, size_t device);

/* The default bound on one submit's work, in streamline steps: a few
 * milliseconds on a discrete GPU, well under a second on lavapipe, so that
 * no single submit of a huge chunk runs into a driver's GPU-hang timeout
 * (TDR) on a slow device, whatever the chunk size. */
#define ENGINE_MAX_DISPATCH_STEPS (1ull << 22)

struct engine_options {
	uint64_t max_chunk_seeds;   /* 0: as many as the limits allow */
	uint64_t max_dispatch_steps; /* tracking steps one GPU submit may run at most
				     * (items x max_steps); 0: ENGINE_MAX_DISPATCH_STEPS */
	uint64_t memory_budget;     /* bytes of GPU memory a job may use (inputs, tables,
				     * work and read-back buffers); 0: default
				     * (resident_budget), and never more than the
				     * device's memory limit leaves */
	uint64_t readback_bytes;    /* host memory of each of a device's two read-back
				     * buffers, at most; 0: 128 MiB. Smaller ones
				     * split batches into more pieces, same output */
	double chunk_seconds;       /* > 0: size chunks to take about this long, so that
				     * progress, streaming and cancellation stay responsive */
	engine_progress_fn *progress;   /* may be NULL */
	engine_compiling_fn *compiling; /* may be NULL */
	void *progress_userdata;        /* of both */
	engine_device_done_fn *device_done;   /* may be NULL */
	void *device_done_userdata;
	FILE *seeds_file;           /* TCK jobs with output.save_seeds: where the seeds
				     * text (tckgen -output_seeds) goes; NULL refuses them */
	bool writeback;             /* output_options.writeback: the output goes to disk
				     * while it is written (a file fsynced at the end) */
};

/* Why an end of a streamline stopped (proto/stop_reasons.def, in the order
 * of the track kernels' codes; the last, ENGINE_STOP_UNKNOWN, is the host's
 * for codes no kernel should write). */
enum engine_stop {
#define X(name, key, words) name,
#include "stop_reasons.def"
#undef X
	ENGINE_STOP_REASONS
};

/* The kernels a run dispatches: pass 1 (a seed's directions), pass 2 (a
 * streamline's points) and the packing of kept points for read-back. */
enum engine_kernel { ENGINE_KERNEL_INIT, ENGINE_KERNEL_TRACK, ENGINE_KERNEL_COMPACT, ENGINE_KERNELS };

struct engine_stats {
	uint64_t seeds;             /* used: all of them, or with seeds.select up to the
				     * seed of the last streamline selected */
	uint64_t streamlines;       /* written to the output */
	uint64_t select;            /* the job's seeds.select (0: none); fewer streamlines
				     * than this when the seeds ran out first */
	uint64_t points;
	uint64_t chunks;            /* seed chunks */
	uint64_t batches;           /* streamline batches */
	uint64_t pieces;            /* read-backs of them (engine_options.readback_bytes) */
	uint64_t submits;           /* kernel submits (each within max_dispatch_steps) */
	/* Streamline ends by why they stopped (enum engine_stop), two per
	 * tracked streamline: also those that min_length, max_length or a
	 * single point keep from the output; with seeds.select, not those
	 * tracked past the last one selected. */
	uint64_t stop_reasons[ENGINE_STOP_REASONS];
	uint64_t seeds_without_direction;  /* no initial direction: no streamline, no ends */
	/* Tracked streamlines the job's regions rejected (counted as the stop
	 * reasons; only with regions, has_regions): entered an exclude region,
	 * or missed an include region. */
	bool has_regions;
	uint64_t rejected_exclude_region;
	uint64_t rejected_include_missing;
	double load_seconds;        /* reading inputs, seeds, sphere */
	double upload_seconds;
	double compile_seconds;     /* pipelines compiled during this job */
	double track_seconds;       /* the run's wall time less encode_seconds and
				     * write_seconds, which the writer threads
				     * spend while the GPU tracks: less than the
				     * GPU's time when there are several batches */
	double kernel_seconds;      /* in the kernels' submits; overlaps
				     * encode_seconds and write_seconds */
	/* Each kernel's batches on the devices' own clocks (their timestamps:
	 * the host's submits and waits left out), summed over the devices; -1
	 * where a device keeps no clock. */
	double device_seconds[ENGINE_KERNELS];
	double encode_seconds;      /* the writer threads waiting for the encoders
				     * (on all cores) to turn read-back points into
				     * the format's records */
	double write_seconds;       /* the writer threads writing encoded records
				     * (the encoders of the next ones run
				     * meanwhile), flushing, and finishing the file
				     * (TRX: building its archive) */
	double prepare_seconds;     /* before tracking: the pipelines fetched (compiling
				     * included), work buffers allocated, output opened */
	const char *odf_storage;    /* resident_storage() of the inputs used */
	uint64_t gpu_input_bytes;   /* resident_bytes() of them */
	uint64_t gpu_work_bytes;    /* the run's own buffers on a device (the most of
				     * any device): with gpu_input_bytes, what the
				     * job takes of the GPU's memory */
	uint64_t gpu_work_reused_bytes;  /* of them, served from the spares of earlier
					  * runs (gpu_buffer_recycle), all devices' */
	/* The reference grid the tractogram was written on (dims, voxel-to-RAS+
	 * mm; zero until the writer starts). Kept because a TCK file does not
	 * carry it and the API converts finished results between formats. */
	int64_t grid_dim[3];
	double grid_affine[4][4];
};

/* A device of a run and the inputs uploaded to it. */
struct engine_device {
	struct gpu_ctx *gpu;
	const struct resident *resident;
};

/* Runs job on seeds over the devices (each with its own upload of the same
 * inputs; one is the usual case) and writes the tractogram to out in
 * job->output_format (seekable: the count is patched). Seed chunks go to
 * whichever device is free, and each chunk's streamlines are written in
 * seed order, so the output is byte-identical to a one-device run. The
 * progress callback runs on one thread at a time, not always the caller's.
 * Returns 0 or a negative errno: -E2BIG when the job does not fit a device
 * (err says how much it needs), -ECANCELED when the progress callback asked
 * to stop, other codes with err's field "device" for GPU failures or
 * "output.path" for write failures. stats may be NULL; its load and upload
 * times are the caller's to fill. */
int engine_run(const struct engine_device *devs, size_t n_devs, const struct jobspec *job,
	       const struct inputs *in, struct seeds *seeds, const struct engine_options *opts,
	       FILE *out, struct engine_stats *stats, struct errbuf *err);

/* A kernel's key in the statistics' JSON and the log ("init"...); static. */
const char *engine_kernel_key(enum engine_kernel kernel);

/* A stop reason's key in the statistics' JSON ("stop_map"...) and its words
 * for people ("left the image"...); static strings. */
const char *engine_stop_key(enum engine_stop reason);
const char *engine_stop_words(enum engine_stop reason);

/* The ends counted in stats->stop_reasons: twice the streamlines tracked. */
uint64_t engine_stop_ends(const struct engine_stats *stats);

#endif
