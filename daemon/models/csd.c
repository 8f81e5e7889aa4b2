/* SPDX-License-Identifier: MIT */
/*
 * csd: see csd.h. The deconvolution is DIPY's csdeconv: solve P f = X^T s,
 * take as "negative" the regularisation directions where the FOD is below
 * tau times its mean amplitude (first judged on the order <= 4 part only),
 * add those rows' outer products to P and solve again, until the set of
 * negative directions repeats.
 */
#include "models/csd.h"

#include <errno.h>
#include <lapacke.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "models/shbasis.h"
#include "models/sphere.h"

#define CSD_RIDGE 1e-5                 /* DIPY's mu, added when X^T X is singular */
#define CSD_REG_SPHERE "symmetric362"  /* halved: DIPY's default small_sphere */
#define CSD_REG_FULL_VERTICES 362.0    /* DIPY scales lambda by sqrt(362) */
#define CSD_LOW_ORDER_COEFS 15         /* order 4 */

static double dot(const double *a, const double *b, int n)
{
	double s = 0.0;

	for (int i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* ---- the single-fibre response ------------------------------------------ */

/* DIPY's _roi_in_volume: a radius that would leave the volume becomes the
 * distance from the centre to the nearer face. */
static void response_cube(const struct volume *dwi, int roi_radius, int64_t lo[3], int64_t hi[3])
{
	for (int a = 0; a < 3; a++) {
		int64_t n = dwi->dim[a], c = n / 2, r = roi_radius;

		if (c - r < 0 || c + r >= n)
			r = c < n - c ? c : n - c;
		lo[a] = c - r;
		hi[a] = c + r < n - 1 ? c + r : n - 1;
	}
}

struct response_sums {
	double l1, l2, b0;
	size_t voxels, b0_values;
};

static void add_response_voxel(const struct gradients *g, const float *signal,
			       const struct dti_tensor *t, struct response_sums *s)
{
	s->l1 += t->evals[0];
	s->l2 += t->evals[1];
	s->voxels++;
	for (size_t i = 0; i < g->n; i++)
		if (g->is_b0[i]) {
			s->b0 += signal[i];
			s->b0_values++;
		}
}

int csd_auto_response(const struct volume *dwi, const struct csd_selection *sel,
		      const struct dti_model *dti, int roi_radius, double fa_threshold,
		      struct csd_response *ret, struct errbuf *err)
{
	const struct gradients *g = sel->g;
	double *scratch = malloc(sizeof(double) * dti_scratch_size(dti));
	float *signal = malloc(sizeof(float) * g->n);
	struct response_sums sums = { 0 };
	int64_t lo[3], hi[3], v[3];

	if (!scratch || !signal) {
		free(scratch);
		free(signal);
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	}
	response_cube(dwi, roi_radius, lo, hi);
	for (v[0] = lo[0]; v[0] <= hi[0]; v[0]++)
		for (v[1] = lo[1]; v[1] <= hi[1]; v[1]++)
			for (v[2] = lo[2]; v[2] <= hi[2]; v[2]++) {
				const float *series = dwi->data + volume_index(dwi, v[0], v[1], v[2]) *
							  sel->series_length;
				struct dti_tensor t;

				for (size_t i = 0; i < g->n; i++)
					signal[i] = series[sel->volumes[i]];
				if (dti_fit(dti, signal, 1, scratch, &t) == 0 &&
				    dti_fa(t.evals) > fa_threshold)
					add_response_voxel(g, signal, &t, &sums);
			}
	free(scratch);
	free(signal);
	if (sums.voxels == 0 || sums.b0_values == 0)
		return errbuf_set(err, -EINVAL, "inputs.dwi", "cannot estimate the fibre response: "
				  "no voxel in the %lldx%lldx%lld cube at the volume's centre has "
				  "FA > %g (give model.response, or check the DWI and its bvecs)",
				  (long long)(hi[0] - lo[0] + 1), (long long)(hi[1] - lo[1] + 1),
				  (long long)(hi[2] - lo[2] + 1), fa_threshold);
	ret->evals[0] = sums.l1 / (double)sums.voxels;
	ret->evals[1] = ret->evals[2] = sums.l2 / (double)sums.voxels;
	ret->s0 = sums.b0 / (double)sums.b0_values;
	ret->voxels = sums.voxels;
	return 0;
}

/* ---- the model ------------------------------------------------------------ */

/* The response's signal on the table, with its axis along z (DIPY's
 * estimate_response). */
static double response_signal(const struct csd_response *r, double b, const double *v)
{
	return r->s0 * exp(-b * (r->evals[2] * v[0] * v[0] + r->evals[1] * v[1] * v[1] +
				 r->evals[0] * v[2] * v[2]));
}

/* Rotational harmonics of the response: its zonal SH coefficients (least
 * squares on the DW directions) over the zonal harmonics at the pole. */
static int response_rh(const struct csd_model *m, const struct csd_selection *sel,
		       const struct csd_response *r, const double *b_dwi, double *rh, int order)
{
	const struct gradients *g = sel->g;
	size_t n = m->n_dwi, row = 0, rows = n > (size_t)m->ncoef ? n : (size_t)m->ncoef;
	double *a = malloc(sizeof(double) * n * (size_t)m->ncoef);
	double *s = calloc(rows, sizeof(double));   /* the signal in, the coefficients out */
	double *singular = malloc(sizeof(double) * (size_t)m->ncoef);
	lapack_int info = -1, rank;

	if (a && s && singular) {
		memcpy(a, b_dwi, sizeof(double) * n * (size_t)m->ncoef);
		for (size_t i = 0; i < g->n; i++)
			if (!g->is_b0[i])
				s[row++] = response_signal(r, g->bvals[i], &g->bvecs[3 * i]);
		/* Minimum-norm least squares by SVD, as numpy's lstsq (rcond
		 * -1: machine precision) that DIPY calls: with fewer
		 * directions than coefficients too. */
		info = LAPACKE_dgelsd(LAPACK_ROW_MAJOR, (lapack_int)n, m->ncoef, 1, a, m->ncoef, s,
				      1, singular, -1.0, &rank);
		for (int l = 0; info == 0 && l <= order; l += 2)
			rh[l / 2] = s[l * (l - 1) / 2 + l] / sqrt((2.0 * l + 1.0) / (4.0 * M_PI));
	}
	free(a);
	free(s);
	free(singular);
	return info == 0 ? 0 : -EINVAL;
}

static int reg_directions(double **ret, size_t *n_ret)
{
	struct sphere full = { 0 };
	double *dirs;
	size_t n = 0;

	if (sphere_builtin(CSD_REG_SPHERE, &full, NULL) < 0)
		return -ENOMEM;
	dirs = malloc(sizeof(double) * 3 * (size_t)full.nv);
	for (int j = 0; dirs && j < full.nv; j++) {
		const float *v = &full.vertices[3 * j];
		bool antipode_kept = false;

		for (size_t k = 0; k < n && !antipode_kept; k++)
			antipode_kept = v[0] * dirs[3 * k] + v[1] * dirs[3 * k + 1] +
					v[2] * dirs[3 * k + 2] < -1.0 + 1e-5;
		if (antipode_kept)
			continue;
		for (int c = 0; c < 3; c++)
			dirs[3 * n + (size_t)c] = v[c];
		n++;
	}
	sphere_free(&full);
	if (!dirs)
		return -ENOMEM;
	*ret = dirs;
	*n_ret = n;
	return 0;
}

static bool positive_definite(const double *p, int n)
{
	double *copy = malloc(sizeof(double) * (size_t)n * (size_t)n);
	bool ok;

	if (!copy)
		return false;
	memcpy(copy, p, sizeof(double) * (size_t)n * (size_t)n);
	ok = LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'L', n, copy, n) == 0;
	free(copy);
	return ok;
}

/* X = B_dwi diag(rh[l/2]) and P = X^T X. */
static void build_normal_equations(struct csd_model *m, const double *b_dwi, const double *rh)
{
	int nc = m->ncoef;

	for (size_t i = 0; i < m->n_dwi; i++)
		for (int l = 0, c = 0; c < nc; l += 2)
			for (int k = 0; k <= 2 * l; k++, c++)
				m->x[i * (size_t)nc + (size_t)c] = b_dwi[i * (size_t)nc + (size_t)c] *
								   rh[l / 2];
	for (int r = 0; r < nc; r++)
		for (int c = 0; c < nc; c++) {
			double s = 0.0;
			for (size_t i = 0; i < m->n_dwi; i++)
				s += m->x[i * (size_t)nc + (size_t)r] * m->x[i * (size_t)nc + (size_t)c];
			m->p[r * nc + c] = s;
		}
	if (!positive_definite(m->p, nc))
		for (int r = 0; r < nc; r++)
			m->p[r * nc + r] += CSD_RIDGE;
}

static int check_response(const struct csd_response *r, struct errbuf *err)
{
	if (!(r->s0 > 0.0) || !isfinite(r->s0) || !(r->evals[0] > 0.0) ||
	    !(r->evals[1] > 0.0) || !isfinite(r->evals[0]) || !isfinite(r->evals[1]))
		return errbuf_set(err, -EINVAL, "model.response", "needs positive finite "
				  "eigenvalues and S0, got evals (%g, %g, %g), S0 %g",
				  r->evals[0], r->evals[1], r->evals[2], r->s0);
	return 0;
}

static int gather_dwi(struct csd_model *m, const struct csd_selection *sel, double **dirs)
{
	const struct gradients *g = sel->g;

	m->dwi_index = malloc(sizeof(size_t) * g->n);
	*dirs = malloc(sizeof(double) * 3 * g->n);
	if (!m->dwi_index || !*dirs)
		return -ENOMEM;
	for (size_t i = 0; i < g->n; i++)
		if (!g->is_b0[i]) {
			memcpy(&(*dirs)[3 * m->n_dwi], &g->bvecs[3 * i], 3 * sizeof(double));
			m->dwi_index[m->n_dwi++] = sel->volumes[i];
		}
	return 0;
}

static int alloc_model(struct csd_model *m)
{
	size_t nc = (size_t)m->ncoef;

	m->x = malloc(sizeof(double) * m->n_dwi * nc);
	m->p = malloc(sizeof(double) * nc * nc);
	m->b_reg = malloc(sizeof(double) * m->n_reg * nc);
	return m->x && m->p && m->b_reg ? 0 : -ENOMEM;
}

int csd_model_init(struct csd_model *m, const struct csd_selection *sel,
		   const struct csd_response *response, const struct csd_params *p,
		   struct errbuf *err)
{
	double rh[SH_MAX_ORDER / 2 + 1] = { 0 };
	double *dwi_dirs = NULL, *reg_dirs = NULL, *b_dwi = NULL;
	int r;

	memset(m, 0, sizeof(*m));
	m->ncoef = sh_ncoef(p->sh_order);
	m->ncoef_low = m->ncoef < CSD_LOW_ORDER_COEFS ? m->ncoef : CSD_LOW_ORDER_COEFS;
	m->tau = p->tau;
	m->max_iterations = p->max_iterations;
	r = check_response(response, err);
	if (r < 0)
		return r;
	/* Fewer directions than coefficients are fitted as DIPY and MRtrix3
	 * fit them: super-resolved, the non-negativity constraint supplying
	 * what the directions do not (P is then singular and gets DIPY's
	 * ridge, build_normal_equations). */
	r = gather_dwi(m, sel, &dwi_dirs);
	if (r == 0)
		r = reg_directions(&reg_dirs, &m->n_reg);
	if (r == 0)
		r = alloc_model(m);
	if (r == 0) {
		b_dwi = malloc(sizeof(double) * m->n_dwi * (size_t)m->ncoef);
		r = b_dwi ? 0 : -ENOMEM;
	}
	if (r == 0) {
		sh_matrix(SH_DESCOTEAUX07_LEGACY, p->sh_order, dwi_dirs, m->n_dwi, b_dwi);
		sh_matrix(SH_DESCOTEAUX07_LEGACY, p->sh_order, reg_dirs, m->n_reg, m->b_reg);
		if (response_rh(m, sel, response, b_dwi, rh, p->sh_order) < 0)
			r = errbuf_set(err, -EINVAL, "inputs.bvecs", "the diffusion-weighted "
				       "directions do not determine order-%d harmonics", p->sh_order);
	}
	if (r == 0) {
		/* Scaled as DIPY (and MRtrix) do, for the numbers of coefficients
		 * and of constraint directions. */
		double scale = p->lambda * m->ncoef * rh[0] /
			       (sqrt((double)m->n_reg) * sqrt(CSD_REG_FULL_VERTICES));
		for (size_t i = 0; i < m->n_reg * (size_t)m->ncoef; i++)
			m->b_reg[i] *= scale;
		build_normal_equations(m, b_dwi, rh);
	}
	free(dwi_dirs);
	free(reg_dirs);
	free(b_dwi);
	if (r == -ENOMEM)
		errbuf_set(err, r, "", "out of memory");
	if (r < 0)
		csd_model_free(m);
	return r;
}

void csd_model_free(struct csd_model *m)
{
	free(m->dwi_index);
	free(m->x);
	free(m->p);
	free(m->b_reg);
	memset(m, 0, sizeof(*m));
}

/* ---- one voxel ------------------------------------------------------------- */

size_t csd_scratch_size(const struct csd_model *m)
{
	size_t nc = (size_t)m->ncoef;

	/* z, the constrained system, its factor, the FOD on the constraint
	 * directions, and two membership sets (bytes, stored in the tail). */
	return nc + 2 * nc * nc + m->n_reg + (2 * m->n_reg + sizeof(double) - 1) / sizeof(double);
}

/* Factors a copy of q (q is kept for the next update) and solves for f. */
static bool solve(const struct csd_model *m, const double *q, double *factor, const double *z,
		  double *f)
{
	int nc = m->ncoef;

	memcpy(factor, q, sizeof(double) * (size_t)nc * (size_t)nc);
	memcpy(f, z, sizeof(double) * (size_t)nc);
	return LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'L', nc, factor, nc) == 0 &&
	       LAPACKE_dpotrs_work(LAPACK_COL_MAJOR, 'L', nc, 1, factor, nc, f, nc) == 0;
}

