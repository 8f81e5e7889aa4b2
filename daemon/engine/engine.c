/* SPDX-License-Identifier: MIT */
/*
 * engine: one tracking job from validated spec to tractogram records (see engine.h).
 *
 * Flow, on inputs already loaded (inputs.h) and uploaded (resident.h): plan
 * chunk and batch sizes from the device limits -> compile/fetch pipelines ->
 * allocate the work buffers (and upload ptt's tables) -> for each seed chunk:
 * pass 1 (prob_init: initial directions per seed), build the streamline list
 * on the host, then for each batch of streamlines pass 2 (prob_track; boot_*
 * and ptt_track for the other getters), read back only the points of kept
 * streamlines, and the device's writer thread has them encoded on all cores
 * and appended to the output (output_write_lines) while the next batch
 * tracks. The next batch's pass 2 is queued right behind a batch's
 * compaction, so that the GPU goes on while the host hands the batch to
 * the writer. Once a device tracks no more, its work buffers go back to its
 * spares and the caller's device_done (the CLI's inputs) runs on a thread
 * of its own while the writers and the end of the file finish.
 */
#include "engine/engine.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "formats/affine.h"
#include "models/boot.h"
#include "formats/compress.h"
#include "job/input_digest.h"
#include "job/inputs.h"
#include "engine/kernel_params.h"
#include "base/log.h"
#include "base/parallel.h"
#include "base/philox.h"
#include "engine/pft.h"
#include "engine/ptt.h"
#include "engine/resident.h"
#include "job/seeds.h"
#include "formats/merge.h"
#include "base/timing.h"
#include "formats/output.h"
#include "engine/paged_volume.h"
#include "models/sphere.h"
#include "formats/volume.h"

/* Lanes per workgroup to aim for: the subgroups of a workgroup share one copy
 * of the sphere in shared memory, and on an H100 prob tracking ran 8% faster
 * at 128 lanes and 16% at 256 than at 64 (more subgroups resident per SM). */
#define TARGET_WORKGROUP_LANES 256
#define FIRST_TIMED_CHUNK_SEEDS 256
#define CHUNKS_PER_DEVICE 8
#define MAX_CHUNK_SEEDS (1ull << 21)
#define SUBMIT_SECONDS 0.25
/* Each write slot's read-back buffer holds at most this much of a batch's
 * packed points by default: host memory the driver pins (slow to allocate
 * and free), so it is not sized for the worst case of every line running
 * max_steps; a batch whose kept points do not fit goes out in pieces. A
 * batch of BATCH_SLOT_BYTES' lines of 50 points (the HCP-sized phantom's)
 * fits; two of 256 MiB took an H100 0.07 s more to pin and 0.03 s more to
 * free (gpu/exp33.sh). */
#define DEFAULT_READBACK_BYTES (128ull << 20)
/* A batch's point slots (2 * max_steps + 1 points a line, most of them left
 * empty) take at most this much: the driver's time to allocate and free the
 * line buffers grows with their size (4 GiB, the binding limit, cost an H100
 * 0.1 s at each end of a 10 M-seed job), and 1.5 GiB still holds some 130,000
 * lines of max_steps 500, dozens of times what a GPU tracks at once, in the
 * same kernel time (gpu/exp33.sh). */
#define BATCH_SLOT_BYTES (3ull << 29)
/* Lines of a batch that keep one more thread encoding them busy enough to
 * be worth starting it: some 100 us of encoding against the tens of us a
 * thread takes to start. Low enough that the phantom jobs of the tests
 * (2,000 seeds) encode on two threads. */
#define ENCODER_MIN_LINES 512

struct job_plan {
	uint32_t subgroup;        /* lanes per item */
	uint32_t items;           /* items (subgroups) per workgroup */
	uint32_t max_peaks;       /* initial directions kept per seed, at most */
	uint32_t slot_points;     /* 2 * max_steps + 1 */
	uint32_t resume_bytes_per_line;  /* track.glsl's resume state (LOOP_LIMITED), else 0 */
	struct pft_plan pft;      /* tracking.pft's steps and scratch; zeroed without it */
	uint64_t chunk_seeds;
	uint64_t batch_lines;
	uint64_t readback_bytes;  /* of each write slot */
};

/* The buffers a batch of lines is tracked and packed in. */
struct line_buffers {
	struct gpu_buffer *points, *ranges, *dest;
	struct gpu_buffer *resume;          /* track.glsl's suspended streamlines */
	struct gpu_buffer *pft;             /* pft.glsl's particles, per streamline */
	struct gpu_buffer *packed;          /* a piece's kept points, packed for the
					     * copy to a write slot */
	/* Host-visible, so that the batch's submits carry them with no submit
	 * of their own: the ids the host writes and the track kernel reads
	 * (once a line), the ranges its last submit copies back, the
	 * destinations the host writes and the compaction's submit copies to
	 * dest. */
	struct gpu_buffer *line_id_host, *ranges_host, *dest_host;
};

struct job_gpu {
	struct gpu_pipeline *init, *track, *compact;
	const struct resident *res;
	struct gpu_buffer *seeds, *ndirs, *dirs;   /* the chunk's seeds and their directions */
	struct line_buffers lines;
	struct paged_volume odf_scale;        /* ptt: daemon/engine/ptt.h's tables for this job */
	struct gpu_buffer *lut;
	struct gpu_buffer *regions;         /* the job's regions (upload_regions), or NULL */
	struct gpu_buffer *cone_table;      /* CONE_LISTS' lists or CONE_MASKS' masks
					     * (upload_cone_table), else NULL */
};

/* A streamline's words in the track kernels' ranges (shaders/track.glsl). */
enum range_word {
	RANGE_FIRST_SLOT,
	RANGE_POINTS,
	RANGE_LENGTH,             /* in mm, float bits */
	RANGE_STOPS,              /* why each half stopped: count_stop_reasons() */
	RANGE_WORDS
};

/* Host-side arrays reused across chunks and batches. */
struct job_host {
	float *seed_xyz;          /* 3 * chunk_seeds */
	uint32_t *ndirs;          /* chunk_seeds */
	uint32_t *line_id;        /* 2 * chunk lines: (global seed, direction index) */
	float *compressed;        /* 3 * slot_points per encoder when output.compress,
				   * else NULL */
	uint32_t *kept;           /* slot_points per encoder: the indices compression
				   * kept, with it */
	struct compress_params compress;
};

#define DROP_LINE 0xffffffffu

/* A piece of a tracked batch on its way to the output: lines whose kept
 * points fit the read-back buffer (usually the whole batch). A device has
 * two: it fills one while its writer thread writes the other. */
struct write_slot {
	struct gpu_buffer *readback;   /* the piece's kept points, packed */
	uint32_t *ranges;              /* RANGE_WORDS per line */
	uint32_t *dest;                /* per line: first packed point, or DROP_LINE */
	uint32_t *seed_index;          /* per line: its seed's global index */
	float *seed_vox;               /* 3 per line with output.save_seeds: its seed
					* (voxels), else NULL */
	uint64_t n_lines;
	uint64_t chunk, end_seed;      /* its chunk's index, and the seed after the chunk */
	bool first_of_chunk, last_of_chunk;
	bool full;                     /* tracked, not yet written */
};

#define WRITE_SLOTS 2

/* ---- planning ----------------------------------------------------------- */

/* Peaks kept are pairwise more than min_separation_angle apart, so caps of
 * half that angle around them (and around their antipodes when |cos| is used)
 * are disjoint: n * 2 pi (1 - cos(a/2)) <= 4 pi, halved for axes. */
static uint32_t peak_bound(double min_separation_deg, bool symmetric, int nv)
{
	double cap = 1.0 - cos(min_separation_deg * M_PI / 360.0);
	double bound = floor((symmetric ? 1.0 : 2.0) / cap);

	return bound < (double)nv ? (uint32_t)bound : (uint32_t)nv;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* The words of the getter's state in the track kernels' resume buffer
 * (kernel_params.h): only ptt keeps one across steps. */
static uint32_t getter_words(const struct jobspec *job)
{
	return job->direction_getter == JOBSPEC_DG_PTT ? PTT_GETTER_WORDS : 0u;
}

/* resume.glsl's RESUME_WORDS: a status word, the walk and the getter's state. */
static uint32_t resume_words(const struct jobspec *job)
{
	return 1u + RESUME_WALK_WORDS + getter_words(job);
}

/* Shared memory of a kernel: per item (subgroup) and per workgroup. */
struct shared_use {
	uint32_t per_item, per_workgroup;
};

static uint32_t shared_bytes(struct shared_use u, uint32_t items)
{
	return items * u.per_item + u.per_workgroup;
}

/* The shared memory of the pass-1 and pass-2 kernels (their .glsl files
 * declare it): per subgroup, prob and boot keep a float per vertex for the
 * PMF (pmf.glsl), pass 1 and boot one more for peak marks (peaks.glsl); SH
 * storage adds the interpolated coefficients; boot adds two floats per
 * diffusion-weighted volume and its coefficients (boot.glsl). ptt's pass 2
 * keeps the sphere's vertices, a vec3 (16 bytes) each, per workgroup.
 * prob's pass 2 with CONE_LISTS or CONE_MASKS keeps one word more per
 * subgroup (the vertex it stands on), within what pass 1 takes: not counted. */
static void kernel_shared_use(const struct jobspec *job, const struct inputs *in,
			      const struct resident *res, struct shared_use use[2])
{
	uint32_t nv = (uint32_t)inputs_sphere(in)->nv;
	uint32_t coefs;

	if (inputs_boot(in)) {
		uint32_t hr = (uint32_t)inputs_boot_matrices(in)->n_dwi;
		uint32_t nc = (uint32_t)inputs_boot_matrices(in)->n_coef;
		use[0] = (struct shared_use){ 4u * (2u * nv + 2u * hr + nc), 0 };
		use[1] = use[0];
		return;
	}
	coefs = resident_odf_storage(res) == JOBSPEC_ODF_SH ? resident_sh_coefs(res) : 0;
	use[0] = (struct shared_use){ 4u * (2u * nv + coefs), 0 };
	if (job->direction_getter == JOBSPEC_DG_PTT)
		use[1] = (struct shared_use){ 0, 16u * nv };
	else
		use[1] = (struct shared_use){ 4u * (nv + coefs), 0 };
}

/* Subgroups per workgroup: as many as fill TARGET_WORKGROUP_LANES while the
 * shared memory of both kernels fits. */
static int choose_items(const struct gpu_limits *lim, const struct jobspec *job,
			const struct inputs *in, const struct resident *res, uint32_t *ret,
			struct errbuf *err)
{
	struct shared_use use[2];
	uint32_t items = TARGET_WORKGROUP_LANES / lim->subgroup_size;

	kernel_shared_use(job, in, res, use);
	for (int k = 0; k < 2; k++)
		if (shared_bytes(use[k], 1) > lim->max_shared_bytes)
			return errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -E2BIG, "tracking.sphere",
					       "a sphere of %d vertices needs %u bytes of shared "
					       "memory, over this device's %u",
					       inputs_sphere(in)->nv, shared_bytes(use[k], 1),
					       lim->max_shared_bytes);
	if (items == 0)
		items = 1;
	while (items > 1 && (shared_bytes(use[0], items) > lim->max_shared_bytes ||
			     shared_bytes(use[1], items) > lim->max_shared_bytes ||
			     items * lim->subgroup_size > lim->max_workgroup_invocations))
		items--;
	*ret = items;
	return 0;
}

/* The step in mm as DIPY's trackers take it (step_size): step_mm, or the
 * step in voxels times the mean voxel size, the inverse of step_voxels below. */
static double step_in_mm(const struct jobspec *job, const struct volume *grid)
{
	double mm[3];

	if (job->step_mm)
		return job->step_mm;
	affine_voxel_sizes(grid->affine, mm);
	return job->step_size * (mm[0] + mm[1] + mm[2]) / 3.0;
}

/* What a run's buffers may lose to the rounding of their allocations' sizes
 * (to 64 KiB on some GPUs), which the memory limit counts. */
#define ALLOCATION_ROUNDING_BYTES (2ull << 20)

/* The GPU memory a run's work and read-back buffers may take on its device:
 * what the job's budget leaves after its inputs and tables (tables bytes; at
 * least RESIDENT_MIN_WORK_BYTES), and no more than the memory limit leaves
 * after all that the device holds (warm inputs of other jobs, staging). */
static int work_room(struct gpu_ctx *gpu, const struct inputs *in, const struct resident *res,
		     const struct engine_options *opts, uint64_t tables, uint64_t *ret,
		     struct errbuf *err)
{
	const struct gpu_limits *lim = gpu_get_limits(gpu);
	uint64_t budget = resident_budget(lim, opts->memory_budget);
	uint64_t used = resident_bytes(res) + tables, free = gpu_memory_free(gpu);

	/* A cached upload may come from a job with a larger budget. */
	if (resident_bytes(res) >= budget)
		return errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -E2BIG, inputs_grid_field(in),
				       "the inputs need %.1f MiB of GPU memory, over the job's "
				       "budget of %.1f MiB", (double)resident_bytes(res) / (1 << 20),
				       (double)budget / (1 << 20));
	if (free < RESIDENT_MIN_WORK_BYTES)
		return errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -E2BIG, GPU_MEMORY_LIMIT_FIELD,
				       "the GPU memory limit of %.1f MiB leaves %.1f MiB for "
				       "tracking beside the %.1f MiB tractd holds on the device "
				       "(this job's inputs: %.1f MiB), under the %.1f MiB it needs "
				       "at least: raise the limit (gpu_memory_limit; tractd run "
				       "--gpu-memory)", (double)lim->memory_limit / (1 << 20),
				       (double)free / (1 << 20),
				       (double)gpu_buffer_bytes(gpu) / (1 << 20),
				       (double)resident_bytes(res) / (1 << 20),
				       (double)RESIDENT_MIN_WORK_BYTES / (1 << 20));
	*ret = budget > used && budget - used > RESIDENT_MIN_WORK_BYTES ? budget - used
									: RESIDENT_MIN_WORK_BYTES;
	*ret = min_u64(*ret, free - ALLOCATION_ROUNDING_BYTES);
	return 0;
}

/* Plans a run's chunks and batches within room bytes of GPU memory
 * (work_room): three read-back sized buffers (the write slots' two and the
 * compaction's on the GPU) of at most a sixth of it each, then two thirds
 * of the rest for streamlines and a third for seeds. */
static int plan_work(const struct gpu_limits *lim, const struct jobspec *job,
		     const struct inputs *in, const struct resident *res,
		     struct seeds *seeds, const struct engine_options *opts, uint64_t room,
		     struct job_plan *plan, struct errbuf *err)
{
	uint64_t buffer_limit = min_u64(lim->max_binding_bytes, lim->max_alloc_bytes);
	uint64_t work, line_slot_bytes, per_line, per_seed;
	int r;

