/* SPDX-License-Identifier: MIT */
/*
 * engine: one tracking job from validated spec to tractogram records (see engine.h).
 *
 * Flow: load inputs (volumes, sphere, seed generator) -> plan chunk and batch
 * sizes from the device limits -> compile/fetch pipelines -> upload the ODF,
 * stop map and sphere -> for each seed chunk: pass 1 (prob_init: initial
 * directions per seed), build the streamline list on the host, then for each
 * batch of streamlines pass 2 (prob_track; boot_* and ptt_track for the
 * other getters), read back only the points of kept
 * streamlines and append them to the output writer (TRK or TCK).
 */
#include "engine.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "affine.h"
#include "boot.h"
#include "compress.h"
#include "fit.h"
#include "gradients.h"
#include "kernel_params.h"
#include "log.h"
#include "philox.h"
#include "ptt.h"
#include "seeds.h"
#include "sphere.h"
#include "timing.h"
#include "output.h"
#include "paged_volume.h"
#include "volume.h"

#define MIN_WORK_BUDGET (8ull << 20)
#define TARGET_WORKGROUP_LANES 64
#define FIRST_TIMED_CHUNK_SEEDS 256
#define CHUNKS_PER_DEVICE 8
#define MAX_CHUNK_SEEDS (1ull << 21)
#define SUBMIT_SECONDS 0.25
struct engine_inputs {
	struct volume odf;        /* inputs.odf: the ODF on the sphere's vertices, clipped */
	struct volume sh;         /* inputs.sh: its coefficients (a dwi job's are fit.sh) */
	enum sh_basis sh_basis;
	bool sh_world;            /* inputs.sh_frame world: directions map through to_sh */
	double to_sh[3][3];
	struct volume dwi;        /* boot: the b0 volumes first, then one shell's */
	int n_b0;
	struct boot_matrices boot;
	enum boot_model boot_model;
	bool boot_getter;
	struct volume stop;
	struct sphere sphere;
	bool symmetric;       /* compare directions by |cos| */
	const char *grid_field;   /* the input that sets the grid, for messages */
	bool fitted;          /* fit holds the DTI and CSD of a dwi input */
	struct fit_result fit;
};

struct engine_resident {
	struct paged_volume odf;  /* prob: ODF values or SH coefficients (storage) */
	enum jobspec_odf_storage storage;   /* never auto */
	uint32_t sh_coefs;        /* SH storage: coefficients per voxel */
	struct gpu_buffer *odf_basis;       /* SH storage: the sampling matrix */
	struct paged_volume dwi;  /* boot */
	struct paged_volume stop; /* the stop map */
	struct gpu_buffer *vertices, *nbr_offset, *nbr;
	struct gpu_buffer *matrices;        /* boot: boot.glsl's layout */
	uint64_t bytes;
};

struct job_plan {
	uint32_t subgroup;        /* lanes per item */
	uint32_t items;           /* items (subgroups) per workgroup */
	uint32_t max_peaks;       /* initial directions kept per seed, at most */
	uint32_t slot_points;     /* 2 * max_steps + 1 */
	uint64_t chunk_seeds;
	uint64_t batch_lines;
};

struct job_gpu {
	struct gpu_pipeline *init, *track, *compact;
	const struct engine_resident *res;
	struct gpu_buffer *seeds, *ndirs, *dirs;
	struct gpu_buffer *line_start, *line_id, *points, *ranges, *dest, *readback;
	struct paged_volume odf_scale;        /* ptt: daemon/ptt.h's tables for this job */
	struct gpu_buffer *lut;
};

/* Host-side arrays reused across chunks and batches. */
struct job_host {
	float *seed_xyz;          /* 3 * chunk_seeds */
	uint32_t *ndirs;          /* chunk_seeds */
	float *dirs;              /* 3 * max_peaks * chunk_seeds */
	float *line_start;        /* 6 * chunk lines */
	uint32_t *line_id;        /* 2 * chunk lines */
	uint32_t *ranges;         /* 3 * batch_lines: first slot, points, length (float bits) */
	uint32_t *dest;           /* batch_lines: first packed point, or DROP_LINE */
	float *compressed;        /* 3 * slot_points when output.compress, else NULL */
	uint32_t *kept;           /* slot_points: indices compression kept, with it */
	struct compress_params compress;
};

#define DROP_LINE 0xffffffffu

/* ---- inputs ------------------------------------------------------------- */

static int load_sphere(const struct jobspec *job, struct sphere *ret, struct errbuf *err)
{
	if (job->sphere_vertices)
		return sphere_from_vertices(job->sphere_vertices, job->sphere_nv,
					    "tracking.sphere.vertices", ret, err);
	return sphere_builtin(job->sphere_name, ret, err);
}

static int require_3d_on_grid(const struct volume *v, const struct volume *ref,
			      const char *ref_field, const char *field, const char *path,
			      struct errbuf *err)
{
	if (v->dim[3] != 1)
		return errbuf_set(err, -EINVAL, field, "%s must be a 3D volume, got %lld volumes",
				  path, (long long)v->dim[3]);
	if (!volume_same_grid(v, ref))
		return errbuf_set(err, -EINVAL, field, "%s is on a different grid (%lldx%lldx%lld "
				  "or another affine) than %s (%lldx%lldx%lld)", path,
				  (long long)v->dim[0], (long long)v->dim[1], (long long)v->dim[2],
				  ref_field, (long long)ref->dim[0], (long long)ref->dim[1], (long long)ref->dim[2]);
	return 0;
}

static int load_seeds(const struct jobspec *job, const struct volume *odf, const char *grid_field,
		      struct seeds **ret, struct errbuf *err)
{
	struct volume roi = { 0 };
	int r;

	if (job->seed_kind == JOBSPEC_SEEDS_POINTS)
		return seeds_from_points(job->seed_points, job->n_seed_points, job->seed_points_ras,
					 odf->affine, odf->dim, ret, err);
	r = volume_load(job->seed_roi_path, "seeds.roi", &roi, err);
	if (r == 0)
		r = require_3d_on_grid(&roi, odf, grid_field, "seeds.roi", job->seed_roi_path, err);
	if (r == 0)
		r = seeds_from_mask(&roi, job->seed_count, job->seed_per_voxel, job->rng_seed, ret, err);
	volume_free(&roi);
	if (r == 0 && seeds_count(*ret) > JOBSPEC_MAX_SEEDS) {
		seeds_free(*ret);
		*ret = NULL;
		r = errbuf_set(err, -EINVAL, "seeds.count", "%llu seeds per voxel exceed the limit "
			       "of %llu seeds per job", (unsigned long long)job->seed_count,
			       (unsigned long long)JOBSPEC_MAX_SEEDS);
	}
	return r;
}

static int load_odf(const struct jobspec *job, struct engine_inputs *in, struct errbuf *err)
{
	int r = volume_load(job->odf_path, "inputs.odf", &in->odf, err);

	if (r == 0 && in->odf.dim[3] != in->sphere.nv)
		r = errbuf_set(err, -EINVAL, "inputs.odf", "%s has %lld volumes but the sphere "
			       "(tracking.sphere) has %d vertices: the ODF must be sampled on it",
			       job->odf_path, (long long)in->odf.dim[3], in->sphere.nv);
	return r;
}

/* The linear part of the affine, which takes a step along the voxel axes
 * to scanner (RAS+) space: where MRtrix3 expresses its FOD directions. */
static void voxel_to_world_directions(const struct volume *v, double m[3][3])
{
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 3; c++)
			m[r][c] = v->affine[r][c];
}

/* The coefficients stay as read: the ODF is sampled from them when it is
 * uploaded (sample_odf), or on the GPU at every step (SH storage). */
static int load_sh(const struct jobspec *job, struct engine_inputs *in, struct errbuf *err)
{
	int r = volume_load(job->sh_path, "inputs.sh", &in->sh, err);
	int order;

	if (r < 0)
		return r;
	order = sh_order_from_ncoef(in->sh.dim[3]);
	if (order < 0 || order > SH_MAX_ORDER)
		return errbuf_set(err, -EINVAL, "inputs.sh", "has %lld volumes, which is not the "
				  "coefficient count of an even SH order up to %d (1, 6, 15, 28, "
				  "45, ...)", (long long)in->sh.dim[3], SH_MAX_ORDER);
	in->sh_basis = job->sh_basis;
	in->sh_world = job->sh_frame == JOBSPEC_SH_FRAME_WORLD;
	voxel_to_world_directions(&in->sh, in->to_sh);
	return 0;
}

static void fit_params_from_job(const struct jobspec *job, struct fit_params *p)
{
	fit_default_params(p);
	p->csd.sh_order = job->model.sh_order;
	p->csd.lambda = job->model.lambda;
	p->csd.tau = job->model.tau;
	p->fa_threshold = job->fa_threshold;
	p->response_roi_radius = job->model.roi_radius;
	p->response_fa = job->model.response_fa;
	p->response_given = job->model.response_given;
	memcpy(p->response.evals, job->model.response_evals, sizeof(p->response.evals));
	p->response.s0 = job->model.response_s0;
}

static int load_dwi_volumes(const struct jobspec *job, struct volume *dwi, struct volume *mask,
			    struct gradients *g, struct errbuf *err)
{
	int r = volume_load(job->dwi_path, "inputs.dwi", dwi, err);

