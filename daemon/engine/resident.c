/* SPDX-License-Identifier: MIT */
/*
 * resident: a job's inputs on the GPU (see resident.h).
 *
 * Flow: plan the pages of the ODF in each storage (or of a boot job's DWI)
 * and keep the first that fits the budget -> upload it (SH inputs sampled
 * on the sphere here unless stored as SH), on CPU devices with each
 * voxel's largest value -> upload the stop map and the sphere -> count the
 * bytes held.
 */
#include "engine/resident.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/boot.h"
#include "base/log.h"
#include "engine/odf_transpose.h"
#include "engine/paged_volume.h"
#include "formats/half.h"
#include "base/parallel.h"
#include "models/sphere.h"
#include "base/timing.h"
#include "formats/volume.h"

struct resident {
	struct paged_volume odf;  /* prob: ODF values or SH coefficients (storage) */
	struct paged_volume odf_max;        /* CPU devices, values: each voxel's largest */
	enum jobspec_odf_storage storage;   /* never auto */
	uint32_t sh_coefs;        /* SH storage: coefficients per voxel */
	struct gpu_buffer *odf_basis;       /* SH storage: the sampling matrix */
	struct paged_volume dwi;  /* boot */
	struct paged_volume stop; /* the stop map */
	struct gpu_buffer *vertices, *nbr_offset, *nbr;
	struct gpu_buffer *matrices;        /* boot: boot.glsl's layout */
	uint64_t bytes;
};

/* Floats of the boot matrices buffer (boot.glsl's layout). */
static uint64_t boot_matrix_floats(const struct boot_matrices *m)
{
	return (uint64_t)m->n_coef * (3ull * (uint64_t)m->n_dwi + (uint64_t)m->nv) +
	       (uint64_t)m->n_dwi;
}

uint64_t resident_budget(const struct gpu_limits *lim, uint64_t requested)
{
	return requested ? requested : gpu_memory_bytes(lim) / 2;
}

/* What a job's inputs and tracking may take of a device: its budget, or
 * less where the memory limit leaves less. by_limit: the limit set it,
 * directly or through the default budget, so that it is the setting to
 * raise. */
struct job_memory {
	uint64_t bytes;
	bool by_limit;
};

static struct job_memory job_memory(const struct gpu_ctx *gpu, uint64_t requested)
{
	const struct gpu_limits *lim = gpu_get_limits(gpu);
	uint64_t budget = resident_budget(lim, requested), free = gpu_memory_free(gpu);

	return (struct job_memory){ .bytes = budget < free ? budget : free,
				    .by_limit = lim->memory_limit && (!requested || free < budget) };
}

/* How the messages name that memory, and what would raise it. */
static const char *job_memory_name(struct job_memory m)
{
	return m.by_limit ? "the job's share of the GPU memory limit" : "the job's budget";
}

static const char *job_memory_remedy(struct job_memory m)
{
	return m.by_limit ? "raise the limit (gpu_memory_limit; tractd run --gpu-memory)"
			  : "raise the budget (gpu_memory_budget)";
}

/* What the kernels stop on: the stop map, or stopping act's include and
 * exclude maps in its place (the threshold is then not applied). */
static const struct volume *stop_volume(const struct inputs *in)
{
	return inputs_tissue(in) ? inputs_tissue(in) : inputs_stop(in);
}

/* What every job binds besides its ODF or DWI: the stop volume and the sphere. */
static uint64_t common_bytes(const struct inputs *in)
{
	uint64_t nv = (uint64_t)inputs_sphere(in)->nv;

	return 4ull * (uint64_t)stop_volume(in)->dim[3] * volume_voxels(inputs_grid(in)) +
	       12ull * nv + 4ull * (nv + 1) +
	       8ull * (uint64_t)inputs_sphere(in)->n_edges;
}

static const char *const storage_names[] = {
	[JOBSPEC_ODF_AUTO] = "auto", [JOBSPEC_ODF_FLOAT32] = "float32",
	[JOBSPEC_ODF_FLOAT16] = "float16", [JOBSPEC_ODF_SH] = "sh",
};

/* Whether the device gets each voxel's largest ODF value: prob_track's
 * cone lists, used on CPU devices only, bound the PMF with it. */
static bool wants_odf_max(const struct gpu_limits *lim, enum jobspec_odf_storage storage)
{
	return gpu_cpu_kernels(lim) && storage != JOBSPEC_ODF_SH;
}

