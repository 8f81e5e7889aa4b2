/* SPDX-License-Identifier: MIT */
/* affine: 4x4 voxel<->world transforms and nibabel-compatible orientation codes. */
#include "formats/affine.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include <lapacke.h>

/* numpy.allclose(col, 0) with its default atol: io_orientation's test for an
 * input axis that maps to nothing. */
#define AXIS_ZERO_ATOL 1e-8

static double det3(const double m[4][4])
{
	return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
	       m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
	       m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
}

int affine_invert(const double a[4][4], double out[4][4])
{
	double det = det3(a);
	double inv[4][4] = { { 0 } };

	if (!(fabs(det) >= 1e-12))
		return -EINVAL;
	/* Adjugate of the 3x3 part; indices taken cyclically so that each
	 * cofactor carries its sign without a separate table. */
	for (int r = 0; r < 3; r++) {
		for (int c = 0; c < 3; c++) {
			int r1 = (c + 1) % 3, r2 = (c + 2) % 3;
			int c1 = (r + 1) % 3, c2 = (r + 2) % 3;
			inv[r][c] = (a[r1][c1] * a[r2][c2] - a[r1][c2] * a[r2][c1]) / det;
		}
	}
	for (int r = 0; r < 3; r++)
		inv[r][3] = -(inv[r][0] * a[0][3] + inv[r][1] * a[1][3] + inv[r][2] * a[2][3]);
	inv[3][3] = 1.0;
	memcpy(out, inv, sizeof(inv));
	return 0;
}

void affine_apply(const double a[4][4], const double in[3], double out[3])
{
	double world[3];

	for (int r = 0; r < 3; r++)
		world[r] = a[r][0] * in[0] + a[r][1] * in[1] + a[r][2] * in[2] + a[r][3];
	memcpy(out, world, sizeof(world));
}

void affine_voxel_sizes(const double a[4][4], double out[3])
{
	for (int c = 0; c < 3; c++)
		out[c] = sqrt(a[0][c] * a[0][c] + a[1][c] * a[1][c] + a[2][c] * a[2][c]);
}

/* The 3x3 part with unit columns (zero columns left as they are), row-major. */
static void normalized_linear_part(const double a[4][4], double rs[9])
{
	double zooms[3];

	affine_voxel_sizes(a, zooms);
	for (int c = 0; c < 3; c++) {
		double z = zooms[c] == 0.0 ? 1.0 : zooms[c];
		for (int r = 0; r < 3; r++)
			rs[r * 3 + c] = a[r][c] / z;
	}
}

/* Nearest orthonormal matrix to rs (polar decomposition U*Vt). Fails when rs
 * has rank < 3, i.e. some voxel axis has no well-defined direction. */
static int nearest_rotation(const double rs[9], double rot[9])
{
	double work[9], s[3], u[9], vt[9], superb[2];

	memcpy(work, rs, sizeof(work));
	if (LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'A', 'A', 3, 3, work, 3, s, u, 3, vt, 3, superb) != 0)
		return -EINVAL;
	/* Same rank threshold as io_orientation: S.max() * max(shape) * eps. */
	if (!(s[2] > s[0] * 3 * DBL_EPSILON))
		return -EINVAL;
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 3; c++)
			rot[r * 3 + c] = u[r * 3 + 0] * vt[0 * 3 + c] + u[r * 3 + 1] * vt[1 * 3 + c] +
					 u[r * 3 + 2] * vt[2 * 3 + c];
	return 0;
}

static int all_finite(const double a[4][4])
{
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 4; c++)
			if (!isfinite(a[r][c]))
				return 0;
	return 1;
}

static char axis_code(int world_axis, int positive)
{
	static const char codes[3][2] = { { 'L', 'R' }, { 'P', 'A' }, { 'I', 'S' } };

	return codes[world_axis][positive ? 1 : 0];
}

/* Greedy assignment as in io_orientation: each voxel axis in turn takes the
 * world axis with the largest |component|; ties go to the lowest world axis
 * and a taken world axis is removed from later choices. */
int affine_axcodes(const double a[4][4], char out[4])
{
	double rs[9], rot[9];

	if (!all_finite(a))
		return -EINVAL;
	normalized_linear_part(a, rs);
	if (nearest_rotation(rs, rot) != 0)
		return -EINVAL;
	for (int vox = 0; vox < 3; vox++) {
		int best = 0;

		for (int w = 1; w < 3; w++)
			if (fabs(rot[w * 3 + vox]) > fabs(rot[best * 3 + vox]))
				best = w;
		if (fabs(rot[best * 3 + vox]) <= AXIS_ZERO_ATOL)
			return -EINVAL;
		out[vox] = axis_code(best, rot[best * 3 + vox] > 0);
		for (int c = 0; c < 3; c++)
			rot[best * 3 + c] = 0.0;
	}
	out[3] = '\0';
	return 0;
}
