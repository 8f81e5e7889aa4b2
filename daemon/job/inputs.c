/* SPDX-License-Identifier: MIT */
/*
 * inputs: a job's volumes, sphere and seeds read and validated on the host
 * (see inputs.h).
 *
 * Flow: the sphere -> the input that sets the grid (an ODF, SH coefficients,
 * or a DWI series: fitted for prob and ptt, reordered with its model's
 * matrices for boot) -> the stop map on that grid (a dwi job's own FA when
 * none is given) -> the criterion's tissue maps and the regions' masks on
 * it -> whether directions compare by |cos|.
 */
#include "job/inputs.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/affine.h"
#include "formats/image.h"
#include "formats/npy.h"
#include "models/gradients.h"
#include "models/shbasis.h"

/* Where a dwi job's gradient directions came from and how they were read,
 * for the log (inputs_describe_gradients). */
enum gradient_source {
	GRADIENTS_NONE,          /* not a dwi job */
	GRADIENTS_BVECS,         /* inputs.bvecs */
	GRADIENTS_MIF_SCHEME,    /* inputs.dwi's dw_scheme */
};

struct gradient_note {
	enum gradient_source source;
	enum jobspec_bvecs_convention convention;
	bool chosen;              /* the job set bvecs_convention */
	bool positive_det;        /* the DWI's affine has a positive determinant */
};

struct inputs {
	struct volume odf;        /* inputs.odf: the ODF on the sphere's vertices, clipped;
				   * streamed: its header alone (dim, affine) */
	struct odf_stream *odf_stream;  /* inputs.odf read while uploaded, or NULL */
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
	struct volume tissue;     /* stopping act, cmc: include, exclude (2 channels) */
	/* The regions' mask images (regions.include/exclude), in the job's
	 * region_mask_path order: read with the other inputs, so that a warm
	 * daemon's cached inputs hold them too. */
	struct volume region_masks[JOBSPEC_MAX_REGION_MASKS];
	struct sphere sphere;
	struct odf_symmetry symmetry;   /* the ODF's; a stream's is the stream's */
	const char *grid_field;   /* the input that sets the grid, for messages */
	bool fitted;          /* fit holds the DTI and CSD of a dwi input */
	struct fit_result fit;
	struct gradient_note gradients;
};

/* boot's: its bootstrap ODFs, even-order SH, are antipodally symmetric
 * (sampled by its own kernels: never mirrored). */
#define BOOT_SYMMETRY ((struct odf_symmetry){ .symmetric = true, .mirrored = false })

/* The volume in slot, NIfTI or MRtrix3 (image.h), and what else the file
 * carries into *info when info is not NULL: read from the descriptor the
 * job holds (a server job's, opened by its owner at submission), else
 * opened by its path (the CLI's, as the user running it). */
static int load_volume(const struct jobspec *job, enum jobspec_file_slot slot, const char *path,
		       const char *field, struct volume *ret, struct image_info *info,
		       struct errbuf *err)
{
	int fd = jobspec_opened_fd(job, slot);

	if (fd < 0)
		return image_load(path, field, ret, info, err);
	return image_load_fd(fd, path, field, ret, info, err);
}

/* The gradient tables, as load_volume reads a volume. */
static int load_gradients(const struct jobspec *job, int64_t n_volumes, struct gradients *ret,
			  struct errbuf *err)
{
	struct gradients_file bvals = { jobspec_opened_fd(job, JOBSPEC_SLOT_BVALS),
					job->bvals_path, "inputs.bvals" };
	struct gradients_file bvecs = { jobspec_opened_fd(job, JOBSPEC_SLOT_BVECS),
					job->bvecs_path, "inputs.bvecs" };

	if (bvals.fd < 0 || bvecs.fd < 0)
		return gradients_load(bvals.path, bvecs.path, n_volumes, bvals.field, bvecs.field,
				      ret, err);
	return gradients_read(&bvals, &bvecs, n_volumes, ret, err);
}

/* The inputs that are images (bvals and bvecs are text). */
static const struct {
	const char *field;
	size_t offset;
	enum jobspec_file_slot slot;
} image_inputs[] = {
	{ "inputs.odf", offsetof(struct jobspec, odf_path), JOBSPEC_SLOT_ODF },
	{ "inputs.sh", offsetof(struct jobspec, sh_path), JOBSPEC_SLOT_SH },
	{ "inputs.dwi", offsetof(struct jobspec, dwi_path), JOBSPEC_SLOT_DWI },
	{ "inputs.mask", offsetof(struct jobspec, mask_path), JOBSPEC_SLOT_MASK },
	{ "inputs.stop_map", offsetof(struct jobspec, stop_map_path), JOBSPEC_SLOT_STOP_MAP },
	{ "stopping.include", offsetof(struct jobspec, stop_include_path),
	  JOBSPEC_SLOT_STOP_INCLUDE },
	{ "stopping.exclude", offsetof(struct jobspec, stop_exclude_path),
	  JOBSPEC_SLOT_STOP_EXCLUDE },
	{ "stopping.wm", offsetof(struct jobspec, stop_wm_path), JOBSPEC_SLOT_STOP_WM },
	{ "stopping.gm", offsetof(struct jobspec, stop_gm_path), JOBSPEC_SLOT_STOP_GM },
	{ "stopping.csf", offsetof(struct jobspec, stop_csf_path), JOBSPEC_SLOT_STOP_CSF },
	{ "stopping.five_tt", offsetof(struct jobspec, stop_5tt_path), JOBSPEC_SLOT_STOP_5TT },
	{ "seeds.roi", offsetof(struct jobspec, seed_roi_path), JOBSPEC_SLOT_SEED_ROI },
	{ "seeds.interface.wm", offsetof(struct jobspec, seed_wm_path),
	  JOBSPEC_SLOT_SEED_INTERFACE_WM },
	{ "seeds.interface.gm", offsetof(struct jobspec, seed_gm_path),
	  JOBSPEC_SLOT_SEED_INTERFACE_GM },
	{ "seeds.interface.five_tt", offsetof(struct jobspec, seed_5tt_path),
	  JOBSPEC_SLOT_SEED_INTERFACE_5TT },
};