/* The pages of each voxel's largest ODF value. */
static int plan_odf_max(const struct gpu_limits *lim, uint64_t voxels, struct paged_layout *ret,
			struct errbuf *err)
{
	return paged_plan(voxels, 1, PAGED_FLOAT32, lim->max_alloc_bytes, ret, err);
}

/* GPU bytes of the maxima a storage brings where they are wanted, else 0. */
static int odf_max_bytes(const struct gpu_limits *lim, const struct inputs *in,
			 enum jobspec_odf_storage storage, uint64_t *ret, struct errbuf *err)
{
	struct paged_layout layout;
	int r;

	*ret = 0;
	if (!wants_odf_max(lim, storage))
		return 0;
	r = plan_odf_max(lim, volume_voxels(inputs_grid(in)), &layout, err);
	if (r == 0)
		*ret = paged_bytes(&layout);
	return r;
}

/* A voxel's values with pages of half a mirrored sphere
 * (odf_transpose_upload's half): the first half's, rounded up to a multiple
 * of 4 so that each voxel starts 16-byte aligned (pmf.glsl's wide loads). */
static uint32_t half_sphere_channels(uint32_t nv)
{
	return (nv / 2 + 3) / 4 * 4;
}

/* The pages of the ODF in a storage (sampled storage of half the sphere
 * where half says so), and its GPU bytes with the SH sampling matrix. */
static int plan_odf(const struct gpu_limits *lim, const struct inputs *in,
		    enum jobspec_odf_storage storage, bool half, struct paged_layout *ret,
		    uint64_t *bytes, struct errbuf *err)
{
	uint64_t voxels = volume_voxels(inputs_grid(in));
	uint32_t nv = (uint32_t)inputs_sphere(in)->nv;
	uint64_t basis = 0;
	int r;

	if (storage == JOBSPEC_ODF_SH) {
		uint32_t nc = (uint32_t)inputs_sh(in)->dim[3];
		basis = 4ull * nc * nv;
		r = paged_plan(voxels, nc, PAGED_FLOAT32, lim->max_alloc_bytes, ret, err);
	} else {
		r = paged_plan(voxels, half ? half_sphere_channels(nv) : nv,
			       storage == JOBSPEC_ODF_FLOAT16 ? PAGED_FLOAT16 : PAGED_FLOAT32,
			       lim->max_alloc_bytes, ret, err);
	}
	*bytes = r == 0 ? paged_bytes(ret) + basis : 0;
	return r;
}

static int odf_too_big(const struct inputs *in, enum jobspec_odf_storage requested,
		       const uint64_t need[4], struct job_memory budget, struct errbuf *err)
{
	char sizes[256];
	int n = snprintf(sizes, sizeof(sizes), "%.1f MiB as float32, %.1f MiB as float16",
			 (double)need[JOBSPEC_ODF_FLOAT32] / (1 << 20),
			 (double)need[JOBSPEC_ODF_FLOAT16] / (1 << 20));

	if (inputs_sh(in))
		snprintf(sizes + n, sizeof(sizes) - (size_t)n, ", %.1f MiB as SH coefficients",
			 (double)need[JOBSPEC_ODF_SH] / (1 << 20));
	return errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -E2BIG,
			       budget.by_limit ? GPU_MEMORY_LIMIT_FIELD
			       : requested == JOBSPEC_ODF_AUTO ? inputs_grid_field(in)
			       : "tracking.odf_storage",
			       "the ODF on %d vertices needs %s of GPU memory; with %.1f MiB for "
			       "the stop map, sphere and tracking, %s fits %s of "
			       "%.1f MiB: %suse a smaller sphere, crop the volume or %s",
			       inputs_sphere(in)->nv, sizes,
			       (double)(common_bytes(in) + RESIDENT_MIN_WORK_BYTES) / (1 << 20),
			       requested == JOBSPEC_ODF_AUTO ? "none" : storage_names[requested],
			       job_memory_name(budget), (double)budget.bytes / (1 << 20),
			       inputs_sh(in) ? "track from SH input (tracking.odf_storage \"sh\"), "
			       : "give SH coefficients (inputs.sh) instead, ",
			       job_memory_remedy(budget));
}

/* The requested storage, or with auto the first of float32, float16 and SH
 * that fits the budget: float32 is exact, float16 halves the memory, SH
 * takes the least but samples the sphere at every step. half: sampled
 * storage holds half the sphere (plan_odf). */
