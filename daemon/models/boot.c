/* SPDX-License-Identifier: MIT */
/*
 * boot: see boot.h. Both decompositions are LAPACK's dgesvd, as numpy's
 * hat and pinv are SVDs: the hat matrix from the thin SVD of B, the smoothed
 * pseudo-inverse from that of the stacked [B; diag(sqrt(lambda) L)], with
 * numpy's singular-value cutoff (1e-15 of the largest).
 */
#include "models/boot.h"

#include <errno.h>
#include <float.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/shbasis.h"

#define BOOT_MAX_DWI 65536          /* keeps every LAPACK dimension an int */
#define BOOT_PINV_RCOND 1e-15       /* numpy.linalg.pinv's default rcond */

static int check_params(size_t n_dwi, const struct sphere *s, const struct boot_params *p,
			struct errbuf *err)
{
	int nc;

	if (p->model != BOOT_MODEL_OPDT && p->model != BOOT_MODEL_CSA)
		return errbuf_set(err, -EINVAL, "model.name", "unknown bootstrap model %d",
				  (int)p->model);
	if (p->sh_order < BOOT_MIN_ORDER || p->sh_order > BOOT_MAX_ORDER || p->sh_order % 2)
		return errbuf_set(err, -EINVAL, "model.sh_order", "boot needs an even sh_order "
				  "from %d to %d, got %d", BOOT_MIN_ORDER, BOOT_MAX_ORDER,
				  p->sh_order);
	if (!isfinite(p->sh_lambda) || p->sh_lambda < 0)
		return errbuf_set(err, -EINVAL, "model.sh_lambda", "must be a finite number "
				  ">= 0, got %g", p->sh_lambda);
	nc = sh_ncoef(p->sh_order);
	if (n_dwi <= (size_t)nc)
		return errbuf_set(err, -EINVAL, "model.sh_order", "boot with sh_order %d fits %d "
				  "coefficients and needs more diffusion-weighted directions than "
				  "that, got %zu", p->sh_order, nc, n_dwi);
	if (n_dwi > BOOT_MAX_DWI)
		return errbuf_set(err, -EINVAL, "inputs.bvecs", "boot takes at most %d "
				  "diffusion-weighted directions, got %zu", BOOT_MAX_DWI, n_dwi);
	if (!s || s->nv <= 0 || !s->vertices)
		return errbuf_set(err, -EINVAL, "tracking.sphere", "the sphere has no vertices");
	return 0;
}

/* P_l(0) for l = 0..order, from Bonnet's recurrence at x = 0:
 * (l + 1) P_{l+1}(0) = -l P_{l-1}(0); odd degrees vanish. */
static void legendre_at_zero(int order, double *p)
{
	p[0] = 1.0;
	if (order >= 1)
		p[1] = 0.0;
	for (int l = 1; l < order; l++)
		p[l + 1] = -l * p[l - 1] / (l + 1);
}

/* Thin SVD of the rows x cols (rows >= cols) row-major a, destroyed: s
 * (cols, descending), u (rows x cols), vt (cols x cols, or NULL when not
 * wanted). */
static int thin_svd(double *a, int rows, int cols, double *s, double *u, double *vt,
		    double *superb)
{
	lapack_int info = LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'S', vt ? 'S' : 'N', rows, cols, a,
					 cols, s, u, cols, vt, cols, superb);

	return info == 0 ? 0 : -EIO;
}

/* Scratch for both SVDs: the stacked matrix, its U, V^T, singular values and
 * LAPACK's superb. */
struct svd_scratch {
	double *a, *u, *vt, *s, *superb;
};

static int scratch_alloc(struct svd_scratch *w, int hr, int nc)
{
	size_t rows = (size_t)hr + (size_t)nc;

	w->a = malloc(rows * (size_t)nc * sizeof(*w->a));
	w->u = malloc(rows * (size_t)nc * sizeof(*w->u));
	w->vt = malloc((size_t)nc * (size_t)nc * sizeof(*w->vt));
	w->s = malloc((size_t)nc * sizeof(*w->s));
	w->superb = malloc((size_t)nc * sizeof(*w->superb));
	return w->a && w->u && w->vt && w->s && w->superb ? 0 : -ENOMEM;
}