/* An input's shape and stored value size, from the descriptor the job
 * holds (a server job's), else from its path (the CLI's), as load_volume. */
static int probe_volume(const struct jobspec *job, enum jobspec_file_slot slot, const char *path,
			const char *field, int64_t dim[4], size_t *stored_size, struct errbuf *err)
{
	int fd = jobspec_opened_fd(job, slot);

	if (fd < 0)
		return image_probe(path, field, dim, stored_size, err);
	return image_probe_fd(fd, path, field, dim, stored_size, err);
}

/* Host bytes of one input image: voxels x (stored size + 4), and for the
 * DWI what the fit derives from it on the same grid (the SH coefficients
 * of sh_order, FA and MD) and the b0s-and-shell copy of a boot job, each
 * a float per voxel and value. UINT64_MAX past 2^64 - 1: no budget admits it. */
static uint64_t image_bytes(const struct jobspec *job, bool dwi, const int64_t dim[4],
			    size_t stored_size)
{
	uint64_t l = job->model.sh_order > 0 ? (uint64_t)job->model.sh_order : 16;
	uint64_t derived_per_voxel = (l + 1) * (l + 2) / 2 + 2 + (uint64_t)dim[3];
	int64_t grid[4] = { dim[0], dim[1], dim[2], 1 };
	uint64_t bytes, derived;

	if (volume_host_bytes(dim, stored_size, &bytes) < 0)
		return UINT64_MAX;
	if (!dwi)
		return bytes;
	/* stored size 4 * n - 4 makes volume_host_bytes count 4 * n bytes. */
	if (volume_host_bytes(grid, 4 * derived_per_voxel - 4, &derived) < 0 ||
	    __builtin_add_overflow(bytes, derived, &bytes))
		return UINT64_MAX;
	return bytes;
}

/* Adds the host bytes of one input image to *total; -EFBIG past limit. */
static int count_image(const struct jobspec *job, enum jobspec_file_slot slot, const char *path,
		       const char *field, bool dwi, uint64_t limit, uint64_t *total,
		       struct errbuf *err)
{
	int64_t dim[4];
	size_t stored_size;
	uint64_t bytes;
	int r = probe_volume(job, slot, path, field, dim, &stored_size, err);

	if (r < 0)
		return r;
	bytes = image_bytes(job, dwi, dim, stored_size);
	if (__builtin_add_overflow(*total, bytes, total))
		*total = UINT64_MAX;
	if (*total > limit)
		return errbuf_set_kind(err, ERR_KIND_LIMIT, -EFBIG, field,
				       "its header declares an image that takes %llu "
				       "bytes of host memory (voxels x (stored size + 4), "
				       "and for a DWI what the fit derives), %llu with the "
				       "job's other inputs: over the limit of %llu bytes "
				       "per job (max_job_host_memory)",
				       (unsigned long long)bytes, (unsigned long long)*total,
				       (unsigned long long)limit);
	return 0;
}

int inputs_check_host_memory(const struct jobspec *job, uint64_t limit, struct errbuf *err)
{
	uint64_t total = 0;
	int r = 0;

	if (!limit)
		return 0;
	for (size_t i = 0; r == 0 && i < sizeof(image_inputs) / sizeof(image_inputs[0]); i++) {
		const char *path = *(char *const *)((const char *)job + image_inputs[i].offset);

		if (path)
			r = count_image(job, image_inputs[i].slot, path, image_inputs[i].field,
					image_inputs[i].offset == offsetof(struct jobspec, dwi_path),
					limit, &total, err);
	}
	/* The regions' masks too: the engine loads them. */
	for (int k = 0; r == 0 && k < job->n_region_masks; k++)
		r = count_image(job, (enum jobspec_file_slot)(JOBSPEC_SLOT_REGION_MASK + k),
				job->region_mask_path[k], job->region_mask_field[k], false, limit,
				&total, err);
	return r;
}

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

/* MRtrix3's 5TT image: its volumes in this order, values in [0, 1]. */
enum five_tt_tissue { TT_CGM, TT_SGM, TT_WM, TT_CSF, TT_PATH, TT_TISSUES };

/* Where MRtrix3 takes a point to be outside the brain (its Tissues::set:
 * the five values sum to less than this). */
#define TT_SUM_THRESHOLD 0.5f

/* A 5TT image in slot, on grid: 4D with 5 volumes, every value in [0, 1]. */
static int load_5tt(const struct jobspec *job, enum jobspec_file_slot slot, const char *path,
		    const char *field, const struct volume *grid, const char *grid_field,
		    struct volume *tt, struct errbuf *err)
{
	int r = load_volume(job, slot, path, field, tt, NULL, err);
	size_t n;