static int choose_odf_storage(const struct gpu_limits *lim, const struct inputs *in,
			      enum jobspec_odf_storage requested, struct job_memory budget,
			      bool half, struct resident *res, struct paged_layout *ret,
			      struct errbuf *err)
{
	static const enum jobspec_odf_storage order[] = {
		JOBSPEC_ODF_FLOAT32, JOBSPEC_ODF_FLOAT16, JOBSPEC_ODF_SH };
	uint64_t fixed = common_bytes(in) + RESIDENT_MIN_WORK_BYTES;
	uint64_t need[4] = { 0 };

	for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		enum jobspec_odf_storage storage = order[k];
		struct paged_layout layout;
		uint64_t maxima = 0;
		int r;

		if (storage == JOBSPEC_ODF_SH && !inputs_sh(in))
			continue;
		r = plan_odf(lim, in, storage, half, &layout, &need[storage], err);
		if (r == 0)
			r = odf_max_bytes(lim, in, storage, &maxima, err);
		if (r < 0)
			return r;
		if ((requested == JOBSPEC_ODF_AUTO || requested == storage) &&
		    fixed + need[storage] + maxima <= budget.bytes) {
			res->storage = storage;
			if (storage == JOBSPEC_ODF_SH)
				res->sh_coefs = layout.channels;
			*ret = layout;
			return 0;
		}
	}
	return odf_too_big(in, requested, need, budget, err);
}

static int plan_dwi(const struct gpu_limits *lim, const struct inputs *in,
		    struct job_memory budget, struct paged_layout *ret, struct errbuf *err)
{
	const struct volume *dwi = inputs_dwi(in);
	uint64_t fixed = common_bytes(in) + RESIDENT_MIN_WORK_BYTES +
			 4ull * boot_matrix_floats(inputs_boot_matrices(in));
	int r = paged_plan(volume_voxels(dwi), (uint32_t)dwi->dim[3], PAGED_FLOAT32,
			   lim->max_alloc_bytes, ret, err);

	if (r == 0 && fixed + paged_bytes(ret) > budget.bytes)
		r = errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -E2BIG,
				    budget.by_limit ? GPU_MEMORY_LIMIT_FIELD : "inputs.dwi",
				    "the DWI (%lld volumes used) needs %.1f MiB of GPU memory, "
				    "and %.1f MiB more for the stop map, sphere, matrices and "
				    "tracking, over %s of %.1f MiB: crop the volume or %s",
				    (long long)dwi->dim[3], (double)paged_bytes(ret) / (1 << 20),
				    (double)fixed / (1 << 20), job_memory_name(budget),
				    (double)budget.bytes / (1 << 20), job_memory_remedy(budget));
	return r;
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

static int upload_boot(struct gpu_ctx *gpu, const struct inputs *in,
		       const struct paged_layout *layout, struct resident *res,
		       struct errbuf *err)
{
	const struct boot_matrices *m = inputs_boot_matrices(in);
	float *packed = pack_boot_matrices(m);
	int r;

	if (!packed)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = gpu_upload_new(gpu, packed, 4ull * boot_matrix_floats(m), &res->matrices, err);
	free(packed);
	if (r == 0)
		r = paged_upload(gpu, layout, inputs_dwi(in)->data, &res->dwi, err);
	return r;
}

/* The ODF on the vertices for the uploads of one resident_new_all: sampled
 * from SH inputs once, by the first upload that needs it, the others
 * waiting on the lock; the host copy lives only until they are done. */
struct odf_values {
	bool half_guess;          /* a streamed ODF's first upload holds half the sphere */
	pthread_mutex_t lock;
	bool done;
	int r;
	struct errbuf err;
	struct volume sampled;
	const struct volume *view;
};

static void odf_values_init(struct odf_values *v)
{
	memset(v, 0, sizeof(*v));
	pthread_mutex_init(&v->lock, NULL);
}

static void odf_values_free(struct odf_values *v)
{
	volume_free(&v->sampled);
	pthread_mutex_destroy(&v->lock);
}

static int odf_values_get(struct odf_values *v, const struct inputs *in,
			  const struct fit_options *fit, const struct volume **ret,
			  struct errbuf *err)
{
	pthread_mutex_lock(&v->lock);
	if (!v->done) {
		v->r = inputs_odf_view(in, fit, &v->sampled, &v->view, &v->err);
		v->done = true;
	}
	pthread_mutex_unlock(&v->lock);
	if (v->r < 0)
		*err = v->err;
	*ret = v->view;
	return v->r;
}

