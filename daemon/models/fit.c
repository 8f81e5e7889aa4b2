/* SPDX-License-Identifier: MIT */
/*
 * fit: see fit.h. Every stage is a loop over voxels split into blocks that
 * worker threads claim from an atomic counter; the calling thread only
 * reports progress, so a progress callback never runs concurrently with
 * itself.
 */
#include "models/fit.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/timing.h"

#define FIT_BLOCK_VOXELS 256
#define FIT_MAX_THREADS 256
#define FIT_PROGRESS_NS 100000000L

/* ---- a parallel loop over voxels ----------------------------------------- */

struct voxel_loop;
typedef void voxel_block_fn(struct voxel_loop *loop, int worker, size_t begin, size_t end);

struct voxel_loop {
	size_t voxels;
	voxel_block_fn *block;
	void *ctx;
	atomic_size_t next;        /* first voxel of the next unclaimed block */
	atomic_size_t done;
	atomic_bool stop;
	atomic_bool failed;        /* a worker could not get its scratch */
	/* The reporting thread sleeps on finished between progress reports;
	 * the worker that ends the last block wakes it. */
	pthread_mutex_t lock;
	pthread_cond_t finished;
};

struct worker_arg {
	struct voxel_loop *loop;
	int index;
};

static void *worker_main(void *p)
{
	struct worker_arg *arg = p;
	struct voxel_loop *loop = arg->loop;

	while (!atomic_load(&loop->stop)) {
		size_t begin = atomic_fetch_add(&loop->next, FIT_BLOCK_VOXELS), end;

		if (begin >= loop->voxels)
			break;
		end = begin + FIT_BLOCK_VOXELS < loop->voxels ? begin + FIT_BLOCK_VOXELS : loop->voxels;
		loop->block(loop, arg->index, begin, end);
		if (atomic_fetch_add(&loop->done, end - begin) + (end - begin) == loop->voxels) {
			pthread_mutex_lock(&loop->lock);
			pthread_cond_broadcast(&loop->finished);
			pthread_mutex_unlock(&loop->lock);
		}
	}
	return NULL;
}

/* Sleeps until the loop is done or FIT_PROGRESS_NS have passed. */
static void wait_progress(struct voxel_loop *loop)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += FIT_PROGRESS_NS;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&loop->lock);
	if (atomic_load(&loop->done) < loop->voxels)
		pthread_cond_timedwait(&loop->finished, &loop->lock, &until);
	pthread_mutex_unlock(&loop->lock);
}

static int thread_count(const struct fit_options *o)
{
	long n = o && o->threads > 0 ? o->threads : sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > FIT_MAX_THREADS ? FIT_MAX_THREADS : (int)n;
}

static bool report(const struct fit_options *o, const char *stage, double fraction)
{
	return !o || !o->progress || o->progress(o->userdata, stage, fraction);
}

/* Runs the loop on threads workers and reports progress until they finish.
 * Returns 0, -ECANCELED, -ENOMEM (a worker's scratch), or -EAGAIN. */
static int run_loop(struct voxel_loop *loop, int threads, const struct fit_options *o,
		    const char *stage)
{
	pthread_t tid[FIT_MAX_THREADS];
	struct worker_arg args[FIT_MAX_THREADS];
	int started = 0, r = 0;

	atomic_init(&loop->next, 0);
	atomic_init(&loop->done, 0);
	atomic_init(&loop->stop, false);
	atomic_init(&loop->failed, false);
	pthread_mutex_init(&loop->lock, NULL);
	pthread_cond_init(&loop->finished, NULL);
	for (; started < threads; started++) {
		args[started] = (struct worker_arg){ loop, started };
		if (pthread_create(&tid[started], NULL, worker_main, &args[started]) != 0)
			break;
	}
	if (started == 0)
		r = -EAGAIN;
	while (started > 0 && atomic_load(&loop->done) < loop->voxels && !atomic_load(&loop->stop)) {
		wait_progress(loop);
		if (!report(o, stage, (double)atomic_load(&loop->done) / (double)loop->voxels))
			atomic_store(&loop->stop, true);
	}
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_cond_destroy(&loop->finished);
	pthread_mutex_destroy(&loop->lock);
	if (r < 0)
		return r;
	if (atomic_load(&loop->failed))
		return -ENOMEM;
	if (atomic_load(&loop->stop))
		return -ECANCELED;
	return report(o, stage, 1.0) ? 0 : -ECANCELED;
}