	if (r == 0 && dwi->dim[3] < 7)
		r = errbuf_set(err, -EINVAL, "inputs.dwi", "%s has %lld volume%s: a DWI series "
			       "is 4D, with a b=0 volume and at least 6 diffusion directions",
			       job->dwi_path, (long long)dwi->dim[3], dwi->dim[3] == 1 ? "" : "s");
	if (r == 0)
		r = gradients_load(job->bvals_path, job->bvecs_path, dwi->dim[3], "inputs.bvals",
				   "inputs.bvecs", g, err);
	if (r == 0 && job->mask_path) {
		r = volume_load(job->mask_path, "inputs.mask", mask, err);
		if (r == 0)
			r = require_3d_on_grid(mask, dwi, "inputs.dwi", "inputs.mask", job->mask_path,
					       err);
	}
	return r;
}

int engine_fit_dwi(const struct jobspec *job, const struct fit_options *o,
		   struct fit_result *ret, struct errbuf *err)
{
	struct volume dwi = { 0 }, mask = { 0 };
	struct gradients g = { 0 };
	struct fit_params p;
	int r = load_dwi_volumes(job, &dwi, &mask, &g, err);

	fit_params_from_job(job, &p);
	if (r == 0)
		r = fit_dwi(&dwi, &g, job->mask_path ? &mask : NULL, &p, o, ret, err);
	volume_free(&dwi);
	volume_free(&mask);
	gradients_free(&g);
	return r;
}

static int load_dwi(const struct jobspec *job, const struct fit_options *o,
		    struct engine_inputs *in, struct errbuf *err)
{
	int r = engine_fit_dwi(job, o, &in->fit, err);

	in->fitted = r == 0;
	in->sh_basis = SH_DESCOTEAUX07_LEGACY;
	return r;
}

/* Copies the b0s and the shell's volumes, in that order, so that the boot
 * kernels find the b0s at 0..n_b0-1 and the diffusion-weighted volumes after. */
static int gather_volumes(const struct volume *dwi, const size_t *volumes, size_t n,
			  struct volume *out, struct errbuf *err)
{
	size_t nvox = volume_voxels(dwi), nt = (size_t)dwi->dim[3];

	if (volume_alloc_on_grid(out, dwi, (int64_t)n) < 0)
		return errbuf_set(err, -ENOMEM, "inputs.dwi", "out of memory for the DWI");
	for (size_t v = 0; v < nvox; v++)
		for (size_t i = 0; i < n; i++)
			out->data[v * n + i] = dwi->data[v * nt + volumes[i]];
	return 0;
}

/* Reorders volumes[0..n) (ascending) to put the b0s first, each group staying
 * ascending, using scratch (n entries); writes the directions of the others
 * to dirs. Returns the number of b0s. */
static size_t b0s_first(const struct gradients *g, size_t *volumes, size_t n, size_t *scratch,
			double *dirs)
{
	size_t n_b0 = 0, n_dw = 0;

	for (size_t i = 0; i < n; i++) {
		size_t v = volumes[i];
		if (g->is_b0[v]) {
			volumes[n_b0++] = v;
			continue;
		}
		memcpy(&dirs[3 * n_dw], &g->bvecs[3 * v], sizeof(double) * 3);
		scratch[n_dw++] = v;
	}
	memcpy(volumes + n_b0, scratch, sizeof(*volumes) * n_dw);
	return n_b0;
}

static void boot_params_from_job(const struct jobspec *job, struct boot_params *p)
{
	p->model = job->model.name == JOBSPEC_MODEL_CSA ? BOOT_MODEL_CSA : BOOT_MODEL_OPDT;
	p->sh_order = job->model.sh_order;
	p->sh_lambda = job->model.sh_lambda;
}

/* The boot getter's inputs: the b0s and the lowest shell of the DWI (the SH
 * model of the residual bootstrap is single-shell; GPUStreamlines and the
 * CSD fit take the same shell), the model's matrices, and the DTI FA of the
 * whole series when no stop map is given. */
static int load_boot(const struct jobspec *job, const struct fit_options *o,
		     struct engine_inputs *in, struct errbuf *err)
{
	struct volume dwi = { 0 }, mask = { 0 };
	struct gradients g = { 0 };
	struct boot_params params;
	size_t *volumes = NULL, n = 0;
	double *dirs = NULL;
	int r = load_dwi_volumes(job, &dwi, &mask, &g, err);

	if (r == 0 && !job->stop_map_path)
		r = fit_tensor(&dwi, &g, job->mask_path ? &mask : NULL, o, &in->fit, err);
	if (r == 0) {
		volumes = malloc(sizeof(*volumes) * 2 * g.n);
		dirs = malloc(sizeof(*dirs) * 3 * g.n);
		if (!volumes || !dirs)
			r = errbuf_set(err, -ENOMEM, "inputs.dwi", "out of memory");
	}
	if (r == 0) {
		n = gradients_lowest_shell(&g, volumes);
		in->n_b0 = (int)b0s_first(&g, volumes, n, volumes + g.n, dirs);
	}
	boot_params_from_job(job, &params);
	in->boot_model = params.model;
	if (r == 0)
		r = boot_matrices_build(dirs, n - (size_t)in->n_b0, &in->sphere, &params, &in->boot, err);
	if (r == 0)
		r = gather_volumes(&dwi, volumes, n, &in->dwi, err);
	in->symmetric = true;   /* even-order SH */
	free(volumes);
	free(dirs);
	volume_free(&dwi);
	volume_free(&mask);
	gradients_free(&g);
	return r;
}

/* The SH coefficients behind a prob job's ODF, or NULL for an ODF input. */
static const struct volume *sh_of(const struct engine_inputs *in)
{
	if (in->fitted)
		return &in->fit.sh;
	return in->sh.data ? &in->sh : NULL;
}

static const struct volume *grid_of(const struct engine_inputs *in)
{
	if (in->boot_getter)
		return &in->dwi;
	return sh_of(in) ? sh_of(in) : &in->odf;
}

/* The ODF on the sphere's vertices, clipped at zero, from SH coefficients. */
static int sample_odf(const struct engine_inputs *in, const struct fit_options *o,
		      struct volume *odf, struct errbuf *err)
{
	return fit_sample_sh(sh_of(in), in->sh_basis, in->sh_world ? in->to_sh : NULL, &in->sphere,
			     o, in->grid_field, odf, err);
}

static int load_stop_map(const struct jobspec *job, struct engine_inputs *in, struct errbuf *err)
{
	int r;

	if (!job->stop_map_path) {
		/* A dwi job stops on its own FA. */
		r = volume_alloc_on_grid(&in->stop, &in->fit.fa, 1);
		if (r < 0)
			return errbuf_set(err, r, "", "out of memory");
		memcpy(in->stop.data, in->fit.fa.data, sizeof(float) * volume_voxels(&in->stop));
		return 0;
	}
	r = volume_load(job->stop_map_path, "inputs.stop_map", &in->stop, err);
	if (r == 0)
		r = require_3d_on_grid(&in->stop, grid_of(in), in->grid_field, "inputs.stop_map",
				       job->stop_map_path, err);
	return r;
}

static int load_inputs(const struct jobspec *job, const struct fit_options *o,
		       struct engine_inputs *in, struct errbuf *err)
{
	static const char *const grid_fields[] = {
		[JOBSPEC_INPUT_ODF] = "inputs.odf",
		[JOBSPEC_INPUT_SH] = "inputs.sh",
		[JOBSPEC_INPUT_DWI] = "inputs.dwi",
	};
	int r = load_sphere(job, &in->sphere, err);

	in->grid_field = grid_fields[job->input_kind];
	if (r < 0)
		return r;
	switch (job->input_kind) {
	case JOBSPEC_INPUT_ODF:
		r = load_odf(job, in, err);
		break;
	case JOBSPEC_INPUT_SH:
		r = load_sh(job, in, err);
		break;
	case JOBSPEC_INPUT_DWI:
		in->boot_getter = job->direction_getter == JOBSPEC_DG_BOOT;
		r = in->boot_getter ? load_boot(job, o, in, err) : load_dwi(job, o, in, err);
		break;
	}
	if (r == 0)
		r = load_stop_map(job, in, err);
	if (in->boot_getter)
		fit_result_free(&in->fit);   /* its FA is now the stop map */
	if (r < 0 || in->boot_getter)
		return r;
	if (sh_of(in)) {
		in->symmetric = true;   /* even-order SH */
		return 0;
	}
	return fit_prepare_odf(&in->odf, &in->sphere, o, &in->symmetric, err);
}

void engine_inputs_free(struct engine_inputs *in)
{
	if (!in)
		return;
	volume_free(&in->odf);
	volume_free(&in->sh);
	volume_free(&in->dwi);
	boot_matrices_free(&in->boot);
	volume_free(&in->stop);
	sphere_free(&in->sphere);
	fit_result_free(&in->fit);
	free(in);
}

int engine_inputs_load(const struct jobspec *job, const struct fit_options *fit,
		       struct engine_inputs **ret, struct errbuf *err)
{
	struct engine_inputs *in = calloc(1, sizeof(*in));
	int r;

	if (!in)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = load_inputs(job, fit, in, err);
	if (r < 0) {
		engine_inputs_free(in);
		return r;
	}
	*ret = in;
	return 0;
}

int engine_seeds_load(const struct jobspec *job, const struct engine_inputs *in,
		      struct seeds **ret, struct errbuf *err)
{
	return load_seeds(job, grid_of(in), in->grid_field, ret, err);
}