	if (r)
		return r;
	if (tt->dim[3] != TT_TISSUES)
		return errbuf_set(err, -EINVAL, field, "%s must be a 5TT image (4D, 5 volumes: "
				  "cortical GM, sub-cortical GM, WM, CSF, pathological tissue), "
				  "got %lld volume%s", path, (long long)tt->dim[3],
				  tt->dim[3] == 1 ? "" : "s");
	if (!volume_same_grid(tt, grid))
		return errbuf_set(err, -EINVAL, field, "%s is on a different grid (%lldx%lldx%lld "
				  "or another affine) than %s (%lldx%lldx%lld)", path,
				  (long long)tt->dim[0], (long long)tt->dim[1], (long long)tt->dim[2],
				  grid_field, (long long)grid->dim[0], (long long)grid->dim[1],
				  (long long)grid->dim[2]);
	n = volume_voxels(tt) * TT_TISSUES;
	for (size_t i = 0; i < n; i++)
		if (!(tt->data[i] >= 0.0f && tt->data[i] <= 1.0f))
			return errbuf_set(err, -EINVAL, field, "%s: tissue fractions must be in "
					  "[0, 1], got %g in volume %zu of voxel %zu", path,
					  (double)tt->data[i], i % TT_TISSUES, i / TT_TISSUES);
	return 0;
}

/* The sum of the 5TT's tissues [first, first + n) at voxel v. */
static float tt_sum(const struct volume *tt, size_t v, int first, int n)
{
	float sum = 0.0f;

	for (int t = first; t < first + n; t++)
		sum += tt->data[v * TT_TISSUES + (size_t)t];
	return sum;
}

/* seeds.interface.five_tt: wm, and gm as cortical plus sub-cortical (as
 * MRtrix3's 5tt2gmwmi takes them). */
static int interface_from_5tt(const struct jobspec *job, const struct volume *grid,
			      const char *grid_field, struct volume *wm, struct volume *gm,
			      struct errbuf *err)
{
	struct volume tt = { 0 };
	int r = load_5tt(job, JOBSPEC_SLOT_SEED_INTERFACE_5TT, job->seed_5tt_path,
			 "seeds.interface.five_tt", grid, grid_field, &tt, err);

	if (r == 0 && (volume_alloc_on_grid(wm, grid, 1) < 0 ||
		       volume_alloc_on_grid(gm, grid, 1) < 0))
		r = errbuf_set(err, -ENOMEM, "", "out of memory");
	for (size_t v = 0; r == 0 && v < volume_voxels(grid); v++) {
		wm->data[v] = tt_sum(&tt, v, TT_WM, 1);
		gm->data[v] = tt_sum(&tt, v, TT_CGM, 2);
	}
	volume_free(&tt);
	return r;
}

/* seeds.interface's partial volumes, given or from a 5TT image. */
static int load_interface(const struct jobspec *job, const struct volume *grid,
			  const char *grid_field, struct volume *wm, struct volume *gm,
			  struct errbuf *err)
{
	int r;

	if (job->seed_5tt_path)
		return interface_from_5tt(job, grid, grid_field, wm, gm, err);
	r = load_volume(job, JOBSPEC_SLOT_SEED_INTERFACE_WM, job->seed_wm_path,
			"seeds.interface.wm", wm, NULL, err);
	if (r == 0)
		r = require_3d_on_grid(wm, grid, grid_field, "seeds.interface.wm",
				       job->seed_wm_path, err);
	if (r == 0)
		r = load_volume(job, JOBSPEC_SLOT_SEED_INTERFACE_GM, job->seed_gm_path,
				"seeds.interface.gm", gm, NULL, err);
	if (r == 0)
		r = require_3d_on_grid(gm, grid, grid_field, "seeds.interface.gm",
				       job->seed_gm_path, err);
	return r;
}

static int interface_seeds(const struct jobspec *job, const struct volume *grid,
			   const char *grid_field, struct seeds **ret, struct errbuf *err)
{
	struct volume wm = { 0 }, gm = { 0 };
	int r = load_interface(job, grid, grid_field, &wm, &gm, err);

	if (r == 0)
		r = seeds_from_interface(&wm, &gm, job->seed_count, job->rng_seed, ret, err);
	volume_free(&wm);
	volume_free(&gm);
	return r;
}

/* The global indices of the points must stay within the job limit, as a
 * mask's count does: draws and outputs key seeds by them. */
static int check_first_index(const struct jobspec *job, const char *field, uint64_t n,
			     struct errbuf *err)
{
	if (n <= JOBSPEC_MAX_SEEDS - job->seed_first_index)
		return 0;
	return errbuf_set(err, -EINVAL, "seeds.first_index", "%llu + the %llu points of %s pass "
			  "the largest global seed index (%llu)",
			  (unsigned long long)job->seed_first_index, (unsigned long long)n, field,
			  (unsigned long long)JOBSPEC_MAX_SEEDS);
}

/* Explicit points, from the document or from seeds.points_file, numbered
 * from seeds.first_index. */