/* Per-worker scratch of n doubles, allocated up front so workers never fail
 * half-way. */
static double **alloc_scratch(int threads, size_t n)
{
	double **s = calloc((size_t)threads, sizeof(*s));

	for (int i = 0; s && i < threads; i++) {
		s[i] = malloc(sizeof(double) * (n ? n : 1));
		if (!s[i]) {
			for (int j = 0; j < i; j++)
				free(s[j]);
			free(s);
			return NULL;
		}
	}
	return s;
}

static void free_scratch(double **s, int threads)
{
	for (int i = 0; s && i < threads; i++)
		free(s[i]);
	free(s);
}

static int loop_error(int r, const char *stage, struct errbuf *err)
{
	if (r == -ECANCELED)
		return errbuf_set(err, r, "", "cancelled during the %s fit", stage);
	if (r == -EAGAIN)
		return errbuf_set(err, r, "", "cannot start fitting threads");
	return errbuf_set(err, r, "", "out of memory");
}

/* ---- DTI ------------------------------------------------------------------- */

struct dti_ctx {
	const struct volume *dwi, *mask;
	const struct dti_model *model;
	struct fit_result *out;
	double **scratch;
	atomic_size_t fitted;
};

static bool in_mask(const struct volume *mask, size_t voxel)
{
	return !mask || mask->data[voxel] > 0.0f;
}

static void dti_block(struct voxel_loop *loop, int worker, size_t begin, size_t end)
{
	struct dti_ctx *c = loop->ctx;
	size_t nt = (size_t)c->dwi->dim[3], fitted = 0;

	for (size_t v = begin; v < end; v++) {
		struct dti_tensor t;

		if (!in_mask(c->mask, v))
			continue;
		fitted++;
		if (dti_fit(c->model, c->dwi->data + v * nt, 1, c->scratch[worker], &t) < 0)
			continue;
		c->out->fa.data[v] = (float)dti_fa(t.evals);
		c->out->md.data[v] = (float)dti_md(t.evals);
	}
	atomic_fetch_add(&c->fitted, fitted);
}

static int fit_dti(const struct volume *dwi, const struct gradients *g, const struct volume *mask,
		   const struct fit_options *o, struct fit_result *out, struct errbuf *err)
{
	struct dti_model model;
	int threads = thread_count(o);
	struct dti_ctx ctx = { .dwi = dwi, .mask = mask, .model = &model, .out = out };
	struct voxel_loop loop = { .voxels = volume_voxels(dwi), .block = dti_block, .ctx = &ctx };
	double start = timing_now();
	int r = dti_model_init(&model, g, err);

	if (r < 0)
		return r;
	atomic_init(&ctx.fitted, 0);
	ctx.scratch = alloc_scratch(threads, dti_scratch_size(&model));
	r = ctx.scratch ? run_loop(&loop, threads, o, "dti") : -ENOMEM;
	free_scratch(ctx.scratch, threads);
	dti_model_free(&model);
	if (r < 0)
		return loop_error(r, "dti", err);
	log_debug("fit stage dti: %.3f s (%zu voxels on %d thread%s)", timing_now() - start,
		  atomic_load(&ctx.fitted), threads, threads == 1 ? "" : "s");
	return 0;
}

/* ---- the CSD table: b0s and the lowest shell ------------------------------- */

struct csd_table {
	struct gradients g;
	size_t *volumes;
	struct csd_selection sel;
};