int engine_inputs_odf(const struct engine_inputs *in, const struct fit_options *o,
		      struct volume *ret, struct errbuf *err)
{
	if (in->boot_getter)
		return errbuf_set(err, -EINVAL, "direction_getter", "a boot job has no ODF volume");
	if (sh_of(in))
		return sample_odf(in, o, ret, err);
	if (volume_alloc_on_grid(ret, &in->odf, in->odf.dim[3]) < 0)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	memcpy(ret->data, in->odf.data, sizeof(float) * volume_voxels(ret) * (size_t)ret->dim[3]);
	return 0;
}

const struct fit_result *engine_inputs_fit(const struct engine_inputs *in)
{
	return in->fitted ? &in->fit : NULL;
}

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

/* Floats of the boot matrices buffer (boot.glsl's layout). */
static uint64_t boot_matrix_floats(const struct boot_matrices *m)
{
	return (uint64_t)m->n_coef * (3ull * (uint64_t)m->n_dwi + (uint64_t)m->nv) +
	       (uint64_t)m->n_dwi;
}

static uint64_t job_budget(const struct gpu_limits *lim, uint64_t requested)
{
	return requested ? requested : lim->device_local_bytes / 2;
}

/* What every job binds besides its ODF or DWI: the stop map and the sphere. */
static uint64_t common_bytes(const struct engine_inputs *in)
{
	uint64_t nv = (uint64_t)in->sphere.nv;

	return 4ull * volume_voxels(grid_of(in)) + 12ull * nv + 4ull * (nv + 1) +
	       8ull * (uint64_t)in->sphere.n_edges;
}

static const char *const storage_names[] = {
	[JOBSPEC_ODF_AUTO] = "auto", [JOBSPEC_ODF_FLOAT32] = "float32",
	[JOBSPEC_ODF_FLOAT16] = "float16", [JOBSPEC_ODF_SH] = "sh",
};

/* The pages of the ODF in a storage, and its GPU bytes with the SH
 * sampling matrix. */
static int plan_odf(const struct gpu_limits *lim, const struct engine_inputs *in,
		    enum jobspec_odf_storage storage, struct paged_layout *ret, uint64_t *bytes,
		    struct errbuf *err)
{
	uint64_t voxels = volume_voxels(grid_of(in));
	uint32_t nv = (uint32_t)in->sphere.nv;
	uint64_t basis = 0;
	int r;

	if (storage == JOBSPEC_ODF_SH) {
		uint32_t nc = (uint32_t)sh_of(in)->dim[3];
		basis = 4ull * nc * nv;
		r = paged_plan(voxels, nc, PAGED_FLOAT32, lim->max_alloc_bytes, ret, err);
	} else {
		r = paged_plan(voxels, nv, storage == JOBSPEC_ODF_FLOAT16 ? PAGED_FLOAT16 : PAGED_FLOAT32,
			       lim->max_alloc_bytes, ret, err);
	}
	*bytes = r == 0 ? paged_bytes(ret) + basis : 0;
	return r;
}

static int odf_too_big(const struct engine_inputs *in, enum jobspec_odf_storage requested,
		       const uint64_t need[4], uint64_t budget, struct errbuf *err)
{
	char sizes[256];
	int n = snprintf(sizes, sizeof(sizes), "%.1f MiB as float32, %.1f MiB as float16",
			 (double)need[JOBSPEC_ODF_FLOAT32] / (1 << 20),
			 (double)need[JOBSPEC_ODF_FLOAT16] / (1 << 20));

	if (sh_of(in))
		snprintf(sizes + n, sizeof(sizes) - (size_t)n, ", %.1f MiB as SH coefficients",
			 (double)need[JOBSPEC_ODF_SH] / (1 << 20));
	return errbuf_set(err, -E2BIG, requested == JOBSPEC_ODF_AUTO ? in->grid_field
				  : "tracking.odf_storage",
			  "the ODF on %d vertices needs %s of GPU memory; with %.1f MiB for the "
			  "stop map, sphere and tracking, %s fits the job's budget of %.1f MiB: "
			  "%suse a smaller sphere, crop the volume or raise the budget "
			  "(gpu_memory_budget)", in->sphere.nv, sizes,
			  (double)(common_bytes(in) + MIN_WORK_BUDGET) / (1 << 20),
			  requested == JOBSPEC_ODF_AUTO ? "none" : storage_names[requested],
			  (double)budget / (1 << 20),
			  sh_of(in) ? "track from SH input (tracking.odf_storage \"sh\"), "
				    : "give SH coefficients (inputs.sh) instead, ");
}

/* The requested storage, or with auto the first of float32, float16 and SH
 * that fits the budget: float32 is exact, float16 halves the memory, SH
 * takes the least but samples the sphere at every step. */
static int choose_odf_storage(const struct gpu_limits *lim, const struct engine_inputs *in,
			      enum jobspec_odf_storage requested, uint64_t budget,
			      struct engine_resident *res, struct paged_layout *ret,
			      struct errbuf *err)
{
	static const enum jobspec_odf_storage order[] = {
		JOBSPEC_ODF_FLOAT32, JOBSPEC_ODF_FLOAT16, JOBSPEC_ODF_SH };
	uint64_t fixed = common_bytes(in) + MIN_WORK_BUDGET;
	uint64_t need[4] = { 0 };

	for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		enum jobspec_odf_storage storage = order[k];
		struct paged_layout layout;
		int r;

		if (storage == JOBSPEC_ODF_SH && !sh_of(in))
			continue;
		r = plan_odf(lim, in, storage, &layout, &need[storage], err);
		if (r < 0)
			return r;
		if ((requested == JOBSPEC_ODF_AUTO || requested == storage) &&
		    fixed + need[storage] <= budget) {
			res->storage = storage;
			if (storage == JOBSPEC_ODF_SH)
				res->sh_coefs = layout.channels;
			*ret = layout;
			return 0;
		}
	}
	return odf_too_big(in, requested, need, budget, err);
}

static int plan_dwi(const struct gpu_limits *lim, const struct engine_inputs *in,
		    uint64_t budget, struct paged_layout *ret, struct errbuf *err)
{
	uint64_t fixed = common_bytes(in) + MIN_WORK_BUDGET + 4ull * boot_matrix_floats(&in->boot);
	int r = paged_plan(volume_voxels(&in->dwi), (uint32_t)in->dwi.dim[3], PAGED_FLOAT32,
			   lim->max_alloc_bytes, ret, err);

	if (r == 0 && fixed + paged_bytes(ret) > budget)
		r = errbuf_set(err, -E2BIG, "inputs.dwi", "the DWI (%lld volumes used) needs "
			       "%.1f MiB of GPU memory, and %.1f MiB more for the stop map, sphere, "
			       "matrices and tracking, over the job's budget of %.1f MiB: crop the "
			       "volume or raise the budget (gpu_memory_budget)",
			       (long long)in->dwi.dim[3], (double)paged_bytes(ret) / (1 << 20),
			       (double)fixed / (1 << 20), (double)budget / (1 << 20));
	return r;
}

/* Shared memory of a kernel: per item (subgroup) and per workgroup. */
struct shared_use {
	uint32_t per_item, per_workgroup;
};

static uint32_t shared_bytes(struct shared_use u, uint32_t items)
{
	return items * u.per_item + u.per_workgroup;
}

/* The shared memory of the pass-1 and pass-2 kernels. prob_init: two floats
 * per vertex per subgroup; prob_track: one vec3, 16 bytes, per vertex per
 * workgroup; boot: two floats per vertex and one per residual per subgroup. */
static void kernel_shared_use(const struct engine_inputs *in, struct shared_use use[2])
{
	uint32_t nv = (uint32_t)in->sphere.nv;

	if (in->boot_getter) {
		use[0] = (struct shared_use){ 4u * (2u * nv + (uint32_t)in->boot.n_dwi), 0 };
		use[1] = use[0];
		return;
	}
	use[0] = (struct shared_use){ 8u * nv, 0 };
	use[1] = (struct shared_use){ 0, 16u * nv };
}

/* Subgroups per workgroup: as many as fill TARGET_WORKGROUP_LANES while the
 * shared memory of both kernels fits. */
static int choose_items(const struct gpu_limits *lim, const struct engine_inputs *in,
			uint32_t *ret, struct errbuf *err)
{
	struct shared_use use[2];
	uint32_t items = TARGET_WORKGROUP_LANES / lim->subgroup_size;

	kernel_shared_use(in, use);
	for (int k = 0; k < 2; k++)
		if (shared_bytes(use[k], 1) > lim->max_shared_bytes)
			return errbuf_set(err, -E2BIG, "tracking.sphere", "a sphere of %d vertices "
					  "needs %u bytes of shared memory, over this device's %u",
					  in->sphere.nv, shared_bytes(use[k], 1), lim->max_shared_bytes);
	if (items == 0)
		items = 1;
	while (items > 1 && (shared_bytes(use[0], items) > lim->max_shared_bytes ||
			     shared_bytes(use[1], items) > lim->max_shared_bytes ||
			     items * lim->subgroup_size > lim->max_workgroup_invocations))
		items--;
	*ret = items;
	return 0;
}

static int plan_work(const struct gpu_limits *lim, const struct jobspec *job,
		     const struct engine_inputs *in, const struct engine_resident *res,
		     struct seeds *seeds, const struct engine_options *opts, struct job_plan *plan,
		     struct errbuf *err)
{
	uint64_t budget = job_budget(lim, opts->memory_budget);
	uint64_t buffer_limit = min_u64(lim->max_binding_bytes, lim->max_alloc_bytes);
	uint64_t inputs = res->bytes;
	uint64_t work, line_slot_bytes, per_line, per_seed;
	int r;