static void scratch_free(struct svd_scratch *w)
{
	free(w->a);
	free(w->u);
	free(w->vt);
	free(w->s);
	free(w->superb);
}

static int alloc_matrices(struct boot_matrices *m)
{
	size_t hr = (size_t)m->n_dwi, nc = (size_t)m->n_coef, nv = (size_t)m->nv;

	m->hat_u = malloc(hr * nc * sizeof(*m->hat_u));
	m->inv_leverage = malloc(hr * sizeof(*m->inv_leverage));
	m->fit_q = malloc(nc * hr * sizeof(*m->fit_q));
	m->fit_b = calloc(nc * hr, sizeof(*m->fit_b));
	m->sampling = malloc(nv * nc * sizeof(*m->sampling));
	return m->hat_u && m->inv_leverage && m->fit_q && m->fit_b && m->sampling ? 0 : -ENOMEM;
}

/* hat_u and inv_leverage from B (hr x nc). numpy's hat keeps every column
 * of U even when B is rank-deficient, which makes H depend on LAPACK's
 * arbitrary basis of the null space: such tables are refused instead. */
static int build_hat(struct boot_matrices *m, const double *b, int order,
		     struct svd_scratch *w, struct errbuf *err)
{
	int hr = m->n_dwi, nc = m->n_coef;

	memcpy(w->a, b, (size_t)hr * (size_t)nc * sizeof(*b));
	if (thin_svd(w->a, hr, nc, w->s, m->hat_u, NULL, w->superb) < 0)
		return errbuf_set(err, -EIO, "inputs.bvecs", "LAPACK's SVD of the order-%d "
				  "basis matrix failed", order);
	if (!(w->s[nc - 1] > w->s[0] * hr * DBL_EPSILON))
		return errbuf_set(err, -EINVAL, "inputs.bvecs", "the %d diffusion-weighted "
				  "directions do not determine order-%d harmonics (rank-deficient "
				  "basis matrix); use a lower sh_order or directions spread over "
				  "the sphere", hr, order);
	for (int j = 0; j < hr; j++) {
		const double *row = &m->hat_u[(size_t)j * nc];
		double h = 0.0;

		for (int k = 0; k < nc; k++)
			h += row[k] * row[k];
		if (h >= BOOT_MAX_LEVERAGE)
			return errbuf_set(err, -EINVAL, "model.sh_order", "diffusion-weighted "
					  "direction %d has leverage %.15g at sh_order %d: the fit "
					  "reproduces it exactly and its residual cannot be "
					  "resampled; use a lower sh_order or more directions",
					  j, h, order);
		m->inv_leverage[j] = 1.0 / sqrt(1.0 - h);
	}
	return 0;
}

/* The first hr columns of pinv([B; diag(sqrt(lambda) L)]) = V S^+ U^T, into
 * inv_b (nc x hr). */
static int smooth_pinv(const double *b, const double *lap, double lambda, int hr, int nc,
		       struct svd_scratch *w, double *inv_b)
{
	double root = sqrt(lambda), cutoff;

	memcpy(w->a, b, (size_t)hr * (size_t)nc * sizeof(*b));
	memset(&w->a[(size_t)hr * nc], 0, (size_t)nc * (size_t)nc * sizeof(*w->a));
	for (int k = 0; k < nc; k++)
		w->a[(size_t)(hr + k) * nc + k] = root * lap[k];
	if (thin_svd(w->a, hr + nc, nc, w->s, w->u, w->vt, w->superb) < 0)
		return -EIO;
	/* numpy zeroes the reciprocals of the singular values at or below
	 * rcond times the largest. */
	cutoff = BOOT_PINV_RCOND * w->s[0];
	for (int k = 0; k < nc; k++)
		w->s[k] = w->s[k] > cutoff ? 1.0 / w->s[k] : 0.0;
	for (int i = 0; i < nc; i++)
		for (int j = 0; j < hr; j++) {
			double sum = 0.0;

			for (int k = 0; k < nc; k++)
				sum += w->vt[(size_t)k * nc + i] * w->s[k] * w->u[(size_t)j * nc + k];
			inv_b[(size_t)i * hr + j] = sum;
		}
	return 0;
}

