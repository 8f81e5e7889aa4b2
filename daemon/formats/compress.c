/* SPDX-License-Identifier: MIT */
/*
 * compress: DIPY's c_compress_streamline (dipy/tracking/streamlinespeed.pyx,
 * 1.6) over voxel points measured in mm. The decisions follow DIPY's order
 * of tests exactly, NaN and coincident points included, so that the kept
 * points are DIPY's; only the arithmetic differs (a voxel difference mapped
 * by the linear part instead of a difference of RAS points), which moves
 * distances by rounding alone.
 */
#include "formats/compress.h"

#include <math.h>
#include <string.h>

void compress_params_init(struct compress_params *p, double tolerance_mm,
			  double max_segment_mm, const double affine[4][4])
{
	p->tolerance_mm = tolerance_mm;
	p->max_segment_mm = max_segment_mm;
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 3; c++)
			p->linear[r][c] = affine[r][c];
}

/* The vector from point a to point b in mm. */
static void diff_mm(const struct compress_params *p, const float *vox, uint32_t a, uint32_t b,
		    double out[3])
{
	double d[3];

	for (int k = 0; k < 3; k++)
		d[k] = (double)vox[3ull * b + (uint64_t)k] - (double)vox[3ull * a + (uint64_t)k];
	for (int r = 0; r < 3; r++)
		out[r] = p->linear[r][0] * d[0] + p->linear[r][1] * d[1] + p->linear[r][2] * d[2];
}

static double norm3(const double v[3])
{
	return sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
}

static double segment_mm(const struct compress_params *p, const float *vox, uint32_t a,
			 uint32_t b)
{
	double d[3];

	diff_mm(p, vox, a, b, d);
	return norm3(d);
}

/* Distance of curr to the line through prev and next, as DIPY computes it:
 * |(next - prev) x (curr - next)| / |next - prev|, NaN when prev == next. */
static double dist_to_line(const struct compress_params *p, const float *vox, uint32_t prev,
			   uint32_t next, uint32_t curr)
{
	double b[3], c[3], x[3];

	diff_mm(p, vox, prev, next, b);
	diff_mm(p, vox, next, curr, c);
	x[0] = b[1] * c[2] - b[2] * c[1];
	x[1] = b[2] * c[0] - b[0] * c[2];
	x[2] = b[0] * c[1] - b[1] * c[0];
	return norm3(x) / norm3(b);
}

/* Whether every point strictly between prev and next lies within the
 * tolerance of the segment prev-next. Points at prev itself are skipped, as
 * DIPY skips them (its fix for repeated points). */
static int segment_fits(const struct compress_params *p, const float *vox, uint32_t prev,
			uint32_t next)
{
	for (uint32_t curr = prev + 1; curr < next; curr++) {
		double dist;

		if (segment_mm(p, vox, curr, prev) == 0)
			continue;
		dist = dist_to_line(p, vox, prev, next, curr);
		if (isnan(dist) || dist > p->tolerance_mm)
			return 0;
	}
	return 1;
}

static void emit(const float *vox, uint32_t i, uint32_t *keep, float *out, uint32_t *count)
{
	if (keep)
		keep[*count] = i;
	if (out)
		memcpy(out + 3ull * *count, vox + 3ull * i, 3 * sizeof(*out));
	(*count)++;
}

uint32_t compress_streamline(const struct compress_params *p, const float *vox, uint32_t n,
			     uint32_t *keep, float *out)
{
	uint32_t count = 0, prev = 0;

	/* DIPY returns streamlines of up to two points unchanged. */
	if (n <= 2) {
		for (uint32_t i = 0; i < n; i++)
			emit(vox, i, keep, out, &count);
		return count;
	}
	emit(vox, 0, keep, out, &count);
	/* The segment from the last kept point to next replaces the points in
	 * between while it is short enough and they lie close enough; when it
	 * fails, the point before next is kept and becomes the new start. */
	for (uint32_t next = 2; next < n; next++) {
		if (segment_mm(p, vox, prev, next) > p->max_segment_mm ||
		    !segment_fits(p, vox, prev, next)) {
			emit(vox, next - 1, keep, out, &count);
			prev = next - 1;
		}
	}
	emit(vox, n - 1, keep, out, &count);
	return count;
}