	/* A cached upload may come from a job with a larger budget. */
	if (inputs >= budget)
		return errbuf_set(err, -E2BIG, in->grid_field, "the inputs need %.1f MiB of GPU "
				  "memory, over the job's budget of %.1f MiB",
				  (double)inputs / (1 << 20), (double)budget / (1 << 20));
	work = budget - inputs > MIN_WORK_BUDGET ? budget - inputs : MIN_WORK_BUDGET;
	r = choose_items(lim, in, &plan->items, err);
	if (r < 0)
		return r;
	plan->subgroup = lim->subgroup_size;
	plan->max_peaks = peak_bound(job->min_separation_angle, in->symmetric, in->sphere.nv);
	plan->slot_points = 2u * (uint32_t)job->max_steps + 1u;

	/* Two thirds of the work budget for streamlines: point slots on the GPU and
	 * in read-back memory, start (seed, direction), id, range, destination. */
	line_slot_bytes = 12ull * plan->slot_points;
	per_line = 2 * line_slot_bytes + 24 + 8 + 12 + 4;
	plan->batch_lines = min_u64(buffer_limit / line_slot_bytes, work * 2 / 3 / per_line);
	/* The rest for seeds: position, direction count, directions. */
	per_seed = 12 + 4 + 12ull * plan->max_peaks;
	plan->chunk_seeds = min_u64(buffer_limit / (12ull * plan->max_peaks), work / 3 / per_seed);
	plan->chunk_seeds = min_u64(plan->chunk_seeds, seeds_count(seeds));
	/* The chunk's host arrays grow with it (~100 bytes a seed at the peak
	 * bound): a cap keeps a large GPU budget from costing gigabytes of host
	 * memory; two million seeds keep the largest GPU busy already. */
	plan->chunk_seeds = min_u64(plan->chunk_seeds, MAX_CHUNK_SEEDS);
	if (opts->max_chunk_seeds)
		plan->chunk_seeds = min_u64(plan->chunk_seeds, opts->max_chunk_seeds);
	/* Line ids and slot offsets are 32-bit in the kernels. */
	plan->batch_lines = min_u64(plan->batch_lines, UINT32_MAX / plan->slot_points / 3);
	if (plan->batch_lines == 0 || plan->chunk_seeds == 0)
		return errbuf_set(err, -E2BIG, "tracking.max_steps", "a streamline of up to %u points "
				  "does not fit this device's buffer limit of %llu bytes",
				  plan->slot_points, (unsigned long long)buffer_limit);
	log_debug("plan: %u lanes x %u items per workgroup, %u peaks/seed, %llu seeds/chunk, "
		  "%llu streamlines/batch", plan->subgroup, plan->items, plan->max_peaks,
		  (unsigned long long)plan->chunk_seeds, (unsigned long long)plan->batch_lines);
	return 0;
}

/* ---- GPU resources ------------------------------------------------------ */

/* Bindings of the kernels (see their .comp headers); prob binds the SH
 * sampling matrix after these with SH storage. */
#define PROB_INIT_BINDINGS 7
#define PROB_TRACK_BINDINGS 7
#define BOOT_INIT_BINDINGS 8
#define BOOT_TRACK_BINDINGS 10
#define PTT_TRACK_BINDINGS 9
#define COMPACT_BINDINGS 4
#define MAX_BINDINGS BOOT_TRACK_BINDINGS

#define MAX_DEFINES 16
#define DEFINE_LEN 48

struct defines {
	char text[MAX_DEFINES][DEFINE_LEN];
	const char *list[MAX_DEFINES + 1];
	int n;
};

static void define(struct defines *d, const char *name, long long value)
{
	snprintf(d->text[d->n], DEFINE_LEN, "%s=%lld", name, value);
	d->list[d->n] = d->text[d->n];
	d->list[++d->n] = NULL;
}

static void boot_defines(const struct engine_inputs *in, struct defines *d)
{
	define(d, "T", in->dwi.dim[3]);
	define(d, "NB0", in->n_b0);
	define(d, "HR", in->boot.n_dwi);
	define(d, "NC", in->boot.n_coef);
	define(d, "MODEL_CSA", in->boot_model == BOOT_MODEL_CSA);
}

/* pmf.glsl's ODF_STORAGE codes. */
static int odf_storage_code(enum jobspec_odf_storage storage)
{
	return storage == JOBSPEC_ODF_SH ? 2 : storage == JOBSPEC_ODF_FLOAT16 ? 1 : 0;
}

static uint32_t prob_bindings(const struct engine_resident *res, uint32_t base)
{
	return base + (res->storage == JOBSPEC_ODF_SH);
}

static void ptt_defines(const struct jobspec *job, const struct engine_inputs *in,
			struct defines *d)
{
	define(d, "PROBE_QUALITY", job->probe_quality);
	define(d, "PROBE_COUNT", job->probe_count);
	define(d, "REJECTION_SAMPLES", job->rejection_samples);
	define(d, "REJECTION_TRIES", job->rejection_tries);
	define(d, "LUT_RES", ptt_lut_res(in->sphere.nv));
}

static int get_pipelines(struct gpu_ctx *gpu, const struct jobspec *job,
			 const struct job_plan *plan, const struct engine_inputs *in,
			 struct job_gpu *g, struct errbuf *err)
{
	struct defines d = { .n = 0 };
	const struct engine_resident *res = g->res;
	int r;

	define(&d, "SG", plan->subgroup);
	define(&d, "ITEMS", plan->items);
	define(&d, "NV", in->sphere.nv);
	define(&d, "MAX_PEAKS", plan->max_peaks);
	define(&d, "SYMMETRIC", in->symmetric);
	r = gpu_pipeline_get(gpu, "compact.comp", d.list, COMPACT_BINDINGS,
			     sizeof(struct kernel_params), &g->compact, err);
	if (r < 0 || !in->boot_getter) {
		define(&d, "ODF_STORAGE", odf_storage_code(res->storage));
		define(&d, "NC", res->sh_coefs);
		if (r == 0)
			r = gpu_pipeline_get(gpu, "prob_init.comp", d.list,
					     prob_bindings(res, PROB_INIT_BINDINGS),
					     sizeof(struct kernel_params), &g->init, err);
		if (r < 0)
			return r;
		if (job->direction_getter == JOBSPEC_DG_PTT && res->storage == JOBSPEC_ODF_SH)
			/* Sampling SH at every probe point gave far shorter
			 * streamlines than float32 on lavapipe, and different ones
			 * for equivalent orders of the sums: refused until that is
			 * understood. */
			return errbuf_set(err, -E2BIG, "tracking.odf_storage", "ptt tracks the ODF "
					  "as float32 or float16, and these inputs are on the GPU as "
					  "SH coefficients (neither fits the budget): raise the GPU "
					  "memory budget, use a smaller sphere or crop the volume");
		if (job->direction_getter == JOBSPEC_DG_PTT) {
			ptt_defines(job, in, &d);
			return gpu_pipeline_get(gpu, "ptt_track.comp", d.list,
						prob_bindings(res, PTT_TRACK_BINDINGS),
						sizeof(struct kernel_params), &g->track, err);
		}
		return gpu_pipeline_get(gpu, "prob_track.comp", d.list,
					prob_bindings(res, PROB_TRACK_BINDINGS),
					sizeof(struct kernel_params), &g->track, err);
	}
	boot_defines(in, &d);
	define(&d, "DWI_BINDING", BOOT_INIT_BINDINGS - 1);
	r = gpu_pipeline_get(gpu, "boot_init.comp", d.list, BOOT_INIT_BINDINGS,
			     sizeof(struct kernel_params), &g->init, err);
	d.n--;
	define(&d, "DWI_BINDING", BOOT_TRACK_BINDINGS - 1);
	if (r == 0)
		r = gpu_pipeline_get(gpu, "boot_track.comp", d.list, BOOT_TRACK_BINDINGS,
				     sizeof(struct kernel_params), &g->track, err);
	return r;
}

static int new_buffer(struct gpu_ctx *gpu, uint64_t bytes, enum gpu_memory kind,
		      struct gpu_buffer **ret, struct errbuf *err)
{
	return gpu_buffer_new(gpu, bytes ? bytes : 4, kind, ret, err);
}

static int upload_new(struct gpu_ctx *gpu, const void *data, uint64_t bytes,
		      struct gpu_buffer **ret, struct errbuf *err)
{
	int r = new_buffer(gpu, bytes, GPU_MEMORY_DEVICE, ret, err);

	if (r < 0)
		return r;
	return gpu_upload(gpu, *ret, 0, data, bytes, err);
}

/* boot.glsl's matrices[]: U^T, 1/leverage, Q, B, S^T, as floats. */
static float *pack_boot_matrices(const struct boot_matrices *m)
{
	size_t hr = (size_t)m->n_dwi, nc = (size_t)m->n_coef, nv = (size_t)m->nv;
	float *out = malloc(sizeof(float) * boot_matrix_floats(m));
	float *ut, *lev, *q, *b, *st;

	if (!out)
		return NULL;
	ut = out;
	lev = ut + nc * hr;
	q = lev + hr;
	b = q + nc * hr;
	st = b + nc * hr;
	for (size_t j = 0; j < hr; j++) {
		lev[j] = (float)m->inv_leverage[j];
		for (size_t c = 0; c < nc; c++) {
			ut[c * hr + j] = (float)m->hat_u[j * nc + c];
			q[c * hr + j] = (float)m->fit_q[c * hr + j];
			b[c * hr + j] = (float)m->fit_b[c * hr + j];
		}
	}
	for (size_t v = 0; v < nv; v++)
		for (size_t c = 0; c < nc; c++)
			st[c * nv + v] = (float)m->sampling[v * nc + c];
	return out;
}