/* A streamed ODF's z-slabs as the runs of its z-columns. */
static int stream_get(void *userdata, size_t k, struct paged_run *ret, struct errbuf *err)
{
	struct odf_slab slab;
	int r = odf_stream_get(userdata, k, &slab, err);

	if (r == 0)
		*ret = (struct paged_run){ .values = slab.values, .first_voxel = slab.first_z,
					   .voxels = slab.planes };
	return r;
}

static void stream_release(void *userdata, size_t k)
{
	odf_stream_release(userdata, k);
}

/* Each voxel's largest ODF value as the device holds it, for voxels
 * [first, first + n) of values (nv each) into maxima: float16 storage
 * rounds each value, and rounding keeps their order, so the largest rounds
 * to the largest held. Values are clipped at zero (inputs.h). */
struct odf_maxima {
	float *maxima;            /* a value per voxel of the volume */
	uint32_t nv;
	bool half;
	const struct paged_runs *runs;   /* streamed: the runs they are found in */
};

static void find_maxima(const struct odf_maxima *m, const float *values, uint64_t first,
			uint64_t n)
{
	for (uint64_t v = 0; v < n; v++) {
		const float *row = values + v * m->nv;
		float largest = 0.0f;
		for (uint32_t j = 0; j < m->nv; j++)
			largest = row[j] > largest ? row[j] : largest;
		m->maxima[first + v] = m->half ? half_to_float(half_from_float(largest)) : largest;
	}
}

/* A streamed ODF's runs, their maxima found as they pass: a run holds the
 * same voxels of each column (paged_volume.h). */
static int maxima_get(void *userdata, size_t k, struct paged_run *ret, struct errbuf *err)
{
	const struct odf_maxima *m = userdata;
	const struct paged_runs *runs = m->runs;
	int r = runs->get(runs->userdata, k, ret, err);

	for (uint64_t c = 0; r == 0 && c < runs->columns; c++)
		find_maxima(m, ret->values + c * ret->voxels * m->nv,
			    c * runs->column_voxels + ret->first_voxel, ret->voxels);
	return r;
}

static void maxima_release(void *userdata, size_t k)
{
	const struct odf_maxima *m = userdata;

	m->runs->release(m->runs->userdata, k);
}

/* The layout of the whole sphere, where a layout of half of it was
 * planned: the storage chosen again, as it may now take more memory. */
static int plan_whole_sphere(struct gpu_ctx *gpu, const struct inputs *in,
			     const struct resident_upload *up, struct resident *res,
			     struct paged_layout *ret, struct errbuf *err)
{
	return choose_odf_storage(gpu_get_limits(gpu), in, up->odf_storage,
				  job_memory(gpu, up->memory_budget), false, res, ret, err);
}

/* A streamed ODF transposed by the GPU from the file's values, of half the
 * sphere where half says so and the values prove it (else again, whole). */
static int transpose_odf(struct gpu_ctx *gpu, const struct inputs *in,
			 const struct resident_upload *up, struct odf_transpose *raw,
			 const struct paged_layout *layout, bool half, struct resident *res,
			 struct errbuf *err)
{
	struct paged_layout whole;
	int r = odf_transpose_upload(gpu, raw, layout, half, &res->odf, err);

	if (r < 0 && half && odf_transpose_unmirrored(raw)) {
		log_debug("%s: %s: its pages hold the whole sphere",
			  gpu_get_limits(gpu)->device_name, err->message);
		r = plan_whole_sphere(gpu, in, up, res, &whole, err);
		if (r == 0)
			r = odf_transpose_upload(gpu, raw, &whole, false, &res->odf, err);
	}
	return r;
}

/* The ODF as its storage wants it: SH coefficients and the matrix that
 * samples them, or values on the vertices: read while uploaded
 * (odf_stream.h), or on the host (odf_values); with maxima (NULL where not
 * wanted), each voxel's largest value found on the way. half: layout holds
 * half the sphere (odf_half), from the host's copy or a streamed ODF
 * through the GPU's transpose; where the slabs would take a streamed one,
 * the whole sphere's layout is planned here. */
static int upload_odf(struct gpu_ctx *gpu, const struct inputs *in,
		      const struct resident_upload *up, struct odf_values *values,
		      const struct paged_layout *layout, bool half, struct odf_maxima *maxima,
		      struct resident *res, struct errbuf *err)
{
	const struct fit_options *fit = up->fit;

