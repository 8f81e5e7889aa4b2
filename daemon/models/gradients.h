/* SPDX-License-Identifier: MIT */
/*
 * gradients: the b-value / b-vector table of a DWI, read from FSL-style text
 * files or taken from arrays, validated, and grouped into shells.
 *
 * Owns the table's arrays. Files are read as DIPY's read_bvals_bvecs reads
 * them: bvals one row of n numbers or one column; bvecs 3 rows of n numbers
 * or n rows of 3 (n rows of 3 when both fit); numbers separated by spaces,
 * tabs or commas; '#' starts a comment.
 *
 * Frame: a b-vector is taken along the image's voxel axes (i, j, k), exactly
 * as DIPY does. No x-flip is applied for images whose affine has a positive
 * determinant, although FSL's convention would call for one: data prepared
 * for DIPY (and GPUStreamlines) track the same here. Does not log.
 */
#ifndef TRACTD_GRADIENTS_H
#define TRACTD_GRADIENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"

#define GRADIENTS_B0_THRESHOLD 50.0   /* DIPY's default: bval <= 50 is a b0 */

struct gradients {
	size_t n;           /* volumes */
	double *bvals;      /* n, s/mm^2 */
	double *bvecs;      /* 3*n, unit length for non-b0 volumes (normalised); as read for b0s */
	bool *is_b0;        /* n */
	size_t n_b0;
};

/* Reads the two text files and validates them against n_volumes (the DWI's
 * 4th dimension): every number finite, b-values not negative, the same count
 * in both files and the DWI, each non-b0 vector of norm 1 within 0.01 (DIPY's
 * atol), at least one b0 and at least 6 diffusion-weighted volumes (DTI needs
 * them), files not empty and at most 1 MiB. Errors name field_bvals or
 * field_bvecs. Returns 0, -EINVAL, -ENOENT, -EIO or -ENOMEM; *ret is written
 * only on success. */
int gradients_load(const char *bvals_path, const char *bvecs_path, int64_t n_volumes,
		   const char *field_bvals, const char *field_bvecs,
		   struct gradients *ret, struct errbuf *err);

/* One of the two tables, already open: read from its start through fd
 * only (never closed here); path names it in messages, field in errors. */
struct gradients_file {
	int fd;
	const char *path;
	const char *field;
};

/* gradients_load on open files. Messages give the line and value of a
 * number that does not parse, never the text itself. */
int gradients_read(const struct gradients_file *bvals, const struct gradients_file *bvecs,
		   int64_t n_volumes, struct gradients *ret, struct errbuf *err);

/* The same validation on arrays; bvecs is 3*n, volume-major (x, y, z of
 * volume 0, then volume 1...). Errors name "inputs.bvals" or "inputs.bvecs".
 * Returns 0, -EINVAL or -ENOMEM; *ret is written only on success. */
int gradients_from_arrays(const double *bvals, const double *bvecs, size_t n,
			  struct gradients *ret, struct errbuf *err);

/* Writes to out (capacity g->n) the volumes, ascending, of the b0s and of the
 * lowest shell, and returns their count. Shells are DIPY's
 * unique_bvals_magnitude groups: b-values rounded to the order of magnitude
 * below the largest one's (995, 1000 and 1005 are one shell when the largest
 * is 2000), taken over the non-b0 volumes. */
size_t gradients_lowest_shell(const struct gradients *g, size_t *out);

/* Number of distinct shells among the non-b0 volumes, grouped as above. */
size_t gradients_shell_count(const struct gradients *g);

/* Frees the arrays and zeroes *g; accepts a zeroed or freed table. */
void gradients_free(struct gradients *g);

#endif