/* Marks the constraint directions whose FOD (from the first ncoef
 * coefficients) is below threshold; returns how many. */
static size_t mark_small(const struct csd_model *m, const double *f, int ncoef,
			 double threshold, double *fod, unsigned char *small)
{
	size_t count = 0;

	for (size_t j = 0; j < m->n_reg; j++) {
		fod[j] = dot(&m->b_reg[j * (size_t)m->ncoef], f, ncoef);
		small[j] = fod[j] < threshold;
		count += small[j];
	}
	return count;
}

/* q (lower triangle) += sign * h h^T */
static void rank_one_update(double *q, const double *h, int nc, double sign)
{
	for (int c = 0; c < nc; c++) {
		double hc = sign * h[c];

		for (int r = c; r < nc; r++)
			q[c * nc + r] += h[r] * hc;
	}
}

/* Moves q = P + H^T H from the rows in `held` to the rows in `small`: the
 * set changes by a few rows between iterations, so updating costs far less
 * than rebuilding from P. */
static void update_system(const struct csd_model *m, const unsigned char *small,
			  unsigned char *held, double *q)
{
	for (size_t j = 0; j < m->n_reg; j++) {
		if (small[j] == held[j])
			continue;
		rank_one_update(q, &m->b_reg[j * (size_t)m->ncoef], m->ncoef, small[j] ? 1.0 : -1.0);
		held[j] = small[j];
	}
}