static int csd_table_init(struct csd_table *t, const struct gradients *g, struct errbuf *err)
{
	double *bvals = malloc(sizeof(double) * g->n), *bvecs = malloc(sizeof(double) * 3 * g->n);
	size_t n;
	int r = -ENOMEM;

	memset(t, 0, sizeof(*t));
	t->volumes = malloc(sizeof(size_t) * g->n);
	if (bvals && bvecs && t->volumes) {
		n = gradients_lowest_shell(g, t->volumes);
		for (size_t i = 0; i < n; i++) {
			bvals[i] = g->bvals[t->volumes[i]];
			memcpy(&bvecs[3 * i], &g->bvecs[3 * t->volumes[i]], 3 * sizeof(double));
		}
		r = gradients_from_arrays(bvals, bvecs, n, &t->g, err);
	} else {
		errbuf_set(err, r, "", "out of memory");
	}
	free(bvals);
	free(bvecs);
	if (r < 0) {
		free(t->volumes);
		t->volumes = NULL;
		return r;
	}
	t->sel = (struct csd_selection){ &t->g, t->volumes, g->n };
	return 0;
}

static void csd_table_free(struct csd_table *t)
{
	gradients_free(&t->g);
	free(t->volumes);
	memset(t, 0, sizeof(*t));
}

static int estimate_response(const struct volume *dwi, const struct csd_table *t,
			     const struct fit_params *p, struct csd_response *ret,
			     struct errbuf *err)
{
	struct dti_model model;
	int r = dti_model_init(&model, &t->g, err);

	if (r < 0)
		return r;
	r = csd_auto_response(dwi, &t->sel, &model, p->response_roi_radius, p->response_fa,
			      ret, err);
	dti_model_free(&model);
	return r;
}

/* ---- CSD ------------------------------------------------------------------- */

struct csd_ctx {
	const struct volume *dwi, *mask;
	const struct csd_model *model;
	double fa_threshold;
	struct fit_result *out;
	double **scratch;
	double **coef;
	atomic_size_t fitted, failed;
};

static void csd_block(struct voxel_loop *loop, int worker, size_t begin, size_t end)
{
	struct csd_ctx *c = loop->ctx;
	size_t nt = (size_t)c->dwi->dim[3], nc = (size_t)c->model->ncoef;
	size_t fitted = 0, failed = 0;

	for (size_t v = begin; v < end; v++) {
		double *coef = c->coef[worker];

		if (!in_mask(c->mask, v) || !(c->out->fa.data[v] >= c->fa_threshold))
			continue;
		fitted++;
		if (csd_fit(c->model, c->dwi->data + v * nt, c->scratch[worker], coef) < 0)
			failed++;
		for (size_t k = 0; k < nc; k++)
			c->out->sh.data[v * nc + k] = (float)coef[k];
	}
	atomic_fetch_add(&c->fitted, fitted);
	atomic_fetch_add(&c->failed, failed);
}

static int fit_csd(const struct volume *dwi, const struct csd_table *t, const struct volume *mask,
		   const struct fit_params *p, const struct fit_options *o, struct fit_result *out,
		   struct errbuf *err)
{
	struct csd_model model;
	int threads = thread_count(o);
	struct csd_ctx ctx = { .dwi = dwi, .mask = mask, .model = &model,
			       .fa_threshold = p->fa_threshold, .out = out };
	struct voxel_loop loop = { .voxels = volume_voxels(dwi), .block = csd_block, .ctx = &ctx };
	double start = timing_now();
	int r = csd_model_init(&model, &t->sel, &out->response, &p->csd, err);

	if (r < 0)
		return r;
	atomic_init(&ctx.fitted, 0);
	atomic_init(&ctx.failed, 0);
	r = volume_alloc_on_grid(&out->sh, dwi, model.ncoef);
	if (r == 0) {
		ctx.scratch = alloc_scratch(threads, csd_scratch_size(&model));
		ctx.coef = alloc_scratch(threads, (size_t)model.ncoef);
		r = ctx.scratch && ctx.coef ? run_loop(&loop, threads, o, "csd") : -ENOMEM;
	}
	free_scratch(ctx.scratch, threads);
	free_scratch(ctx.coef, threads);
	out->directions = model.n_dwi;
	csd_model_free(&model);
	out->fitted_voxels = atomic_load(&ctx.fitted);
	out->failed_voxels = atomic_load(&ctx.failed);
	if (r < 0)
		return loop_error(r, "csd", err);
	log_debug("fit stage csd: %.3f s (%zu voxels on %d thread%s)", timing_now() - start,
		  out->fitted_voxels, threads, threads == 1 ? "" : "s");
	return 0;
}

/* ---- the whole DWI fit ------------------------------------------------------ */