	r = choose_items(lim, job, in, res, &plan->items, err);
	if (r < 0)
		return r;
	plan->subgroup = lim->subgroup_size;
	plan->max_peaks = peak_bound(job->min_separation_angle, inputs_symmetric(in),
				     inputs_sphere(in)->nv);
	plan->slot_points = 2u * (uint32_t)job->max_steps + 1u;
	plan->resume_bytes_per_line = lim->loop_limited ? 4u * resume_words(job) : 0u;
	r = pft_plan(job, step_in_mm(job, inputs_grid(in)), &plan->pft, err);
	if (r < 0)
		return r;

	line_slot_bytes = 12ull * plan->slot_points;
	plan->readback_bytes = opts->readback_bytes ? opts->readback_bytes : DEFAULT_READBACK_BYTES;
	plan->readback_bytes = min_u64(plan->readback_bytes, min_u64(room / 6, buffer_limit));
	if (plan->readback_bytes < line_slot_bytes)
		plan->readback_bytes = line_slot_bytes;
	/* The two write slots' read-back buffers and the packed buffer the
	 * compaction fills on the GPU. */
	work = room > 3 * plan->readback_bytes ? room - 3 * plan->readback_bytes : 0;

	/* Two thirds of the work budget for streamlines: point slots on the GPU,
	 * range, destination, particle filtering's scratch, and the
	 * host-visible id (seed, direction), range and destination. */
	per_line = line_slot_bytes + 8 + 2 * (4 * RANGE_WORDS + 4) + plan->resume_bytes_per_line +
		   4ull * plan->pft.line_words;
	plan->batch_lines = min_u64(min_u64(buffer_limit, BATCH_SLOT_BYTES) / line_slot_bytes,
				    work * 2 / 3 / per_line);
	if (plan->resume_bytes_per_line)
		plan->batch_lines = min_u64(plan->batch_lines,
					    (buffer_limit - 4) / plan->resume_bytes_per_line);
	if (plan->pft.line_words)
		plan->batch_lines = min_u64(plan->batch_lines,
					    buffer_limit / (4ull * plan->pft.line_words));
	/* The rest for seeds: position, direction count, directions. */
	per_seed = 12 + 4 + 12ull * plan->max_peaks;
	plan->chunk_seeds = min_u64(buffer_limit / (12ull * plan->max_peaks), work / 3 / per_seed);
	plan->chunk_seeds = min_u64(plan->chunk_seeds, seeds_count(seeds));
	/* The chunk's host arrays grow with it (16 bytes a seed and 8 for each
	 * of its possible streamlines: 120 at 13 peaks): a cap keeps a large
	 * GPU budget from costing gigabytes of host memory; two million seeds
	 * keep the largest GPU busy already. */
	plan->chunk_seeds = min_u64(plan->chunk_seeds, MAX_CHUNK_SEEDS);
	if (opts->max_chunk_seeds)
		plan->chunk_seeds = min_u64(plan->chunk_seeds, opts->max_chunk_seeds);
	/* No more lines than the job's seeds can start: a small job's batch
	 * (and its point and read-back buffers) is sized by its seeds, not by
	 * the device (4 GiB of points on a large GPU for 1,000 seeds); one
	 * batch holds them all either way, so the output is the same. */
	plan->batch_lines = min_u64(plan->batch_lines, seeds_count(seeds) * plan->max_peaks);
	/* Line ids and slot offsets are 32-bit in the kernels. */
	plan->batch_lines = min_u64(plan->batch_lines, UINT32_MAX / plan->slot_points / 3);
	if (plan->batch_lines == 0 || plan->chunk_seeds == 0)
		return errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -E2BIG, "tracking.max_steps",
				       "a streamline of up to %u points does not fit this "
				       "device's buffer limit of %llu bytes, or the job's %.1f "
				       "MiB of GPU memory for tracking", plan->slot_points,
				       (unsigned long long)buffer_limit, (double)room / (1 << 20));
	/* No more than a batch's points, and at least one whole streamline, so
	 * that every piece makes progress. */
	plan->readback_bytes = min_u64(plan->readback_bytes, line_slot_bytes * plan->batch_lines);
	log_debug("plan: %u lanes x %u items per workgroup, %u peaks/seed, %llu seeds/chunk, "
		  "%llu streamlines/batch, %.1f MiB read-back per slot", plan->subgroup, plan->items,
		  plan->max_peaks, (unsigned long long)plan->chunk_seeds,
		  (unsigned long long)plan->batch_lines, (double)plan->readback_bytes / (1 << 20));
	return 0;
}

/* ---- GPU resources ------------------------------------------------------ */

/* Bindings of the kernels (see their .comp headers); prob binds the SH
 * sampling matrix after these with SH storage, and prob's track kernel the
 * ODF's maxima and the cone lists with CONE_LISTS, or the cone masks with
 * CONE_MASKS. */
#define PROB_INIT_BINDINGS 7
#define PROB_TRACK_BINDINGS 9
#define BOOT_INIT_BINDINGS 8
#define BOOT_TRACK_BINDINGS 12
#define PTT_TRACK_BINDINGS 11
#define COMPACT_BINDINGS 4
/* A track kernel binds tracking.pft's scratch and the job's regions after
 * its own buffers. */
#define MAX_BINDINGS (BOOT_TRACK_BINDINGS + 2)

/* The most a kernel gets: the common ones, a getter's, pft's and regions'. */
#define MAX_DEFINES 32
#define DEFINE_LEN 48

struct defines {
	char text[MAX_DEFINES][DEFINE_LEN];
	const char *list[MAX_DEFINES + 1];
	int n;
};

static void define(struct defines *d, const char *name, long long value)
{
	assert(d->n < MAX_DEFINES);
	snprintf(d->text[d->n], DEFINE_LEN, "%s=%lld", name, value);
	d->list[d->n] = d->text[d->n];
	d->list[++d->n] = NULL;
}

static void boot_defines(const struct inputs *in, struct defines *d)
{
	define(d, "T", inputs_dwi(in)->dim[3]);
	define(d, "NB0", inputs_n_b0(in));
	define(d, "HR", inputs_boot_matrices(in)->n_dwi);
	define(d, "NC", inputs_boot_matrices(in)->n_coef);
	define(d, "MODEL_CSA", inputs_boot_model(in) == BOOT_MODEL_CSA);
}

/* Whether the ODF kernels read the ODF a 64-bit word per load
 * (ODF_PAIR_LOADS, pmf.glsl): two float32 values or four float16 ones. On
 * CPU devices (lavapipe), where each lane's load is a scalar load of its own,
 * this halves (float32) or quarters (float16) the loads that dominate a
 * step. GPUs load a subgroup's consecutive values together and keep the
 * one-value path. Needs 64-bit integers and sampled storage whose voxels
 * start 8-byte aligned: an even number of float32 vertices, a multiple of 4
 * of float16 ones. */
static bool odf_pair_loads(const struct gpu_limits *lim, enum jobspec_odf_storage storage,
			   int nv)
{
	return gpu_cpu_kernels(lim) && lim->shader_int64 &&
	       ((storage == JOBSPEC_ODF_FLOAT32 && nv % 2 == 0) ||
		(storage == JOBSPEC_ODF_FLOAT16 && nv % 4 == 0));
}

/* Whether the ODF kernels of a GPU read sampled storage four vertices per
 * load (ODF_VEC4_LOADS, pmf.glsl): 16 bytes of float32 or 8 of float16, which
 * a voxel's start allows when the vertex count is a multiple of 4. On an
 * H100 float32 took a quarter of the load instructions and 8 % of the 10 M
 * job's kernel time (5.62 -> 5.19 s, registers 127 -> 118 in pass 2). CPU
 * devices take the 64-bit words. */
static bool odf_vec4_loads(const struct gpu_limits *lim, enum jobspec_odf_storage storage,
			   int nv)
{
	return !odf_pair_loads(lim, storage, nv) && storage != JOBSPEC_ODF_SH && nv % 4 == 0;
}

/* Whether a value at the 8 corners of an interpolation, which every lane of
 * a subgroup needs (the stop map's, the ODF's page spots and maxima), is
 * loaded once per corner, lane q loading corner q, and passed between the
 * lanes (CORNER_LANES, interp.glsl): on CPU devices (lavapipe) each lane's
 * load is a scalar load of its own, so every lane loading all 8 corners costs
 * 8 times the loads. The corners are summed in the same order, so the
 * streamlines stay the same to the bit. Needs a lane per corner. GPUs load
 * a subgroup's equal addresses together and keep the plain loops. */
static bool corner_lanes(const struct gpu_limits *lim, uint32_t subgroup)
{
	return gpu_cpu_kernels(lim) && subgroup >= 8;
}

/* Whether prob's pass 1 lists each seed's local maxima and takes its peaks
 * from that list (PEAK_LISTS, peaks.glsl) instead of marking them by vertex
 * and reading every vertex's mark in each round of the peak selection: on
 * CPU devices (lavapipe) each lane's load is a scalar load of its own, and a
 * seed has a handful of maxima among the sphere's vertices. The same peaks
 * in the same order. boot keeps the marks, which its steps read by vertex;
 * GPUs read a subgroup's consecutive marks together and keep them too. */
static bool peak_lists(const struct gpu_limits *lim, const struct inputs *in)
{
	return gpu_cpu_kernels(lim) && !inputs_boot(in);
}

/* Whether the ODF kernels read half the sphere (ODF_MIRRORED, pmf.glsl):
 * where the ODF's values at every antipodal pair are equal to the bit
 * (DIPY's sampled ODFs are) and the sphere's second half is its first
 * negated, the PMF's second half is its first, read once. The same PMF
 * from half the loads: on an H100 the HCP-sized 10 M job's pass 2 took
 * 2.29 s instead of 3.13 s, and lavapipe's bench case (README) 3.8 s
 * instead of 5.0 s on one thread; the same bytes. Sampled storage only:
 * SH storage samples the coefficients at each step. */
static bool odf_mirrored(const struct inputs *in, const struct resident *res)
{
	return inputs_symmetric(in) && inputs_mirrored(in) &&
	       sphere_mirrored(inputs_sphere(in)) && resident_odf_storage(res) != JOBSPEC_ODF_SH;
}

/* odf.glsl's ODF_STORAGE codes. */
static int odf_storage_code(enum jobspec_odf_storage storage)
{
	return storage == JOBSPEC_ODF_SH ? 2 : storage == JOBSPEC_ODF_FLOAT16 ? 1 : 0;
}

static uint32_t prob_bindings(const struct resident *res, uint32_t base)
{
	return base + (resident_odf_storage(res) == JOBSPEC_ODF_SH);
}

/* Spheres up to this size get cone lists or masks (their nv^2 dot products
 * take about 20 ms at the bound; the masks are 4 MiB there). */
#define CONE_TABLE_MAX_VERTICES 4096

/* Whether prob's track kernel reads the ODF within the cone only, found
 * among each vertex's listed neighbours (CONE_LISTS, prob_track.comp): on
 * CPU devices, where a step's loads set its time, with the maxima that
 * bound the PMF's (resident.h's odf_max, found for sampled storage on CPU
 * devices) and without angular weights. GPUs coalesce the whole sphere's
 * loads and keep reading it all. */
static bool cone_lists(const struct jobspec *job, const struct inputs *in,
		       const struct resident *res)
{
	return job->direction_getter == JOBSPEC_DG_PROB && !inputs_boot(in) &&
	       resident_bindings(res).odf_max && job->angular_weight <= 0 &&
	       inputs_sphere(in)->nv <= CONE_TABLE_MAX_VERTICES;
}

/* Whether prob's track kernel, reading the whole sphere, tells which
 * vertices lie in the cone from masks of each vertex's neighbours
 * (CONE_MASKS, prob_track.comp) instead of a dot product per vertex: where
 * it takes no cone lists. A step's direction stands on a vertex, whose
 * masks give the answer for all but the vertices on the cone's edge. On an
 * H100 pass 2 took 0.634 s with the dot products, 0.574 s with the masks
 * (README, "The kernels on the device's clock"). */
static bool cone_masks(const struct jobspec *job, const struct inputs *in,
		       const struct resident *res)
{
	return job->direction_getter == JOBSPEC_DG_PROB && !inputs_boot(in) &&
	       !cone_lists(job, in, res) && inputs_sphere(in)->nv <= CONE_TABLE_MAX_VERTICES;
}

/* The bindings of prob's cone tables. */
static uint32_t cone_table_bindings(const struct jobspec *job, const struct inputs *in,
				    const struct resident *res)
{
	return cone_lists(job, in, res) ? 2 : cone_masks(job, in, res) ? 1 : 0;
}

static void ptt_defines(const struct jobspec *job, const struct inputs *in,
			struct defines *d)
{
	define(d, "PROBE_QUALITY", job->probe_quality);
	define(d, "PROBE_COUNT", job->probe_count);
	define(d, "REJECTION_SAMPLES", job->rejection_samples);
	define(d, "REJECTION_TRIES", job->rejection_tries);
	define(d, "LUT_RES", ptt_lut_res(inputs_sphere(in)->nv));
}

/* x's bits, for a define that a shader reads back exactly with uintBitsToFloat. */
static uint32_t float_bits(float x)
{
	uint32_t bits;

	memcpy(&bits, &x, sizeof(bits));
	return bits;
}

/* tracking.pft's shape for pft.glsl, and its scratch binding: n_bindings,
 * the first after the getter's own. Every track kernel gets PFT
 * (track.glsl tests it); only prob's may have it on (check_pft). */
static void pft_defines(const struct job_plan *plan, const struct jobspec *job,
			uint32_t n_bindings, struct defines *d)
{
	define(d, "PFT", job->pft);
	if (!job->pft)
		return;
	define(d, "PFT_PARTICLES", job->pft_particles);
	define(d, "PFT_BACK_STEPS", plan->pft.back_steps);
	define(d, "PFT_FRONT_STEPS", plan->pft.front_steps);
	define(d, "PFT_MAX_TRIALS", job->pft_max_trials);
	define(d, "PFT_LINE_WORDS", plan->pft.line_words);
	define(d, "PFT_BINDING", n_bindings);
	/* Off at 0, as DIPY's test (max < 0) never passes an end: those
	 * kernels are built without it. */
	if (job->pft_min_wm_pve > 0)
		define(d, "PFT_MIN_WM_PVE_BITS", float_bits((float)job->pft_min_wm_pve));
}

/* The resume buffer's layout for a track kernel, so that its words are
 * counted in one place (kernel_params.h) for the host and the shaders. */
static void resume_defines(const struct jobspec *job, struct defines *d)
{
	define(d, "WALK_WORDS", RESUME_WALK_WORDS);
	define(d, "GETTER_WORDS", getter_words(job));
	if (job->direction_getter == JOBSPEC_DG_PTT)
		define(d, "ARC_WORDS", PTT_ARC_WORDS);
}