static int load_seed_points(const struct jobspec *job, const struct volume *odf,
			    struct seeds **ret, struct errbuf *err)
{
	const char *field = job->seed_points_path ? "seeds.points_file" : "seeds.points";
	double *read = NULL;
	const double *pts = job->seed_points;
	uint64_t n = job->n_seed_points;
	int r = 0;

	if (job->seed_points_path) {
		r = npy_points_load(jobspec_opened_fd(job, JOBSPEC_SLOT_SEED_POINTS),
				    job->seed_points_path, field, JOBSPEC_MAX_SEEDS, &read, &n, err);
		pts = read;
	}
	if (r == 0)
		r = check_first_index(job, field, n, err);
	if (r == 0)
		r = seeds_from_points(field, pts, n, job->seed_points_ras, odf->affine, odf->dim,
				      ret, err);
	if (r == 0)
		seeds_number_from(*ret, job->seed_first_index);
	free(read);
	return r;
}

static int load_seeds(const struct jobspec *job, const struct volume *odf, const char *grid_field,
		      struct seeds **ret, struct errbuf *err)
{
	struct volume roi = { 0 };
	int r;

	if (job->seed_kind == JOBSPEC_SEEDS_POINTS)
		return load_seed_points(job, odf, ret, err);
	if (job->seed_kind == JOBSPEC_SEEDS_INTERFACE)
		return interface_seeds(job, odf, grid_field, ret, err);
	r = load_volume(job, JOBSPEC_SLOT_SEED_ROI, job->seed_roi_path, "seeds.roi", &roi, NULL,
			err);
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

/* Whether a job's ODF may stay on disk until it is uploaded: nothing but
 * the upload reads it on the host (ptt's per-voxel scale does), and its
 * float16 pairs never straddle a voxel (an even vertex count). */
static bool odf_streamable(const struct jobspec *job, const struct inputs *in)
{
	return job->input_kind == JOBSPEC_INPUT_ODF && job->direction_getter != JOBSPEC_DG_PTT &&
	       in->sphere.nv % 2 == 0;
}

/* An uncompressed NIfTI ODF as a stream (odf_stream.h) with its header in
 * in->odf; anything else (.nii.gz, .mif, another byte order) leaves
 * in->odf_stream NULL for load_volume. */
static int open_odf_stream(const struct jobspec *job, const struct fit_options *o,
			   struct inputs *in, struct errbuf *err)
{
	int fd = jobspec_opened_fd(job, JOBSPEC_SLOT_ODF), own = -1;
	int r = fd < 0 ? volume_open(job->odf_path, "inputs.odf", &own, err) : 0;

	if (r < 0)
		return r;
	fd = fd < 0 ? own : fd;
	if (!mif_detect_fd(fd))
		r = odf_stream_open(fd, job->odf_path, &in->sphere, o, &in->odf, &in->odf_stream,
				    err);
	if (own >= 0)
		close(own);
	return r;
}

static int load_odf(const struct jobspec *job, const struct fit_options *o, bool stream,
		    struct inputs *in, struct errbuf *err)
{
	int r = stream && odf_streamable(job, in) ? open_odf_stream(job, o, in, err) : 0;

	if (r == 0 && !in->odf_stream)
		r = load_volume(job, JOBSPEC_SLOT_ODF, job->odf_path, "inputs.odf", &in->odf, NULL,
				err);
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
static int load_sh(const struct jobspec *job, struct inputs *in, struct errbuf *err)
{
	struct image_info info = { 0 };
	int r = load_volume(job, JOBSPEC_SLOT_SH, job->sh_path, "inputs.sh", &in->sh, &info, err);
	int order;

	if (r < 0)
		return r;
	mif_scheme_free(&info.scheme);
	/* An upload's format is known only now: a NIfTI one names its basis. */
	if (!info.mif && !job->sh_basis_given)
		return errbuf_set(err, -EINVAL, "inputs.sh_basis", "%s", JOBSPEC_SH_BASIS_REQUIRED);
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

/* The determinant of the affine's linear part. */
static double linear_determinant(const double a[4][4])
{
	return a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) -
	       a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
	       a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
}

/* FSL's bvecs run along the voxel axes with x flipped where the affine's
 * determinant is positive (as MRtrix3's -fslgrad reads them: the first
 * row negated, then the voxel axes); voxel bvecs are DIPY's reading. */
static void apply_bvecs_convention(const struct jobspec *job, struct gradients *g,
				   struct gradient_note *note)
{
	*note = (struct gradient_note){ .source = GRADIENTS_BVECS,
					.convention = job->bvecs_convention,
					.chosen = job->bvecs_convention_given,
					.positive_det = note->positive_det };
	if (job->bvecs_convention == JOBSPEC_BVECS_FSL && note->positive_det)
		for (size_t i = 0; i < g->n; i++)
			g->bvecs[3 * i] = -g->bvecs[3 * i];
}

/* The dw_scheme's scanner directions along dwi's voxel axes: through the
 * inverse of the affine's linear part with unit columns (its rotation,
 * as MRtrix3's -export_grad_fsl takes them before FSL's x flip). */
static int gradients_from_scheme(const struct jobspec *job, const struct volume *dwi,
				 const struct mif_scheme *s, struct gradients *g,
				 struct errbuf *err)
{
	double rot[4][4] = { { 0 } }, inv[4][4], sizes[3];
	double *bvals = malloc(sizeof(*bvals) * s->n), *bvecs = malloc(sizeof(*bvecs) * 3 * s->n);
	int r = 0;