/* DIPY's QballBaseModel: L_j = -l(l+1), F_j = P_l(0), then the model's
 * row scaling of invB (built in fit_q, scaled in place). */
static int build_fit(struct boot_matrices *m, const double *b, const struct boot_params *p,
		     struct svd_scratch *w, struct errbuf *err)
{
	int hr = m->n_dwi, nc = m->n_coef;
	double p0[BOOT_MAX_ORDER + 1], lap[(BOOT_MAX_ORDER + 1) * (BOOT_MAX_ORDER + 2) / 2];
	double f[(BOOT_MAX_ORDER + 1) * (BOOT_MAX_ORDER + 2) / 2];

	legendre_at_zero(p->sh_order, p0);
	for (int l = 0, j = 0; l <= p->sh_order; l += 2)
		for (int mm = -l; mm <= l; mm++, j++) {
			lap[j] = -(double)(l * (l + 1));
			f[j] = p0[l];
		}
	if (smooth_pinv(b, lap, p->sh_lambda, hr, nc, w, m->fit_q) < 0)
		return errbuf_set(err, -EIO, "inputs.bvecs", "LAPACK's SVD of the smoothed "
				  "order-%d basis matrix failed", p->sh_order);
	for (int i = 0; i < nc; i++) {
		double *q = &m->fit_q[(size_t)i * hr];
		double *fb = &m->fit_b[(size_t)i * hr];

		for (int j = 0; j < hr; j++) {
			double inv = q[j];

			/* Same operation order as DIPY's (F * L) * invB. */
			if (p->model == BOOT_MODEL_OPDT) {
				fb[j] = f[i] * lap[i] * inv;
				q[j] = 4 * f[i] * inv;
			} else {
				q[j] = f[i] * lap[i] / (8 * M_PI) * inv;
			}
		}
	}
	return 0;
}

static int build_sampling(struct boot_matrices *m, const struct sphere *s, int order)
{
	double *xyz = malloc(3 * (size_t)s->nv * sizeof(*xyz));

	if (!xyz)
		return -ENOMEM;
	for (size_t i = 0; i < 3 * (size_t)s->nv; i++)
		xyz[i] = s->vertices[i];
	sh_matrix(SH_DESCOTEAUX07_LEGACY, order, xyz, (size_t)s->nv, m->sampling);
	free(xyz);
	return 0;
}

int boot_matrices_build(const double *dirs, size_t n_dwi, const struct sphere *s,
			const struct boot_params *p, struct boot_matrices *ret,
			struct errbuf *err)
{
	struct boot_matrices m = {0};
	struct svd_scratch w = {0};
	double *b = NULL;
	int r = check_params(n_dwi, s, p, err);

	if (r < 0)
		return r;
	m.n_dwi = (int)n_dwi;
	m.n_coef = sh_ncoef(p->sh_order);
	m.nv = s->nv;
	r = alloc_matrices(&m);
	if (r == 0)
		r = scratch_alloc(&w, m.n_dwi, m.n_coef);
	if (r == 0) {
		b = malloc(n_dwi * (size_t)m.n_coef * sizeof(*b));
		r = b ? 0 : -ENOMEM;
	}
	if (r == 0) {
		sh_matrix(SH_DESCOTEAUX07_LEGACY, p->sh_order, dirs, n_dwi, b);
		r = build_hat(&m, b, p->sh_order, &w, err);
	}
	if (r == 0)
		r = build_fit(&m, b, p, &w, err);
	if (r == 0)
		r = build_sampling(&m, s, p->sh_order);
	free(b);
	scratch_free(&w);
	if (r == -ENOMEM)
		errbuf_set(err, r, "", "out of memory");
	if (r < 0) {
		boot_matrices_free(&m);
		return r;
	}
	*ret = m;
	return 0;
}

void boot_matrices_free(struct boot_matrices *m)
{
	free(m->hat_u);
	free(m->inv_leverage);
	free(m->fit_q);
	free(m->fit_b);
	free(m->sampling);
	memset(m, 0, sizeof(*m));
}