/* Whether the job has regions (regions.include or regions.exclude). */
static bool has_regions(const struct jobspec *job)
{
	return job->n_include_regions + job->n_exclude_regions > 0;
}

/* The buffers a track kernel binds, less the job's regions: those come
 * after them (track.glsl's REGIONS_BINDING). */
static uint32_t track_binding_count(const struct jobspec *job, const struct inputs *in,
				    const struct resident *res)
{
	if (inputs_boot(in))
		return BOOT_TRACK_BINDINGS;
	if (job->direction_getter == JOBSPEC_DG_PTT)
		return prob_bindings(res, PTT_TRACK_BINDINGS);
	return prob_bindings(res, PROB_TRACK_BINDINGS) + cone_table_bindings(job, in, res);
}

/* The buffers a track kernel binds after its getter's own, and their
 * defines: tracking.pft's scratch (pft.glsl's PFT_BINDING), then the job's
 * regions (track.glsl's REGIONS_BINDING); a job with neither compiles the
 * kernels as before. Returns the track kernel's binding count. */
static uint32_t optional_track_defines(const struct job_plan *plan, const struct jobspec *job,
				       const struct inputs *in, const struct resident *res,
				       struct defines *d)
{
	uint32_t n = track_binding_count(job, in, res);

	pft_defines(plan, job, n, d);
	n += job->pft ? 1u : 0u;
	if (!has_regions(job))
		return n;
	define(d, "REGIONS", 1);
	define(d, "REGIONS_BINDING", n);
	return n + 1;
}

/* Gets a run's pipelines from a device, telling the caller once
 * (engine_options.compiling) when one is in no cache: the first run of a
 * configuration compiles for seconds, minutes on lavapipe. */
struct pipeline_source {
	struct gpu_ctx *gpu;
	const struct engine_options *opts;
	bool told;
};

static int get_pipeline(struct pipeline_source *src, const char *shader, const struct defines *d,
			uint32_t n_buffers, struct gpu_pipeline **ret, struct errbuf *err)
{
	if (!src->told && src->opts->compiling && !gpu_pipeline_cached(src->gpu, shader, d->list)) {
		src->told = true;
		src->opts->compiling(src->opts->progress_userdata,
				     gpu_get_limits(src->gpu)->device_name);
	}
	return gpu_pipeline_get(src->gpu, shader, d->list, n_buffers, sizeof(struct kernel_params),
				ret, err);
}

static int get_pipelines(struct pipeline_source *src, const struct jobspec *job,
			 const struct job_plan *plan, const struct inputs *in,
			 struct job_gpu *g, struct errbuf *err)
{
	struct defines d = { .n = 0 };
	const struct resident *res = g->res;
	uint32_t track_bindings;
	int r;

	define(&d, "SG", plan->subgroup);
	define(&d, "ITEMS", plan->items);
	define(&d, "NV", inputs_sphere(in)->nv);
	define(&d, "MAX_PEAKS", plan->max_peaks);
	define(&d, "SYMMETRIC", inputs_symmetric(in));
	define(&d, "LOOP_LIMITED", gpu_get_limits(src->gpu)->loop_limited);
	define(&d, "CORNER_LANES", corner_lanes(gpu_get_limits(src->gpu), plan->subgroup));
	define(&d, "PEAK_LISTS", peak_lists(gpu_get_limits(src->gpu), in));
	define(&d, "STOPPING", job->stopping);
	/* Off, the kernels are today's; on, the weight is a push constant, so
	 * that each weight does not compile a pipeline of its own. */
	define(&d, "ANGULAR_WEIGHT", job->angular_weight > 0);
	r = get_pipeline(src, "compact.comp", &d, COMPACT_BINDINGS, &g->compact, err);
	if (r < 0 || !inputs_boot(in)) {
		define(&d, "ODF_STORAGE", odf_storage_code(resident_odf_storage(res)));
		define(&d, "ODF_PAIR_LOADS", odf_pair_loads(gpu_get_limits(src->gpu),
							    resident_odf_storage(res),
							    inputs_sphere(in)->nv));
		define(&d, "ODF_VEC4_LOADS", odf_vec4_loads(gpu_get_limits(src->gpu),
							    resident_odf_storage(res),
							    inputs_sphere(in)->nv));
		define(&d, "NC", resident_sh_coefs(res));
		define(&d, "ODF_MIRRORED", odf_mirrored(in, res));
		define(&d, "CONE_LISTS", cone_lists(job, in, res));
		define(&d, "CONE_MASKS", cone_masks(job, in, res));
		if (r == 0)
			r = get_pipeline(src, "prob_init.comp", &d,
					 prob_bindings(res, PROB_INIT_BINDINGS), &g->init, err);
		if (r < 0)
			return r;
		if (job->direction_getter == JOBSPEC_DG_PTT &&
		    resident_odf_storage(res) == JOBSPEC_ODF_SH)
			/* Sampling SH at every probe point gave far shorter
			 * streamlines than float32 on lavapipe, and different ones
			 * for equivalent orders of the sums: refused until that is
			 * understood. */
			return errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -E2BIG,
					       "tracking.odf_storage", "ptt tracks the ODF as "
					       "float32 or float16, and these inputs are on the "
					       "GPU as SH coefficients (neither fits the budget): "
					       "raise the GPU memory budget, use a smaller sphere "
					       "or crop the volume");
		resume_defines(job, &d);
		track_bindings = optional_track_defines(plan, job, in, res, &d);
		if (job->direction_getter == JOBSPEC_DG_PTT) {
			ptt_defines(job, in, &d);
			return get_pipeline(src, "ptt_track.comp", &d, track_bindings, &g->track,
					    err);
		}
		return get_pipeline(src, "prob_track.comp", &d, track_bindings, &g->track, err);
	}
	boot_defines(in, &d);
	define(&d, "DWI_BINDING", BOOT_INIT_BINDINGS - 1);
	r = get_pipeline(src, "boot_init.comp", &d, BOOT_INIT_BINDINGS, &g->init, err);
	d.n--;
	define(&d, "DWI_BINDING", BOOT_TRACK_BINDINGS - 1);
	resume_defines(job, &d);
	track_bindings = optional_track_defines(plan, job, in, res, &d);
	if (r == 0)
		r = get_pipeline(src, "boot_track.comp", &d, track_bindings, &g->track, err);
	return r;
}

static int new_buffer(struct gpu_ctx *gpu, uint64_t bytes, enum gpu_memory kind,
		      struct gpu_buffer **ret, struct errbuf *err)
{
	return gpu_buffer_new(gpu, bytes ? bytes : 4, kind, ret, err);
}

/* The chunk's buffers: its seeds and their initial directions. The line
 * buffers come once a chunk's streamlines are listed (grow_line_buffers). */
static int alloc_seed_buffers(struct gpu_ctx *gpu, const struct job_plan *plan,
			      struct job_gpu *g, struct errbuf *err)
{
	uint64_t s = plan->chunk_seeds;
	int r = new_buffer(gpu, 12 * s, GPU_MEMORY_DEVICE, &g->seeds, err);

	if (r == 0)
		r = new_buffer(gpu, 4 * s, GPU_MEMORY_DEVICE, &g->ndirs, err);
	if (r == 0)
		r = new_buffer(gpu, 12ull * plan->max_peaks * s, GPU_MEMORY_DEVICE, &g->dirs, err);
	return r;
}

/* A write slot's read-back buffer when the line buffers hold lines: the
 * plan's, or less when that many lines of max_steps fill less. */
static uint64_t slot_readback_bytes(const struct job_plan *plan, uint64_t lines)
{
	return min_u64(plan->readback_bytes, 12ull * plan->slot_points * lines);
}

/* The buffers of a batch of l lines: on the GPU their point slots, ranges,
 * destinations, resume state, particle filtering's scratch and a piece's
 * packed points; in host-visible memory their ids, ranges and
 * destinations. */
static int alloc_line_buffers(struct gpu_ctx *gpu, const struct job_plan *plan, uint64_t l,
			      struct line_buffers *s, struct errbuf *err)
{
	uint64_t slot_bytes = 12ull * plan->slot_points * l;
	int r = new_buffer(gpu, slot_bytes, GPU_MEMORY_DEVICE, &s->points, err);

	if (r == 0)
		r = new_buffer(gpu, 4 * RANGE_WORDS * l, GPU_MEMORY_DEVICE, &s->ranges, err);
	if (r == 0)
		r = new_buffer(gpu, 4 * l, GPU_MEMORY_DEVICE, &s->dest, err);
	if (r == 0)
		r = new_buffer(gpu, 4 + plan->resume_bytes_per_line * l, GPU_MEMORY_DEVICE, &s->resume,
			       err);
	if (r == 0)
		r = new_buffer(gpu, 4ull * plan->pft.line_words * l, GPU_MEMORY_DEVICE, &s->pft, err);
	if (r == 0)
		r = new_buffer(gpu, slot_readback_bytes(plan, l), GPU_MEMORY_DEVICE, &s->packed, err);
	if (r == 0)
		r = new_buffer(gpu, 8 * l, GPU_MEMORY_READBACK, &s->line_id_host, err);
	if (r == 0)
		r = new_buffer(gpu, 4 * RANGE_WORDS * l, GPU_MEMORY_READBACK, &s->ranges_host, err);
	if (r == 0)
		r = new_buffer(gpu, 4 * l, GPU_MEMORY_READBACK, &s->dest_host, err);
	return r;
}

/* Lets the line buffers go (as spares, for the larger ones that replace
 * them or a later job of the same shape). */
static void free_line_buffers(struct gpu_ctx *gpu, struct line_buffers *s)
{
	struct gpu_buffer *all[] = { s->points, s->ranges, s->dest, s->resume, s->pft, s->packed,
				     s->line_id_host, s->ranges_host, s->dest_host };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		gpu_buffer_recycle(gpu, all[i]);
	memset(s, 0, sizeof(*s));
}

/* The lines the line buffers are sized for when a chunk lists n_lines:
 * the power of two at or above, so that a warm daemon's jobs of one shape
 * (whose chunks list about as many lines) ask for the same sizes and get
 * the last one's spares, and never more than the plan's batch. A batch
 * still holds min(n_lines, batch_lines) lines, as before: the output does
 * not change. */
static uint64_t line_capacity_for(const struct job_plan *plan, uint64_t n_lines)
{
	uint64_t capacity = 1;

	while (capacity < n_lines && capacity < plan->batch_lines)
		capacity <<= 1;
	return min_u64(capacity, plan->batch_lines);
}

static void free_job_gpu(struct gpu_ctx *gpu, struct job_gpu *g)
{
	struct gpu_buffer *all[] = { g->seeds, g->ndirs, g->dirs, g->lut, g->regions,
				     g->cone_table };

	/* Kept for the next run of the same shape (a warm daemon's next job). */
	free_line_buffers(gpu, &g->lines);
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		gpu_buffer_recycle(gpu, all[i]);
	paged_free(gpu, &g->odf_scale);
	memset(g, 0, sizeof(*g));
}

static int alloc_host(const struct job_plan *plan, struct job_host *h, struct errbuf *err)
{
	uint64_t s = plan->chunk_seeds;
	uint64_t chunk_lines = s * plan->max_peaks;

	h->seed_xyz = malloc(12 * s);
	h->ndirs = malloc(4 * s);
	h->line_id = malloc(8 * chunk_lines);
	if (!h->seed_xyz || !h->ndirs || !h->line_id)
		return errbuf_set(err, -ENOMEM, "", "out of host memory for %llu seeds per chunk",
				  (unsigned long long)s);
	return 0;
}

/* output.compress: a scratch streamline for compress_streamline per
 * encoder thread (output_write_lines' parts). Each compresses one
 * streamline at a time, so the longest one bounds it. */
static int alloc_compress(const struct job_plan *plan, const struct jobspec *job,
			  const double affine[4][4], struct job_host *h, struct errbuf *err)
{
	if (!job->compress)
		return 0;
	compress_params_init(&h->compress, job->compress_tolerance_mm,
			     job->compress_max_segment_mm, affine);
	h->compressed = malloc(12ull * plan->slot_points * PARALLEL_MAX_PARTS);
	h->kept = malloc(4ull * plan->slot_points * PARALLEL_MAX_PARTS);
	if (!h->compressed || !h->kept)
		return errbuf_set(err, -ENOMEM, "", "out of host memory for a streamline of %u "
				  "points", plan->slot_points);
	return 0;
}

static void free_host(struct job_host *h)
{
	free(h->seed_xyz);
	free(h->ndirs);
	free(h->line_id);
	free(h->compressed);
	free(h->kept);
	memset(h, 0, sizeof(*h));
}

/* ---- running ------------------------------------------------------------ */

/* What the devices of one run share. Chunks are handed out in seed order
 * and written in that order: a device that has tracked a batch of chunk k
 * waits until chunk k - 1 is written (its turn), so the output does not
 * depend on how many devices there are or how fast each is. lock guards
 * the fields after it; out and stats are the turn holder's. */
struct run_shared {
	const struct jobspec *job;
	const struct inputs *in;
	struct seeds *seeds;
	const struct engine_options *opts;
	struct output_writer *out;
	struct engine_stats *stats;
	uint64_t first, total;    /* seeds [first, total): a shard's (seeds_range), or all */
	uint64_t next_to_write;   /* the turn holder's: the seed after the last one whose
				   * streamlines were written or passed over (stats->seeds) */
	uint64_t chunk_limit;     /* the smallest of the devices' chunk sizes */
	double t0;
	pthread_mutex_t lock;
	pthread_cond_t changed;   /* the turn, a slot or the error changed */
	uint64_t next_seed;       /* first seed of the next chunk handed out */
	uint64_t next_chunk;      /* index of that chunk */
	uint64_t turn;            /* the chunk being written */
	uint64_t written;         /* streamlines written by the chunks before turn */
	bool selected;            /* seeds.select streamlines are written: no more chunks */
	char shard_tag[SHARD_TAG_MAX];  /* the record a shard's output carries (merge.h) */
	int error;                /* the first failure (its errbuf is failed_err) */
	struct errbuf failed_err;
	/* progress_lock keeps the callback on one thread at a time and guards
	 * what was last reported, so that seeds_done only grows. */
	pthread_mutex_t progress_lock;
	uint64_t seeds_reported;
	uint64_t streamlines_written;   /* at the last chunk written */
};

