/* SPDX-License-Identifier: MIT */
/*
 * csd: constrained spherical deconvolution (Tournier 2007) of one voxel's
 * diffusion signal into fibre-ODF SH coefficients, as DIPY's
 * ConstrainedSphericalDeconvModel computes them, and the single-fibre
 * response it deconvolves with (DIPY's auto_response_ssst).
 *
 * Owns the per-table matrices: X = B_dwi scaled by the response's rotational
 * harmonics, P = X^T X, and the lambda-scaled regularisation basis on the
 * 181-direction hemisphere of symmetric362. Coefficients are in DIPY's
 * descoteaux07 legacy basis along the voxel axes (the bvecs' frame).
 * Pure maths: no I/O, no logging; csd_fit is thread-safe on a const model
 * with per-thread scratch.
 */
#ifndef TRACTD_CSD_H
#define TRACTD_CSD_H

#include <stddef.h>

#include "models/dti.h"
#include "base/errbuf.h"
#include "models/gradients.h"
#include "formats/volume.h"

/* An axially symmetric tensor (evals[0] along the axis, evals[1] == evals[2]
 * across) and the b=0 signal it is scaled to. */
struct csd_response {
	double evals[3];
	double s0;
	size_t voxels;            /* voxels averaged (0 when given by the job) */
};

struct csd_params {
	int sh_order;             /* even, 2..SH_MAX_ORDER */
	double lambda;            /* positivity constraint weight, DIPY lambda_ */
	double tau;               /* fraction of the mean FOD amplitude taken as zero */
	int max_iterations;       /* DIPY's convergence */
};

struct csd_model {
	int ncoef;
	int ncoef_low;            /* coefficients of order <= 4: the first guess's constraint */
	size_t n_dwi;             /* diffusion-weighted volumes deconvolved */
	size_t *dwi_index;        /* their positions in the series */
	double *x;                /* n_dwi x ncoef, row-major */
	double *p;                /* ncoef x ncoef: X^T X (+ 1e-5 I when not positive definite) */
	size_t n_reg;
	double *b_reg;            /* n_reg x ncoef, row-major, lambda-scaled */
	double tau;
	int max_iterations;
};

/* Which volumes of the series a model uses (GPUStreamlines deconvolves
 * multi-shell data with the b0s and the lowest shell only): volumes[i] is
 * the series position of the table's volume i. */
struct csd_selection {
	const struct gradients *g;     /* the selected volumes' table */
	const size_t *volumes;         /* g->n positions in the series */
	size_t series_length;          /* the DWI's volumes */
};

/* auto_response_ssst: a DTI fit (dti, built on sel->g) in the cube of half-width
 * roi_radius voxels at the volume's centre (shrunk to fit), the voxels with
 * FA > fa_threshold, response evals [mean l1, mean l2, mean l2] and s0 the
 * mean of their b0 signals. -EINVAL with field "inputs.dwi" when no voxel
 * qualifies. */
int csd_auto_response(const struct volume *dwi, const struct csd_selection *sel,
		      const struct dti_model *dti, int roi_radius, double fa_threshold,
		      struct csd_response *ret, struct errbuf *err);

/* Builds the model for the selected volumes. -EINVAL with field "model.sh_order"
 * when there are fewer diffusion-weighted directions than coefficients, with
 * field "model.response" for an unusable response; -ENOMEM. */
int csd_model_init(struct csd_model *m, const struct csd_selection *sel,
		   const struct csd_response *response, const struct csd_params *p,
		   struct errbuf *err);
void csd_model_free(struct csd_model *m);

/* Doubles of scratch one csd_fit call needs. */
size_t csd_scratch_size(const struct csd_model *m);

/* Deconvolves one voxel (signal holds all volumes of the series, contiguous)
 * into coef[ncoef]. Returns the iterations used, or -1 when the system could
 * not be solved (coef is then zero). */
int csd_fit(const struct csd_model *m, const float *signal, double *scratch, double *coef);

#endif
