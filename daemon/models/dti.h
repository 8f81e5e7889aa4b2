/* SPDX-License-Identifier: MIT */
/*
 * dti: the diffusion tensor of one voxel by weighted least squares, as DIPY's
 * TensorModel(fit_method="WLS") computes it, and the scalar maps derived
 * from it (FA, MD).
 *
 * Owns the design of one gradient table: the log-linear design matrix
 * -[bxx, 2bxy, byy, 2bxz, 2byz, bzz, 1] and its OLS pseudo-inverse. A fit
 * floors the signal at 1e-4, takes OLS estimates as weights w = exp(X b_ols)
 * and solves the weighted problem min |w (X b - ln S)| by QR; eigenvalues
 * are floored at 1e-6 / max|X| like DIPY's min_diffusivity. Pure maths: no
 * I/O, no logging, thread-safe on a const model with per-thread scratch.
 */
#ifndef TRACTD_DTI_H
#define TRACTD_DTI_H

#include <stddef.h>

#include "base/errbuf.h"
#include "models/gradients.h"

struct dti_model {
	size_t n;                 /* volumes */
	double *design;           /* n x 7, row-major */
	double *ols_pinv;         /* 7 x n, row-major */
	double min_diffusivity;
	int lwork;                /* LAPACK dgels workspace, from its query */
};

struct dti_tensor {
	double evals[3];          /* descending, >= min_diffusivity */
	double evecs[3][3];       /* evecs[k] is the unit eigenvector of evals[k] */
};

/* Builds the model of g. -EINVAL (field "inputs.bvecs") when the directions
 * cannot determine a tensor, -ENOMEM. */
int dti_model_init(struct dti_model *m, const struct gradients *g, struct errbuf *err);
void dti_model_free(struct dti_model *m);

/* Doubles of scratch one dti_fit call needs. */
size_t dti_scratch_size(const struct dti_model *m);

/* Fits the n signal values of one voxel (stride apart in memory) using
 * scratch; returns 0, or -1 when the weighted problem is singular (the caller
 * treats the voxel as unfitted). */
int dti_fit(const struct dti_model *m, const float *signal, size_t stride, double *scratch,
	    struct dti_tensor *ret);

/* Fractional anisotropy; 0 for an all-zero tensor. */
double dti_fa(const double evals[3]);
/* Mean diffusivity. */
double dti_md(const double evals[3]);

#endif