static int upload_boot(struct gpu_ctx *gpu, const struct engine_inputs *in,
		       const struct paged_layout *layout, struct engine_resident *res,
		       struct errbuf *err)
{
	float *packed = pack_boot_matrices(&in->boot);
	int r;

	if (!packed)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = upload_new(gpu, packed, 4ull * boot_matrix_floats(&in->boot), &res->matrices, err);
	free(packed);
	if (r == 0)
		r = paged_upload(gpu, layout, in->dwi.data, &res->dwi, err);
	return r;
}

/* The ODF as its storage wants it: SH coefficients and the matrix that
 * samples them, or values on the vertices, sampled here from SH inputs
 * (the host copy lives only for the upload). */
static int upload_odf(struct gpu_ctx *gpu, const struct engine_inputs *in,
		      const struct fit_options *fit, const struct paged_layout *layout,
		      struct engine_resident *res, struct errbuf *err)
{
	struct volume sampled = { 0 };
	const float *values = in->odf.data;
	int r;

	if (res->storage == JOBSPEC_ODF_SH) {
		float *basis = fit_sh_sampling_matrix(in->sh_basis, sh_order_from_ncoef(res->sh_coefs),
						      in->sh_world ? in->to_sh : NULL, &in->sphere);
		if (!basis)
			return errbuf_set(err, -ENOMEM, "", "out of memory");
		r = upload_new(gpu, basis, 4ull * res->sh_coefs * (uint64_t)in->sphere.nv,
			       &res->odf_basis, err);
		free(basis);
		if (r == 0)
			r = paged_upload(gpu, layout, sh_of(in)->data, &res->odf, err);
		return r;
	}
	if (sh_of(in)) {
		r = sample_odf(in, fit, &sampled, err);
		if (r < 0)
			return r;
		values = sampled.data;
	}
	r = paged_upload(gpu, layout, values, &res->odf, err);
	volume_free(&sampled);
	return r;
}

static int upload_common(struct gpu_ctx *gpu, const struct engine_inputs *in,
			 struct engine_resident *res, struct errbuf *err)
{
	const struct sphere *s = &in->sphere;
	struct paged_layout layout;
	int r = paged_plan(volume_voxels(&in->stop), 1, PAGED_FLOAT32,
			   gpu_get_limits(gpu)->max_alloc_bytes, &layout, err);

	if (r == 0)
		r = paged_upload(gpu, &layout, in->stop.data, &res->stop, err);

	if (r == 0)
		r = upload_new(gpu, s->vertices, 12ull * (uint64_t)s->nv, &res->vertices, err);
	if (r == 0)
		r = upload_new(gpu, s->nbr_offset, 4ull * (uint64_t)(s->nv + 1), &res->nbr_offset, err);
	if (r == 0)
		r = upload_new(gpu, s->nbr, 8ull * (uint64_t)s->n_edges, &res->nbr, err);
	return r;
}

static int upload_resident(struct gpu_ctx *gpu, const struct engine_inputs *in,
			   const struct engine_upload *up, struct engine_resident *res,
			   struct errbuf *err)
{
	const struct gpu_limits *lim = gpu_get_limits(gpu);
	uint64_t budget = job_budget(lim, up->memory_budget);
	struct paged_layout layout;
	int r;

	if (in->boot_getter) {
		r = plan_dwi(lim, in, budget, &layout, err);
		if (r == 0)
			r = upload_boot(gpu, in, &layout, res, err);
	} else {
		r = choose_odf_storage(lim, in, up->odf_storage, budget, res, &layout, err);
		if (r == 0)
			r = upload_odf(gpu, in, up->fit, &layout, res, err);
	}
	if (r == 0)
		r = upload_common(gpu, in, res, err);
	if (r == 0)
		res->bytes = res->odf.bytes + res->dwi.bytes + res->stop.bytes +
			     common_bytes(in) - 4ull * volume_voxels(grid_of(in)) +
			     (in->boot_getter ? 4ull * boot_matrix_floats(&in->boot) : 0) +
			     (res->odf_basis ? 4ull * res->sh_coefs * (uint64_t)in->sphere.nv : 0);
	return r;
}

int engine_resident_new(struct gpu_ctx *gpu, const struct engine_inputs *in,
			const struct engine_upload *up, struct engine_resident **ret,
			struct errbuf *err)
{
	struct engine_resident *res = calloc(1, sizeof(*res));
	int r;

	if (!res)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = upload_resident(gpu, in, up, res, err);
	if (r < 0) {
		engine_resident_free(gpu, res);
		return r;
	}
	{
		const struct paged_volume *v = in->boot_getter ? &res->dwi : &res->odf;
		log_debug("%s on the GPU%s%s: %u pages of %llu voxels, %.1f MiB",
			  in->boot_getter ? "DWI" : "ODF", in->boot_getter ? "" : " as ",
			  in->boot_getter ? "" : engine_resident_storage(res),
			  v->layout.n_pages, (unsigned long long)v->layout.voxels_per_page,
			  (double)v->bytes / (1 << 20));
	}
	*ret = res;
	return 0;
}

struct upload_task {
	struct gpu_ctx *gpu;
	const struct engine_inputs *in;
	const struct engine_upload *up;
	struct engine_resident *res;
	struct errbuf err;
	int r;
	pthread_t thread;
	bool started;
};

static void *upload_task_main(void *arg)
{
	struct upload_task *t = arg;

	t->r = engine_resident_new(t->gpu, t->in, t->up, &t->res, &t->err);
	return NULL;
}

int engine_resident_new_all(struct gpu_ctx *const *gpus, size_t n, const struct engine_inputs *in,
			    const struct engine_upload *up, struct engine_resident **ret,
			    struct errbuf *err)
{
	struct upload_task *tasks = calloc(n ? n : 1, sizeof(*tasks));
	int r = 0;

	if (!tasks)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	for (size_t i = 0; i < n; i++) {
		tasks[i] = (struct upload_task){ .gpu = gpus[i], .in = in, .up = up };
		if (i > 0)
			tasks[i].started = pthread_create(&tasks[i].thread, NULL, upload_task_main,
							  &tasks[i]) == 0;
	}
	upload_task_main(&tasks[0]);
	for (size_t i = 1; i < n; i++) {
		if (tasks[i].started)
			pthread_join(tasks[i].thread, NULL);
		else
			upload_task_main(&tasks[i]);
	}
	for (size_t i = 0; i < n && r == 0; i++)
		if (tasks[i].r < 0) {
			r = tasks[i].r;
			*err = tasks[i].err;
		}
	for (size_t i = 0; i < n; i++) {
		if (r < 0)
			engine_resident_free(gpus[i], tasks[i].res);
		ret[i] = r < 0 ? NULL : tasks[i].res;
	}
	free(tasks);
	return r;
}

uint64_t engine_resident_bytes(const struct engine_resident *res)
{
	return res->bytes;
}

const char *engine_resident_storage(const struct engine_resident *res)
{
	return res->odf.pages ? storage_names[res->storage] : "dwi";
}

void engine_resident_free(struct gpu_ctx *gpu, struct engine_resident *res)
{
	if (!res)
		return;
	paged_free(gpu, &res->odf);
	paged_free(gpu, &res->dwi);
	gpu_buffer_free(gpu, res->odf_basis);
	paged_free(gpu, &res->stop);
	gpu_buffer_free(gpu, res->vertices);
	gpu_buffer_free(gpu, res->nbr_offset);
	gpu_buffer_free(gpu, res->nbr);
	gpu_buffer_free(gpu, res->matrices);
	free(res);
}

static int alloc_work_buffers(struct gpu_ctx *gpu, const struct job_plan *plan,
			      struct job_gpu *g, struct errbuf *err)
{
	uint64_t s = plan->chunk_seeds, l = plan->batch_lines;
	uint64_t slot_bytes = 12ull * plan->slot_points * l;
	int r = new_buffer(gpu, 12 * s, GPU_MEMORY_DEVICE, &g->seeds, err);

	if (r == 0)
		r = new_buffer(gpu, 4 * s, GPU_MEMORY_DEVICE, &g->ndirs, err);
	if (r == 0)
		r = new_buffer(gpu, 12ull * plan->max_peaks * s, GPU_MEMORY_DEVICE, &g->dirs, err);
	if (r == 0)
		r = new_buffer(gpu, 24 * l, GPU_MEMORY_DEVICE, &g->line_start, err);
	if (r == 0)
		r = new_buffer(gpu, 8 * l, GPU_MEMORY_DEVICE, &g->line_id, err);
	if (r == 0)
		r = new_buffer(gpu, slot_bytes, GPU_MEMORY_DEVICE, &g->points, err);
	if (r == 0)
		r = new_buffer(gpu, 12 * l, GPU_MEMORY_DEVICE, &g->ranges, err);
	if (r == 0)
		r = new_buffer(gpu, 4 * l, GPU_MEMORY_DEVICE, &g->dest, err);
	if (r == 0)
		r = new_buffer(gpu, slot_bytes, GPU_MEMORY_READBACK, &g->readback, err);
	return r;
}