bool fit_describe(const struct fit_result *f, char *buf, size_t len)
{
	size_t ncoef = f->sh.data ? (size_t)f->sh.dim[3] : 0;

	if (!ncoef || !f->directions)
		return false;
	snprintf(buf, len, "CSD of order %d (%zu coefficients) from %zu diffusion-weighted "
		 "directions%s", sh_order_from_ncoef(f->sh.dim[3]), ncoef, f->directions,
		 f->directions < ncoef ? ": fewer directions than coefficients, super-resolved "
					 "by the non-negativity constraint as DIPY and MRtrix3 fit "
					 "it" : "");
	return true;
}

void fit_default_params(struct fit_params *p)
{
	*p = (struct fit_params){
		.csd = { .sh_order = 8, .lambda = 1.0, .tau = 0.1, .max_iterations = 50 },
		.fa_threshold = 0.1,
		.response_roi_radius = 10,
		.response_fa = 0.7,
	};
}

static int alloc_scalar_maps(const struct volume *dwi, struct fit_result *out, struct errbuf *err)
{
	if (volume_alloc_on_grid(&out->fa, dwi, 1) < 0 || volume_alloc_on_grid(&out->md, dwi, 1) < 0)
		return errbuf_set(err, -ENOMEM, "", "out of memory for the DTI maps");
	return 0;
}

int fit_tensor(const struct volume *dwi, const struct gradients *g, const struct volume *mask,
	       const struct fit_options *o, struct fit_result *ret, struct errbuf *err)
{
	struct fit_result out = { 0 };
	int r = alloc_scalar_maps(dwi, &out, err);

	if (r == 0)
		r = fit_dti(dwi, g, mask, o, &out, err);
	if (r < 0) {
		fit_result_free(&out);
		return r;
	}
	*ret = out;
	return 0;
}

int fit_dwi(const struct volume *dwi, const struct gradients *g, const struct volume *mask,
	    const struct fit_params *p, const struct fit_options *o, struct fit_result *ret,
	    struct errbuf *err)
{
	struct fit_result out = { 0 };
	struct csd_table table = { 0 };
	double response_start;
	int r = fit_tensor(dwi, g, mask, o, &out, err);

	response_start = timing_now();
	if (r == 0)
		r = csd_table_init(&table, g, err);
	if (r == 0 && p->response_given)
		out.response = p->response;
	else if (r == 0)
		r = estimate_response(dwi, &table, p, &out.response, err);
	if (r == 0)
		log_debug("fit stage response: %.3f s (%zu voxels, %s)", timing_now() - response_start,
			  out.response.voxels, p->response_given ? "given" : "estimated");
	if (r == 0 && !report(o, "response", 1.0))
		r = errbuf_set(err, -ECANCELED, "", "cancelled after the response estimate");
	if (r == 0)
		r = fit_csd(dwi, &table, mask, p, o, &out, err);
	csd_table_free(&table);
	if (r < 0) {
		fit_result_free(&out);
		return r;
	}
	*ret = out;
	return 0;
}

void fit_result_free(struct fit_result *r)
{
	volume_free(&r->fa);
	volume_free(&r->md);
	volume_free(&r->sh);
	memset(r, 0, sizeof(*r));
}

/* ---- SH coefficients on a sphere ------------------------------------------- */

struct sample_ctx {
	const struct volume *sh;
	struct volume *odf;
	const float *basis_t;      /* ncoef x nv: basis_t[c * nv + j] = Y_c(vertex j) */
	size_t sampled;            /* the vertices sampled: nv, or the first half on a
				    * mirrored sphere, copied to the second */
};

/* odf += w * row over nv values; restrict lets the compiler vectorise it. */
static void add_scaled(float *restrict odf, const float *restrict row, float w, size_t nv)
{
	for (size_t j = 0; j < nv; j++)
		odf[j] += w * row[j];
}

