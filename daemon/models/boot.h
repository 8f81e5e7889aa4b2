/* SPDX-License-Identifier: MIT */
/*
 * boot: the host-side matrices of the residual-bootstrap direction getter
 * (DIPY 1.6's BootPmfGen over an OpdtModel or a CsaOdfModel), built once per
 * gradient table and sphere and then uploaded to the GPU.
 *
 * Owns the hat matrix's factor, the leverages, the model's fit matrices and
 * the sampling matrix, all in DIPY's legacy descoteaux07 basis along the
 * voxel axes (the bvecs' frame), in double. Values equal DIPY's shm.hat,
 * shm.lcr_matrix, OpdtModel/CsaOdfModel._fit_matrix and sampling_matrix to
 * rounding. Pure maths: no I/O, no logging.
 *
 * The residual matrix R = lcr_matrix(H) is not stored. DIPY builds
 *     R0 = diag(1 / sqrt(1 - H_jj)) (I - H),   R = R0 - 1 mean_rows(R0),
 * so for a signal d, with h = H d:
 *     R d = r - mean(r),   r_j = (d_j - h_j) * inv_leverage[j].
 * The GPU computes h = hat_u (hat_u^T d) and then r that way: O(n nc) per
 * voxel instead of the O(n^2) of R and H.
 */
#ifndef TRACTD_BOOT_H
#define TRACTD_BOOT_H

#include <stddef.h>

#include "base/errbuf.h"
#include "models/sphere.h"

enum boot_model {
	BOOT_MODEL_OPDT,        /* DIPY OpdtModel */
	BOOT_MODEL_CSA,         /* DIPY CsaOdfModel */
};

struct boot_params {
	enum boot_model model;
	int sh_order;           /* even, 2..12 */
	double sh_lambda;       /* DIPY's `smooth`, >= 0 (default 0.006) */
};

struct boot_matrices {
	int n_dwi;              /* hr: diffusion-weighted directions */
	int n_coef;             /* nc = (L+1)(L+2)/2 */
	int nv;                 /* sphere vertices */
	double *hat_u;          /* n_dwi x n_coef row-major: U of the thin SVD of B,
				 * so H = U U^T (DIPY shm.hat) */
	double *inv_leverage;   /* n_dwi: 1/sqrt(1 - H[j][j]) */
	double *fit_q;          /* n_coef x n_dwi (DIPY's _fit_matrix): OPDT delta_q =
				 * 4 diag(F) invB; CSA diag(F L) invB / (8 pi) */
	double *fit_b;          /* n_coef x n_dwi: OPDT delta_b = diag(F L) invB;
				 * CSA all zero */
	double *sampling;       /* nv x n_coef: real_sh_descoteaux(L, legacy) at the
				 * sphere's vertices (DIPY sampling_matrix) */
};

/* The GPU evaluates, for a normalised signal d of the n_dwi volumes,
 *     OPDT: c = fit_q . (-ln d (1.5 + ln d) d) - fit_b . d
 *     CSA:  c = fit_q . ln(-ln(clamp(d, 0.001, 0.999))), then c[0] = 0.5/sqrt(pi)
 * and the ODF sampling . c. B is the basis at dirs, L_j = -l(l+1), F_j = P_l(0)
 * and invB the first n_dwi columns of pinv([B; diag(sqrt(sh_lambda) L)])
 * (DIPY's smooth_pinv). CSA has one matrix (tracking-reference.md section 3.2
 * lists its delta_b as equal to delta_q, but the CSA formula never reads it),
 * so its fit_b is zero and a shader may evaluate both models alike. */
#define BOOT_CSA_MIN_SIGNAL 0.001
#define BOOT_CSA_MAX_SIGNAL 0.999
#define BOOT_MIN_ORDER 2
#define BOOT_MAX_ORDER 12
#define BOOT_DEFAULT_SH_LAMBDA 0.006
/* A direction whose leverage H_jj is this close to 1 is fitted exactly: its
 * residual carries no information and 1/sqrt(1 - H_jj) blows up. */
#define BOOT_MAX_LEVERAGE (1.0 - 1e-12)

/* dirs: n_dwi unit gradient directions (xyz interleaved, along the voxel axes
 * as DIPY's gtab.gradients of the non-b0 volumes; normalised here). Fills
 * *ret (written only on success). Returns 0; -EINVAL with field
 * "model.sh_order" for an odd or out-of-range order, for n_dwi <= n_coef and
 * for a direction of leverage >= BOOT_MAX_LEVERAGE, with "model.sh_lambda"
 * for a negative or non-finite lambda, "model.name" for an unknown model,
 * "inputs.bvecs" when the directions do not determine the harmonics (B
 * rank-deficient) or are too many; -EIO when LAPACK fails; -ENOMEM. */
int boot_matrices_build(const double *dirs, size_t n_dwi, const struct sphere *s,
			const struct boot_params *p, struct boot_matrices *ret,
			struct errbuf *err);

/* Frees everything and zeroes *m; accepts zeroed or freed matrices. */
void boot_matrices_free(struct boot_matrices *m);

#endif
