/* SPDX-License-Identifier: MIT */
/*
 * engine: one tracking job from validated spec to tractogram records (see engine.h).
 *
 * Flow: load inputs (volumes, sphere, seed generator) -> plan chunk and batch
 * sizes from the device limits -> compile/fetch pipelines -> upload the ODF,
 * stop map and sphere -> for each seed chunk: pass 1 (prob_init: initial
 * directions per seed), build the streamline list on the host, then for each
 * batch of streamlines pass 2 (prob_track), read back only the points of kept
 * streamlines and append them to the output writer (TRK or TCK).
 */
#include "engine.h"

#include <errno.h>
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
#include "seeds.h"
#include "sphere.h"
#include "timing.h"
#include "output.h"
#include "volume.h"

#define MIN_WORK_BUDGET (8ull << 20)
#define TARGET_WORKGROUP_LANES 64
#define FIRST_TIMED_CHUNK_SEEDS 256
#define ODF_SYMMETRY_TOLERANCE 1e-3
/* Buffers the boot kernels can spread the DWI over: the GPU context's 16
 * bindings less the 9 that boot_track binds besides. */
#define MAX_DWI_PARTS 7

struct engine_inputs {
	struct volume odf;        /* prob: the ODF on the sphere's vertices */
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
	struct gpu_buffer *odf, *fa, *vertices, *nbr_offset, *nbr;
	struct gpu_buffer *matrices;                  /* boot: boot.glsl's layout */
	struct gpu_buffer *dwi_parts[MAX_DWI_PARTS];  /* boot: x-slabs of the DWI */
	uint32_t n_dwi_parts;
	uint32_t part_planes;     /* x-planes per part, one more shared with the next */
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

static void clip_negative(struct volume *v)
{
	size_t n = volume_voxels(v) * (size_t)v->dim[3];

	for (size_t i = 0; i < n; i++)
		if (v->data[i] < 0.0f)
			v->data[i] = 0.0f;
}

/* For each vertex, the index of its antipode, or -1. */
static int *antipodes(const struct sphere *s)
{
	int *anti = malloc(sizeof(*anti) * (size_t)s->nv);

	if (!anti)
		return NULL;
	for (int j = 0; j < s->nv; j++) {
		const float *a = &s->vertices[3 * j];
		anti[j] = -1;
		for (int k = 0; k < s->nv && anti[j] < 0; k++) {
			const float *b = &s->vertices[3 * k];
			if (a[0] * b[0] + a[1] * b[1] + a[2] * b[2] < -1.0f + 1e-5f)
				anti[j] = k;
		}
	}
	return anti;
}

static bool voxel_symmetric(const float *f, const int *anti, int nv)
{
	float top = 0.0f;

	for (int j = 0; j < nv; j++)
		top = f[j] > top ? f[j] : top;
	for (int j = 0; j < nv; j++)
		if (anti[j] > j && fabsf(f[j] - f[anti[j]]) > ODF_SYMMETRY_TOLERANCE * top)
			return false;
	return true;
}

/* An ODF sampled on a hemisphere is symmetric by convention; on a full sphere
 * it is when every voxel has equal values at antipodal vertices. Symmetric
 * ODFs compare directions by |cos| (DIPY); asymmetric ones by cos. */
static int odf_symmetry(const struct volume *odf, const struct sphere *s, bool *ret,
			struct errbuf *err)
{
	int *anti;
	size_t nvox = volume_voxels(odf);
	bool symmetric = true;

	if (!s->antipodal) {
		*ret = true;
		return 0;
	}
	anti = antipodes(s);
	if (!anti)
		return errbuf_set(err, -ENOMEM, "inputs.odf", "out of memory");
	for (size_t v = 0; v < nvox && symmetric; v++)
		symmetric = voxel_symmetric(&odf->data[v * (size_t)s->nv], anti, s->nv);
	free(anti);
	*ret = symmetric;
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

static int load_sh(const struct jobspec *job, const struct fit_options *o,
		   struct engine_inputs *in, struct errbuf *err)
{
	struct volume sh = { 0 };
	double to_world[3][3];
	int r = volume_load(job->sh_path, "inputs.sh", &sh, err);