static void sample_block(struct voxel_loop *loop, int worker, size_t begin, size_t end)
{
	struct sample_ctx *c = loop->ctx;
	size_t nc = (size_t)c->sh->dim[3], nv = (size_t)c->odf->dim[3], n = c->sampled;

	(void)worker;
	for (size_t v = begin; v < end; v++) {
		const float *coef = c->sh->data + v * nc;
		float *odf = c->odf->data + v * nv;

		for (size_t k = 0; k < nc; k++)
			if (coef[k] != 0.0f)
				add_scaled(odf, c->basis_t + k * nv, coef[k], n);
		for (size_t j = 0; j < n; j++)
			odf[j] = odf[j] > 0.0f ? odf[j] : 0.0f;
		memcpy(odf + n, odf, (nv - n) * sizeof(*odf));
	}
}

/* ---- an ODF as given --------------------------------------------------------- */

#define ODF_SYMMETRY_TOLERANCE FIT_ODF_SYMMETRY_TOLERANCE

struct odf_ctx {
	struct volume *odf;
	/* The antipodal vertex pairs (first[i], second[i]) to compare; none on
	 * a hemisphere. */
	int *first, *second;
	int n_pairs;
	atomic_bool asymmetric;
	atomic_bool unmirrored;   /* a pair's values differ at all */
};

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

/* Each antipodal pair once (the vertex whose antipode comes after it, and
 * that antipode), for the symmetry check. -ENOMEM. */
static int antipodal_pairs(const struct sphere *s, struct odf_ctx *c)
{
	int *anti = antipodes(s);
	bool ok;

	c->first = malloc(sizeof(*c->first) * (size_t)s->nv);
	c->second = malloc(sizeof(*c->second) * (size_t)s->nv);
	c->n_pairs = 0;
	ok = anti && c->first && c->second;
	for (int j = 0; ok && j < s->nv; j++)
		if (anti[j] > j) {
			c->first[c->n_pairs] = j;
			c->second[c->n_pairs++] = anti[j];
		}
	free(anti);
	return ok ? 0 : -ENOMEM;
}

int fit_antipodal_pairs(const struct sphere *s, int **first, int **second, int *n_pairs)
{
	struct odf_ctx c = { 0 };

	*first = *second = NULL;
	*n_pairs = 0;
	if (!s->antipodal)
		return 0;
	if (antipodal_pairs(s, &c) < 0) {
		free(c.first);
		free(c.second);
		return -ENOMEM;
	}
	*first = c.first;
	*second = c.second;
	*n_pairs = c.n_pairs;
	return 0;
}

/* The largest difference between antipodal values. Branch-free over all
 * pairs: this check reads every value of a symmetric ODF, gigabytes for a
 * whole brain, and a loop that may stop early does not vectorize. */
static float antipodal_gap(const float *f, const struct odf_ctx *c)
{
	float gap = 0.0f;

	for (int i = 0; i < c->n_pairs; i++) {
		float d = fabsf(f[c->first[i]] - f[c->second[i]]);
		gap = d > gap ? d : gap;
	}
	return gap;
}

static void odf_block(struct voxel_loop *loop, int worker, size_t begin, size_t end)
{
	struct odf_ctx *c = loop->ctx;
	int nv = (int)c->odf->dim[3];
	bool check = c->n_pairs > 0 && !atomic_load(&c->asymmetric);

	(void)worker;
	for (size_t v = begin; v < end; v++) {
		float *f = c->odf->data + v * (size_t)nv, lowest = 0.0f, top = 0.0f;
		for (int j = 0; j < nv; j++) {
			lowest = f[j] < lowest ? f[j] : lowest;
			top = f[j] > top ? f[j] : top;
		}
		/* Only voxels with a negative value are written: most have none,
		 * and writing back gigabytes that did not change doubles the
		 * memory traffic of this pass. */
		if (lowest < 0.0f)
			for (int j = 0; j < nv; j++)
				f[j] = f[j] < 0.0f ? 0.0f : f[j];
		/* Values this far apart relative to the voxel's maximum (after
		 * clipping) count as equal; apart at all, not as mirrored. */
		if (check) {
			float gap = antipodal_gap(f, c);
			if (gap > 0.0f)
				atomic_store(&c->unmirrored, true);
			if (gap > ODF_SYMMETRY_TOLERANCE * top) {
				atomic_store(&c->asymmetric, true);
				check = false;
			}
		}
	}
}

struct odf_symmetry fit_sampled_sh_symmetry(const struct sphere *s)
{
	return (struct odf_symmetry){ .symmetric = true, .mirrored = sphere_mirrored(s) };
}