	affine_voxel_sizes(dwi->affine, sizes);
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 3; k++)
			rot[i][k] = dwi->affine[i][k] / sizes[k];
	rot[3][3] = 1;
	if (!bvals || !bvecs)
		r = errbuf_set(err, -ENOMEM, "inputs.dwi", "out of memory");
	else if (affine_invert(rot, inv) < 0)
		r = errbuf_set(err, -EINVAL, "inputs.dwi", "%s: its transform is singular: the "
			       "dw_scheme cannot be turned to the voxel axes", job->dwi_path);
	for (size_t i = 0; r == 0 && i < s->n; i++) {
		bvals[i] = s->rows[4 * i + 3];
		affine_apply(inv, &s->rows[4 * i], &bvecs[3 * i]);
	}
	if (r == 0)
		r = gradients_from_arrays(bvals, bvecs, s->n, g, err);
	if (r == -EINVAL && err) {
		/* The table is the DWI's, not the inputs.bvals/bvecs that the
		 * validation names. */
		char why[sizeof(err->message)];
		snprintf(why, sizeof(why), "%s", err->message);
		errbuf_set(err, r, "inputs.dwi", "%s: dw_scheme: %s", job->dwi_path, why);
	}
	free(bvals);
	free(bvecs);
	return r;
}

/* The gradient table: the DWI's own dw_scheme (a .mif), or inputs.bvals
 * and inputs.bvecs, never both. */
static int dwi_gradients(const struct jobspec *job, const struct volume *dwi,
			 const struct image_info *info, struct gradients *g,
			 struct gradient_note *note, struct errbuf *err)
{
	int r;

	note->positive_det = linear_determinant(dwi->affine) > 0;
	if (info->scheme.n && job->bvals_path)
		return errbuf_set(err, -EINVAL, "inputs.bvals", "%s carries its gradient table "
				  "(dw_scheme) and inputs.bvals and inputs.bvecs give another: "
				  "give one of them (drop inputs.bvals and inputs.bvecs to use "
				  "the .mif's)", job->dwi_path);
	if (info->scheme.n) {
		note->source = GRADIENTS_MIF_SCHEME;
		return gradients_from_scheme(job, dwi, &info->scheme, g, err);
	}
	if (!job->bvals_path)
		return errbuf_set(err, -EINVAL, "inputs.bvals", "is required with inputs.dwi: %s "
				  "has no gradient table of its own (%s)", job->dwi_path,
				  info->mif ? "no dw_scheme in its MRtrix header" : "a NIfTI image");
	r = load_gradients(job, dwi->dim[3], g, err);
	if (r == 0)
		apply_bvecs_convention(job, g, note);
	return r;
}

static int load_dwi_volumes(const struct jobspec *job, struct volume *dwi, struct volume *mask,
			    struct gradients *g, struct gradient_note *note, struct errbuf *err)
{
	struct image_info info = { 0 };
	int r = load_volume(job, JOBSPEC_SLOT_DWI, job->dwi_path, "inputs.dwi", dwi, &info, err);

	if (r == 0 && dwi->dim[3] < 7)
		r = errbuf_set(err, -EINVAL, "inputs.dwi", "%s has %lld volume%s: a DWI series "
			       "is 4D, with a b=0 volume and at least 6 diffusion directions",
			       job->dwi_path, (long long)dwi->dim[3], dwi->dim[3] == 1 ? "" : "s");
	if (r == 0)
		r = dwi_gradients(job, dwi, &info, g, note, err);
	mif_scheme_free(&info.scheme);
	if (r == 0 && job->mask_path) {
		r = load_volume(job, JOBSPEC_SLOT_MASK, job->mask_path, "inputs.mask", mask, NULL,
				err);
		if (r == 0)
			r = require_3d_on_grid(mask, dwi, "inputs.dwi", "inputs.mask", job->mask_path,
					       err);
	}
	return r;
}

/* inputs_fit_dwi, noting how the gradients were read. */
static int fit_dwi_noted(const struct jobspec *job, const struct fit_options *fit,
			 struct fit_result *ret, struct gradient_note *note, struct errbuf *err)
{
	struct volume dwi = { 0 }, mask = { 0 };
	struct gradients g = { 0 };
	struct fit_params p;
	int r = load_dwi_volumes(job, &dwi, &mask, &g, note, err);

	fit_params_from_job(job, &p);
	if (r == 0)
		r = fit_dwi(&dwi, &g, job->mask_path ? &mask : NULL, &p, fit, ret, err);
	volume_free(&dwi);
	volume_free(&mask);
	gradients_free(&g);
	return r;
}

int inputs_fit_dwi(const struct jobspec *job, const struct fit_options *fit,
		   struct fit_result *ret, struct errbuf *err)
{
	struct gradient_note note = { 0 };