int csd_fit(const struct csd_model *m, const float *signal, double *scratch, double *coef)
{
	size_t nc = (size_t)m->ncoef;
	double *z = scratch, *q = z + nc, *factor = q + nc * nc, *fod = factor + nc * nc;
	unsigned char *small = (unsigned char *)(fod + m->n_reg), *held = small + m->n_reg;
	double threshold;

	memset(z, 0, sizeof(double) * nc);
	for (size_t i = 0; i < m->n_dwi; i++) {
		double s = signal[m->dwi_index[i]];
		for (size_t c = 0; c < nc; c++)
			z[c] += m->x[i * nc + c] * s;
	}
	memcpy(q, m->p, sizeof(double) * nc * nc);
	if (!solve(m, q, factor, z, coef))
		goto fail;
	threshold = m->b_reg[0] * coef[0] * m->tau;
	if (mark_small(m, coef, m->ncoef_low, threshold, fod, small) == 0 &&
	    mark_small(m, coef, m->ncoef, threshold, fod, small) == 0)
		return 0;
	memset(held, 0, m->n_reg);
	for (int it = 1; it <= m->max_iterations; it++) {
		update_system(m, small, held, q);
		if (!solve(m, q, factor, z, coef))
			goto fail;
		mark_small(m, coef, m->ncoef, threshold, fod, small);
		if (memcmp(held, small, m->n_reg) == 0)
			return it;
	}
	return m->max_iterations;
fail:
	memset(coef, 0, sizeof(double) * nc);
	return -1;
}