static void free_job_gpu(struct gpu_ctx *gpu, struct job_gpu *g)
{
	struct gpu_buffer *all[] = { g->seeds, g->ndirs, g->dirs, g->line_start, g->line_id,
				     g->points, g->ranges, g->dest, g->readback, g->lut };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		gpu_buffer_free(gpu, all[i]);
	paged_free(gpu, &g->odf_scale);
	memset(g, 0, sizeof(*g));
}

static int alloc_host(const struct job_plan *plan, struct job_host *h, struct errbuf *err)
{
	uint64_t s = plan->chunk_seeds, l = plan->batch_lines;
	uint64_t chunk_lines = s * plan->max_peaks;

	h->seed_xyz = malloc(12 * s);
	h->ndirs = malloc(4 * s);
	h->dirs = malloc(12ull * plan->max_peaks * s);
	h->line_start = malloc(24 * chunk_lines);
	h->line_id = malloc(8 * chunk_lines);
	h->ranges = malloc(12 * l);
	h->dest = malloc(4 * l);
	if (!h->seed_xyz || !h->ndirs || !h->dirs || !h->line_start || !h->line_id || !h->ranges ||
	    !h->dest)
		return errbuf_set(err, -ENOMEM, "", "out of host memory for %llu seeds per chunk",
				  (unsigned long long)s);
	return 0;
}

/* output.compress: a scratch streamline for compress_streamline. One
 * streamline is compressed at a time, so the longest one bounds it. */
static int alloc_compress(const struct job_plan *plan, const struct jobspec *job,
			  const double affine[4][4], struct job_host *h, struct errbuf *err)
{
	if (!job->compress)
		return 0;
	compress_params_init(&h->compress, job->compress_tolerance_mm,
			     job->compress_max_segment_mm, affine);
	h->compressed = malloc(12ull * plan->slot_points);
	h->kept = malloc(4ull * plan->slot_points);
	if (!h->compressed || !h->kept)
		return errbuf_set(err, -ENOMEM, "", "out of host memory for a streamline of %u "
				  "points", plan->slot_points);
	return 0;
}

static void free_host(struct job_host *h)
{
	free(h->seed_xyz);
	free(h->ndirs);
	free(h->dirs);
	free(h->line_start);
	free(h->line_id);
	free(h->ranges);
	free(h->dest);
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
	const struct engine_inputs *in;
	struct seeds *seeds;
	const struct engine_options *opts;
	struct output_writer *out;
	struct engine_stats *stats;
	uint64_t total;           /* seeds */
	uint64_t chunk_limit;     /* the smallest of the devices' chunk sizes */
	double t0;
	pthread_mutex_t lock;
	pthread_cond_t turn_changed;
	uint64_t next_seed;       /* first seed of the next chunk handed out */
	uint64_t next_chunk;      /* index of that chunk */
	uint64_t turn;            /* the chunk being written */
	int error;                /* the first failure (its errbuf is failed_err) */
	struct errbuf failed_err;
};

/* One device's part of a run. */
struct job_run {
	struct run_shared *sh;
	struct gpu_ctx *gpu;
	const struct engine_resident *res;
	const struct jobspec *job;
	const struct engine_inputs *in;
	struct job_plan plan;
	struct job_gpu g;
	struct job_host h;
	struct kernel_params params;
	struct engine_stats stats;   /* this device's kernels, chunks, batches */
	double rate[3];              /* items per second of track, compact, init */
	uint64_t chunk;              /* index of the chunk it tracks */
	struct errbuf err;
	pthread_t thread;
	bool started;
};