/* One device's part of a run. */
struct job_run {
	struct run_shared *sh;
	struct gpu_ctx *gpu;
	const struct resident *res;
	const struct jobspec *job;
	const struct inputs *in;
	struct job_plan plan;
	struct job_gpu g;
	struct job_host h;
	struct kernel_params params;
	struct engine_stats stats;   /* this device's kernels, chunks, batches */
	double rate[ENGINE_KERNELS]; /* items per second of each kernel */
	uint64_t chunk;              /* index of the chunk it tracks */
	uint64_t chunk_lines;        /* its streamlines */
	uint64_t batch_first_line;   /* the first of them in the batch being tracked */
	uint64_t line_capacity;      /* lines the line buffers hold now (grow_line_buffers) */
	uint64_t bytes_before, reused_before;   /* the device's, before this run's buffers */
	struct write_slot slots[WRITE_SLOTS];
	unsigned next_fill, next_write;   /* the slot tracked into next, written next */
	bool tracking_done;          /* no more slots will be filled */
	/* Where the device's threads waited (its debug line at the end):
	 * tracking for a slot its writer still writes; the writer for the
	 * chunks before its own, tracked by other devices, to be written. */
	double slot_wait_seconds, turn_wait_seconds;
	double listing_seconds;      /* its chunks' seeds and lists, pass 1 left out */
	/* Its batches' host steps around the track kernel: writing the line
	 * ids, waiting for the tracking, and the pieces (their compaction
	 * included); and growing the line buffers and write slots. */
	double ids_seconds, tracking_wait_seconds, pieces_seconds, grow_seconds;
	double tracked_seconds, written_seconds;   /* its threads' ends, from the run's start */
	struct errbuf err;           /* the tracking thread's */
	struct errbuf write_err;     /* the writer thread's */
	pthread_t thread, writer, releaser;
	bool started, writer_started, releasing;
	size_t index;                /* in engine_run's devs */
	bool work_released;          /* release_device_work done */
};

/* The write slots for batches of up to l lines. */
static int alloc_slots(struct job_run *run, uint64_t l, struct errbuf *err)
{
	int r = 0;

	for (unsigned k = 0; r == 0 && k < WRITE_SLOTS; k++) {
		struct write_slot *w = &run->slots[k];
		r = new_buffer(run->gpu, slot_readback_bytes(&run->plan, l), GPU_MEMORY_READBACK,
			       &w->readback, err);
		w->ranges = malloc(4 * RANGE_WORDS * l);
		w->dest = malloc(4 * l);
		w->seed_index = malloc(4 * l);
		w->seed_vox = run->job->save_seeds ? malloc(12 * l) : NULL;
		if (r == 0 && (!w->ranges || !w->dest || !w->seed_index ||
			       (run->job->save_seeds && !w->seed_vox)))
			r = errbuf_set(err, -ENOMEM, "", "out of host memory for %llu streamlines per "
				       "batch", (unsigned long long)l);
	}
	return r;
}

static void free_slots(struct job_run *run)
{
	for (unsigned k = 0; k < WRITE_SLOTS; k++) {
		gpu_buffer_recycle(run->gpu, run->slots[k].readback);
		free(run->slots[k].ranges);
		free(run->slots[k].dest);
		free(run->slots[k].seed_index);
		free(run->slots[k].seed_vox);
	}
	memset(run->slots, 0, sizeof(run->slots));
}

/* The step in voxels the kernels take: tracking.step_size, or step_mm over
 * the mean voxel size (DIPY's TrackerParameters.average_voxel_size; exact on
 * isotropic grids, where DIPY's per-axis scaling is the same step). */
static double step_voxels(const struct jobspec *job, const struct volume *grid)
{
	double mm[3];

	if (!job->step_mm)
		return job->step_size;
	affine_voxel_sizes(grid->affine, mm);
	return job->step_mm / ((mm[0] + mm[1] + mm[2]) / 3.0);
}

/* step_mm has the same bound in voxels as step_size, checked once the grid
 * is known. */
static int check_step(const struct jobspec *job, const struct inputs *in, struct errbuf *err)
{
	double step = step_voxels(job, inputs_grid(in));

	if (step <= JOBSPEC_MAX_STEP_VOXELS)
		return 0;
	return errbuf_set(err, -EINVAL, "tracking.step_mm", "must be at most %g voxels on this "
			  "grid, got %g mm = %g voxels", JOBSPEC_MAX_STEP_VOXELS, job->step_mm, step);
}

/* The kernels' cos_max_angle. */
static float cos_max_angle(const struct jobspec *job)
{
	return (float)cos(job->max_angle * M_PI / 180.0);
}

static void fill_params(struct job_run *run)
{
	const struct jobspec *job = run->job;
	const struct volume *grid = inputs_grid(run->in);
	struct kernel_params *p = &run->params;
	double step = step_voxels(job, grid);

	memset(p, 0, sizeof(*p));
	for (int i = 0; i < 3; i++)
		p->dim[i] = (int32_t)grid->dim[i];
	p->step_size = (float)step;
	p->cos_max_angle = cos_max_angle(job);
	p->pmf_threshold = (float)job->pmf_threshold;
	p->fa_threshold = (float)job->fa_threshold;
	p->relative_peak_threshold = (float)job->relative_peak_threshold;
	p->cos_min_separation_angle = (float)cos(job->min_separation_angle * M_PI / 180.0);
	p->min_signal = (float)job->model.min_signal;
	/* Lengths in mm of voxel-space steps: |A d|^2 = d^T (A^T A) d. */
	for (int r = 0, k = 0; r < 3; r++)
		for (int c = r; c < 3; c++, k++) {
			const double (*A)[4] = grid->affine;
			p->metric[k] = (float)(A[0][r] * A[0][c] + A[1][r] * A[1][c] +
					       A[2][r] * A[2][c]);
		}
	philox_key_from_seed(job->rng_seed, p->philox_key);
	p->max_steps = (uint32_t)job->max_steps;
	p->max_attempts = (uint32_t)job->max_attempts;
	p->loop_count = 2;
	/* DIPY: the curvature of the circle on which a step of step_size turns
	 * by max_angle, 2 sin(max_angle / 2) / step_size. */
	p->max_curvature = (float)(2.0 * sin(job->max_angle * M_PI / 360.0) / step);
	p->probe_step = (float)(job->probe_length / (job->probe_quality - 1));
	p->probe_radius = (float)job->probe_radius;
	p->angular_weight = (float)job->angular_weight;
}

/* Items one submit may carry. The first submit of a kernel carries
 * ENGINE_MAX_DISPATCH_STEPS worst-case steps (every item running max_steps),
 * which any device runs quickly; later ones about SUBMIT_SECONDS of work at
 * the rate measured so far, so a fast GPU is not starved of items and no
 * submit runs long enough to trip a GPU watchdog. --max-dispatch-steps
 * fixes the bound instead. */
static uint64_t items_per_submit(const struct job_run *run, double rate)
{
	uint64_t fixed = run->sh->opts->max_dispatch_steps;
	uint64_t first = (fixed ? fixed : ENGINE_MAX_DISPATCH_STEPS) / (uint64_t)run->job->max_steps;
	double sized = rate * SUBMIT_SECONDS;

	first = first ? first : 1;
	if (fixed || sized <= (double)first)
		return first;
	return sized >= (double)UINT32_MAX ? UINT32_MAX : (uint64_t)sized;
}

/* Called after each submit of a dispatch with the end of the items done. */
typedef int submitted_fn(struct job_run *run, uint64_t items_done, struct errbuf *err);

/* A copy recorded with a kernel's dispatches: before the first or after
 * the last (src NULL: none). */
struct side_copy {
	struct gpu_buffer *src, *dst;
	struct gpu_copy_region region;
};

/* A kernel's items [first_item, n) on the device, in submits of
 * items_per_submit: start_dispatch waits for all but the last, which
 * finish_dispatch waits for, so that the host may do other work while it
 * runs. */
struct dispatch {
	enum engine_kernel kernel;
	struct gpu_pipeline *pipe;
	struct gpu_buffer *const *buffers;
	uint64_t first_item, n;
	submitted_fn *submitted;    /* may be NULL */
	struct side_copy before, after;
	/* The submit in flight: its items [start, end). */
	struct gpu_ticket ticket;
	uint64_t start, end, submits;
	double t0, t_submit;
	bool pending;
};

/* Adds a finished batch's device time to the kernel's (stays -1 on a
 * device that keeps no clock). */
static void add_device_time(struct job_run *run, enum engine_kernel kernel)
{
	double took = gpu_batch_device_seconds(run->gpu);

	if (took >= 0.0)
		run->stats.device_seconds[kernel] += took;
	else
		run->stats.device_seconds[kernel] = -1.0;
}

static int record_side_copy(struct job_run *run, const struct side_copy *c, struct errbuf *err)
{
	return c->src && c->region.size ? gpu_batch_copy(run->gpu, c->src, c->dst, &c->region, err)
					 : 0;
}

/* Records and submits the items [d->start, d->end), split where the
 * workgroup count limit requires it, with the side copies of the first and
 * the last submit; leaves it in flight. */
static int submit_items(struct job_run *run, struct dispatch *d, struct errbuf *err)
{
	const struct gpu_limits *lim = gpu_get_limits(run->gpu);
	uint64_t per_dispatch = (uint64_t)lim->max_workgroup_count_x * run->plan.items;
	int r = gpu_batch_begin(run->gpu, err);

	d->t_submit = timing_now();
	if (r == 0 && d->start == d->first_item)
		r = record_side_copy(run, &d->before, err);
	for (uint64_t first = d->start; r == 0 && first < d->end; first += per_dispatch) {
		uint64_t count = min_u64(per_dispatch, d->end - first);
		run->params.first_item = (uint32_t)first;
		run->params.item_count = (uint32_t)count;
		r = gpu_batch_dispatch(run->gpu, d->pipe, d->buffers, &run->params,
				       (uint32_t)((count + run->plan.items - 1) / run->plan.items),
				       err);
	}
	if (r == 0 && d->end == d->n)
		r = record_side_copy(run, &d->after, err);
	if (r == 0)
		r = gpu_batch_submit(run->gpu, &d->ticket, err);
	d->pending = r == 0;
	d->submits++;
	run->stats.kernel_seconds += timing_now() - d->t_submit;
	return r;
}

/* Waits for the submit in flight; run->rate keeps the kernel's items per
 * second (from the submit to the end of the wait: with the host busy
 * elsewhere meanwhile, a little less than the device's). */
static int wait_items(struct job_run *run, struct dispatch *d, struct errbuf *err)
{
	double t_wait = timing_now(), took;
	int r = 0;

	if (!d->pending)
		return 0;
	d->pending = false;
	r = gpu_batch_wait(run->gpu, d->ticket, err);
	if (r == 0)
		add_device_time(run, d->kernel);
	took = timing_now() - d->t_submit;
	if (took > 0.0)
		run->rate[d->kernel] = (double)(d->end - d->start) / took;
	run->stats.kernel_seconds += timing_now() - t_wait;
	if (r == 0 && d->submitted)
		r = d->submitted(run, d->end, err);
	return r;
}

/* Starts the kernel's items: every submit but the last is waited for
 * here. Items carry their global index (first_item), so the split changes
 * no output. */
static int start_dispatch(struct job_run *run, struct dispatch *d, struct errbuf *err)
{
	int r = 0;

	d->t0 = timing_now();
	d->submits = 0;
	d->pending = false;
	for (d->end = d->first_item; r == 0 && d->end < d->n;) {
		r = wait_items(run, d, err);
		d->start = d->end;
		d->end = min_u64(d->n, d->start + items_per_submit(run, run->rate[d->kernel]));
		if (r == 0)
			r = submit_items(run, d, err);
	}
	return r;
}

/* Waits for the kernel's last submit. */
static int finish_dispatch(struct job_run *run, struct dispatch *d, struct errbuf *err)
{
	int r = wait_items(run, d, err);

	run->stats.submits += d->submits;
	log_debug("%s: %llu items in %llu submit(s), %.4f s", engine_kernel_key(d->kernel),
		  (unsigned long long)(d->n - d->first_item), (unsigned long long)d->submits,
		  timing_now() - d->t0);
	return r;
}

/* A kernel's items [first_item, n), waited for. submitted may be NULL. */
static int dispatch_items(struct job_run *run, enum engine_kernel kernel,
			  struct gpu_pipeline *pipe, struct gpu_buffer *const *buffers,
			  uint64_t first_item, uint64_t n, submitted_fn *submitted,
			  struct errbuf *err)
{
	struct dispatch d = { .kernel = kernel, .pipe = pipe, .buffers = buffers,
			      .first_item = first_item, .n = n, .submitted = submitted };
	int r = start_dispatch(run, &d, err);

	return r == 0 ? finish_dispatch(run, &d, err) : r;
}

/* Whether an end stopped where DIPY's LocalTracking calls it valid
 * (ENDPOINT or OUTSIDEIMAGE): the stop map (the threshold criterion's
 * ENDPOINT), the image's edge or the include map; no direction, max_steps
 * and the exclude map are not. */
static bool end_valid(uint32_t code)
{
	return code == ENGINE_STOP_MAP || code == ENGINE_STOP_OUTSIDE ||
	       code == ENGINE_STOP_INCLUDE;
}

/* Whether a line's two ends are valid (tracking.return_all false keeps
 * only those). */
static bool line_valid(uint32_t stops)
{
	return end_valid(stops & 0xffu) && end_valid((stops >> 8) & 0xffu);
}

/* Why the job's regions reject a line (its ranges' stop word), as counted. */
enum region_verdict {
	REGIONS_KEEP,
	REGIONS_EXCLUDED,         /* a half entered an exclude region */
	REGIONS_INCLUDE_MISSING,  /* it missed an include region (track.glsl) */
};

#define STOPS_INCLUDE_MISSING (1u << 16)   /* track.glsl's INCLUDE_MISSING */

static enum region_verdict region_verdict(uint32_t stops)
{
	if ((stops & 0xffu) == ENGINE_STOP_EXCLUDE_REGION ||
	    ((stops >> 8) & 0xffu) == ENGINE_STOP_EXCLUDE_REGION)
		return REGIONS_EXCLUDED;
	return stops & STOPS_INCLUDE_MISSING ? REGIONS_INCLUDE_MISSING : REGIONS_KEEP;
}

/* Ends the piece of the batch's lines that starts at line first: as many
 * lines as the read-back buffer holds the kept points of. Each streamline to
 * keep (>= 2 points, length within the job's limits, not rejected by the
 * job's regions, both ends valid unless return_all) gets its place there;
 * the others are DROP_LINE and never read back. Returns the piece's end. */
