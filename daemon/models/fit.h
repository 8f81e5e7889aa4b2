/* SPDX-License-Identifier: MIT */
/*
 * fit: the model fits a job needs, over whole volumes, in parallel over
 * voxels: DTI (FA, MD) on the DWI series, the CSD fibre ODF on b0s and the
 * lowest shell (as GPUStreamlines does on multi-shell data), and any SH
 * coefficient volume sampled on the tracking sphere.
 *
 * Owns the worker threads of one call (joined before it returns) and the
 * result volumes it hands back. Reports progress per stage through a
 * callback on the calling thread, which may cancel. Logs each stage's wall
 * time at debug level only (the benchmark reads it); failures go to the
 * caller through errbuf.
 */
#ifndef TRACTD_FIT_H
#define TRACTD_FIT_H

#include <stdbool.h>
#include <stddef.h>

#include "models/csd.h"
#include "base/errbuf.h"
#include "models/gradients.h"
#include "models/shbasis.h"
#include "models/sphere.h"
#include "formats/volume.h"

/* Called about every 0.1 s and at the end of each stage ("dti",
 * "response", "csd", "odf") with the fraction of it done. Returning false
 * cancels: the fit returns -ECANCELED. */
typedef bool fit_progress_fn(void *userdata, const char *stage, double fraction);

struct fit_options {
	int threads;                   /* 0: one per online CPU */
	fit_progress_fn *progress;     /* may be NULL */
	void *userdata;
};

struct fit_params {
	struct csd_params csd;
	double fa_threshold;           /* CSD is fitted where FA >= this (and in the mask) */
	int response_roi_radius;       /* auto_response_ssst roi_radii */
	double response_fa;            /* auto_response_ssst fa_thr */
	bool response_given;           /* use response instead of estimating it */
	struct csd_response response;
};

struct fit_result {
	struct volume fa, md;          /* 3D, 0 outside the mask */
	struct volume sh;              /* CSD coefficients, descoteaux07 legacy, voxel frame */
	struct csd_response response;
	size_t directions;             /* diffusion-weighted directions deconvolved: fewer
					* than sh's coefficients is a super-resolved fit */
	size_t fitted_voxels;          /* voxels deconvolved */
	size_t failed_voxels;          /* of which left at zero: singular systems */
};

/* One sentence for the log on which CSD order f was fitted at and from how
 * many directions, and, with fewer directions than coefficients, that the
 * fit was super-resolved; into buf[len]. false (buf untouched) when f holds
 * no CSD fit. */
bool fit_describe(const struct fit_result *f, char *buf, size_t len);

/* DIPY's defaults: sh_order 8, lambda 1, tau 0.1, 50 iterations,
 * fa_threshold 0.1, roi radius 10, response FA 0.7. */
void fit_default_params(struct fit_params *p);

/* Fits dwi (4D, g->n volumes) inside mask (3D on the same grid, > 0 means
 * in; NULL: everywhere). Errors name the job field at fault; -ECANCELED
 * when progress asked to stop; -ENOMEM. */
int fit_dwi(const struct volume *dwi, const struct gradients *g, const struct volume *mask,
	    const struct fit_params *p, const struct fit_options *o, struct fit_result *ret,
	    struct errbuf *err);
/* The DTI stage of fit_dwi alone: fills ret's fa and md (sh stays empty). */
int fit_tensor(const struct volume *dwi, const struct gradients *g, const struct volume *mask,
	       const struct fit_options *o, struct fit_result *ret, struct errbuf *err);

void fit_result_free(struct fit_result *r);

/* Samples the SH volume sh (basis, even order from its 4th dimension) at the
 * sphere's vertices into odf (same grid, one volume per vertex), clipped at
 * zero. Vertices are directions along the voxel axes; to_sh_frame (NULL:
 * identity) maps them to the frame the coefficients are expressed in. On a
 * mirrored sphere (sphere_mirrored) the first half is sampled and copied to
 * the second: even-order SH takes one value at antipodal directions, and the
 * ODF is then mirrored to the bit (fit_sampled_sh_symmetry). field names sh
 * in errors. */
int fit_sample_sh(const struct volume *sh, enum sh_basis basis, const double to_sh_frame[3][3],
		  const struct sphere *s, const struct fit_options *o, const char *field,
		  struct volume *odf, struct errbuf *err);

/* What an ODF's values at antipodal vertices allow. */
struct odf_symmetry {
	bool symmetric;   /* every voxel's equal to 1e-3 of its maximum, or the
			   * sphere a hemisphere: directions compare by |cos| (DIPY) */
	bool mirrored;    /* every voxel's equal to the bit (a full sphere): a
			   * kernel may read one of each pair (engine.c's
			   * ODF_MIRRORED) */
};

/* The symmetry of an ODF fit_sample_sh samples on s. */
struct odf_symmetry fit_sampled_sh_symmetry(const struct sphere *s);

/* What parts of an ODF checked one by one allow: all that each allows;
 * start from ODF_SYMMETRY_ALL. */
#define ODF_SYMMETRY_ALL ((struct odf_symmetry){ true, true })
void odf_symmetry_and(struct odf_symmetry *all, struct odf_symmetry part);

/* An ODF volume (one volume per vertex of s) made ready to track: values
 * clipped at zero, and its symmetry found. Runs on fit's threads; errors as
 * fit_dwi. */
int fit_prepare_odf(struct volume *odf, const struct sphere *s, const struct fit_options *o,
		    struct odf_symmetry *symmetry, struct errbuf *err);

/* fit_prepare_odf's rule, for a reader that checks an ODF elsewhere (the
 * GPU, engine/odf_transpose.h): a voxel is asymmetric when the largest
 * |difference| of its values at an antipodal pair, after clipping, passes
 * this (a double) times its largest value; the pairs it compares, each
 * once (none on a hemisphere: *first and *second NULL), malloc'd for the
 * caller to free. -ENOMEM. */
#define FIT_ODF_SYMMETRY_TOLERANCE 1e-3
int fit_antipodal_pairs(const struct sphere *s, int **first, int **second, int *n_pairs);

/* The matrix that samples coefficients of the basis and even order at the
 * sphere's vertices (mapped by to_sh_frame as in fit_sample_sh): nc x nv
 * floats, row c holding basis function c at every vertex. NULL when out of
 * memory; free() it. */
float *fit_sh_sampling_matrix(enum sh_basis basis, int order, const double to_sh_frame[3][3],
			      const struct sphere *s);

#endif
