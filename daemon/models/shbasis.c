/* SPDX-License-Identifier: MIT */
/*
 * The four bases are built from the complex harmonics as scipy's sph_harm
 * defines them (Condon-Shortley phase, orthonormal on the sphere). With
 * Ybar(l, m) = N(l, m) P(l, m)(cos theta) for m >= 0, so that
 * Y(l, m) = Ybar(l, m) e^{i m phi} and Y(l, -m) = (-1)^m conj(Y(l, m)):
 *
 *                         m < 0                              m > 0
 *   descoteaux07_legacy   sqrt2 Ybar(l,|m|) cos(|m| phi)     sqrt2 Ybar(l,m) sin(m phi)
 *   descoteaux07          (-1)^m of the legacy value         as legacy
 *   tournier07            sqrt2 Ybar(l,|m|) sin(|m| phi)     sqrt2 Ybar(l,m) cos(m phi)
 *   tournier07_legacy     tournier07 without the sqrt2
 *
 * and Ybar(l, 0) for m = 0 in all four. The normalised Legendre functions come
 * from the usual three-term recurrence in l, which keeps every intermediate
 * of order one instead of forming factorials.
 */
#include "models/shbasis.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>

static const char *const basis_names[] = {
	[SH_DESCOTEAUX07_LEGACY] = "descoteaux07_legacy",
	[SH_DESCOTEAUX07] = "descoteaux07",
	[SH_TOURNIER07] = "tournier07",
	[SH_TOURNIER07_LEGACY] = "tournier07_legacy",
};

#define N_BASES ((int)(sizeof(basis_names) / sizeof(basis_names[0])))

int sh_basis_from_name(const char *name, enum sh_basis *ret)
{
	for (int b = 0; name && b < N_BASES; b++)
		if (strcmp(name, basis_names[b]) == 0) {
			*ret = (enum sh_basis)b;
			return 0;
		}
	return -EINVAL;
}

const char *sh_basis_name(enum sh_basis basis)
{
	return basis_names[basis];
}

int sh_ncoef(int order)
{
	return (order + 1) * (order + 2) / 2;
}

int sh_order_from_ncoef(int64_t ncoef)
{
	double estimate;
	int64_t order;

	if (ncoef < 1)
		return -1;
	/* Solves (o+1)(o+2)/2 = ncoef in floating point, then checks the
	 * neighbouring even orders exactly; orders beyond INT_MAX cannot be
	 * returned and their products would overflow. */
	estimate = (sqrt(8.0 * (double)ncoef + 1.0) - 3.0) / 2.0;
	if (estimate > (double)INT_MAX)
		return -1;
	order = (int64_t)llround(estimate);
	for (int64_t o = order - 2; o <= order + 2; o++)
		if (o >= 0 && o % 2 == 0 && (o + 1) * (o + 2) / 2 == ncoef)
			return (int)o;
	return -1;
}

/* legendre[l][m] = N(l, m) P(l, m)(cos theta) for 0 <= m <= l <= order. */
static void normalised_legendre(int order, double cos_theta, double sin_theta,
				double legendre[SH_MAX_ORDER + 1][SH_MAX_ORDER + 1])
{
	legendre[0][0] = sqrt(1.0 / (4.0 * M_PI));
	for (int m = 1; m <= order; m++)
		legendre[m][m] = -sqrt((2.0 * m + 1.0) / (2.0 * m)) * sin_theta *
				 legendre[m - 1][m - 1];
	for (int m = 0; m < order; m++) {
		legendre[m + 1][m] = sqrt(2.0 * m + 3.0) * cos_theta * legendre[m][m];
		for (int l = m + 2; l <= order; l++) {
			double a = sqrt((4.0 * l * l - 1.0) / ((double)l * l - (double)m * m));
			double b = sqrt(((l - 1.0) * (l - 1.0) - (double)m * m) /
					(4.0 * (l - 1.0) * (l - 1.0) - 1.0));

			legendre[l][m] = a * (cos_theta * legendre[l - 1][m] - b * legendre[l - 2][m]);
		}
	}
}

void sh_eval(enum sh_basis basis, int order, const double dir[3], double *row)
{
	double legendre[SH_MAX_ORDER + 1][SH_MAX_ORDER + 1];
	double r = sqrt(dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2]);
	double rho = hypot(dir[0], dir[1]);
	double cos_theta = r > 0 ? dir[2] / r : 1.0;
	double sin_theta = r > 0 ? rho / r : 0.0;
	double phi = atan2(dir[1], dir[0]);
	double scale = basis == SH_TOURNIER07_LEGACY ? 1.0 : M_SQRT2;
	int k = 0;

	normalised_legendre(order, cos_theta, sin_theta, legendre);
	for (int l = 0; l <= order; l += 2)
		for (int m = -l; m <= l; m++, k++) {
			int am = m < 0 ? -m : m;
			double ybar = legendre[l][am];

			if (m == 0) {
				row[k] = ybar;
				continue;
			}
			switch (basis) {
			case SH_DESCOTEAUX07_LEGACY:
			case SH_DESCOTEAUX07:
				if (m > 0)
					row[k] = scale * ybar * sin(am * phi);
				else
					row[k] = (basis == SH_DESCOTEAUX07 && am % 2 ? -scale : scale) *
						 ybar * cos(am * phi);
				break;
			case SH_TOURNIER07:
			case SH_TOURNIER07_LEGACY:
				row[k] = scale * ybar * (m > 0 ? cos(am * phi) : sin(am * phi));
				break;
			}
		}
}

void sh_matrix(enum sh_basis basis, int order, const double *dirs, size_t n, double *out)
{
	size_t ncoef = (size_t)sh_ncoef(order);

	for (size_t i = 0; i < n; i++)
		sh_eval(basis, order, &dirs[3 * i], &out[i * ncoef]);
}