	return fit_dwi_noted(job, fit, ret, &note, err);
}

static int load_dwi(const struct jobspec *job, const struct fit_options *o,
		    struct inputs *in, struct errbuf *err)
{
	int r = fit_dwi_noted(job, o, &in->fit, &in->gradients, err);

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
		     struct inputs *in, struct errbuf *err)
{
	struct volume dwi = { 0 }, mask = { 0 };
	struct gradients g = { 0 };
	struct boot_params params;
	size_t *volumes = NULL, n = 0;
	double *dirs = NULL;
	int r = load_dwi_volumes(job, &dwi, &mask, &g, &in->gradients, err);

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
	in->symmetry = BOOT_SYMMETRY;
	free(volumes);
	free(dirs);
	volume_free(&dwi);
	volume_free(&mask);
	gradients_free(&g);
	return r;
}

/* The SH coefficients behind a prob job's ODF, or NULL for an ODF input. */
static const struct volume *sh_of(const struct inputs *in)
{
	if (in->fitted)
		return &in->fit.sh;
	return in->sh.data ? &in->sh : NULL;
}

static const struct volume *grid_of(const struct inputs *in)
{
	if (in->boot_getter)
		return &in->dwi;
	return sh_of(in) ? sh_of(in) : &in->odf;
}

/* The ODF on the sphere's vertices, clipped at zero, from SH coefficients. */
static int sample_odf(const struct inputs *in, const struct fit_options *o,
		      struct volume *odf, struct errbuf *err)
{
	return fit_sample_sh(sh_of(in), in->sh_basis, in->sh_world ? in->to_sh : NULL, &in->sphere,
			     o, in->grid_field, odf, err);
}

static int load_stop_map(const struct jobspec *job, struct inputs *in, struct errbuf *err)
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
	r = load_volume(job, JOBSPEC_SLOT_STOP_MAP, job->stop_map_path, "inputs.stop_map",
			&in->stop, NULL, err);
	if (r == 0)
		r = require_3d_on_grid(&in->stop, grid_of(in), in->grid_field, "inputs.stop_map",
				       job->stop_map_path, err);
	return r;
}

/* One anatomical map, 3D on the grid, into *map. */
static int load_tissue_map(const struct jobspec *job, enum jobspec_file_slot slot,
			   const char *path, const char *field, const struct inputs *in,
			   struct volume *map, struct errbuf *err)
{
	int r = load_volume(job, slot, path, field, map, NULL, err);

	if (r == 0)
		r = require_3d_on_grid(map, grid_of(in), in->grid_field, field, path, err);
	return r;
}

/* stopping act: its include and exclude maps as given. */
static int load_act_maps(const struct jobspec *job, const struct inputs *in,
			 struct volume maps[3], struct errbuf *err)
{
	int r = load_tissue_map(job, JOBSPEC_SLOT_STOP_INCLUDE, job->stop_include_path,
				"stopping.include", in, &maps[0], err);

	if (r == 0)
		r = load_tissue_map(job, JOBSPEC_SLOT_STOP_EXCLUDE, job->stop_exclude_path,
				    "stopping.exclude", in, &maps[1], err);
	return r;
}

/* stopping act with five_tt: include and exclude as MRtrix3's ACT ends a
 * streamline (README, "MRtrix3's 5TT"): include = cortical + sub-cortical
 * GM, and 1 where the tissues sum to less than 0.5 (MRtrix3: outside the
 * image); exclude = CSF. */
static int load_act_5tt(const struct jobspec *job, const struct inputs *in,
			struct volume maps[3], struct errbuf *err)
{
	struct volume tt = { 0 };
	int r = load_5tt(job, JOBSPEC_SLOT_STOP_5TT, job->stop_5tt_path, "stopping.five_tt",
			 grid_of(in), in->grid_field, &tt, err);

	if (r == 0 && (volume_alloc_on_grid(&maps[0], grid_of(in), 1) < 0 ||
		       volume_alloc_on_grid(&maps[1], grid_of(in), 1) < 0))
		r = errbuf_set(err, -ENOMEM, "", "out of memory");
	for (size_t v = 0; r == 0 && v < volume_voxels(&tt); v++) {
		bool outside = tt_sum(&tt, v, TT_CGM, TT_TISSUES) < TT_SUM_THRESHOLD;

		maps[0].data[v] = outside ? 1.0f : tt_sum(&tt, v, TT_CGM, 2);
		maps[1].data[v] = tt_sum(&tt, v, TT_CSF, 1);
	}
	volume_free(&tt);
	return r;
}

/* stopping cmc: include and exclude from the partial volumes as DIPY's
 * AnatomicalStoppingCriterion.from_pve: include = gm, and 1 where wm + gm +
 * csf is 0 (the image's background); exclude = csf. */
static int load_cmc_maps(const struct jobspec *job, const struct inputs *in,
			 struct volume maps[3], struct errbuf *err)
{
	int r = load_tissue_map(job, JOBSPEC_SLOT_STOP_GM, job->stop_gm_path, "stopping.gm", in,
				&maps[0], err);

	if (r == 0)
		r = load_tissue_map(job, JOBSPEC_SLOT_STOP_CSF, job->stop_csf_path, "stopping.csf",
				    in, &maps[1], err);
	if (r == 0)
		r = load_tissue_map(job, JOBSPEC_SLOT_STOP_WM, job->stop_wm_path, "stopping.wm", in,
				    &maps[2], err);
	if (r == 0) {
		size_t n = volume_voxels(&maps[0]);

		for (size_t v = 0; v < n; v++)
			if (maps[2].data[v] + maps[0].data[v] + maps[1].data[v] == 0.0f)
				maps[0].data[v] = 1.0f;
	}
	return r;
}