	const struct volume *odf;
	int r;

	if (res->storage == JOBSPEC_ODF_SH) {
		float *basis = inputs_sh_sampling_matrix(in);
		if (!basis)
			return errbuf_set(err, -ENOMEM, "", "out of memory");
		r = gpu_upload_new(gpu, basis, 4ull * res->sh_coefs * (uint64_t)inputs_sphere(in)->nv,
				   &res->odf_basis, err);
		free(basis);
		if (r == 0)
			r = paged_upload(gpu, layout, inputs_sh(in)->data, &res->odf, err);
		return r;
	}
	if (up->odf_stream) {
		struct paged_runs runs = { .n_runs = odf_stream_slabs(up->odf_stream),
					   .get = stream_get, .release = stream_release,
					   .userdata = up->odf_stream };
		struct paged_runs found;
		struct paged_layout whole;
		/* A GPU transposes the file's values itself; CPU devices, and
		 * what the kernel cannot take, get the slabs the host transposed. */
		struct odf_transpose *raw = maxima ? NULL
				: odf_transpose_new(gpu, up->odf_stream, inputs_sphere(in), layout);
		if (!raw && half) {
			r = plan_whole_sphere(gpu, in, up, res, &whole, err);
			if (r < 0)
				return r;
			return upload_odf(gpu, in, up, values, &whole, false, maxima, res, err);
		}
		odf_stream_join(up->odf_stream, !raw);
		if (raw) {
			r = transpose_odf(gpu, in, up, raw, layout, half, res, err);
			odf_transpose_free(gpu, raw);
			return r;
		}
		log_debug("ODF transposed on the host, slab by slab, for %s",
			  gpu_get_limits(gpu)->device_name);
		odf_stream_columns(up->odf_stream, &runs.columns, &runs.column_voxels);
		if (!maxima)
			return paged_upload_runs(gpu, layout, &runs, &res->odf, err);
		found = runs;
		found.get = maxima_get;
		found.release = maxima_release;
		found.userdata = maxima;
		maxima->runs = &runs;
		return paged_upload_runs(gpu, layout, &found, &res->odf, err);
	}
	r = odf_values_get(values, in, fit, &odf, err);
	if (r == 0)
		r = paged_upload_part(gpu, layout, odf->data, (uint32_t)odf->dim[3],
				      half ? (uint32_t)odf->dim[3] / 2 : layout->channels, &res->odf,
				      err);
	if (r == 0 && maxima)
		find_maxima(maxima, odf->data, 0, layout->voxels);
	return r;
}

/* The ODF, and where wanted its maxima (a float32 volume of one channel). */
static int upload_odf_all(struct gpu_ctx *gpu, const struct inputs *in,
			  const struct resident_upload *up, struct odf_values *values,
			  const struct paged_layout *layout, bool half, struct resident *res,
			  struct errbuf *err)
{
	const struct gpu_limits *lim = gpu_get_limits(gpu);
	struct odf_maxima maxima = { .nv = (uint32_t)inputs_sphere(in)->nv,
				     .half = res->storage == JOBSPEC_ODF_FLOAT16 };
	struct paged_layout maxima_layout;
	int r;

	if (!wants_odf_max(lim, res->storage))
		return upload_odf(gpu, in, up, values, layout, half, NULL, res, err);
	maxima.maxima = malloc(sizeof(float) * layout->voxels);
	if (!maxima.maxima)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = upload_odf(gpu, in, up, values, layout, half, &maxima, res, err);
	if (r == 0)
		r = plan_odf_max(lim, layout->voxels, &maxima_layout, err);
	if (r == 0)
		r = paged_upload(gpu, &maxima_layout, maxima.maxima, &res->odf_max, err);
	free(maxima.maxima);
	return r;
}

static int upload_common(struct gpu_ctx *gpu, const struct inputs *in,
			 struct resident *res, struct errbuf *err)
{
	const struct sphere *s = inputs_sphere(in);
	struct paged_layout layout;
	const struct volume *stop = stop_volume(in);
	int r = paged_plan(volume_voxels(stop), (uint32_t)stop->dim[3], PAGED_FLOAT32,
			   gpu_get_limits(gpu)->max_alloc_bytes, &layout, err);