static uint64_t assign_piece(struct job_run *run, uint64_t first, uint64_t n_lines,
			     uint64_t *points)
{
	const struct line_buffers *s = &run->g.lines;
	const uint32_t *ranges = gpu_buffer_host(s->ranges_host);
	uint32_t *dest = gpu_buffer_host(s->dest_host);
	uint64_t capacity = slot_readback_bytes(&run->plan, run->line_capacity) / 12, next = 0, i;

	for (i = first; i < n_lines; i++) {
		uint32_t count = ranges[RANGE_WORDS * i + RANGE_POINTS];
		uint32_t stops = ranges[RANGE_WORDS * i + RANGE_STOPS];
		float length_mm;

		memcpy(&length_mm, &ranges[RANGE_WORDS * i + RANGE_LENGTH], sizeof(length_mm));
		if (count < 2 || length_mm < run->job->min_length ||
		    length_mm > run->job->max_length || region_verdict(stops) != REGIONS_KEEP ||
		    (!run->job->return_all && !line_valid(stops))) {
			dest[i] = DROP_LINE;
			continue;
		}
		/* A streamline is never longer than a slot, which the plan keeps
		 * within the capacity: a piece holds at least one. */
		if (next + count > capacity)
			break;
		dest[i] = (uint32_t)next;
		next += count;
	}
	*points = next;
	return i;
}

/* The seed of a slot's line i in RAS+ mm, as saved per streamline. */
static void seed_ras(const struct job_run *run, const struct write_slot *w, uint64_t i,
		     float out[3])
{
	double vox[3], ras[3];

	for (int a = 0; a < 3; a++)
		vox[a] = w->seed_vox[3 * i + (uint64_t)a];
	affine_apply(inputs_grid(run->in)->affine, vox, ras);
	for (int a = 0; a < 3; a++)
		out[a] = (float)ras[a];
}

/* The index of the batch's line i's seed among the points written. The
 * kernel stores a line's backward half below its seed's slot, and slots are
 * 2 * max_steps + 1 apart with the seed at max_steps, so the first point's
 * slot gives the backward count. Compression may drop the seed: then the
 * first kept point past it is named (tckgen's seeds never meet that case). */
static uint32_t seed_vertex(const struct job_run *run, const struct write_slot *w, uint64_t i,
			    const uint32_t *kept, uint32_t count)
{
	uint32_t max_steps = (uint32_t)run->job->max_steps;
	uint32_t first_slot = w->ranges[RANGE_WORDS * i + RANGE_FIRST_SLOT];
	uint32_t v = max_steps - first_slot % (2 * max_steps + 1);

	if (!kept)
		return v;
	for (uint32_t k = 0; k < count; k++)
		if (kept[k] >= v)
			return k;
	return count - 1;
}

/* Whether seeds.select streamlines are written (never without select). */
static bool selection_full(const struct run_shared *sh)
{
	return sh->job->seed_select && sh->stats->streamlines >= sh->job->seed_select;
}

/* A kernel's stop code as counted: ENGINE_STOP_UNKNOWN past the known ones. */
static enum engine_stop stop_from_code(uint32_t code)
{
	return code < ENGINE_STOP_UNKNOWN ? (enum engine_stop)code : ENGINE_STOP_UNKNOWN;
}

/* Counts, in write order, the seeds up to end_seed: those that had no
 * initial direction (no line of theirs came by) and the seeds done. */
static void pass_seeds(struct run_shared *sh, uint64_t end_seed)
{
	if (end_seed <= sh->next_to_write)
		return;
	sh->stats->seeds_without_direction += end_seed - sh->next_to_write;
	sh->next_to_write = end_seed;
}

/* Counts a tracked line of the slot, written or not, as the turn holder:
 * its seed and why both of its ends stopped. The kernel packs the backward
 * half's code in bits 0-7 and the forward half's in bits 8-15, and bit 16
 * when it missed an include region; with regions, the rejections. Counted
 * here, in seed order, rather than as tracked, so that with seeds.select the
 * counts stop at the last line written whatever the chunks. */
static void count_line(struct run_shared *sh, const struct write_slot *w, uint64_t i)
{
	uint32_t stops = w->ranges[RANGE_WORDS * i + RANGE_STOPS];

	pass_seeds(sh, w->seed_index[i]);
	sh->next_to_write = (uint64_t)w->seed_index[i] + 1;
	sh->stats->stop_reasons[stop_from_code(stops & 0xffu)]++;
	sh->stats->stop_reasons[stop_from_code((stops >> 8) & 0xffu)]++;
	switch (region_verdict(stops)) {
	case REGIONS_EXCLUDED:
		sh->stats->rejected_exclude_region++;
		break;
	case REGIONS_INCLUDE_MISSING:
		sh->stats->rejected_include_missing++;
		break;
	case REGIONS_KEEP:
		break;
	}
}

/* A slot's lines as the output's encoders read them (slot_line). */
struct slot_lines {
	const struct job_run *run;
	const struct write_slot *w;
	const float *packed;
};

/* Line i of a slot: its kept points, compressed into the encoder part's
 * own scratch when the job asks, and its seed; none when it was dropped. */
static void slot_line(void *userdata, uint64_t i, unsigned part, struct output_line *line)
{
	const struct slot_lines *s = userdata;
	const struct job_run *run = s->run;
	const struct write_slot *w = s->w;
	const struct job_host *h = &run->h;
	uint32_t count = w->ranges[RANGE_WORDS * i + RANGE_POINTS];
	const float *points;
	const uint32_t *kept = NULL;

	if (w->dest[i] == DROP_LINE)
		return;
	points = s->packed + 3ull * w->dest[i];
	/* After the length filter: min/max length judge the whole line. */
	if (h->compressed) {
		float *out = h->compressed + 3ull * run->plan.slot_points * part;
		uint32_t *k = h->kept + (uint64_t)run->plan.slot_points * part;

		count = compress_streamline(&h->compress, points, count, k, out);
		points = out;
		kept = k;
	}
	line->points_vox = points;
	line->n = count;
	line->dps.seed_index = w->seed_index[i];
	line->dps.seed_vertex = seed_vertex(run, w, i, kept, count);
	line->dps.direction_getter = (uint8_t)run->job->direction_getter;
	if (w->seed_vox) {
		seed_ras(run, w, i, line->seed_ras);
		line->dps.seed_ras = line->seed_ras;
	}
}

/* The slot's lines to hand to the encoders, each counted (count_line) in
 * seed order: all of them, or with seeds.select those up to the last one
 * selected (a line not dropped is one streamline written). */
static uint64_t lines_to_write(struct run_shared *sh, const struct write_slot *w)
{
	uint64_t select = sh->job->seed_select, written = sh->stats->streamlines, i;

	for (i = 0; i < w->n_lines && !(select && written >= select); i++) {
		count_line(sh, w, i);
		written += w->dest[i] != DROP_LINE;
	}
	return i;
}

/* Appends the packed streamlines of a slot's batch to the output, encoded
 * on as many cores as the batch keeps busy; with seeds.select, up to the
 * last one selected: the lines after it are neither written nor counted. */
static int write_batch(struct job_run *run, const struct write_slot *w, struct errbuf *err)
{
	struct slot_lines lines = { run, w, gpu_buffer_host(w->readback) };
	struct output_write_stats ws = { 0 };
	struct engine_stats *stats = run->sh->stats;
	uint64_t n = lines_to_write(run->sh, w);
	int r = output_write_lines(run->sh->out, n, slot_line, &lines,
				   parallel_parts(n, ENCODER_MIN_LINES), &ws);

	stats->streamlines += ws.streamlines;
	stats->points += ws.points;
	stats->encode_seconds += ws.encode_seconds;
	stats->write_seconds += ws.write_seconds;
	if (r < 0)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, r, "output.path",
				       "cannot write the tractogram: %s", strerror(-r));
	return 0;
}

static void getter_track_bindings(const struct job_run *run, struct gpu_buffer **b)
{
	const struct job_gpu *g = &run->g;
	const struct line_buffers *s = &g->lines;
	const struct resident_bindings res = resident_bindings(g->res);

	if (run->job->direction_getter == JOBSPEC_DG_PTT) {
		struct gpu_buffer *const ptt[PTT_TRACK_BINDINGS + 1] = {
			res.odf, res.stop, res.vertices, g->odf_scale.table, g->lut, g->seeds,
			g->dirs, s->line_id_host, s->points, s->ranges, s->resume, res.odf_basis };
		memcpy(b, ptt, sizeof(ptt));
		return;
	}
	if (!inputs_boot(run->in)) {
		struct gpu_buffer *prob[PROB_TRACK_BINDINGS + 2] = {
			res.odf, res.stop, res.vertices, g->seeds, g->dirs, s->line_id_host,
			s->points, s->ranges, s->resume, NULL, NULL };
		/* After the common ones: SH storage's basis, then the cone's
		 * tables: the maxima and lists, or the masks. */
		uint32_t n = PROB_TRACK_BINDINGS;
		if (res.odf_basis)
			prob[n++] = res.odf_basis;
		if (cone_lists(run->job, run->in, g->res))
			prob[n++] = res.odf_max;
		prob[n] = g->cone_table;
		memcpy(b, prob, sizeof(prob));
		return;
	}
	struct gpu_buffer *const boot[BOOT_TRACK_BINDINGS] = {
		res.stop, res.vertices, res.nbr_offset, res.nbr, res.matrices, g->seeds,
		g->dirs, s->line_id_host, s->points, s->ranges, s->resume, res.dwi };
	memcpy(b, boot, sizeof(boot));
}

/* The getter's track kernel's buffers, then tracking.pft's scratch and the
 * job's regions if any (optional_track_defines' order). */
static void track_bindings(const struct job_run *run, struct gpu_buffer **b)
{
	uint32_t n = track_binding_count(run->job, run->in, run->g.res);

	getter_track_bindings(run, b);
	if (run->job->pft)
		b[n++] = run->g.lines.pft;
	if (run->g.regions)
		b[n] = run->g.regions;
}

static void init_bindings(const struct job_run *run, struct gpu_buffer **b)
{
	const struct job_gpu *g = &run->g;
	const struct resident_bindings res = resident_bindings(g->res);

	if (!inputs_boot(run->in)) {
		struct gpu_buffer *const prob[PROB_INIT_BINDINGS + 1] = {
			res.odf, res.vertices, res.nbr_offset, res.nbr, g->seeds, g->ndirs,
			g->dirs, res.odf_basis };
		memcpy(b, prob, sizeof(prob));
		return;
	}
	struct gpu_buffer *const boot[BOOT_INIT_BINDINGS] = {
		res.vertices, res.nbr_offset, res.nbr, res.matrices, g->seeds, g->ndirs,
		g->dirs, res.dwi };
	memcpy(b, boot, sizeof(boot));
}

/* Waits until the chunk before `chunk` is written. -ECANCELED when a device
 * failed or the job was cancelled meanwhile. */
static int wait_turn(struct job_run *run, uint64_t chunk, struct errbuf *err)
{
	struct run_shared *sh = run->sh;
	double t0 = timing_now();
	int r = 0;

	pthread_mutex_lock(&sh->lock);
	while (sh->turn != chunk && !sh->error)
		pthread_cond_wait(&sh->changed, &sh->lock);
	if (sh->turn != chunk)
		r = errbuf_set(err, -ECANCELED, "", "stopped: another device failed");
	pthread_mutex_unlock(&sh->lock);
	run->turn_wait_seconds += timing_now() - t0;
	return r;
}

/* The slot to track into next, once the writer is done with it; NULL when
 * the run failed meanwhile. */
static struct write_slot *take_slot(struct job_run *run)
{
	struct run_shared *sh = run->sh;
	struct write_slot *w;
	double t0 = timing_now();

	pthread_mutex_lock(&sh->lock);
	while (run->slots[run->next_fill].full && !sh->error)
		pthread_cond_wait(&sh->changed, &sh->lock);
	w = sh->error ? NULL : &run->slots[run->next_fill];
	run->next_fill = (run->next_fill + 1) % WRITE_SLOTS;
	pthread_mutex_unlock(&sh->lock);
	run->slot_wait_seconds += timing_now() - t0;
	return w;
}

static void post_slot(struct job_run *run, struct write_slot *w)
{
	pthread_mutex_lock(&run->sh->lock);
	w->full = true;
	pthread_cond_broadcast(&run->sh->changed);
	pthread_mutex_unlock(&run->sh->lock);
}

/* Where a batch sits in its chunk, for the slots its pieces go out in. */
struct batch_place {
	uint64_t end_seed;        /* the seed after the chunk */
	bool first, last;         /* the chunk's first and last batch */
};

/* A batch of the chunk's lines [first_line, first_line + n_lines). */
struct batch {
	struct batch_place at;
	uint64_t first_line, n_lines;
	struct dispatch track;    /* its pass of the track kernel */
};

static int start_batch(struct job_run *run, struct batch *b, struct errbuf *err);

/* The seeds of a slot's lines: the writer needs them after the chunk's
 * arrays are rebuilt for the next chunk, which need not wait for it. */
static void copy_line_seeds(const struct job_run *run, struct write_slot *w, uint64_t first_line,
			    uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint32_t seed = run->h.line_id[2 * (first_line + i)];
		w->seed_index[i] = seed;
		if (w->seed_vox)
			memcpy(&w->seed_vox[3 * i],
			       &run->h.seed_xyz[3 * (uint64_t)(seed - run->params.first_seed)], 12);
	}
}

/* Packs the batch's lines [first, end), tracked, into a write slot for the
 * writer thread: while the compaction runs, the host copies the lines'
 * ranges, destinations and seeds into the slot, then queues the next
 * batch's tracking (next, unless NULL: it overwrites the line buffers, so
 * only after the batch's last piece) behind it. */
static int post_piece(struct job_run *run, const struct batch *b, uint64_t first, uint64_t end,
		      uint64_t points, struct batch *next, struct errbuf *err)
{
	const struct line_buffers *s = &run->g.lines;
	struct write_slot *w = take_slot(run);
	int r;

	if (!w)
		return errbuf_set(err, -ECANCELED, "", "stopped: another device failed");
	struct gpu_buffer *const pack_buffers[] = { s->points, s->ranges, s->dest, s->packed };
	struct dispatch compact = {
		.kernel = ENGINE_KERNEL_COMPACT, .pipe = run->g.compact, .buffers = pack_buffers,
		.first_item = first, .n = end,
		.before = { s->dest_host, s->dest, { 4 * first, 4 * first, 4 * (end - first) } },
		.after = { s->packed, w->readback, { 0, 0, 12 * points } },
	};
	r = start_dispatch(run, &compact, err);
	if (r < 0)
		return r;
	memcpy(w->ranges, (const uint32_t *)gpu_buffer_host(s->ranges_host) + RANGE_WORDS * first,
	       4 * RANGE_WORDS * (end - first));
	memcpy(w->dest, (const uint32_t *)gpu_buffer_host(s->dest_host) + first, 4 * (end - first));
	copy_line_seeds(run, w, b->first_line + first, end - first);
	r = next ? start_batch(run, next, err) : 0;
	if (r == 0)
		r = finish_dispatch(run, &compact, err);
	if (r < 0)
		return r;
	w->n_lines = end - first;
	w->chunk = run->chunk;
	w->end_seed = b->at.end_seed;
	w->first_of_chunk = b->at.first && first == 0;
	w->last_of_chunk = b->at.last && end == b->n_lines;
	post_slot(run, w);
	run->stats.pieces++;
	return 0;
}