void odf_symmetry_and(struct odf_symmetry *all, struct odf_symmetry part)
{
	all->symmetric = all->symmetric && part.symmetric;
	all->mirrored = all->mirrored && part.mirrored;
}

int fit_prepare_odf(struct volume *odf, const struct sphere *s, const struct fit_options *o,
		    struct odf_symmetry *symmetry, struct errbuf *err)
{
	struct odf_ctx ctx = { .odf = odf };
	struct voxel_loop loop = { .voxels = volume_voxels(odf), .block = odf_block, .ctx = &ctx };
	int r;

	atomic_init(&ctx.asymmetric, false);
	atomic_init(&ctx.unmirrored, false);
	/* On a hemisphere an ODF is symmetric by convention: nothing to compare. */
	if (s->antipodal && antipodal_pairs(s, &ctx) < 0) {
		free(ctx.first);
		free(ctx.second);
		return errbuf_set(err, -ENOMEM, "inputs.odf", "out of memory");
	}
	r = run_loop(&loop, thread_count(o), o, "odf");
	free(ctx.first);
	free(ctx.second);
	if (r < 0)
		return loop_error(r, "odf", err);
	symmetry->symmetric = !atomic_load(&ctx.asymmetric);
	symmetry->mirrored = s->antipodal && !atomic_load(&ctx.unmirrored);
	return 0;
}

static void map_direction(const double m[3][3], const float *v, double out[3])
{
	for (int r = 0; r < 3; r++)
		out[r] = m ? m[r][0] * v[0] + m[r][1] * v[1] + m[r][2] * v[2] : v[r];
}

float *fit_sh_sampling_matrix(enum sh_basis basis, int order, const double to_sh_frame[3][3],
			      const struct sphere *s)
{
	int nc = sh_ncoef(order);
	float *bt = malloc(sizeof(float) * (size_t)nc * (size_t)s->nv);
	double row[(SH_MAX_ORDER + 1) * (SH_MAX_ORDER + 2) / 2], dir[3];

	for (int j = 0; bt && j < s->nv; j++) {
		map_direction(to_sh_frame, &s->vertices[3 * j], dir);
		sh_eval(basis, order, dir, row);
		for (int c = 0; c < nc; c++)
			bt[(size_t)c * (size_t)s->nv + (size_t)j] = (float)row[c];
	}
	return bt;
}

int fit_sample_sh(const struct volume *sh, enum sh_basis basis, const double to_sh_frame[3][3],
		  const struct sphere *s, const struct fit_options *o, const char *field,
		  struct volume *odf, struct errbuf *err)
{
	int order = sh_order_from_ncoef(sh->dim[3]);
	struct sample_ctx ctx = { .sh = sh, .odf = odf, .sampled = (size_t)s->nv };
	struct voxel_loop loop = { .voxels = volume_voxels(sh), .block = sample_block, .ctx = &ctx };
	double start = timing_now();
	int threads = thread_count(o);
	float *bt;
	int r;

	if (order < 0 || order > SH_MAX_ORDER)
		return errbuf_set(err, -EINVAL, field, "has %lld volumes, which is not the "
				  "coefficient count of an even SH order up to %d (1, 6, 15, 28, "
				  "45, ...)", (long long)sh->dim[3], SH_MAX_ORDER);
	bt = fit_sh_sampling_matrix(basis, order, to_sh_frame, s);
	if (!bt || volume_alloc_on_grid(odf, sh, s->nv) < 0) {
		free(bt);
		return errbuf_set(err, -ENOMEM, field, "out of memory for the ODF on %d vertices",
				  s->nv);
	}
	ctx.basis_t = bt;
	if (fit_sampled_sh_symmetry(s).mirrored)
		ctx.sampled /= 2;
	r = run_loop(&loop, threads, o, "odf");
	free(bt);
	if (r < 0) {
		volume_free(odf);
		return loop_error(r, "odf", err);
	}
	log_debug("fit stage odf: %.3f s (%zu voxels, %d vertices, on %d thread%s)",
		  timing_now() - start, loop.voxels, s->nv, threads, threads == 1 ? "" : "s");
	return 0;
}