	if (r == 0)
		r = paged_upload(gpu, &layout, stop->data, &res->stop, err);
	if (r == 0)
		r = gpu_upload_new(gpu, s->vertices, 12ull * (uint64_t)s->nv, &res->vertices, err);
	if (r == 0)
		r = gpu_upload_new(gpu, s->nbr_offset, 4ull * (uint64_t)(s->nv + 1), &res->nbr_offset,
				   err);
	if (r == 0)
		r = gpu_upload_new(gpu, s->nbr, 8ull * (uint64_t)s->n_edges, &res->nbr, err);
	return r;
}

/* Whether a mirrored ODF's pages can hold half the sphere: its second
 * half's vertices the first's antipodes, and fewer channels for it. */
static bool half_sphere_fits(const struct inputs *in)
{
	uint32_t nv = (uint32_t)inputs_sphere(in)->nv;

	return sphere_mirrored(inputs_sphere(in)) && half_sphere_channels(nv) < nv;
}

/* Whether GPUs upload a streamed ODF into pages of half the sphere first
 * (odf_transpose_upload's half): a file read raw whose middle z-plane is
 * mirrored, a guess that the upload checks on every value. */
static bool stream_half_guess(const struct inputs *in, struct odf_stream *stream)
{
	struct odf_raw raw;

	return stream && half_sphere_fits(in) && odf_stream_raw(stream, &raw) &&
	       odf_stream_raw_plane_mirrored(stream);
}

void resident_prepare(struct inputs *in)
{
	(void)stream_half_guess(in, inputs_odf_stream(in));
}

/* Whether the ODF's sampled storage holds half the sphere: half the pages
 * to allocate, fill and free, and half the GPU memory; the kernels read that
 * half only (ODF_MIRRORED). Known for an ODF on the host (inputs.h's
 * symmetry); guessed for a streamed one, which only a GPU's transpose can
 * put into such pages. */
static bool odf_half(const struct gpu_limits *lim, const struct inputs *in,
		     const struct resident_upload *up, const struct odf_values *values)
{
	if (up->odf_stream)
		return values->half_guess && !gpu_cpu_kernels(lim);
	return half_sphere_fits(in) && inputs_symmetric(in) && inputs_mirrored(in);
}

static int upload_resident(struct gpu_ctx *gpu, const struct inputs *in,
			   const struct resident_upload *up, struct odf_values *values,
			   struct resident *res, struct errbuf *err)
{
	const struct gpu_limits *lim = gpu_get_limits(gpu);
	struct job_memory budget = job_memory(gpu, up->memory_budget);
	uint64_t nv = (uint64_t)inputs_sphere(in)->nv;
	struct paged_layout layout = { 0 };
	int r;

	if (inputs_boot(in)) {
		r = plan_dwi(lim, in, budget, &layout, err);
		if (r == 0)
			r = upload_boot(gpu, in, &layout, res, err);
	} else {
		bool half = odf_half(lim, in, up, values);
		r = choose_odf_storage(lim, in, up->odf_storage, budget, half, res, &layout, err);
		if (r == 0)
			r = upload_odf_all(gpu, in, up, values, &layout, half, res, err);
	}
	if (r == 0)
		r = upload_common(gpu, in, res, err);
	if (r == 0)
		res->bytes = res->odf.bytes + res->odf_max.bytes + res->dwi.bytes + res->stop.bytes +
			     common_bytes(in) - 4ull * volume_voxels(inputs_grid(in)) +
			     (inputs_boot(in) ? 4ull * boot_matrix_floats(inputs_boot_matrices(in)) : 0) +
			     (res->odf_basis ? 4ull * res->sh_coefs * nv : 0);
	return r;
}

static int new_resident(struct gpu_ctx *gpu, const struct inputs *in,
			const struct resident_upload *up, struct odf_values *values,
			struct resident **ret, struct errbuf *err)
{
	struct resident *res = calloc(1, sizeof(*res));
	double t0 = timing_now(), seconds;
	int r;

