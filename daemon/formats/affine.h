/* SPDX-License-Identifier: MIT */
/*
 * affine: 4x4 voxel<->world transforms (row-major double[4][4], last row 0 0 0 1).
 * Pure functions, no allocation, no logging.
 */
#ifndef TRACTD_AFFINE_H
#define TRACTD_AFFINE_H

/* out = inverse of a. Returns 0, or -EINVAL when a is singular (|det| < 1e-12). */
int affine_invert(const double a[4][4], double out[4][4]);

/* out = a * (in, 1), the first three components. in and out may alias. */
void affine_apply(const double a[4][4], const double in[3], double out[3]);

/* Column norms of the 3x3 part: the voxel sizes in mm. */
void affine_voxel_sizes(const double a[4][4], double out[3]);

/* Orientation codes as nibabel's aff2axcodes(io_orientation(a)): for each voxel
 * axis the world axis it is closest to after removing scaling and shear (polar
 * decomposition via SVD), written as 'L'/'R', 'P'/'A', 'I'/'S' plus a NUL.
 * Returns 0, or -EINVAL for a degenerate affine. */
int affine_axcodes(const double a[4][4], char out[4]);

#endif
