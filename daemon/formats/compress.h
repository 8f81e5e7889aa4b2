/* SPDX-License-Identifier: MIT */
/*
 * compress: lossy streamline compression by linearisation (Presseau et al.
 * 2015), the algorithm of DIPY's compress_streamlines. Owns nothing but the
 * arithmetic: points stay in voxel coordinates and distances are measured in
 * mm through the grid's voxel-to-RAS affine, so the points kept are those
 * DIPY keeps from the same streamline in RAS+ mm. No I/O, no logging.
 */
#ifndef TRACTD_COMPRESS_H
#define TRACTD_COMPRESS_H

#include <stdint.h>

#define COMPRESS_DEFAULT_TOLERANCE_MM 0.01
#define COMPRESS_DEFAULT_MAX_SEGMENT_MM 10.0

struct compress_params {
	double tolerance_mm;      /* largest distance of a dropped point to the polyline */
	double max_segment_mm;    /* longest segment made by dropping points */
	double linear[3][3];      /* the affine's linear part: voxel steps to mm */
};

/* Fills p from the tolerances and a 4x4 voxel-to-RAS affine (its translation
 * cancels in every distance). */
void compress_params_init(struct compress_params *p, double tolerance_mm,
			  double max_segment_mm, const double affine[4][4]);

/* Compresses the n points of vox (3 * n floats, voxel coordinates). Writes the
 * indices of the kept points, in order, to keep (room for n) when it is not
 * NULL, and the kept points themselves to out (room for 3 * n floats, not
 * overlapping vox) when it is not NULL. Returns the number kept: n when
 * n <= 2, else at least 2 (the ends are always kept). */
uint32_t compress_streamline(const struct compress_params *p, const float *vox, uint32_t n,
			     uint32_t *keep, float *out);

#endif