/* Calls the progress callback (on one thread at a time) unless seeds_done
 * would not advance; written output is always reported, with the
 * streamlines written by then (seeds_done never goes back). Its answer
 * false cancels the run. */
static int report_progress(struct run_shared *sh, uint64_t seeds_done, bool written,
			   struct errbuf *err)
{
	const struct engine_options *o = sh->opts;
	bool go_on = true;

	if (!o->progress)
		return 0;
	pthread_mutex_lock(&sh->progress_lock);
	if (written)
		sh->streamlines_written = sh->stats->streamlines;
	if (written || seeds_done > sh->seeds_reported) {
		uint64_t done = seeds_done > sh->seeds_reported ? seeds_done : sh->seeds_reported;
		struct engine_progress p = { done - sh->first, sh->total - sh->first,
					     sh->streamlines_written, written };
		sh->seeds_reported = done;
		go_on = o->progress(o->progress_userdata, &p);
	}
	pthread_mutex_unlock(&sh->progress_lock);
	if (!go_on)
		return errbuf_set(err, -ECANCELED, "", "cancelled after %llu of %llu seeds",
				  (unsigned long long)(seeds_done - sh->first),
				  (unsigned long long)(sh->total - sh->first));
	return 0;
}

/* A submitted_fn of the track kernel's first pass: the seeds of the chunk
 * before its first line not yet tracked are done, once every chunk before
 * it is written (its turn), so that progress runs in seed order on any
 * number of devices. The chunk's end is reported when it is written. */
static int report_tracked(struct job_run *run, uint64_t items_done, struct errbuf *err)
{
	uint64_t next_line = run->batch_first_line + items_done;
	bool in_turn;

	if (next_line >= run->chunk_lines)
		return 0;
	pthread_mutex_lock(&run->sh->lock);
	in_turn = run->sh->turn == run->chunk;
	pthread_mutex_unlock(&run->sh->lock);
	return in_turn ? report_progress(run->sh, run->h.line_id[2 * next_line], false, err) : 0;
}

/* The most passes of the track kernel a batch can take: every pass but the
 * last takes each suspended line at least one step, or one particle
 * filtering retry, further (a line that stalls fails the job), and a line
 * has two halves of max_steps steps each with up to max_trials retries
 * (each of which may back up over max_steps steps at most). */
static uint64_t max_track_passes(const struct jobspec *job)
{
	uint64_t trials = job->pft ? (uint64_t)job->pft_max_trials : 0;

	return 2 * (trials + 1) * ((uint64_t)job->max_steps + 1) + 1;
}

/* A pass whose suspended lines could not go on: the device cuts a step, or a
 * particle filtering retry, that one dispatch cannot finish, every time. */
static int fail_stalled(const struct job_run *run, struct errbuf *err)
{
	const struct jobspec *job = run->job;

	if (job->pft)
		return errbuf_set(err, -EINVAL, "tracking.pft",
				  "a retry of %d particles over %u back and %u front steps "
				  "needs more loop iterations than this device (loop-limited, "
				  "as lavapipe) runs in one dispatch: use fewer particles or a "
				  "shorter back_mm/front_mm, or a GPU",
				  job->pft_particles, run->plan.pft.back_steps,
				  run->plan.pft.front_steps);
	return errbuf_set(err, -EINVAL, "tracking.sphere",
			  "one step needs more loop iterations than this device "
			  "(loop-limited, as lavapipe) runs in one dispatch: use a smaller "
			  "sphere, or a GPU");
}

/* Starts a pass of the track kernel over the batch, which copies the ranges
 * back after it (so that the last pass's are the host's). Left in flight. */
static int start_track_pass(struct job_run *run, struct batch *b, uint32_t pass,
			    struct errbuf *err)
{
	const struct line_buffers *s = &run->g.lines;
	struct gpu_buffer *buffers[MAX_BINDINGS];
	const uint32_t none = 0;
	int r = 0;

	track_bindings(run, buffers);
	b->track = (struct dispatch){
		.kernel = ENGINE_KERNEL_TRACK, .pipe = run->g.track, .buffers = buffers,
		.first_item = 0, .n = b->n_lines, .submitted = pass == 0 ? report_tracked : NULL,
		.after = { s->ranges, s->ranges_host, { 0, 0, 4 * RANGE_WORDS * b->n_lines } },
	};
	run->params.resuming = pass > 0;
	if (run->plan.resume_bytes_per_line)
		r = gpu_upload(run->gpu, s->resume, 0, &none, sizeof(none), err);
	if (r == 0)
		r = start_dispatch(run, &b->track, err);
	b->track.buffers = NULL;   /* recorded: the array goes with this call */
	run->params.resuming = 0;
	return r;
}

/* Queues the batch's tracking: its line ids go to the host-visible buffer,
 * and its first pass is left in flight. */
static int start_batch(struct job_run *run, struct batch *b, struct errbuf *err)
{
	double t0 = timing_now();

	memcpy(gpu_buffer_host(run->g.lines.line_id_host), run->h.line_id + 2 * b->first_line,
	       8 * b->n_lines);
	run->batch_first_line = b->first_line;
	run->ids_seconds += timing_now() - t0;
	return start_track_pass(run, b, 0, err);
}

/* Waits for the batch's tracking. On a LOOP_LIMITED device the kernel
 * suspends the streamlines whose loops the device would cut, and runs again
 * over the batch, resuming them, until none is left (shaders/track.glsl);
 * a line that stalls, or more passes than the lines' steps allow, fail. */
static int finish_tracking(struct job_run *run, struct batch *b, struct errbuf *err)
{
	const uint64_t max_passes = max_track_passes(run->job);
	uint32_t suspended = 0;
	int r = finish_dispatch(run, &b->track, err);

	for (uint32_t pass = 1; r == 0 && run->plan.resume_bytes_per_line; pass++) {
		r = gpu_download(run->gpu, run->g.lines.resume, 0, &suspended, sizeof(suspended),
				 err);
		if (r < 0 || suspended == 0)
			break;
		if (suspended & RESUME_STALLED)
			return fail_stalled(run, err);
		log_debug("track: %u streamlines suspended in pass %u", suspended, pass - 1);
		if (pass == max_passes)
			return errbuf_set_kind(err, ERR_KIND_DEVICE, -EIO, "",
					       "track: %u streamlines still suspended after %u "
					       "passes, the most their steps allow",
					       suspended, pass);
		r = start_track_pass(run, b, pass, err);
		if (r == 0)
			r = finish_dispatch(run, &b->track, err);
	}
	return r;
}

/* Hands the batch's kept lines to the writer, in as many pieces as the
 * read-back needs, and queues the next batch's tracking (unless NULL)
 * behind the last one's compaction. */
static int post_pieces(struct job_run *run, const struct batch *b, struct batch *next,
		       struct errbuf *err)
{
	double t0 = timing_now();
	int r = 0;

	for (uint64_t first = 0, end, points; r == 0 && first < b->n_lines; first = end) {
		end = assign_piece(run, first, b->n_lines, &points);
		r = post_piece(run, b, first, end, points, end == b->n_lines ? next : NULL, err);
	}
	run->pieces_seconds += timing_now() - t0;
	run->stats.batches++;
	return r;
}

/* The chunk's k-th batch. */
static void place_batch(struct job_run *run, uint64_t k, uint64_t n_lines, uint64_t end_seed,
			struct batch *b)
{
	uint64_t first = k * run->plan.batch_lines;

	b->first_line = first;
	b->n_lines = min_u64(run->plan.batch_lines, n_lines - first);
	b->at = (struct batch_place){ end_seed, first == 0, first + b->n_lines >= n_lines };
}

/* Tracks the chunk's n_lines lines in batches, each one's tracking queued
 * behind the compaction of the one before, so that the GPU goes from one
 * batch to the next without waiting for the host. */
static int run_batches(struct job_run *run, uint64_t n_lines, uint64_t end_seed,
		       struct errbuf *err)
{
	struct batch batches[2];
	int r;

	place_batch(run, 0, n_lines, end_seed, &batches[0]);
	r = start_batch(run, &batches[0], err);
	for (uint64_t k = 0; r == 0; k++) {
		struct batch *b = &batches[k % 2];
		struct batch *next = b->at.last ? NULL : &batches[(k + 1) % 2];
		double t0 = timing_now();

		r = finish_tracking(run, b, err);
		run->tracking_wait_seconds += timing_now() - t0;
		if (next)
			place_batch(run, k + 1, n_lines, end_seed, next);
		if (r == 0)
			r = post_pieces(run, b, next, err);
		if (!next)
			break;
	}
	return r;
}

/* A chunk without streamlines still posts an empty slot: its turn must pass. */
static int post_empty_chunk(struct job_run *run, uint64_t end_seed, struct errbuf *err)
{
	struct write_slot *w = take_slot(run);

	if (!w)
		return errbuf_set(err, -ECANCELED, "", "stopped: another device failed");
	w->n_lines = 0;
	w->chunk = run->chunk;
	w->end_seed = end_seed;
	w->first_of_chunk = true;
	w->last_of_chunk = true;
	post_slot(run, w);
	return 0;
}

/* Lists the chunk's streamlines: one per initial direction of each seed, in
 * (seed, direction) order (the writer counts the seeds that have none); with
 * tracking.max_cross, the first max_cross of them, as DIPY's LocalTracking.
 * The seeds and directions stay on the GPU, where the track kernels read
 * them by these ids. */
static uint64_t build_lines(struct job_run *run, uint64_t first_seed, uint64_t n_seeds)
{
	struct job_host *h = &run->h;
	uint32_t max_cross = run->job->max_cross ? (uint32_t)run->job->max_cross : UINT32_MAX;
	uint64_t n = 0;

	for (uint64_t s = 0; s < n_seeds; s++) {
		uint32_t n_dirs = h->ndirs[s] < max_cross ? h->ndirs[s] : max_cross;

		for (uint32_t d = 0; d < n_dirs; d++, n++) {
			h->line_id[2 * n] = (uint32_t)(first_seed + s);
			h->line_id[2 * n + 1] = d;
		}
	}
	return n;
}

/* Waits until the writer thread has written every slot (so that they can
 * be replaced); -ECANCELED when the run failed meanwhile. */
static int wait_slots_written(struct job_run *run, struct errbuf *err)
{
	struct run_shared *sh = run->sh;
	bool busy;

	pthread_mutex_lock(&sh->lock);
	do {
		busy = false;
		for (unsigned k = 0; k < WRITE_SLOTS; k++)
			busy = busy || run->slots[k].full;
		if (busy && !sh->error)
			pthread_cond_wait(&sh->changed, &sh->lock);
	} while (busy && !sh->error);
	pthread_mutex_unlock(&sh->lock);
	return busy ? errbuf_set(err, -ECANCELED, "", "stopped: another device failed") : 0;
}

/* The most seeds a chunk of the run can hold: the devices' limit, or with
 * a target chunk duration the rounds' bound (a chunk holds at most the
 * seeds handed out before it, so never more than half the run's after the
 * first), and with seeds.select at most the streamlines selected
 * (select_chunk_seeds' bound). */
static uint64_t largest_chunk_seeds(const struct run_shared *sh)
{
	uint64_t all = sh->total - sh->first, largest = all;

	if (sh->opts->chunk_seconds > 0.0)
		largest = all / 2 + 1 > FIRST_TIMED_CHUNK_SEEDS ? all / 2 + 1
								 : FIRST_TIMED_CHUNK_SEEDS;
	if (sh->job->seed_select)
		largest = min_u64(largest, sh->job->seed_select > FIRST_TIMED_CHUNK_SEEDS
						   ? sh->job->seed_select : FIRST_TIMED_CHUNK_SEEDS);
	return min_u64(sh->chunk_limit, largest);
}

/* The streamlines the run's largest chunk will likely have: this chunk's
 * per seed, over the largest chunk's seeds. The first chunk then sizes the
 * buffers once, where a daemon's rounds of doubling chunks grew them at
 * each round (ten growths, 0.7-1.0 s of a warm 10 M-seed job on an H100),
 * and the next job of that shape gets the same sizes back from the spares. */
static uint64_t lines_expected(const struct job_run *run, uint64_t n_seeds, uint64_t n_lines)
{
	double per_seed = (double)n_lines / (double)n_seeds;
	double lines = ceil(per_seed * (double)largest_chunk_seeds(run->sh));

	return lines > (double)n_lines ? (uint64_t)lines : n_lines;
}

/* Sizes the line buffers and the write slots by the streamlines a chunk
 * really has, known once pass 1 has found each seed's directions, rather
 * than by the plan's bound (every seed with max_peaks directions: 4.6 GiB
 * on an H100 for a 100,000-seed job). They only grow, a job's largest
 * chunk sizing them; the slots are replaced once the writer is done with
 * them (a pause of the tracking at each growth, seldom more than one a
 * job with lines_expected). */
static int grow_line_buffers(struct job_run *run, uint64_t n_lines, struct errbuf *err)
{
	uint64_t capacity = line_capacity_for(&run->plan, n_lines);
	double t0 = timing_now(), t_lines;
	int r;

	if (capacity <= run->line_capacity)
		return 0;
	r = wait_slots_written(run, err);
	if (r < 0)
		return r;
	free_slots(run);
	free_line_buffers(run->gpu, &run->g.lines);
	run->line_capacity = capacity;
	r = alloc_line_buffers(run->gpu, &run->plan, capacity, &run->g.lines, err);
	t_lines = timing_now();
	if (r == 0)
		r = alloc_slots(run, capacity, err);
	if (r == 0)
		log_debug("line buffers for %llu streamlines allocated in %.3f s, write slots in "
			  "%.3f s", (unsigned long long)capacity, t_lines - t0,
			  timing_now() - t_lines);
	run->grow_seconds += timing_now() - t0;
	return r;
}

