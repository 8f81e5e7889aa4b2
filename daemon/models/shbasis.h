/* SPDX-License-Identifier: MIT */
/*
 * shbasis: the real symmetric spherical-harmonic bases that SH coefficient
 * images come in, evaluated at directions.
 *
 * Owns the four bases DIPY 1.6 knows (descoteaux07 and tournier07, each legacy
 * or not) and their coefficient order. Values equal DIPY's
 * real_sh_descoteaux_from_index / real_sh_tournier_from_index at the angles
 * cart2sphere gives: theta the polar angle from +z, phi the azimuth from +x.
 * Pure functions: no allocation, no logging.
 */
#ifndef TRACTD_SHBASIS_H
#define TRACTD_SHBASIS_H

#include <stddef.h>
#include <stdint.h>

enum sh_basis {
	SH_DESCOTEAUX07_LEGACY,  /* DIPY's default (legacy=True) "descoteaux07" */
	SH_DESCOTEAUX07,         /* DIPY descoteaux07, legacy=False */
	SH_TOURNIER07,           /* MRtrix3's basis = DIPY tournier07, legacy=False */
	SH_TOURNIER07_LEGACY,    /* DIPY tournier07, legacy=True */
};

#define SH_MAX_ORDER 16

/* "descoteaux07_legacy", "descoteaux07", "tournier07", "tournier07_legacy"
 * -> 0, else -EINVAL. */
int sh_basis_from_name(const char *name, enum sh_basis *ret);
const char *sh_basis_name(enum sh_basis basis);

/* Number of coefficients of an even order: (order+1)(order+2)/2. */
int sh_ncoef(int order);
/* The even order with that many coefficients, or -1 when ncoef is not one.
 * Not capped at SH_MAX_ORDER, so callers can name the order they reject. */
int sh_order_from_ncoef(int64_t ncoef);

/* Basis functions at direction dir (normalised here; the zero vector gives
 * theta = phi = 0) in DIPY's coefficient order: l = 0, 2, ..., order; for
 * each l, m = -l..l. row has sh_ncoef(order) entries. order even,
 * 0..SH_MAX_ORDER. */
void sh_eval(enum sh_basis basis, int order, const double dir[3], double *row);
/* out[n * ncoef], row-major: sh_eval for each of n directions dirs[3*i..]. */
void sh_matrix(enum sh_basis basis, int order, const double *dirs, size_t n, double *out);

#endif