	if (r == 0) {
		voxel_to_world_directions(&sh, to_world);
		r = fit_sample_sh(&sh, job->sh_basis,
				  job->sh_frame == JOBSPEC_SH_FRAME_WORLD ? to_world : NULL,
				  &in->sphere, o, "inputs.sh", &in->odf, err);
	}
	volume_free(&sh);
	return r;
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
	if (r == 0)
		r = fit_sample_sh(&in->fit.sh, SH_DESCOTEAUX07_LEGACY, NULL, &in->sphere, o,
				  "inputs.dwi", &in->odf, err);
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

static const struct volume *grid_of(const struct engine_inputs *in)
{
	return in->boot_getter ? &in->dwi : &in->odf;
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
		r = load_sh(job, o, in, err);
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
	clip_negative(&in->odf);
	return odf_symmetry(&in->odf, &in->sphere, &in->symmetric, err);
}

void engine_inputs_free(struct engine_inputs *in)
{
	if (!in)
		return;
	volume_free(&in->odf);
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

const struct volume *engine_inputs_odf(const struct engine_inputs *in)
{
	return &in->odf;
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

static uint64_t input_bytes(const struct engine_inputs *in, const struct engine_resident *res)
{
	size_t nvox = volume_voxels(grid_of(in));
	uint64_t sphere = 12ull * (uint64_t)in->sphere.nv + 4ull * (uint64_t)(in->sphere.nv + 1) +
			  8ull * (uint64_t)in->sphere.n_edges;
	uint64_t plane = 4ull * (uint64_t)(in->dwi.dim[1] * in->dwi.dim[2] * in->dwi.dim[3]);

	if (in->boot_getter)
		return 4ull * nvox + sphere + 4ull * boot_matrix_floats(&in->boot) +
		       plane * ((uint64_t)in->dwi.dim[0] + res->n_dwi_parts - 1);
	return 4ull * nvox * (uint64_t)in->sphere.nv + 4ull * nvox + sphere;
}

static int check_input_fits(const struct gpu_limits *lim, const struct engine_inputs *in,
			    struct errbuf *err)
{
	uint64_t odf_bytes = 4ull * volume_voxels(&in->odf) * (uint64_t)in->sphere.nv;
	uint64_t limit = min_u64(lim->max_binding_bytes, lim->max_alloc_bytes);

	if (!in->boot_getter && odf_bytes > limit)
		return errbuf_set(err, -E2BIG, "inputs.odf", "the ODF needs %llu MiB on the GPU, over "
				  "this device's %llu MiB per storage buffer; use a smaller sphere "
				  "(e.g. repulsion100) or crop the volume",
				  (unsigned long long)(odf_bytes >> 20), (unsigned long long)(limit >> 20));
	return 0;
}

/* Splits the DWI into x-slabs that each fit one binding, neighbours sharing
 * one plane so that every trilinear lookup stays within one slab. */
static int plan_dwi_parts(const struct gpu_limits *lim, const struct volume *dwi,
			  struct engine_resident *res, struct errbuf *err)
{
	uint64_t limit = min_u64(lim->max_binding_bytes, lim->max_alloc_bytes);
	uint64_t nx = (uint64_t)dwi->dim[0];
	uint64_t plane = 4ull * (uint64_t)(dwi->dim[1] * dwi->dim[2] * dwi->dim[3]);
	uint64_t planes;

	if (nx * plane <= limit) {
		res->n_dwi_parts = 1;
		res->part_planes = (uint32_t)nx;
		return 0;
	}
	planes = limit / plane > 1 ? limit / plane - 1 : 0;
	if (planes == 0 || (nx - 1 + planes - 1) / planes > MAX_DWI_PARTS)
		return errbuf_set(err, -E2BIG, "inputs.dwi", "the DWI needs %llu MiB on the GPU in "
				  "slabs of at most %llu MiB (this device's storage-buffer limit), "
				  "more than the %d slabs the boot kernels bind; crop the volume",
				  (unsigned long long)((nx * plane) >> 20),
				  (unsigned long long)(limit >> 20), MAX_DWI_PARTS);
	res->part_planes = (uint32_t)planes;
	res->n_dwi_parts = (uint32_t)((nx - 1 + planes - 1) / planes);
	return 0;
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
	uint64_t budget = opts->memory_budget ? opts->memory_budget : lim->device_local_bytes / 2;
	uint64_t buffer_limit = min_u64(lim->max_binding_bytes, lim->max_alloc_bytes);
	uint64_t inputs = input_bytes(in, res);
	uint64_t work, line_slot_bytes, per_line, per_seed;
	int r;

	if (inputs >= budget)
		return errbuf_set(err, -E2BIG, "inputs.odf", "the inputs need %.1f MiB of GPU memory, "
				  "over the job's budget of %.1f MiB", (double)inputs / (1 << 20),
				  (double)budget / (1 << 20));
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

/* Bindings of the kernels besides the DWI parts (see their .comp headers). */
#define PROB_INIT_BINDINGS 7
#define PROB_TRACK_BINDINGS 7
#define BOOT_INIT_BINDINGS 7
#define BOOT_TRACK_BINDINGS 9
#define COMPACT_BINDINGS 4

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

static void boot_defines(const struct engine_inputs *in, const struct engine_resident *res,
			 struct defines *d)
{
	define(d, "T", in->dwi.dim[3]);
	define(d, "NB0", in->n_b0);
	define(d, "HR", in->boot.n_dwi);
	define(d, "NC", in->boot.n_coef);
	define(d, "MODEL_CSA", in->boot_model == BOOT_MODEL_CSA);
	define(d, "DWI_PARTS", res->n_dwi_parts);
	define(d, "PART_PLANES", res->part_planes);
}

static int get_pipelines(struct gpu_ctx *gpu, const struct job_plan *plan,
			 const struct engine_inputs *in, struct job_gpu *g, struct errbuf *err)
{
	struct defines d = { .n = 0 };
	const struct engine_resident *res = g->res;
	uint32_t parts = res->n_dwi_parts;
	int r;

	define(&d, "SG", plan->subgroup);
	define(&d, "ITEMS", plan->items);
	define(&d, "NV", in->sphere.nv);
	define(&d, "MAX_PEAKS", plan->max_peaks);
	define(&d, "SYMMETRIC", in->symmetric);
	r = gpu_pipeline_get(gpu, "compact.comp", d.list, COMPACT_BINDINGS,
			     sizeof(struct kernel_params), &g->compact, err);
	if (r < 0 || !in->boot_getter) {
		if (r == 0)
			r = gpu_pipeline_get(gpu, "prob_init.comp", d.list, PROB_INIT_BINDINGS,
					     sizeof(struct kernel_params), &g->init, err);
		if (r == 0)
			r = gpu_pipeline_get(gpu, "prob_track.comp", d.list, PROB_TRACK_BINDINGS,
					     sizeof(struct kernel_params), &g->track, err);
		return r;
	}
	boot_defines(in, res, &d);
	define(&d, "DWI_BINDING", BOOT_INIT_BINDINGS);
	r = gpu_pipeline_get(gpu, "boot_init.comp", d.list, BOOT_INIT_BINDINGS + parts,
			     sizeof(struct kernel_params), &g->init, err);
	d.n--;
	define(&d, "DWI_BINDING", BOOT_TRACK_BINDINGS);
	if (r == 0)
		r = gpu_pipeline_get(gpu, "boot_track.comp", d.list, BOOT_TRACK_BINDINGS + parts,
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
		       struct engine_resident *res, struct errbuf *err)
{
	const struct volume *dwi = &in->dwi;
	uint64_t plane = (uint64_t)(dwi->dim[1] * dwi->dim[2] * dwi->dim[3]);
	uint64_t nx = (uint64_t)dwi->dim[0];
	float *packed = pack_boot_matrices(&in->boot);
	int r;

	if (!packed)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = upload_new(gpu, packed, 4ull * boot_matrix_floats(&in->boot), &res->matrices, err);
	free(packed);
	for (uint32_t k = 0; r == 0 && k < res->n_dwi_parts; k++) {
		uint64_t first = (uint64_t)k * res->part_planes;
		uint64_t planes = min_u64(res->part_planes + 1ull, nx - first);
		r = upload_new(gpu, dwi->data + first * plane, 4ull * planes * plane,
			       &res->dwi_parts[k], err);
	}
	return r;
}

static int upload_resident(struct gpu_ctx *gpu, const struct engine_inputs *in,
			   struct engine_resident *res, struct errbuf *err)
{
	const struct sphere *s = &in->sphere;
	size_t nvox = volume_voxels(grid_of(in));
	int r = in->boot_getter ? upload_boot(gpu, in, res, err) :
		upload_new(gpu, in->odf.data, 4ull * nvox * (uint64_t)s->nv, &res->odf, err);

	if (r == 0)
		r = upload_new(gpu, in->stop.data, 4ull * nvox, &res->fa, err);
	if (r == 0)
		r = upload_new(gpu, s->vertices, 12ull * (uint64_t)s->nv, &res->vertices, err);
	if (r == 0)
		r = upload_new(gpu, s->nbr_offset, 4ull * (uint64_t)(s->nv + 1), &res->nbr_offset, err);
	if (r == 0)
		r = upload_new(gpu, s->nbr, 8ull * (uint64_t)s->n_edges, &res->nbr, err);
	return r;
}

int engine_resident_new(struct gpu_ctx *gpu, const struct engine_inputs *in,
			struct engine_resident **ret, struct errbuf *err)
{
	struct engine_resident *res;
	int r = check_input_fits(gpu_get_limits(gpu), in, err);

	if (r < 0)
		return r;
	res = calloc(1, sizeof(*res));
	if (!res)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	if (in->boot_getter)
		r = plan_dwi_parts(gpu_get_limits(gpu), &in->dwi, res, err);
	if (r == 0)
		r = upload_resident(gpu, in, res, err);
	if (r < 0) {
		engine_resident_free(gpu, res);
		return r;
	}
	res->bytes = input_bytes(in, res);
	*ret = res;
	return 0;
}

uint64_t engine_resident_bytes(const struct engine_resident *res)
{
	return res->bytes;
}

void engine_resident_free(struct gpu_ctx *gpu, struct engine_resident *res)
{
	if (!res)
		return;
	gpu_buffer_free(gpu, res->odf);
	gpu_buffer_free(gpu, res->fa);
	gpu_buffer_free(gpu, res->vertices);
	gpu_buffer_free(gpu, res->nbr_offset);
	gpu_buffer_free(gpu, res->nbr);
	gpu_buffer_free(gpu, res->matrices);
	for (uint32_t k = 0; k < res->n_dwi_parts; k++)
		gpu_buffer_free(gpu, res->dwi_parts[k]);
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
				     g->points, g->ranges, g->dest, g->readback };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		gpu_buffer_free(gpu, all[i]);
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

struct job_run {
	struct gpu_ctx *gpu;
	const struct jobspec *job;
	const struct engine_inputs *in;
	struct seeds *seeds;
	const struct job_plan *plan;
	struct job_gpu *g;
	struct job_host *h;
	const struct engine_options *opts;
	struct output_writer *out;
	struct kernel_params params;
	struct engine_stats *stats;
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
}

/* Items one submit may carry: an item runs up to max_steps steps (a line;
 * a seed's init is cheaper, bounded alike for simplicity). */
static uint64_t items_per_submit(const struct job_run *run)
{
	uint64_t steps = run->opts->max_dispatch_steps ? run->opts->max_dispatch_steps
						       : ENGINE_MAX_DISPATCH_STEPS;
	uint64_t items = steps / (uint64_t)run->job->max_steps;

	return items ? items : 1;
}

/* Dispatches items [0, n) of a kernel: one submit per items_per_submit, so
 * that no submit runs long enough to trip a GPU watchdog, each split where
 * the workgroup count limit requires it. Items carry their global index
 * (work[0]), so the split changes no output. */
static int dispatch_items(struct job_run *run, const char *what, struct gpu_pipeline *pipe,
			  struct gpu_buffer *const *buffers, uint64_t n, struct errbuf *err)
{
	const struct gpu_limits *lim = gpu_get_limits(run->gpu);
	uint64_t per_dispatch = (uint64_t)lim->max_workgroup_count_x * run->plan->items;
	uint64_t per_submit = items_per_submit(run), submits = 0;
	double t0 = timing_now();
	int r = 0;

	for (uint64_t start = 0; r == 0 && start < n; start += per_submit) {
		uint64_t end = min_u64(n, start + per_submit);

		r = gpu_batch_begin(run->gpu, err);
		for (uint64_t first = start; r == 0 && first < end; first += per_dispatch) {
			uint64_t count = min_u64(per_dispatch, end - first);
			run->params.work[0] = (uint32_t)first;
			run->params.work[1] = (uint32_t)count;
			r = gpu_batch_dispatch(run->gpu, pipe, buffers, &run->params,
					       (uint32_t)((count + run->plan->items - 1) /
							  run->plan->items), err);
		}
		if (r == 0)
			r = gpu_batch_submit_wait(run->gpu, err);
		submits++;
	}
	run->stats->submits += submits;
	run->stats->kernel_seconds += timing_now() - t0;
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
		vox[a] = run->h->line_start[6 * line + (uint64_t)a];
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
	uint32_t v = max_steps - run->h->ranges[3 * i] % (2 * max_steps + 1);

	if (!run->h->compressed)
		return v;
	for (uint32_t k = 0; k < count; k++)
		if (run->h->kept[k] >= v)
			return k;
	return count - 1;
}

/* Appends the packed streamlines of the batch starting at the chunk's line
 * first_line to the output. */
static int write_batch(struct job_run *run, uint64_t first_line, uint64_t n_lines,
		       struct errbuf *err)
{
	const float *packed = gpu_buffer_host(run->g->readback);
	struct job_host *h = run->h;
	double t0 = timing_now();

	for (uint64_t i = 0; i < n_lines; i++) {
		uint32_t count = h->ranges[3 * i + 1];
		const float *points;
		float seed[3];
		struct output_dps dps = {
			.seed_ras = run->job->save_seeds ? seed : NULL,
			.direction_getter = run->job->direction_getter == JOBSPEC_DG_BOOT
						    ? OUTPUT_DG_BOOT : OUTPUT_DG_PROB,
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
		r = output_write_streamline_dps(run->out, points, count, &dps);
		if (r < 0)
			return errbuf_set(err, r, "output.path", "cannot write the tractogram: %s",
					  strerror(-r));
		run->stats->streamlines++;
		run->stats->points += count;
	}
	run->stats->write_seconds += timing_now() - t0;
	return 0;
}

/* Appends the DWI parts to a boot kernel's bindings. */
static size_t with_dwi_parts(const struct engine_resident *res, struct gpu_buffer **b, size_t n)
{
	for (uint32_t k = 0; k < res->n_dwi_parts; k++)
		b[n++] = res->dwi_parts[k];
	return n;
}

static void track_bindings(const struct job_run *run, struct gpu_buffer **b)
{
	const struct job_gpu *g = run->g;
	const struct engine_resident *res = g->res;

	if (!run->in->boot_getter) {
		struct gpu_buffer *const prob[PROB_TRACK_BINDINGS] = {
			res->odf, res->fa, res->vertices, g->line_start, g->line_id, g->points,
			g->ranges };
		memcpy(b, prob, sizeof(prob));
		return;
	}
	struct gpu_buffer *const boot[BOOT_TRACK_BINDINGS] = {
		res->fa, res->vertices, res->nbr_offset, res->nbr, res->matrices, g->line_start,
		g->line_id, g->points, g->ranges };
	memcpy(b, boot, sizeof(boot));
	with_dwi_parts(res, b, BOOT_TRACK_BINDINGS);
}

static void init_bindings(const struct job_run *run, struct gpu_buffer **b)
{
	const struct job_gpu *g = run->g;
	const struct engine_resident *res = g->res;

	if (!run->in->boot_getter) {
		struct gpu_buffer *const prob[PROB_INIT_BINDINGS] = {
			res->odf, res->vertices, res->nbr_offset, res->nbr, g->seeds, g->ndirs,
			g->dirs };
		memcpy(b, prob, sizeof(prob));
		return;
	}
	struct gpu_buffer *const boot[BOOT_INIT_BINDINGS] = {
		res->vertices, res->nbr_offset, res->nbr, res->matrices, g->seeds, g->ndirs,
		g->dirs };
	memcpy(b, boot, sizeof(boot));
	with_dwi_parts(res, b, BOOT_INIT_BINDINGS);
}

static int run_batch(struct job_run *run, uint64_t first_line, uint64_t n_lines, struct errbuf *err)
{
	struct job_gpu *g = run->g;
	struct gpu_buffer *buffers[BOOT_TRACK_BINDINGS + MAX_DWI_PARTS];
	struct gpu_buffer *const pack_buffers[] = { g->points, g->ranges, g->dest, g->readback };
	int r = gpu_upload(run->gpu, g->line_start, 0, run->h->line_start + 6 * first_line,
			   24 * n_lines, err);

	if (r == 0)
		r = gpu_upload(run->gpu, g->line_id, 0, run->h->line_id + 2 * first_line, 8 * n_lines, err);
	track_bindings(run, buffers);
	if (r == 0)
		r = dispatch_items(run, "track", g->track, buffers, n_lines, err);
	if (r == 0)
		r = gpu_download(run->gpu, g->ranges, 0, run->h->ranges, 12 * n_lines, err);
	if (r < 0)
		return r;
	assign_destinations(run->h, n_lines, run->job->min_length, run->job->max_length);
	r = gpu_upload(run->gpu, g->dest, 0, run->h->dest, 4 * n_lines, err);
	if (r == 0)
		r = dispatch_items(run, "compact", g->compact, pack_buffers, n_lines, err);
	if (r == 0)
		r = write_batch(run, first_line, n_lines, err);
	run->stats->batches++;
	return r;
}

/* Lists the chunk's streamlines: one per initial direction of each seed, in
 * (seed, direction) order. */
static uint64_t build_lines(struct job_run *run, uint64_t first_seed, uint64_t n_seeds)
{
	struct job_host *h = run->h;
	uint32_t max_peaks = run->plan->max_peaks;
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
	struct job_gpu *g = run->g;
	struct job_host *h = run->h;
	struct gpu_buffer *buffers[BOOT_INIT_BINDINGS + MAX_DWI_PARTS];
	uint64_t n_lines;
	int r = seeds_fill(run->seeds, first_seed, n_seeds, h->seed_xyz);

	init_bindings(run, buffers);
	/* Seed indices are 32-bit in the kernels' random streams (JOBSPEC_MAX_SEEDS). */
	run->params.rng[2] = (uint32_t)first_seed;
	if (r < 0)
		return errbuf_set(err, r, "seeds", "cannot generate seeds %llu..%llu",
				  (unsigned long long)first_seed,
				  (unsigned long long)(first_seed + n_seeds));
	r = gpu_upload(run->gpu, g->seeds, 0, h->seed_xyz, 12 * n_seeds, err);
	if (r == 0)
		r = dispatch_items(run, "init", g->init, buffers, n_seeds, err);
	if (r == 0)
		r = gpu_download(run->gpu, g->ndirs, 0, h->ndirs, 4 * n_seeds, err);
	if (r == 0)
		r = gpu_download(run->gpu, g->dirs, 0, h->dirs, 12ull * run->plan->max_peaks * n_seeds,
				 err);
	if (r < 0)
		return r;
	n_lines = build_lines(run, first_seed, n_seeds);
	for (uint64_t first = 0; first < n_lines && r == 0; first += run->plan->batch_lines)
		r = run_batch(run, first, min_u64(run->plan->batch_lines, n_lines - first), err);
	run->stats->chunks++;
	return r;
}

/* With a target chunk duration, the first chunk is small and later ones are
 * sized from the rate measured so far (never above the planned maximum). */
static uint64_t next_chunk_seeds(const struct job_run *run, uint64_t done, double elapsed)
{
	double target = run->opts->chunk_seconds;
	double sized;

	if (target <= 0.0)
		return run->plan->chunk_seeds;
	if (done == 0 || elapsed <= 0.0)
		return min_u64(run->plan->chunk_seeds, FIRST_TIMED_CHUNK_SEEDS);
	sized = (double)done / elapsed * target;
	if (sized < (double)FIRST_TIMED_CHUNK_SEEDS)
		return min_u64(run->plan->chunk_seeds, FIRST_TIMED_CHUNK_SEEDS);
	return sized >= (double)run->plan->chunk_seeds ? run->plan->chunk_seeds : (uint64_t)sized;
}

static int track_all(struct job_run *run, struct errbuf *err)
{
	uint64_t total = seeds_count(run->seeds);
	double t0 = timing_now(), write_before = run->stats->write_seconds;
	int r = 0;

	fill_params(run);
	for (uint64_t first = 0, n; first < total && r == 0; first += n) {
		n = min_u64(next_chunk_seeds(run, first, timing_now() - t0), total - first);
		r = run_chunk(run, first, n, err);
		if (r == 0 && output_flush(run->out) < 0)
			r = errbuf_set(err, -EIO, "output.path", "cannot write the tractogram");
		if (r == 0 && run->opts->progress &&
		    !run->opts->progress(run->opts->progress_userdata, first + n, total,
					 run->stats->streamlines))
			r = errbuf_set(err, -ECANCELED, "", "cancelled after %llu of %llu seeds",
				       (unsigned long long)(first + n), (unsigned long long)total);
	}
	run->stats->seeds = total;
	run->stats->track_seconds += timing_now() - t0 -
				     (run->stats->write_seconds - write_before);
	return r;
}

static int prepare_gpu(struct gpu_ctx *gpu, const struct job_plan *plan,
		       const struct engine_inputs *in, struct job_gpu *g, struct engine_stats *stats,
		       struct errbuf *err)
{
	double compile_before = gpu_compile_seconds(gpu);
	int r = get_pipelines(gpu, plan, in, g, err);

	stats->compile_seconds = gpu_compile_seconds(gpu) - compile_before;
	if (r == 0)
		r = alloc_work_buffers(gpu, plan, g, err);
	return r;
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

int engine_run(struct gpu_ctx *gpu, const struct jobspec *job, const struct engine_inputs *in,
	       const struct engine_resident *res, struct seeds *seeds,
	       const struct engine_options *opts, FILE *out, struct engine_stats *stats,
	       struct errbuf *err)
{
	struct engine_stats local_stats;
	struct job_plan plan;
	struct job_gpu g = { .res = res };
	struct job_host h = { 0 };
	struct job_run run = { .gpu = gpu, .job = job, .in = in, .seeds = seeds, .plan = &plan,
			       .g = &g, .h = &h, .opts = opts };
	int r;

	if (!stats)
		stats = &local_stats;
	memset(stats, 0, sizeof(*stats));
	run.stats = stats;
	r = check_seed_index(job, seeds, err);
	if (r == 0)
			r = plan_work(gpu_get_limits(gpu), job, in, res, seeds, opts, &plan, err);
	if (r == 0)
		r = prepare_gpu(gpu, &plan, in, &g, stats, err);
	if (r == 0)
		r = alloc_host(&plan, &h, err);
	if (r == 0)
		r = alloc_compress(&plan, job, grid_of(in)->affine, &h, err);
	if (r == 0) {
		struct output_options oo = { .with_seeds = job->save_seeds,
					     .with_seed_index = job->save_seed_index,
					     .with_direction_getter = job->save_direction_getter,
					     .seeds_file = opts->seeds_file,
					     .positions = job->output_positions,
					     .compression = job->output_compression };
		r = output_writer_new(job->output_format, out, grid_of(in)->dim, grid_of(in)->affine,
				      &oo, &run.out, err);
		if (r == 0) {
			memcpy(stats->grid_dim, grid_of(in)->dim, sizeof(stats->grid_dim));
			memcpy(stats->grid_affine, grid_of(in)->affine, sizeof(stats->grid_affine));
		}
	}
	if (r == 0)
		r = track_all(&run, err);
	if (run.out) {
		int fr = output_writer_finish(run.out);
		if (r == 0 && fr < 0)
			r = errbuf_set(err, fr, "output.path", "cannot finish the tractogram: %s",
				       strerror(-fr));
	}
	free_host(&h);
	free_job_gpu(gpu, &g);
	return r;
}