static int run_chunk(struct job_run *run, uint64_t first_seed, uint64_t n_seeds, struct errbuf *err)
{
	struct job_gpu *g = &run->g;
	struct job_host *h = &run->h;
	struct gpu_buffer *buffers[MAX_BINDINGS];
	uint64_t n_lines;
	double t0 = timing_now(), t_init, t_listing;
	int r = seeds_fill(run->sh->seeds, first_seed, n_seeds, h->seed_xyz);

	init_bindings(run, buffers);
	/* Seed indices are 32-bit in the kernels' random streams (JOBSPEC_MAX_SEEDS). */
	run->params.first_seed = (uint32_t)first_seed;
	if (r < 0)
		return errbuf_set(err, r, "seeds", "cannot generate seeds %llu..%llu",
				  (unsigned long long)first_seed,
				  (unsigned long long)(first_seed + n_seeds));
	r = gpu_upload(run->gpu, g->seeds, 0, h->seed_xyz, 12 * n_seeds, err);
	t_init = timing_now();
	if (r == 0)
		r = dispatch_items(run, ENGINE_KERNEL_INIT, g->init, buffers, 0, n_seeds,
				   NULL, err);
	t_listing = timing_now();
	if (r == 0)
		r = gpu_download(run->gpu, g->ndirs, 0, h->ndirs, 4 * n_seeds, err);
	if (r < 0)
		return r;
	n_lines = build_lines(run, first_seed, n_seeds);
	run->chunk_lines = n_lines;
	run->listing_seconds += (t_init - t0) + (timing_now() - t_listing);
	log_debug("chunk %llu: %llu seeds, %llu streamlines, listed in %.4f s",
		  (unsigned long long)run->chunk, (unsigned long long)n_seeds,
		  (unsigned long long)n_lines, timing_now() - t0);
	if (n_lines == 0)
		r = post_empty_chunk(run, first_seed + n_seeds, err);
	else
		r = grow_line_buffers(run, lines_expected(run, n_seeds, n_lines), err);
	if (r == 0 && n_lines > 0)
		r = run_batches(run, n_lines, first_seed + n_seeds, err);
	run->stats.chunks++;
	return r;
}

/* With a target chunk duration, the first chunk is small and later ones are
 * sized from the rate measured so far (never above the devices' limit), and
 * hold at most as many seeds as were handed out before them: a job tracked
 * in less than the target (100,000 seeds on a large GPU) still goes out in
 * rounds that double, so that most of its result is written, and streamed
 * to a waiting client, while the rest is tracked rather than all at its
 * end; a long job reaches its rate-sized chunks within a few rounds. */
static uint64_t next_chunk_seeds(const struct run_shared *sh, uint64_t done, double elapsed)
{
	double target = sh->opts->chunk_seconds;
	uint64_t seeds = done > FIRST_TIMED_CHUNK_SEEDS ? done : FIRST_TIMED_CHUNK_SEEDS;
	double sized;

	if (target <= 0.0)
		return sh->chunk_limit;
	if (done == 0 || elapsed <= 0.0)
		return min_u64(sh->chunk_limit, FIRST_TIMED_CHUNK_SEEDS);
	sized = (double)done / elapsed * target;
	if (sized < (double)FIRST_TIMED_CHUNK_SEEDS)
		return min_u64(sh->chunk_limit, FIRST_TIMED_CHUNK_SEEDS);
	if (sized < (double)seeds)
		seeds = (uint64_t)sized;
	return min_u64(sh->chunk_limit, seeds);
}

/* With seeds.select, a chunk of about as many seeds as streamlines are
 * still missing (as of the chunks written), so that few seeds are tracked
 * past the last one selected; at least FIRST_TIMED_CHUNK_SEEDS, so that the
 * GPU is not starved by a handful. Called with the lock held. */
static uint64_t select_chunk_seeds(const struct run_shared *sh)
{
	uint64_t select = sh->job->seed_select;

	if (!select)
		return UINT64_MAX;
	return select - sh->written > FIRST_TIMED_CHUNK_SEEDS ? select - sh->written
							      : FIRST_TIMED_CHUNK_SEEDS;
}

/* Hands this device the next chunk: false when none is left, the
 * selection is written or the run stopped. */
static bool take_chunk(struct job_run *run, uint64_t *first, uint64_t *n)
{
	struct run_shared *sh = run->sh;
	bool got;

	pthread_mutex_lock(&sh->lock);
	got = !sh->error && !sh->selected && sh->next_seed < sh->total;
	if (got) {
		*first = sh->next_seed;
		/* Sized by the run's own seeds done (a shard starts at its first). */
		*n = min_u64(next_chunk_seeds(sh, sh->next_seed - sh->first,
					      timing_now() - sh->t0),
			     sh->total - sh->next_seed);
		*n = min_u64(*n, select_chunk_seeds(sh));
		run->chunk = sh->next_chunk++;
		sh->next_seed += *n;
	}
	pthread_mutex_unlock(&sh->lock);
	return got;
}

/* What the turn holder wrote goes out to the file, and to a daemon's
 * clients following the result, and is reported with the seeds done so far.
 * Called at each chunk's end and after each of its other batches, so that
 * a streamed answer trails the tracking by a batch, not by a chunk (0.2 s
 * at the end of a warm daemon's 10 M-seed job on an H100); the seeds done
 * move at chunk ends (finish_chunk's pass_seeds). */
static int publish_written(struct run_shared *sh, struct errbuf *err)
{
	double t0 = timing_now();
	int r = output_flush(sh->out);

	sh->stats->write_seconds += timing_now() - t0;
	if (r < 0)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -EIO, "output.path",
				       "cannot write the tractogram");
	return report_progress(sh, sh->next_to_write, true, err);
}

/* After a chunk is written (this device holds the turn): flushes the
 * output, reports progress and passes the turn on. Once seeds.select
 * streamlines are written, the seeds done stay at the last one used and no
 * more chunks are handed out. */
static int finish_chunk(struct job_run *run, uint64_t end_seed, struct errbuf *err)
{
	struct run_shared *sh = run->sh;
	int r;

	if (!selection_full(sh))
		pass_seeds(sh, end_seed);
	r = publish_written(sh, err);
	pthread_mutex_lock(&sh->lock);
	sh->written = sh->stats->streamlines;
	sh->selected = selection_full(sh);
	if (r == 0)
		sh->turn++;
	pthread_cond_broadcast(&sh->changed);
	pthread_mutex_unlock(&sh->lock);
	return r;
}

/* Records a failure; the first one is the run's. */
static void fail_run(struct run_shared *sh, int r, const struct errbuf *err)
{
	pthread_mutex_lock(&sh->lock);
	if (!sh->error) {
		sh->error = r;
		sh->failed_err = *err;
	}
	pthread_cond_broadcast(&sh->changed);
	pthread_mutex_unlock(&sh->lock);
}

/* Writes one slot: waits for its chunk's turn first, passes the turn on
 * after the chunk's last batch. */
static int write_slot(struct job_run *run, const struct write_slot *w)
{
	int r = w->first_of_chunk ? wait_turn(run, w->chunk, &run->write_err) : 0;

	if (r == 0 && w->n_lines > 0)
		r = write_batch(run, w, &run->write_err);
	if (r == 0 && w->last_of_chunk)
		r = finish_chunk(run, w->end_seed, &run->write_err);
	else if (r == 0 && w->n_lines > 0)
		r = publish_written(run->sh, &run->write_err);
	return r;
}

/* The device's writer thread: writes its slots in the order they were
 * filled until tracking is done and every slot is written. */
static void *write_slots(void *arg)
{
	struct job_run *run = arg;
	struct run_shared *sh = run->sh;

	for (;;) {
		struct write_slot *w = &run->slots[run->next_write];
		int r;

		pthread_mutex_lock(&sh->lock);
		while (!w->full && !run->tracking_done && !sh->error)
			pthread_cond_wait(&sh->changed, &sh->lock);
		if (!w->full || sh->error) {
			pthread_mutex_unlock(&sh->lock);
			break;
		}
		pthread_mutex_unlock(&sh->lock);
		r = write_slot(run, w);
		if (r < 0) {
			fail_run(sh, r, &run->write_err);
			break;
		}
		pthread_mutex_lock(&sh->lock);
		w->full = false;
		run->next_write = (run->next_write + 1) % WRITE_SLOTS;
		pthread_cond_broadcast(&sh->changed);
		pthread_mutex_unlock(&sh->lock);
	}
	return NULL;
}

/* The run's own buffers (the line buffers at their largest: they only
 * grow) and what of them came from spares, before they go. */
static void count_work_buffers(struct job_run *run)
{
	run->stats.gpu_work_bytes = gpu_buffer_bytes(run->gpu) - run->bytes_before;
	run->stats.gpu_work_reused_bytes = gpu_reused_bytes(run->gpu) - run->reused_before;
	log_debug("work buffers allocated: %llu bytes, %llu of them reused from earlier runs",
		  (unsigned long long)run->stats.gpu_work_bytes,
		  (unsigned long long)run->stats.gpu_work_reused_bytes);
}

/* Once a device tracks no more: its buffers on the GPU go back to its
 * spares, and the caller may free what it holds there (device_done)
 * while the writer finishes. The write slots stay for the writer. */
static void release_device_work(struct job_run *run)
{
	const struct engine_options *opts = run->sh->opts;

	/* A failed run may leave a batch in flight that uses them. */
	gpu_batch_settle(run->gpu);
	count_work_buffers(run);
	free_job_gpu(run->gpu, &run->g);
	run->work_released = true;
	if (opts->device_done)
		opts->device_done(opts->device_done_userdata, run->index);
}

static void *release_work(void *arg)
{
	release_device_work(arg);
	return NULL;
}

/* Where the caller frees its share of the device (device_done: the CLI's
 * inputs, 0.15-0.2 s of the driver's work for the HCP-sized ODF on an
 * H100), on a thread of its own, so that it runs beside the writer's last
 * batches and the end of the file (TRX's closing entries) instead of
 * after them; engine_run joins it (join_releases) before the run's last
 * buffers go. Without device_done, handing the buffers to the spares
 * takes microseconds: no thread for that. */
static void start_release(struct job_run *run)
{
	if (run->sh->opts->device_done &&
	    pthread_create(&run->releaser, NULL, release_work, run) == 0) {
		run->releasing = true;
		return;
	}
	release_device_work(run);
}

/* A device's tracking thread; its writer thread writes each batch while it
 * tracks the next. */
static void *track_chunks(void *arg)
{
	struct job_run *run = arg;
	struct run_shared *sh = run->sh;
	uint64_t first, n;
	int r = pthread_create(&run->writer, NULL, write_slots, run);

	fill_params(run);
	run->writer_started = r == 0;
	if (r != 0)
		r = errbuf_set(&run->err, -r, "", "cannot start a writer thread: %s", strerror(r));
	while (r == 0 && take_chunk(run, &first, &n))
		r = run_chunk(run, first, n, &run->err);
	if (r < 0)
		fail_run(sh, r, &run->err);
	run->tracked_seconds = timing_now() - sh->t0;
	pthread_mutex_lock(&sh->lock);
	run->tracking_done = true;
	pthread_cond_broadcast(&sh->changed);
	pthread_mutex_unlock(&sh->lock);
	start_release(run);
	if (run->writer_started)
		pthread_join(run->writer, NULL);
	run->written_seconds = timing_now() - sh->t0;
	return NULL;
}

/* ptt's per-voxel ODF scale: the ODF's maxima come from the values on the
 * vertices, which SH inputs are sampled to here (the host copy lives only
 * for this). */
static int ptt_scale(const struct jobspec *job, const struct inputs *in, float *scale,
		     struct errbuf *err)
{
	struct volume sampled = { 0 };
	const struct volume *odf;
	int r = inputs_odf_view(in, NULL, &sampled, &odf, err);

	if (r == 0)
		ptt_odf_scale(odf, inputs_stop(in), job->fa_threshold, scale);
	volume_free(&sampled);
	return r;
}

/* The ptt tables depend on the job (stop threshold, sphere symmetry) as well
 * as on the cached inputs, so each job builds and uploads its own; the scale
 * is paged like the stop map it matches in size. */
static int upload_ptt_tables(struct gpu_ctx *gpu, const struct jobspec *job,
			     const struct inputs *in, struct job_gpu *g, struct errbuf *err)
{
	size_t nvox = volume_voxels(inputs_stop(in));
	float *scale = malloc(sizeof(float) * nvox);
	struct ptt_lut lut = { 0 };
	struct paged_layout layout;
	int r;

	if (!scale || ptt_lut_build(inputs_sphere(in), inputs_symmetric(in), &lut) < 0) {
		free(scale);
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	}
	r = ptt_scale(job, in, scale, err);
	if (r == 0)
		r = paged_plan(nvox, 1, PAGED_FLOAT32, gpu_get_limits(gpu)->max_alloc_bytes, &layout,
			       err);
	if (r == 0)
		r = paged_upload(gpu, &layout, scale, &g->odf_scale, err);
	if (r == 0)
		r = gpu_upload_new(gpu, lut.words, 4ull * lut.n_words, &g->lut, err);
	free(scale);
	ptt_lut_free(&lut);
	return r;
}

/* track.glsl's Regions: the counts, then the include regions and the
 * exclude regions, each a sphere's centre in voxels and radius in mm (-1
 * for a mask), then with masks their bits per voxel (inputs_region_masks). */
static int upload_regions(struct job_run *run, struct errbuf *err)
{
	const struct jobspec *job = run->job;
	int n = job->n_include_regions + job->n_exclude_regions;
	float head[4 + 4 * 2 * JOBSPEC_MAX_REGIONS];
	uint32_t counts[2] = { (uint32_t)job->n_include_regions,
			       (uint32_t)job->n_exclude_regions };
	uint64_t head_bytes = 16ull * (1 + (uint64_t)n), mask_bytes = 0;
	uint32_t *masks = NULL;
	double to_voxel[4][4];
	int r;

	if (!has_regions(job))
		return 0;
	if (affine_invert(inputs_grid(run->in)->affine, to_voxel) < 0)
		return errbuf_set(err, -EINVAL, "regions", "the grid's affine is singular");
	memset(head, 0, sizeof(head));
	memcpy(head, counts, sizeof(counts));
	for (int i = 0; i < n; i++) {
		const struct jobspec_region *region = i < job->n_include_regions ?
			&job->include_regions[i] : &job->exclude_regions[i - job->n_include_regions];
		double vox[3];

		affine_apply(to_voxel, region->center, vox);
		for (int a = 0; a < 3; a++)
			head[4 + 4 * i + a] = (float)vox[a];
		head[4 + 4 * i + 3] = region->mask < 0 ? (float)region->radius : -1.0f;
	}
	r = inputs_region_masks(job, run->in, &masks, err);
	if (masks)
		mask_bytes = 4ull * volume_voxels(inputs_grid(run->in));
	if (r == 0)
		r = new_buffer(run->gpu, head_bytes + mask_bytes, GPU_MEMORY_DEVICE,
			       &run->g.regions, err);
	if (r == 0)
		r = gpu_upload(run->gpu, run->g.regions, 0, head, head_bytes, err);
	if (r == 0 && masks)
		r = gpu_upload(run->gpu, run->g.regions, head_bytes, masks, mask_bytes, err);
	free(masks);
	return r;
}

/* prob_track's cone lists (sphere_cone_lists) or masks (sphere_cone_masks)
 * for the job's max_angle, where it takes them (cone_lists, cone_masks). */