	if (!res)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = upload_resident(gpu, in, up, values, res, err);
	seconds = timing_now() - t0;
	if (r < 0) {
		resident_free(gpu, res);
		return r;
	}
	{
		const struct paged_volume *v = inputs_boot(in) ? &res->dwi : &res->odf;
		log_debug("%s on the GPU%s%s%s: %u pages of %llu voxels, %.1f MiB; inputs uploaded "
			  "in %.3f s (%.1f GB/s)", inputs_boot(in) ? "DWI" : "ODF",
			  inputs_boot(in) ? "" : " as ", inputs_boot(in) ? "" : resident_storage(res),
			  !inputs_boot(in) && res->storage != JOBSPEC_ODF_SH &&
			  v->layout.channels < (uint32_t)inputs_sphere(in)->nv
			  ? " of half the sphere" : "",
			  v->layout.n_pages, (unsigned long long)v->layout.voxels_per_page,
			  (double)v->bytes / (1 << 20), seconds,
			  seconds > 0 ? (double)res->bytes / seconds * 1e-9 : 0.0);
	}
	*ret = res;
	return 0;
}

struct upload_task {
	struct gpu_ctx *gpu;
	const struct inputs *in;
	const struct resident_upload *up;
	struct odf_values *values;
	struct resident *res;
	struct errbuf err;
	int r;
};

static void upload_task_main(void *arg)
{
	struct upload_task *t = arg;

	t->r = new_resident(t->gpu, t->in, t->up, t->values, &t->res, &t->err);
	/* The other devices stop waiting for slabs this one will not take. */
	if (t->r < 0 && t->up->odf_stream)
		odf_stream_cancel(t->up->odf_stream);
}

/* The first device's error, or where a streamed ODF's upload failed on one
 * device, that one's rather than the others' -ECANCELED. */
static int first_error(const struct upload_task *tasks, size_t n, struct errbuf *err)
{
	int r = 0;

	for (size_t i = 0; i < n; i++)
		if (tasks[i].r < 0 && (r == 0 || r == -ECANCELED)) {
			r = tasks[i].r;
			*err = tasks[i].err;
		}
	return r;
}

int resident_new_all(struct gpu_ctx *const *gpus, size_t n, const struct inputs *in,
		     const struct resident_upload *up, struct resident **ret, struct errbuf *err)
{
	struct upload_task *tasks = calloc(n ? n : 1, sizeof(*tasks));
	struct odf_values values;
	int r = 0;

	if (!tasks)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	odf_values_init(&values);
	values.half_guess = stream_half_guess(in, up->odf_stream);
	for (size_t i = 0; i < n; i++)
		tasks[i] = (struct upload_task){ .gpu = gpus[i], .in = in, .up = up,
						 .values = &values };
	if (up->odf_stream)
		r = odf_stream_start(up->odf_stream, n, err);
	if (r == 0) {
		parallel_run(upload_task_main, tasks, sizeof(*tasks), n);
		r = first_error(tasks, n, err);
	}
	if (up->odf_stream) {
		odf_stream_finish(up->odf_stream);
		log_debug("ODF read in %zu slabs while it was uploaded to %zu device(s)",
			  odf_stream_slabs(up->odf_stream), n);
	}
	for (size_t i = 0; i < n; i++) {
		if (r < 0)
			resident_free(gpus[i], tasks[i].res);
		ret[i] = r < 0 ? NULL : tasks[i].res;
	}
	odf_values_free(&values);
	free(tasks);
	return r;
}

uint64_t resident_bytes(const struct resident *res)
{
	return res->bytes;
}

const char *resident_storage(const struct resident *res)
{
	return res->odf.pages ? storage_names[res->storage] : "dwi";
}

enum jobspec_odf_storage resident_odf_storage(const struct resident *res)
{
	return res->storage;
}

uint32_t resident_sh_coefs(const struct resident *res)
{
	return res->sh_coefs;
}

struct resident_bindings resident_bindings(const struct resident *res)
{
	return (struct resident_bindings){
		.odf = res->odf.table, .odf_basis = res->odf_basis, .odf_max = res->odf_max.table,
		.dwi = res->dwi.table,
		.matrices = res->matrices, .stop = res->stop.table, .vertices = res->vertices,
		.nbr_offset = res->nbr_offset, .nbr = res->nbr,
	};
}

void resident_free(struct gpu_ctx *gpu, struct resident *res)
{
	if (!res)
		return;
	paged_free(gpu, &res->odf);
	paged_free(gpu, &res->odf_max);
	paged_free(gpu, &res->dwi);
	gpu_buffer_free(gpu, res->odf_basis);
	paged_free(gpu, &res->stop);
	gpu_buffer_free(gpu, res->vertices);
	gpu_buffer_free(gpu, res->nbr_offset);
	gpu_buffer_free(gpu, res->nbr);
	gpu_buffer_free(gpu, res->matrices);
	free(res);
}