static void fill_params(struct job_run *run)
{
	const struct jobspec *job = run->job;
	uint32_t key[2];

	memset(&run->params, 0, sizeof(run->params));
	const struct volume *grid = grid_of(run->in);

	for (int i = 0; i < 3; i++)
		run->params.dim[i] = (int32_t)grid->dim[i];
	run->params.track[0] = (float)job->step_size;
	run->params.track[1] = (float)cos(job->max_angle * M_PI / 180.0);
	run->params.track[2] = (float)job->pmf_threshold;
	run->params.track[3] = (float)job->fa_threshold;
	run->params.peak[0] = (float)job->relative_peak_threshold;
	run->params.peak[1] = (float)cos(job->min_separation_angle * M_PI / 180.0);
	run->params.peak[2] = (float)job->model.min_signal;
	/* Lengths in mm of voxel-space steps: |A d|^2 = d^T (A^T A) d. */
	for (int r = 0, k = 0; r < 3; r++)
		for (int c = r; c < 3; c++, k++) {
			const double (*A)[4] = grid->affine;
			run->params.metric[k] = (float)(A[0][r] * A[0][c] + A[1][r] * A[1][c] +
							A[2][r] * A[2][c]);
		}
	philox_key_from_seed(job->rng_seed, key);
	run->params.rng[0] = key[0];
	run->params.rng[1] = key[1];
	run->params.work[2] = (uint32_t)job->max_steps;
	run->params.work[3] = (uint32_t)job->max_attempts;
	/* DIPY: the curvature of the circle on which a step of step_size turns
	 * by max_angle, 2 sin(max_angle / 2) / step_size. */
	run->params.ptt[0] = (float)(2.0 * sin(job->max_angle * M_PI / 360.0) / job->step_size);
	run->params.ptt[1] = (float)(job->probe_length / (job->probe_quality - 1));
	run->params.ptt[2] = (float)job->probe_radius;
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

/* Dispatches items [0, n) of a kernel in submits of items_per_submit, each
 * split where the workgroup count limit requires it; *rate keeps the
 * kernel's items per second. Items carry their global index (work[0]), so
 * the split changes no output. */
static int dispatch_items(struct job_run *run, const char *what, struct gpu_pipeline *pipe,
			  struct gpu_buffer *const *buffers, uint64_t n, double *rate,
			  struct errbuf *err)
{
	const struct gpu_limits *lim = gpu_get_limits(run->gpu);
	uint64_t per_dispatch = (uint64_t)lim->max_workgroup_count_x * run->plan.items;
	uint64_t submits = 0;
	double t0 = timing_now();
	int r = 0;

	for (uint64_t start = 0; r == 0 && start < n; submits++) {
		uint64_t end = min_u64(n, start + items_per_submit(run, *rate));
		double t_submit = timing_now(), took;

		r = gpu_batch_begin(run->gpu, err);
		for (uint64_t first = start; r == 0 && first < end; first += per_dispatch) {
			uint64_t count = min_u64(per_dispatch, end - first);
			run->params.work[0] = (uint32_t)first;
			run->params.work[1] = (uint32_t)count;
			r = gpu_batch_dispatch(run->gpu, pipe, buffers, &run->params,
					       (uint32_t)((count + run->plan.items - 1) / run->plan.items),
					       err);
		}
		if (r == 0)
			r = gpu_batch_submit_wait(run->gpu, err);
		took = timing_now() - t_submit;
		if (took > 0.0)
			*rate = (double)(end - start) / took;
		start = end;
	}
	run->stats.submits += submits;
	run->stats.kernel_seconds += timing_now() - t0;
	log_debug("%s: %llu items in %llu submit(s), %.4f s", what, (unsigned long long)n,
		  (unsigned long long)submits, timing_now() - t0);
	return r;
}

/* Gives each streamline to keep (>= 2 points, length within the job's limits)
 * its place in the packed read-back buffer: the others are never read back. */
static void assign_destinations(struct job_host *h, uint64_t n_lines, double min_mm,
				double max_mm)
{
	uint64_t next = 0;

	for (uint64_t i = 0; i < n_lines; i++) {
		uint32_t count = h->ranges[3 * i + 1];
		float length_mm;

		memcpy(&length_mm, &h->ranges[3 * i + 2], sizeof(length_mm));
		if (count < 2 || length_mm < min_mm || length_mm > max_mm) {
			h->dest[i] = DROP_LINE;
			continue;
		}
		h->dest[i] = (uint32_t)next;
		next += count;
	}
}

/* The seed of a chunk's line in RAS+ mm, as saved per streamline. */
static void seed_ras(const struct job_run *run, uint64_t line, float out[3])
{
	double vox[3], ras[3];

	for (int a = 0; a < 3; a++)
		vox[a] = run->h.line_start[6 * line + (uint64_t)a];
	affine_apply(grid_of(run->in)->affine, vox, ras);
	for (int a = 0; a < 3; a++)
		out[a] = (float)ras[a];
}

/* The index of the batch's line i's seed among the points written. The
 * kernel stores a line's backward half below its seed's slot, and slots are
 * 2 * max_steps + 1 apart with the seed at max_steps, so the first point's
 * slot gives the backward count. Compression may drop the seed: then the
 * first kept point past it is named (tckgen's seeds never meet that case). */
static uint32_t seed_vertex(const struct job_run *run, uint64_t i, uint32_t count)
{
	uint32_t max_steps = (uint32_t)run->job->max_steps;
	uint32_t v = max_steps - run->h.ranges[3 * i] % (2 * max_steps + 1);

	if (!run->h.compressed)
		return v;
	for (uint32_t k = 0; k < count; k++)
		if (run->h.kept[k] >= v)
			return k;
	return count - 1;
}

/* Appends the packed streamlines of the batch starting at the chunk's line
 * first_line to the output. */
static int write_batch(struct job_run *run, uint64_t first_line, uint64_t n_lines,
		       struct errbuf *err)
{
	const float *packed = gpu_buffer_host(run->g.readback);
	struct job_host *h = &run->h;
	double t0 = timing_now();

	for (uint64_t i = 0; i < n_lines; i++) {
		uint32_t count = h->ranges[3 * i + 1];
		const float *points;
		float seed[3];
		struct output_dps dps = {
			.seed_ras = run->job->save_seeds ? seed : NULL,
			.direction_getter = (uint8_t)run->job->direction_getter,
		};
		int r;

		if (h->dest[i] == DROP_LINE)
			continue;
		points = packed + 3ull * h->dest[i];
		/* After the length filter: min/max length judge the whole line. */
		if (h->compressed) {
			count = compress_streamline(&h->compress, points, count, h->kept,
						    h->compressed);
			points = h->compressed;
		}
		dps.seed_index = h->line_id[2 * (first_line + i)];
		dps.seed_vertex = seed_vertex(run, i, count);
		if (run->job->save_seeds)
			seed_ras(run, first_line + i, seed);
		r = output_write_streamline_dps(run->sh->out, points, count, &dps);
		if (r < 0)
			return errbuf_set(err, r, "output.path", "cannot write the tractogram: %s",
					  strerror(-r));
		run->sh->stats->streamlines++;
		run->sh->stats->points += count;
	}
	run->sh->stats->write_seconds += timing_now() - t0;
	return 0;
}

static void track_bindings(const struct job_run *run, struct gpu_buffer **b)
{
	const struct job_gpu *g = &run->g;
	const struct engine_resident *res = g->res;

	if (run->job->direction_getter == JOBSPEC_DG_PTT) {
		struct gpu_buffer *const ptt[PTT_TRACK_BINDINGS + 1] = {
			res->odf.table, res->stop.table, res->vertices, g->odf_scale.table, g->lut,
			g->line_start, g->line_id, g->points, g->ranges, res->odf_basis };
		memcpy(b, ptt, sizeof(ptt));
		return;
	}
	if (!run->in->boot_getter) {
		struct gpu_buffer *const prob[PROB_TRACK_BINDINGS + 1] = {
			res->odf.table, res->stop.table, res->vertices, g->line_start, g->line_id, g->points,
			g->ranges, res->odf_basis };
		memcpy(b, prob, sizeof(prob));
		return;
	}
	struct gpu_buffer *const boot[BOOT_TRACK_BINDINGS] = {
		res->stop.table, res->vertices, res->nbr_offset, res->nbr, res->matrices, g->line_start,
		g->line_id, g->points, g->ranges, res->dwi.table };
	memcpy(b, boot, sizeof(boot));
}

static void init_bindings(const struct job_run *run, struct gpu_buffer **b)
{
	const struct job_gpu *g = &run->g;
	const struct engine_resident *res = g->res;

	if (!run->in->boot_getter) {
		struct gpu_buffer *const prob[PROB_INIT_BINDINGS + 1] = {
			res->odf.table, res->vertices, res->nbr_offset, res->nbr, g->seeds, g->ndirs,
			g->dirs, res->odf_basis };
		memcpy(b, prob, sizeof(prob));
		return;
	}
	struct gpu_buffer *const boot[BOOT_INIT_BINDINGS] = {
		res->vertices, res->nbr_offset, res->nbr, res->matrices, g->seeds, g->ndirs,
		g->dirs, res->dwi.table };
	memcpy(b, boot, sizeof(boot));
}

/* Waits until the chunk before this device's is written. -ECANCELED when
 * another device failed or the job was cancelled meanwhile. */
static int wait_turn(struct job_run *run, struct errbuf *err)
{
	struct run_shared *sh = run->sh;
	int r = 0;

	pthread_mutex_lock(&sh->lock);
	while (sh->turn != run->chunk && !sh->error)
		pthread_cond_wait(&sh->turn_changed, &sh->lock);
	if (sh->turn != run->chunk)
		r = errbuf_set(err, -ECANCELED, "", "stopped: another device failed");
	pthread_mutex_unlock(&sh->lock);
	return r;
}

static int run_batch(struct job_run *run, uint64_t first_line, uint64_t n_lines, struct errbuf *err)
{
	struct job_gpu *g = &run->g;
	struct gpu_buffer *buffers[MAX_BINDINGS];
	struct gpu_buffer *const pack_buffers[] = { g->points, g->ranges, g->dest, g->readback };
	int r = gpu_upload(run->gpu, g->line_start, 0, run->h.line_start + 6 * first_line,
			   24 * n_lines, err);

	if (r == 0)
		r = gpu_upload(run->gpu, g->line_id, 0, run->h.line_id + 2 * first_line, 8 * n_lines, err);
	track_bindings(run, buffers);
	if (r == 0)
		r = dispatch_items(run, "track", g->track, buffers, n_lines, &run->rate[0], err);
	if (r == 0)
		r = gpu_download(run->gpu, g->ranges, 0, run->h.ranges, 12 * n_lines, err);
	if (r < 0)
		return r;
	assign_destinations(&run->h, n_lines, run->job->min_length, run->job->max_length);
	r = gpu_upload(run->gpu, g->dest, 0, run->h.dest, 4 * n_lines, err);
	if (r == 0)
		r = dispatch_items(run, "compact", g->compact, pack_buffers, n_lines, &run->rate[1],
				   err);
	if (r == 0)
		r = wait_turn(run, err);
	if (r == 0)
		r = write_batch(run, first_line, n_lines, err);
	run->stats.batches++;
	return r;
}

/* Lists the chunk's streamlines: one per initial direction of each seed, in
 * (seed, direction) order. */
static uint64_t build_lines(struct job_run *run, uint64_t first_seed, uint64_t n_seeds)
{
	struct job_host *h = &run->h;
	uint32_t max_peaks = run->plan.max_peaks;
	uint64_t n = 0;

	for (uint64_t s = 0; s < n_seeds; s++) {
		for (uint32_t d = 0; d < h->ndirs[s]; d++, n++) {
			memcpy(&h->line_start[6 * n], &h->seed_xyz[3 * s], 12);
			memcpy(&h->line_start[6 * n + 3], &h->dirs[3 * (s * max_peaks + d)], 12);
			h->line_id[2 * n] = (uint32_t)(first_seed + s);
			h->line_id[2 * n + 1] = d;
		}
	}
	return n;
}

static int run_chunk(struct job_run *run, uint64_t first_seed, uint64_t n_seeds, struct errbuf *err)
{
	struct job_gpu *g = &run->g;
	struct job_host *h = &run->h;
	struct gpu_buffer *buffers[MAX_BINDINGS];
	uint64_t n_lines;
	int r = seeds_fill(run->sh->seeds, first_seed, n_seeds, h->seed_xyz);

	init_bindings(run, buffers);
	/* Seed indices are 32-bit in the kernels' random streams (JOBSPEC_MAX_SEEDS). */
	run->params.rng[2] = (uint32_t)first_seed;
	if (r < 0)
		return errbuf_set(err, r, "seeds", "cannot generate seeds %llu..%llu",
				  (unsigned long long)first_seed,
				  (unsigned long long)(first_seed + n_seeds));
	r = gpu_upload(run->gpu, g->seeds, 0, h->seed_xyz, 12 * n_seeds, err);
	if (r == 0)
		r = dispatch_items(run, "init", g->init, buffers, n_seeds, &run->rate[2], err);
	if (r == 0)
		r = gpu_download(run->gpu, g->ndirs, 0, h->ndirs, 4 * n_seeds, err);
	if (r == 0)
		r = gpu_download(run->gpu, g->dirs, 0, h->dirs, 12ull * run->plan.max_peaks * n_seeds,
				 err);
	if (r < 0)
		return r;
	n_lines = build_lines(run, first_seed, n_seeds);
	for (uint64_t first = 0; first < n_lines && r == 0; first += run->plan.batch_lines)
		r = run_batch(run, first, min_u64(run->plan.batch_lines, n_lines - first), err);
	run->stats.chunks++;
	return r;
}

/* With a target chunk duration, the first chunk is small and later ones are
 * sized from the rate measured so far (never above the devices' limit). */
static uint64_t next_chunk_seeds(const struct run_shared *sh, uint64_t done, double elapsed)
{
	double target = sh->opts->chunk_seconds;
	double sized;

	if (target <= 0.0)
		return sh->chunk_limit;
	if (done == 0 || elapsed <= 0.0)
		return min_u64(sh->chunk_limit, FIRST_TIMED_CHUNK_SEEDS);
	sized = (double)done / elapsed * target;
	if (sized < (double)FIRST_TIMED_CHUNK_SEEDS)
		return min_u64(sh->chunk_limit, FIRST_TIMED_CHUNK_SEEDS);
	return sized >= (double)sh->chunk_limit ? sh->chunk_limit : (uint64_t)sized;
}

/* Hands this device the next chunk: false when none is left or the run
 * stopped. */
static bool take_chunk(struct job_run *run, uint64_t *first, uint64_t *n)
{
	struct run_shared *sh = run->sh;
	bool got;

	pthread_mutex_lock(&sh->lock);
	got = !sh->error && sh->next_seed < sh->total;
	if (got) {
		*first = sh->next_seed;
		*n = min_u64(next_chunk_seeds(sh, sh->next_seed, timing_now() - sh->t0),
			     sh->total - sh->next_seed);
		run->chunk = sh->next_chunk++;
		sh->next_seed += *n;
	}
	pthread_mutex_unlock(&sh->lock);
	return got;
}

/* After the chunk is written (this device holds the turn): flushes the
 * output, reports progress and passes the turn on. */
static int finish_chunk(struct job_run *run, uint64_t end_seed, struct errbuf *err)
{
	struct run_shared *sh = run->sh;
	const struct engine_options *o = sh->opts;
	int r = wait_turn(run, err);

	if (r == 0 && output_flush(sh->out) < 0)
		r = errbuf_set(err, -EIO, "output.path", "cannot write the tractogram");
	if (r == 0 && o->progress &&
	    !o->progress(o->progress_userdata, end_seed, sh->total, sh->stats->streamlines))
		r = errbuf_set(err, -ECANCELED, "", "cancelled after %llu of %llu seeds",
			       (unsigned long long)end_seed, (unsigned long long)sh->total);
	pthread_mutex_lock(&sh->lock);
	if (r == 0)
		sh->turn++;
	pthread_cond_broadcast(&sh->turn_changed);
	pthread_mutex_unlock(&sh->lock);
	return r;
}

/* Records a device's failure; the first one is the run's. */
static void fail_run(struct job_run *run, int r)
{
	struct run_shared *sh = run->sh;

	pthread_mutex_lock(&sh->lock);
	if (!sh->error) {
		sh->error = r;
		sh->failed_err = run->err;
	}
	pthread_cond_broadcast(&sh->turn_changed);
	pthread_mutex_unlock(&sh->lock);
}

static void *track_chunks(void *arg)
{
	struct job_run *run = arg;
	uint64_t first, n;
	int r = 0;

	fill_params(run);
	while (r == 0 && take_chunk(run, &first, &n)) {
		r = run_chunk(run, first, n, &run->err);
		if (r == 0)
			r = finish_chunk(run, first + n, &run->err);
	}
	if (r < 0)
		fail_run(run, r);
	return NULL;
}

/* ptt's per-voxel ODF scale: the ODF's maxima come from the values on the
 * vertices, which SH inputs are sampled to here (the host copy lives only
 * for this). */
static int ptt_scale(const struct jobspec *job, const struct engine_inputs *in, float *scale,
		     struct errbuf *err)
{
	struct volume sampled = { 0 };
	const struct volume *odf = &in->odf;

	if (sh_of(in)) {
		int r = sample_odf(in, NULL, &sampled, err);
		if (r < 0)
			return r;
		odf = &sampled;
	}
	ptt_odf_scale(odf, &in->stop, job->fa_threshold, scale);
	volume_free(&sampled);
	return 0;
}

/* The ptt tables depend on the job (stop threshold, sphere symmetry) as well
 * as on the cached inputs, so each job builds and uploads its own; the scale
 * is paged like the stop map it matches in size. */
static int upload_ptt_tables(struct gpu_ctx *gpu, const struct jobspec *job,
			     const struct engine_inputs *in, struct job_gpu *g, struct errbuf *err)
{
	size_t nvox = volume_voxels(&in->stop);
	float *scale = malloc(sizeof(float) * nvox);
	struct ptt_lut lut = { 0 };
	struct paged_layout layout;
	int r;

	if (!scale || ptt_lut_build(&in->sphere, in->symmetric, &lut) < 0) {
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
		r = upload_new(gpu, lut.words, 4ull * lut.n_words, &g->lut, err);
	free(scale);
	ptt_lut_free(&lut);
	return r;
}

static int prepare_gpu(struct job_run *run, struct errbuf *err)
{
	double compile_before = gpu_compile_seconds(run->gpu);
	int r = get_pipelines(run->gpu, run->job, &run->plan, run->in, &run->g, err);

	run->stats.compile_seconds = gpu_compile_seconds(run->gpu) - compile_before;
	if (r == 0)
		r = alloc_work_buffers(run->gpu, &run->plan, &run->g, err);
	if (r == 0 && run->job->direction_getter == JOBSPEC_DG_PTT)
		r = upload_ptt_tables(run->gpu, run->job, run->in, &run->g, err);
	if (r == 0)
		r = alloc_host(&run->plan, &run->h, err);
	if (r == 0)
		r = alloc_compress(&run->plan, run->job, grid_of(run->in)->affine, &run->h, err);
	return r;
}

static void free_device_run(struct job_run *run)
{
	free_host(&run->h);
	free_job_gpu(run->gpu, &run->g);
}

/* TRK stores properties as float32, exact for integers up to 2^24: a larger
 * job's seed indices would silently collide, so it is refused instead. */
static int check_seed_index(const struct jobspec *job, struct seeds *seeds, struct errbuf *err)
{
	const uint64_t exact = 1ull << 24;

	if (!job->save_seed_index || job->output_format != OUTPUT_TRK || seeds_count(seeds) <= exact)
		return 0;
	return errbuf_set(err, -EINVAL, "output.save_seed_index", "TRK keeps seed indices as "
			  "float32, exact up to %llu seeds; this job has %llu: use output.format "
			  "\"trx\"", (unsigned long long)exact,
			  (unsigned long long)seeds_count(seeds));
}

static int open_output(struct run_shared *sh, FILE *out, struct errbuf *err)
{
	const struct jobspec *job = sh->job;
	const struct volume *grid = grid_of(sh->in);
	struct output_options oo = { .with_seeds = job->save_seeds,
				     .with_seed_index = job->save_seed_index,
				     .with_direction_getter = job->save_direction_getter,
				     .seeds_file = sh->opts->seeds_file,
				     .positions = job->output_positions,
				     .compression = job->output_compression };
	int r = output_writer_new(job->output_format, out, grid->dim, grid->affine, &oo, &sh->out,
				  err);

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
		run->gpu = devs[i].gpu;
		run->res = devs[i].resident;
		run->g.res = devs[i].resident;
		run->job = sh->job;
		run->in = sh->in;
		r = plan_work(gpu_get_limits(run->gpu), sh->job, sh->in, run->res, sh->seeds, sh->opts,
			      &run->plan, err);
		if (r == 0)
			r = prepare_gpu(run, err);
		if (r == 0)
			sh->chunk_limit = min_u64(sh->chunk_limit, run->plan.chunk_seeds);
	}
	/* Several chunks per device, so that they all have work to the end. */
	if (n > 1)
		sh->chunk_limit = min_u64(sh->chunk_limit,
					  (sh->total + CHUNKS_PER_DEVICE * n - 1) / (CHUNKS_PER_DEVICE * n));
	return r;
}

/* Device 0 runs on the calling thread, the others on threads of their own. */
static int track_on_devices(struct run_shared *sh, struct job_run *runs, size_t n,
			    struct errbuf *err)
{
	for (size_t i = 1; i < n; i++) {
		int r = pthread_create(&runs[i].thread, NULL, track_chunks, &runs[i]);
		if (r != 0) {
			errbuf_set(&runs[i].err, -r, "device", "cannot start a thread: %s", strerror(r));
			fail_run(&runs[i], -r);
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

static void add_device_stats(struct engine_stats *total, const struct engine_stats *dev)
{
	total->chunks += dev->chunks;
	total->batches += dev->batches;
	total->kernel_seconds += dev->kernel_seconds;
	total->submits += dev->submits;
	total->compile_seconds += dev->compile_seconds;
}

int engine_run_devices(const struct engine_device *devs, size_t n_devs, const struct jobspec *job,
		       const struct engine_inputs *in, struct seeds *seeds,
		       const struct engine_options *opts, FILE *out, struct engine_stats *stats,
		       struct errbuf *err)
{
	struct engine_stats local_stats;
	struct run_shared sh = { .job = job, .in = in, .seeds = seeds, .opts = opts,
				 .total = seeds_count(seeds) };
	struct job_run *runs = calloc(n_devs ? n_devs : 1, sizeof(*runs));
	double write_before;
	int r;

	if (!stats)
		stats = &local_stats;
	memset(stats, 0, sizeof(*stats));
	if (!runs)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	sh.stats = stats;
	stats->odf_storage = engine_resident_storage(devs[0].resident);
	stats->gpu_input_bytes = engine_resident_bytes(devs[0].resident);
	pthread_mutex_init(&sh.lock, NULL);
	pthread_cond_init(&sh.turn_changed, NULL);
	r = check_seed_index(job, seeds, err);
	if (r == 0)
		r = prepare_devices(&sh, devs, runs, n_devs, err);
	if (r == 0)
		r = open_output(&sh, out, err);
	sh.t0 = timing_now();
	write_before = stats->write_seconds;
	if (r == 0)
		r = track_on_devices(&sh, runs, n_devs, err);
	stats->seeds = sh.total;
	stats->track_seconds = timing_now() - sh.t0 - (stats->write_seconds - write_before);
	if (sh.out) {
		int fr = output_writer_finish(sh.out);
		if (r == 0 && fr < 0)
			r = errbuf_set(err, fr, "output.path", "cannot finish the tractogram: %s",
				       strerror(-fr));
	}
	for (size_t i = 0; i < n_devs; i++) {
		add_device_stats(stats, &runs[i].stats);
		if (runs[i].gpu)
			free_device_run(&runs[i]);
	}
	pthread_cond_destroy(&sh.turn_changed);
	pthread_mutex_destroy(&sh.lock);
	free(runs);
	return r;
}

int engine_run(struct gpu_ctx *gpu, const struct jobspec *job, const struct engine_inputs *in,
	       const struct engine_resident *res, struct seeds *seeds,
	       const struct engine_options *opts, FILE *out, struct engine_stats *stats,
	       struct errbuf *err)
{
	struct engine_device dev = { .gpu = gpu, .resident = res };

	return engine_run_devices(&dev, 1, job, in, seeds, opts, out, stats, err);
}