static int upload_cone_table(struct job_run *run, struct errbuf *err)
{
	const struct sphere *sphere = inputs_sphere(run->in);
	bool lists = cone_lists(run->job, run->in, run->res);
	uint32_t *table;
	size_t words;
	int r;

	if (!lists && !cone_masks(run->job, run->in, run->res))
		return 0;
	r = lists ? sphere_cone_lists(sphere, cos_max_angle(run->job), inputs_symmetric(run->in),
				      &table, &words)
		  : sphere_cone_masks(sphere, cos_max_angle(run->job), inputs_symmetric(run->in),
				      &table, &words);
	if (r < 0)
		return errbuf_set(err, r, "tracking.max_angle", "cannot list the sphere's "
				  "vertices within max_angle: %s", strerror(-r));
	r = new_buffer(run->gpu, 4ull * words, GPU_MEMORY_DEVICE, &run->g.cone_table, err);
	if (r == 0)
		r = gpu_upload(run->gpu, run->g.cone_table, 0, table, 4ull * words, err);
	free(table);
	return r;
}

/* The job's tables first (ptt's, the regions, the cone's): the plan
 * sizes the work buffers from the GPU memory they leave. */
static int prepare_gpu(struct job_run *run, struct errbuf *err)
{
	double compile_before = gpu_compile_seconds(run->gpu), t0;
	struct pipeline_source src = { run->gpu, run->sh->opts, false };
	uint64_t room = 0;
	int r = 0;

	if (run->job->direction_getter == JOBSPEC_DG_PTT)
		r = upload_ptt_tables(run->gpu, run->job, run->in, &run->g, err);
	if (r == 0)
		r = upload_regions(run, err);
	if (r == 0)
		r = upload_cone_table(run, err);
	if (r == 0)
		r = work_room(run->gpu, run->in, run->res, run->sh->opts,
			      gpu_buffer_bytes(run->gpu) - run->bytes_before, &room, err);
	if (r == 0)
		r = plan_work(gpu_get_limits(run->gpu), run->job, run->in, run->res, run->sh->seeds,
			      run->sh->opts, room, &run->plan, err);
	if (r == 0)
		r = get_pipelines(&src, run->job, &run->plan, run->in, &run->g, err);
	run->stats.compile_seconds = gpu_compile_seconds(run->gpu) - compile_before;
	t0 = timing_now();
	if (r == 0)
		r = alloc_seed_buffers(run->gpu, &run->plan, &run->g, err);
	if (r == 0)
		r = alloc_host(&run->plan, &run->h, err);
	if (r == 0)
		r = alloc_compress(&run->plan, run->job, inputs_grid(run->in)->affine, &run->h, err);
	if (r == 0)
		log_debug("work buffers before tracking allocated in %.3f s: %llu bytes",
			  timing_now() - t0,
			  (unsigned long long)(gpu_buffer_bytes(run->gpu) - run->bytes_before));
	return r;
}

static void free_device_run(struct job_run *run)
{
	if (!run->work_released)
		release_device_work(run);
	free_slots(run);
	free_host(&run->h);
}

/* TRK stores properties as float32, exact for integers up to 2^24: a larger
 * job's seed indices would silently collide, so it is refused instead. */
static int check_seed_index(const struct jobspec *job, struct seeds *seeds, struct errbuf *err)
{
	const uint64_t exact = 1ull << 24;

	if (!job->save_seed_index || job->output_format != OUTPUT_TRK ||
	    seeds_index_end(seeds) <= exact)
		return 0;
	return errbuf_set(err, -EINVAL, "output.save_seed_index", "TRK keeps seed indices as "
			  "float32, exact up to %llu seeds; this job has %llu: use output.format "
			  "\"trx\"", (unsigned long long)exact,
			  (unsigned long long)seeds_index_end(seeds));
}

/* The job's parameters in a TCK header, under tckgen's names where they
 * mean what tckgen's do (step_size in mm, max_angle, max_num_seeds,
 * min_dist, max_dist), and tractd's own otherwise, so that tckinfo tells
 * how a file was made. */
static void tck_properties(const struct run_shared *sh, char *buf, size_t len)
{
	static const char *const getters[] = { "prob", "boot", "ptt" };
	const struct jobspec *job = sh->job;
	double mm[3];
	size_t used;

	affine_voxel_sizes(inputs_grid(sh->in)->affine, mm);
	used = (size_t)snprintf(buf, len, "method: tractd %s\nstep_size: %g\nmax_angle: %g\n"
				"max_num_seeds: %llu\nmax_num_steps: %d\nstop_threshold: %g\n"
				"pmf_threshold: %g\nrng_seed: %llu\n",
				getters[job->direction_getter],
				job->step_mm ? job->step_mm : job->step_size * cbrt(mm[0] * mm[1] * mm[2]),
				job->max_angle, (unsigned long long)seeds_count(sh->seeds), job->max_steps,
				job->fa_threshold, job->pmf_threshold,
				(unsigned long long)job->rng_seed);
	if (used < len && job->seed_select)
		used += (size_t)snprintf(buf + used, len - used, "max_num_tracks: %llu\n",
					 (unsigned long long)job->seed_select);
	if (used < len && job->min_length > 0)
		used += (size_t)snprintf(buf + used, len - used, "min_dist: %g\n", job->min_length);
	if (used < len && isfinite(job->max_length))
		snprintf(buf + used, len - used, "max_dist: %g\n", job->max_length);
}

static int open_output(struct run_shared *sh, FILE *out, struct errbuf *err)
{
	const struct jobspec *job = sh->job;
	const struct volume *grid = inputs_grid(sh->in);
	char properties[512];
	struct output_options oo = { .with_seeds = job->save_seeds,
				     .with_seed_index = job->save_seed_index,
				     .with_direction_getter = job->save_direction_getter,
				     .seeds_file = sh->opts->seeds_file,
				     .positions = job->output_positions,
				     .compression = job->output_compression,
				     .tck_properties = properties,
				     .writeback = sh->opts->writeback };
	int r;

	tck_properties(sh, properties, sizeof(properties));
	if (job->shard.count) {
		struct shard_tag tag = { .index = job->shard.index, .count = job->shard.count,
					 .first = sh->first, .end = sh->total,
					 .total = seeds_count(sh->seeds), .job = job->fingerprint };

		r = input_digest(job, &tag.inputs, err);
		if (r)
			return r;
		shard_tag_format(&tag, sh->shard_tag);
		oo.shard_tag = sh->shard_tag;
	}
	r = output_writer_new(job->output_format, out, grid->dim, grid->affine, &oo, &sh->out, err);

	if (r == 0) {
		memcpy(sh->stats->grid_dim, grid->dim, sizeof(sh->stats->grid_dim));
		memcpy(sh->stats->grid_affine, grid->affine, sizeof(sh->stats->grid_affine));
	}
	return r;
}

/* Plans and allocates every device's part; the smallest chunk is the run's. */
static int prepare_devices(struct run_shared *sh, const struct engine_device *devs,
			   struct job_run *runs, size_t n, struct errbuf *err)
{
	int r = 0;

	sh->chunk_limit = UINT64_MAX;
	for (size_t i = 0; i < n && r == 0; i++) {
		struct job_run *run = &runs[i];
		run->sh = sh;
		run->index = i;
		run->gpu = devs[i].gpu;
		run->bytes_before = gpu_buffer_bytes(run->gpu);
		run->reused_before = gpu_reused_bytes(run->gpu);
		run->res = devs[i].resident;
		run->g.res = devs[i].resident;
		run->job = sh->job;
		run->in = sh->in;
		r = prepare_gpu(run, err);
		if (r == 0)
			sh->chunk_limit = min_u64(sh->chunk_limit, run->plan.chunk_seeds);
	}
	/* Several chunks per device, so that they all have work to the end. */
	if (n > 1)
		sh->chunk_limit = min_u64(sh->chunk_limit,
					  (sh->total - sh->first + CHUNKS_PER_DEVICE * n - 1) /
					  (CHUNKS_PER_DEVICE * n));
	return r;
}

/* Device 0 runs on the calling thread, the others on threads of their own. */
static int track_on_devices(struct run_shared *sh, struct job_run *runs, size_t n,
			    struct errbuf *err)
{
	for (size_t i = 1; i < n; i++) {
		int r = pthread_create(&runs[i].thread, NULL, track_chunks, &runs[i]);
		if (r != 0) {
			errbuf_set_kind(&runs[i].err, ERR_KIND_DEVICE, -r, "device",
					"cannot start a thread: %s", strerror(r));
			fail_run(sh, -r, &runs[i].err);
			break;
		}
		runs[i].started = true;
	}
	track_chunks(&runs[0]);
	for (size_t i = 1; i < n; i++)
		if (runs[i].started)
			pthread_join(runs[i].thread, NULL);
	if (sh->error)
		*err = sh->failed_err;
	return sh->error;
}

/* Waits for the devices' releases (start_release) still running. */
static void join_releases(struct job_run *runs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (runs[i].releasing)
			pthread_join(runs[i].releaser, NULL);
}

static void add_device_stats(struct engine_stats *total, const struct engine_stats *dev)
{
	total->chunks += dev->chunks;
	total->batches += dev->batches;
	total->pieces += dev->pieces;
	total->kernel_seconds += dev->kernel_seconds;
	for (int k = 0; k < ENGINE_KERNELS; k++)
		total->device_seconds[k] = total->device_seconds[k] < 0.0 ||
					   dev->device_seconds[k] < 0.0 ? -1.0 :
					   total->device_seconds[k] + dev->device_seconds[k];
	total->submits += dev->submits;
	total->compile_seconds += dev->compile_seconds;
	if (dev->gpu_work_bytes > total->gpu_work_bytes)
		total->gpu_work_bytes = dev->gpu_work_bytes;
	total->gpu_work_reused_bytes += dev->gpu_work_reused_bytes;
}

/* Where a device's time went: with several devices, what keeps the run's
 * wall time above each one's kernels. */
static void log_device_waits(const struct job_run *run, size_t index)
{
	log_debug("device %zu: %llu chunk(s), tracked by %.3f s and written by %.3f s from the "
		  "run's start; kernels %.3f s; its chunks' seeds and lists %.3f s; its tracking "
		  "waited %.3f s for a write slot, its writer %.3f s for the chunks before its own; "
		  "its buffers grown in %.3f s; its batches' line ids written in %.3f s, their "
		  "tracking waited for %.3f s, their pieces %.3f s (their compaction and slot "
		  "waits included)",
		  index, (unsigned long long)run->stats.chunks, run->tracked_seconds,
		  run->written_seconds, run->stats.kernel_seconds, run->listing_seconds,
		  run->slot_wait_seconds, run->turn_wait_seconds, run->grow_seconds,
		  run->ids_seconds, run->tracking_wait_seconds, run->pieces_seconds);
}

const char *engine_kernel_key(enum engine_kernel kernel)
{
	static const char *const keys[ENGINE_KERNELS] = {
		[ENGINE_KERNEL_INIT] = "init",
		[ENGINE_KERNEL_TRACK] = "track",
		[ENGINE_KERNEL_COMPACT] = "compact",
	};

	return keys[kernel];
}

const char *engine_stop_key(enum engine_stop reason)
{
	switch (reason) {
#define X(name, key, words) case name: return key;
#include "stop_reasons.def"
#undef X
	case ENGINE_STOP_REASONS:
		break;
	}
	return "unknown";
}

const char *engine_stop_words(enum engine_stop reason)
{
	switch (reason) {
#define X(name, key, words) case name: return words;
#include "stop_reasons.def"
#undef X
	case ENGINE_STOP_REASONS:
		break;
	}
	return "unknown";
}

uint64_t engine_stop_ends(const struct engine_stats *stats)
{
	uint64_t ends = 0;

	for (int k = 0; k < ENGINE_STOP_REASONS; k++)
		ends += stats->stop_reasons[k];
	return ends;
}

int engine_run(const struct engine_device *devs, size_t n_devs, const struct jobspec *job,
	       const struct inputs *in, struct seeds *seeds, const struct engine_options *opts,
	       FILE *out, struct engine_stats *stats, struct errbuf *err)
{
	struct engine_stats local_stats;
	struct run_shared sh = { .job = job, .in = in, .seeds = seeds, .opts = opts };
	struct job_run *runs;
	double t_prepare, t_finish;
	int r;

	if (!stats)
		stats = &local_stats;
	memset(stats, 0, sizeof(*stats));
	seeds_range(seeds, &sh.first, &sh.total);
	sh.next_seed = sh.next_to_write = sh.first;
	if (n_devs == 0)
		return errbuf_set_kind(err, ERR_KIND_DEVICE, -ENODEV, "device",
				       "no GPU to run the job on");
	runs = calloc(n_devs, sizeof(*runs));
	if (!runs)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	sh.stats = stats;
	stats->odf_storage = resident_storage(devs[0].resident);
	stats->gpu_input_bytes = resident_bytes(devs[0].resident);
	pthread_mutex_init(&sh.lock, NULL);
	pthread_mutex_init(&sh.progress_lock, NULL);
	pthread_cond_init(&sh.changed, NULL);
	t_prepare = timing_now();
	r = check_seed_index(job, seeds, err);
	if (r == 0)
		r = check_step(job, in, err);
	if (r == 0)
		r = prepare_devices(&sh, devs, runs, n_devs, err);
	if (r == 0)
		r = open_output(&sh, out, err);
	sh.t0 = timing_now();
	stats->prepare_seconds = sh.t0 - t_prepare;
	if (r == 0)
		r = track_on_devices(&sh, runs, n_devs, err);
	stats->seeds = sh.next_to_write - sh.first;
	stats->select = job->seed_select;
	stats->has_regions = has_regions(job);
	/* The writer threads' time is theirs: encode_seconds and write_seconds
	 * (stats starts at zero). */
	t_finish = timing_now();
	stats->track_seconds = t_finish - sh.t0 - stats->encode_seconds - stats->write_seconds;
	if (sh.out) {
		/* The end of the file: TRX builds its whole archive here. */
		int fr = output_writer_finish(sh.out);

		stats->write_seconds += timing_now() - t_finish;
		if (r == 0 && fr < 0)
			r = errbuf_set_kind(err, ERR_KIND_OUTPUT, fr, "output.path",
					    "cannot finish the tractogram: %s", strerror(-fr));
	}
	join_releases(runs, n_devs);
	for (size_t i = 0; i < n_devs; i++) {
		if (runs[i].gpu) {
			log_device_waits(&runs[i], i);
			free_device_run(&runs[i]);
		}
		add_device_stats(stats, &runs[i].stats);
	}
	pthread_cond_destroy(&sh.changed);
	pthread_mutex_destroy(&sh.progress_lock);
	pthread_mutex_destroy(&sh.lock);
	free(runs);
	return r;
}
