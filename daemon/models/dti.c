/* SPDX-License-Identifier: MIT */
/*
 * dti: see dti.h. LAPACK is called through the column-major *_work entry
 * points with caller-owned scratch, so a fit allocates nothing.
 */
#include "models/dti.h"

#include <errno.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DTI_PARAMS 7
#define DTI_MIN_SIGNAL 1e-4     /* DIPY's MIN_POSITIVE_SIGNAL */
#define DTI_MIN_DIFFUSIVITY_SCALE 1e-6

/* LAPACK's dgels workspace for an n x 7 least-squares problem with one
 * right-hand side, from its own query. */
static lapack_int gels_work_size(size_t n)
{
	double query = 0.0;
	lapack_int rows = (lapack_int)n;

	if (LAPACKE_dgels_work(LAPACK_COL_MAJOR, 'N', rows, DTI_PARAMS, 1, NULL, rows, NULL, rows,
			       &query, -1) != 0)
		return -1;
	return (lapack_int)query;
}

static void fill_design(double *design, const struct gradients *g)
{
	for (size_t i = 0; i < g->n; i++) {
		const double *v = &g->bvecs[3 * i];
		double b = g->bvals[i];
		double *row = &design[DTI_PARAMS * i];

		row[0] = -b * v[0] * v[0];
		row[1] = -2.0 * b * v[0] * v[1];
		row[2] = -b * v[1] * v[1];
		row[3] = -2.0 * b * v[0] * v[2];
		row[4] = -2.0 * b * v[1] * v[2];
		row[5] = -b * v[2] * v[2];
		row[6] = -1.0;
	}
}

/* DIPY floors eigenvalues at tol / -min(design). */
static double min_diffusivity(const double *design, size_t n)
{
	double lowest = 0.0;

	for (size_t i = 0; i < n * DTI_PARAMS; i++)
		lowest = design[i] < lowest ? design[i] : lowest;
	return DTI_MIN_DIFFUSIVITY_SCALE / -lowest;
}

/* The OLS pseudo-inverse, as the least-squares solution of X P = I. */
static int ols_pseudo_inverse(struct dti_model *m)
{
	size_t n = m->n;
	double *a = malloc(sizeof(double) * n * DTI_PARAMS);
	double *identity = calloc(n * n, sizeof(double));
	lapack_int info = -1;

	if (a && identity) {
		for (size_t i = 0; i < n; i++) {
			identity[i * n + i] = 1.0;
			for (size_t j = 0; j < DTI_PARAMS; j++)
				a[j * n + i] = m->design[i * DTI_PARAMS + j];
		}
		info = LAPACKE_dgels(LAPACK_COL_MAJOR, 'N', (lapack_int)n, DTI_PARAMS,
				     (lapack_int)n, a, (lapack_int)n, identity, (lapack_int)n);
		/* Column c of the solution holds P's column c (its first 7 rows). */
		for (size_t c = 0; info == 0 && c < n; c++)
			for (size_t j = 0; j < DTI_PARAMS; j++)
				m->ols_pinv[j * n + c] = identity[c * n + j];
	}
	free(a);
	free(identity);
	return info == 0 ? 0 : -EINVAL;
}

int dti_model_init(struct dti_model *m, const struct gradients *g, struct errbuf *err)
{
	memset(m, 0, sizeof(*m));
	if (g->n < DTI_PARAMS)
		return errbuf_set(err, -EINVAL, "inputs.bvecs", "a tensor has 7 unknowns but the "
				  "gradient table has only %zu volumes", g->n);
	m->n = g->n;
	m->design = malloc(sizeof(double) * g->n * DTI_PARAMS);
	m->ols_pinv = malloc(sizeof(double) * g->n * DTI_PARAMS);
	if (!m->design || !m->ols_pinv) {
		dti_model_free(m);
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	}
	fill_design(m->design, g);
	m->min_diffusivity = min_diffusivity(m->design, g->n);
	m->lwork = gels_work_size(g->n);
	if (ols_pseudo_inverse(m) < 0 || m->lwork < 0) {
		dti_model_free(m);
		return errbuf_set(err, -EINVAL, "inputs.bvecs", "the gradient directions do not "
				  "determine a tensor (they span fewer than 6 independent "
				  "directions, or no b=0 and one b-value only)");
	}
	return 0;
}

void dti_model_free(struct dti_model *m)
{
	free(m->design);
	free(m->ols_pinv);
	memset(m, 0, sizeof(*m));
}

size_t dti_scratch_size(const struct dti_model *m)
{
	return (DTI_PARAMS + 2) * m->n + (size_t)m->lwork;
}

/* Symmetric 3x3 eigen-decomposition, sorted descending as DIPY's
 * decompose_tensor does, eigenvalues floored. */
static int decompose(const double *beta, double min_diff, struct dti_tensor *ret)
{
	/* Column-major upper triangle of [[xx xy xz][xy yy yz][xz yz zz]]. */
	double a[9] = { beta[0], beta[1], beta[3], beta[1], beta[2], beta[4],
			beta[3], beta[4], beta[5] };
	double w[3], work[16];

	if (LAPACKE_dsyev_work(LAPACK_COL_MAJOR, 'V', 'U', 3, a, 3, w, work, 16) != 0)
		return -1;
	for (int k = 0; k < 3; k++) {
		int src = 2 - k;
		ret->evals[k] = w[src] > min_diff ? w[src] : min_diff;
		for (int c = 0; c < 3; c++)
			ret->evecs[k][c] = a[3 * src + c];
	}
	return 0;
}

int dti_fit(const struct dti_model *m, const float *signal, size_t stride, double *scratch,
	    struct dti_tensor *ret)
{
	size_t n = m->n;
	double *a = scratch;                    /* n x 7, column-major */
	double *rhs = a + DTI_PARAMS * n;       /* n */
	double *log_s = rhs + n;                /* n */
	double *work = log_s + n;
	double beta[DTI_PARAMS] = { 0 };

	for (size_t i = 0; i < n; i++) {
		double s = signal[i * stride];
		log_s[i] = log(s > DTI_MIN_SIGNAL ? s : DTI_MIN_SIGNAL);
	}
	for (size_t j = 0; j < DTI_PARAMS; j++)
		for (size_t i = 0; i < n; i++)
			beta[j] += m->ols_pinv[j * n + i] * log_s[i];
	for (size_t i = 0; i < n; i++) {
		const double *row = &m->design[DTI_PARAMS * i];
		double predicted = 0.0, weight;

		for (size_t j = 0; j < DTI_PARAMS; j++)
			predicted += row[j] * beta[j];
		weight = exp(predicted);
		for (size_t j = 0; j < DTI_PARAMS; j++)
			a[j * n + i] = weight * row[j];
		rhs[i] = weight * log_s[i];
	}
	if (LAPACKE_dgels_work(LAPACK_COL_MAJOR, 'N', (lapack_int)n, DTI_PARAMS, 1, a,
			       (lapack_int)n, rhs, (lapack_int)n, work, m->lwork) != 0)
		return -1;
	return decompose(rhs, m->min_diffusivity, ret);
}

double dti_fa(const double evals[3])
{
	double d01 = evals[0] - evals[1], d12 = evals[1] - evals[2], d20 = evals[2] - evals[0];
	double sum_sq = evals[0] * evals[0] + evals[1] * evals[1] + evals[2] * evals[2];

	if (sum_sq == 0.0)
		return 0.0;
	return sqrt(0.5 * (d01 * d01 + d12 * d12 + d20 * d20) / sum_sq);
}

double dti_md(const double evals[3])
{
	return (evals[0] + evals[1] + evals[2]) / 3.0;
}