/* The regions' masks, each 3D on the grid. */
static int load_region_masks(const struct jobspec *job, struct inputs *in, struct errbuf *err)
{
	int r = 0;

	for (int k = 0; r == 0 && k < job->n_region_masks; k++)
		r = load_tissue_map(job, (enum jobspec_file_slot)(JOBSPEC_SLOT_REGION_MASK + k),
				    job->region_mask_path[k], job->region_mask_field[k], in,
				    &in->region_masks[k], err);
	return r;
}

/* stopping act and cmc: include and exclude interleaved per voxel, so that
 * the kernels find both of a corner's values in one place. */
static int load_tissue(const struct jobspec *job, struct inputs *in, struct errbuf *err)
{
	struct volume maps[3];
	int r;

	if (job->stopping == JOBSPEC_STOP_THRESHOLD)
		return 0;
	memset(maps, 0, sizeof(maps));
	if (job->stop_5tt_path)
		r = load_act_5tt(job, in, maps, err);
	else
		r = job->stopping == JOBSPEC_STOP_ACT ? load_act_maps(job, in, maps, err) :
							load_cmc_maps(job, in, maps, err);
	if (r == 0 && volume_alloc_on_grid(&in->tissue, grid_of(in), 2) < 0)
		r = errbuf_set(err, -ENOMEM, "", "out of memory");
	if (r == 0) {
		size_t n = volume_voxels(&maps[0]);

		for (size_t v = 0; v < n; v++) {
			in->tissue.data[2 * v] = maps[0].data[v];
			in->tissue.data[2 * v + 1] = maps[1].data[v];
		}
	}
	for (int i = 0; i < 3; i++)
		volume_free(&maps[i]);
	return r;
}

static int load_inputs(const struct jobspec *job, const struct fit_options *o, bool stream,
		       struct inputs *in, struct errbuf *err)
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
		r = load_odf(job, o, stream, in, err);
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
	if (r == 0)
		r = load_tissue(job, in, err);
	if (r == 0)
		r = load_region_masks(job, in, err);
	if (in->boot_getter)
		fit_result_free(&in->fit);   /* its FA is now the stop map */
	if (r < 0 || in->boot_getter)
		return r;
	if (sh_of(in)) {
		in->symmetry = fit_sampled_sh_symmetry(&in->sphere);
		return 0;
	}
	if (in->odf_stream)
		return 0;   /* clipped and checked slab by slab */
	return fit_prepare_odf(&in->odf, &in->sphere, o, &in->symmetry, err);
}

static uint64_t volume_bytes(const struct volume *v)
{
	return v->data ? (uint64_t)volume_voxels(v) * (uint64_t)v->dim[3] * sizeof(float) : 0;
}

static uint64_t region_mask_bytes(const struct inputs *in)
{
	uint64_t bytes = 0;

	for (int k = 0; k < JOBSPEC_MAX_REGION_MASKS; k++)
		bytes += volume_bytes(&in->region_masks[k]);
	return bytes;
}

uint64_t inputs_host_bytes(const struct inputs *in)
{
	const struct boot_matrices *b = &in->boot;
	uint64_t doubles = (uint64_t)b->n_dwi * (uint64_t)b->n_coef * 3 + (uint64_t)b->n_dwi +
			   (uint64_t)b->nv * (uint64_t)b->n_coef;

	return volume_bytes(&in->odf) + volume_bytes(&in->sh) + volume_bytes(&in->dwi) +
	       volume_bytes(&in->stop) + volume_bytes(&in->tissue) + volume_bytes(&in->fit.fa) + volume_bytes(&in->fit.md) +
	       volume_bytes(&in->fit.sh) + (b->hat_u ? doubles * sizeof(double) : 0) +
	       region_mask_bytes(in);
}

void inputs_free(struct inputs *in)
{
	if (!in)
		return;
	odf_stream_free(in->odf_stream);
	volume_free(&in->odf);
	volume_free(&in->sh);
	volume_free(&in->dwi);
	boot_matrices_free(&in->boot);
	volume_free(&in->stop);
	volume_free(&in->tissue);
	for (int k = 0; k < JOBSPEC_MAX_REGION_MASKS; k++)
		volume_free(&in->region_masks[k]);
	sphere_free(&in->sphere);
	fit_result_free(&in->fit);
	free(in);
}

static int load_all(const struct jobspec *job, const struct fit_options *fit, bool stream,
		    struct inputs **ret, struct errbuf *err)
{
	struct inputs *in = calloc(1, sizeof(*in));
	int r;

	if (!in)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = load_inputs(job, fit, stream, in, err);
	if (r < 0) {
		inputs_free(in);
		return r;
	}
	*ret = in;
	return 0;
}

int inputs_load(const struct jobspec *job, const struct fit_options *fit, struct inputs **ret,
		struct errbuf *err)
{
	return load_all(job, fit, false, ret, err);
}

int inputs_load_streamed(const struct jobspec *job, const struct fit_options *fit,
			 struct inputs **ret, struct errbuf *err)
{
	return load_all(job, fit, true, ret, err);
}

struct odf_stream *inputs_odf_stream(struct inputs *in)
{
	return in->odf_stream;
}

int inputs_seeds_load(const struct jobspec *job, const struct inputs *in, struct seeds **ret,
		      struct errbuf *err)
{
	return load_seeds(job, grid_of(in), in->grid_field, ret, err);
}

/* Sets bit in the voxels where region's mask (loaded with the inputs) is
 * non-zero. */
static void add_region_mask(const struct inputs *in, const struct jobspec_region *region,
			    uint32_t bit, uint32_t *bits)
{
	const struct volume *mask;

	if (region->mask < 0)
		return;
	mask = &in->region_masks[region->mask];
	for (size_t v = 0; v < volume_voxels(mask); v++)
		if (mask->data[v] != 0.0f)
			bits[v] |= bit;
}

int inputs_region_masks(const struct jobspec *job, const struct inputs *in, uint32_t **ret,
			struct errbuf *err)
{
	uint32_t *bits;

	*ret = NULL;
	if (job->n_region_masks == 0)
		return 0;
	bits = calloc(volume_voxels(grid_of(in)), sizeof(*bits));
	if (!bits)
		return errbuf_set(err, -ENOMEM, "regions", "out of memory for the region masks");
	for (int i = 0; i < job->n_include_regions; i++)
		add_region_mask(in, &job->include_regions[i], 1u << i, bits);
	for (int j = 0; j < job->n_exclude_regions; j++)
		add_region_mask(in, &job->exclude_regions[j], 1u << (16 + j), bits);
	*ret = bits;
	return 0;
}

int inputs_odf(const struct inputs *in, const struct fit_options *fit, struct volume *ret,
	       struct errbuf *err)
{
	if (in->boot_getter)
		return errbuf_set(err, -EINVAL, "direction_getter", "a boot job has no ODF volume");
	if (sh_of(in))
		return sample_odf(in, fit, ret, err);
	if (volume_alloc_on_grid(ret, &in->odf, in->odf.dim[3]) < 0)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	memcpy(ret->data, in->odf.data, sizeof(float) * volume_voxels(ret) * (size_t)ret->dim[3]);
	return 0;
}

const struct fit_result *inputs_fit(const struct inputs *in)
{
	return in->fitted ? &in->fit : NULL;
}

bool inputs_describe_gradients(const struct inputs *in, char *buf, size_t len, bool *warn)
{
	const struct gradient_note *n = &in->gradients;
	bool fsl = n->convention == JOBSPEC_BVECS_FSL;

	*warn = false;
	if (n->source == GRADIENTS_NONE)
		return false;
	if (n->source == GRADIENTS_MIF_SCHEME) {
		snprintf(buf, len, "gradients: the dw_scheme of inputs.dwi (scanner coordinates), "
			 "turned to its voxel axes");
		return true;
	}
	*warn = !n->chosen && n->positive_det;
	snprintf(buf, len, "gradients: inputs.bvecs read with bvecs_convention %s%s: %s%s",
		 fsl ? "fsl" : "voxel", n->chosen ? "" : " (the default)",
		 !n->positive_det ? "the affine of inputs.dwi has a negative determinant, where "
				    "FSL's convention and the voxel axes agree" :
		 fsl ? "x flipped, the affine of inputs.dwi having a positive determinant" :
		       "along the voxel axes as DIPY reads them, although the affine of inputs.dwi "
		       "has a positive determinant, for which FSL's convention (and MRtrix3's "
		       "-fslgrad) flips x",
		 *warn ? "; set inputs.bvecs_convention to \"fsl\" or \"voxel\" to say which "
			 "the file follows" : "");
	return true;
}

/* ---- read access -------------------------------------------------------- */

const struct volume *inputs_grid(const struct inputs *in)
{
	return grid_of(in);
}

const char *inputs_grid_field(const struct inputs *in)
{
	return in->grid_field;
}

const struct sphere *inputs_sphere(const struct inputs *in)
{
	return &in->sphere;
}

static struct odf_symmetry inputs_symmetry(const struct inputs *in)
{
	return in->odf_stream ? odf_stream_symmetry(in->odf_stream) : in->symmetry;
}

bool inputs_symmetric(const struct inputs *in)
{
	return inputs_symmetry(in).symmetric;
}

bool inputs_mirrored(const struct inputs *in)
{
	return inputs_symmetry(in).mirrored;
}

const struct volume *inputs_stop(const struct inputs *in)
{
	return &in->stop;
}

const struct volume *inputs_tissue(const struct inputs *in)
{
	return in->tissue.data ? &in->tissue : NULL;
}

const struct volume *inputs_sh(const struct inputs *in)
{
	return sh_of(in);
}

float *inputs_sh_sampling_matrix(const struct inputs *in)
{
	return fit_sh_sampling_matrix(in->sh_basis, sh_order_from_ncoef(sh_of(in)->dim[3]),
				      in->sh_world ? in->to_sh : NULL, &in->sphere);
}

int inputs_odf_view(const struct inputs *in, const struct fit_options *fit,
		    struct volume *scratch, const struct volume **ret, struct errbuf *err)
{
	*ret = &in->odf;
	if (!sh_of(in))
		return 0;
	*ret = scratch;
	return sample_odf(in, fit, scratch, err);
}

bool inputs_boot(const struct inputs *in)
{
	return in->boot_getter;
}

const struct volume *inputs_dwi(const struct inputs *in)
{
	return &in->dwi;
}

int inputs_n_b0(const struct inputs *in)
{
	return in->n_b0;
}

const struct boot_matrices *inputs_boot_matrices(const struct inputs *in)
{
	return &in->boot;
}

enum boot_model inputs_boot_model(const struct inputs *in)
{
	return in->boot_model;
}
