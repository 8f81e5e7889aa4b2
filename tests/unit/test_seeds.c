/* SPDX-License-Identifier: MIT */
/*
 * seeds: determinism, placement inside mask voxels, count semantics of
 * DIPY's random_seeds_from_mask, independence from chunking, point seeds in
 * voxel and RAS+ mm coordinates, seeds on the faces of a WM/GM interface,
 * and rejection of bad input. Masks are built
 * by hand (no file I/O).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "job/seeds.h"

struct mask {
	struct volume vol;
	uint64_t nvox;
};

static void identity(double a[4][4])
{
	memset(a, 0, 16 * sizeof(double));
	for (int k = 0; k < 4; k++)
		a[k][k] = 1;
}

/* An nx*ny*nz mask (nt volumes) whose voxels are set by a fixed pattern:
 * roughly a third of them, scattered. */
static void make_mask(struct mask *m, int64_t nx, int64_t ny, int64_t nz, int64_t nt)
{
	size_t n = (size_t)(nx * ny * nz * nt);

	memset(m, 0, sizeof(*m));
	m->vol.dim[0] = nx;
	m->vol.dim[1] = ny;
	m->vol.dim[2] = nz;
	m->vol.dim[3] = nt;
	identity(m->vol.affine);
	m->vol.data = calloc(n, sizeof(float));
	assert_non_null(m->vol.data);
	for (size_t v = 0; v < (size_t)(nx * ny * nz); v++) {
		if ((v * 7919) % 3 != 0)
			continue;
		m->vol.data[v * (size_t)nt] = 0.5f + (float)(v % 5);
		m->nvox++;
	}
}

static void free_mask(struct mask *m)
{
	free(m->vol.data);
}

static float mask_value(const struct mask *m, int64_t x, int64_t y, int64_t z)
{
	if (x < 0 || y < 0 || z < 0 || x >= m->vol.dim[0] || y >= m->vol.dim[1] ||
	    z >= m->vol.dim[2])
		return 0;
	return m->vol.data[volume_index(&m->vol, x, y, z) * (size_t)m->vol.dim[3]];
}

/* The [x][y][z] index of the mask voxel that seed s lies in (|s - ijk| <=
 * 0.5 on every axis), or -1 when there is none. */
static int64_t voxel_of(const struct mask *m, const float s[3])
{
	for (int corner = 0; corner < 8; corner++) {
		int64_t v[3];
		bool inside = true;

		for (int k = 0; k < 3; k++) {
			v[k] = (corner >> k) & 1 ? (int64_t)ceil(s[k] - 0.5) : (int64_t)floor(s[k] + 0.5);
			inside = inside && fabs(s[k] - (double)v[k]) <= 0.5;
		}
		if (inside && mask_value(m, v[0], v[1], v[2]) > 0)
			return (int64_t)volume_index(&m->vol, v[0], v[1], v[2]);
	}
	return -1;
}

static float *fill_all(struct seeds *s)
{
	uint64_t n = seeds_count(s);
	float *out = malloc((size_t)n * 3 * sizeof(float) + 1);

	assert_non_null(out);
	assert_int_equal(seeds_fill(s, 0, n, out), 0);
	return out;
}

static struct seeds *from_mask(const struct mask *m, uint64_t count, bool per_voxel,
			       uint64_t rng_seed)
{
	struct seeds *s = NULL;
	struct errbuf err = {0};

	assert_int_equal(seeds_from_mask(&m->vol, count, per_voxel, rng_seed, &s, &err), 0);
	assert_non_null(s);
	return s;
}

/* Seeds per mask voxel over all seeds of s; every seed must be in the mask. */
static unsigned *hits_per_voxel(const struct mask *m, struct seeds *s)
{
	size_t nxyz = (size_t)(m->vol.dim[0] * m->vol.dim[1] * m->vol.dim[2]);
	unsigned *hits = calloc(nxyz, sizeof(*hits));
	float *pts = fill_all(s);

	assert_non_null(hits);
	for (uint64_t i = 0; i < seeds_count(s); i++) {
		int64_t v = voxel_of(m, &pts[3 * i]);

		assert_true(v >= 0);
		hits[v]++;
	}
	free(pts);
	return hits;
}

static void test_deterministic_per_rng_seed(void **state)
{
	struct mask m;
	struct seeds *a, *b, *c;
	float *pa, *pb, *pc;
	size_t bytes;

	(void)state;
	make_mask(&m, 9, 8, 7, 1);
	a = from_mask(&m, 500, false, 1234);
	b = from_mask(&m, 500, false, 1234);
	c = from_mask(&m, 500, false, 1235);
	pa = fill_all(a);
	pb = fill_all(b);
	pc = fill_all(c);
	bytes = 500 * 3 * sizeof(float);
	assert_memory_equal(pa, pb, bytes);
	assert_memory_not_equal(pa, pc, bytes);
	free(pa);
	free(pb);
	free(pc);
	seeds_free(a);
	seeds_free(b);
	seeds_free(c);
	free_mask(&m);
}

/* Fewer seeds than voxels: one seed in each of the first count voxels of the
 * order, which is a prefix of the full round. */
static void test_fewer_seeds_than_voxels(void **state)
{
	struct mask m;
	struct seeds *part, *full;
	float *pp, *pf;
	unsigned *hits;
	uint64_t count, distinct = 0;

	(void)state;
	make_mask(&m, 10, 9, 8, 1);
	count = m.nvox / 3;
	part = from_mask(&m, count, false, 77);
	full = from_mask(&m, m.nvox, false, 77);
	assert_int_equal(seeds_count(part), count);
	hits = hits_per_voxel(&m, part);
	for (size_t v = 0; v < 10 * 9 * 8; v++) {
		assert_true(hits[v] <= 1);
		distinct += hits[v];
	}
	assert_int_equal(distinct, count);
	pp = fill_all(part);
	pf = fill_all(full);
	assert_memory_equal(pp, pf, (size_t)count * 3 * sizeof(float));
	free(pp);
	free(pf);
	free(hits);
	seeds_free(part);
	seeds_free(full);
	free_mask(&m);
}

/* count = 2.5 rounds: every voxel gets 2 or 3, half of them 3, and each round
 * visits the voxels in the same order. */
static void test_fractional_rounds(void **state)
{
	struct mask m;
	struct seeds *s;
	unsigned *hits;
	float *pts;
	uint64_t threes = 0;

	(void)state;
	make_mask(&m, 6, 6, 6, 1);
	assert_int_equal(m.nvox % 2, 0);
	s = from_mask(&m, m.nvox * 5 / 2, false, 9);
	hits = hits_per_voxel(&m, s);
	for (size_t v = 0; v < 6 * 6 * 6; v++) {
		if (mask_value(&m, (int64_t)v / 36, (int64_t)v / 6 % 6, (int64_t)v % 6) > 0)
			assert_in_range(hits[v], 2, 3);
		else
			assert_int_equal(hits[v], 0);
		threes += hits[v] == 3;
	}
	assert_int_equal(threes, m.nvox / 2);
	pts = fill_all(s);
	for (uint64_t i = 0; i + m.nvox < seeds_count(s); i++)
		assert_int_equal(voxel_of(&m, &pts[3 * i]), voxel_of(&m, &pts[3 * (i + m.nvox)]));
	free(pts);
	free(hits);
	seeds_free(s);
	free_mask(&m);
}

static void test_per_voxel_count(void **state)
{
	struct mask m;
	struct seeds *s;
	unsigned *hits;

	(void)state;
	make_mask(&m, 5, 7, 4, 1);
	s = from_mask(&m, 3, true, 5);
	assert_int_equal(seeds_count(s), 3 * m.nvox);
	hits = hits_per_voxel(&m, s);
	for (size_t v = 0; v < 5 * 7 * 4; v++)
		if (mask_value(&m, (int64_t)v / 28, (int64_t)v / 4 % 7, (int64_t)v % 4) > 0)
			assert_int_equal(hits[v], 3);
	free(hits);
	seeds_free(s);
	free_mask(&m);
}

/* Any split of the range gives the same seeds as one fill. */
static void test_chunking_independent(void **state)
{
	static const uint64_t cuts[] = {0, 1, 7, 64, 65, 300, 301, 1000};
	struct mask m;
	struct seeds *s;
	float *whole, *part;

	(void)state;
	make_mask(&m, 8, 8, 8, 1);
	s = from_mask(&m, 1000, false, 31337);
	whole = fill_all(s);
	part = malloc(1000 * 3 * sizeof(float));
	assert_non_null(part);
	for (size_t c = 0; c + 1 < sizeof(cuts) / sizeof(cuts[0]); c++) {
		uint64_t first = cuts[c], n = cuts[c + 1] - cuts[c];

		assert_int_equal(seeds_fill(s, first, n, part), 0);
		assert_memory_equal(part, whole + 3 * first, (size_t)n * 3 * sizeof(float));
	}
	assert_int_equal(seeds_fill(s, 999, 1, part), 0);
	assert_memory_equal(part, whole + 3 * 999, 3 * sizeof(float));
	free(part);
	free(whole);
	seeds_free(s);
	free_mask(&m);
}

/* A fill large enough to be drawn on several threads gives the seeds that
 * small single-threaded fills give, whatever the split. */
static void test_large_fill_matches_small_fills(void **state)
{
	const uint64_t n = 300007, piece = 4099;
	struct mask m;
	struct seeds *s;
	float *whole, *part;

	(void)state;
	make_mask(&m, 20, 16, 12, 1);
	s = from_mask(&m, n + 10, false, 4242);
	whole = malloc(n * 3 * sizeof(float));
	part = malloc(piece * 3 * sizeof(float));
	assert_non_null(whole);
	assert_non_null(part);
	assert_int_equal(seeds_fill(s, 7, n, whole), 0);
	for (uint64_t first = 0; first < n; first += piece) {
		uint64_t k = n - first < piece ? n - first : piece;
		assert_int_equal(seeds_fill(s, 7 + first, k, part), 0);
		assert_memory_equal(part, whole + 3 * first, (size_t)k * 3 * sizeof(float));
	}
	free(part);
	free(whole);
	seeds_free(s);
	free_mask(&m);
}

static void test_fill_range_checked(void **state)
{
	struct mask m;
	struct seeds *s;
	float out[3 * 4];

	(void)state;
	make_mask(&m, 3, 3, 3, 1);
	s = from_mask(&m, 4, false, 0);
	assert_int_equal(seeds_fill(s, 0, 5, out), -EINVAL);
	assert_int_equal(seeds_fill(s, 3, 2, out), -EINVAL);
	assert_int_equal(seeds_fill(s, UINT64_MAX, 2, out), -EINVAL);
	assert_int_equal(seeds_fill(s, 2, UINT64_MAX, out), -EINVAL);
	assert_int_equal(seeds_fill(s, 4, 0, out), 0);
	assert_int_equal(seeds_fill(s, 0, 4, out), 0);
	seeds_free(s);
	free_mask(&m);
}

/* Jitter fills the voxel: within +-0.5, centred, uniform spread. */
static void test_jitter_uniform_in_voxel(void **state)
{
	struct mask m;
	struct seeds *s;
	float *pts;
	double sum[3] = {0}, sq[3] = {0};
	const int n = 20000;

	(void)state;
	make_mask(&m, 4, 4, 4, 1);
	memset(m.vol.data, 0, 64 * sizeof(float));
	m.vol.data[volume_index(&m.vol, 1, 2, 3)] = 1;
	m.nvox = 1;
	s = from_mask(&m, (uint64_t)n, true, 8);
	pts = fill_all(s);
	for (int i = 0; i < n; i++) {
		static const double centre[3] = {1, 2, 3};

		for (int k = 0; k < 3; k++) {
			double d = pts[3 * i + k] - centre[k];

			assert_true(d >= -0.5 && d <= 0.5);
			sum[k] += d;
			sq[k] += d * d;
		}
	}
	for (int k = 0; k < 3; k++) {
		assert_true(fabs(sum[k] / n) < 0.01);
		assert_true(fabs(sq[k] / n - 1.0 / 12) < 0.005);
	}
	free(pts);
	seeds_free(s);
	free_mask(&m);
}

/* The first voxel of the order is uniform over the mask across rng_seeds: a
 * biased shuffle would show here. */
static void test_order_unbiased(void **state)
{
	struct mask m;
	unsigned first_counts[5] = {0};
	const int trials = 5000;

	(void)state;
	make_mask(&m, 5, 1, 1, 1);
	for (int v = 0; v < 5; v++)
		m.vol.data[v] = 1;
	m.nvox = 5;
	for (int t = 0; t < trials; t++) {
		struct seeds *s = from_mask(&m, 1, false, (uint64_t)t);
		float p[3];

		assert_int_equal(seeds_fill(s, 0, 1, p), 0);
		first_counts[voxel_of(&m, p)]++;
		seeds_free(s);
	}
	for (int v = 0; v < 5; v++)
		assert_in_range(first_counts[v], trials / 5 - 120, trials / 5 + 120);
	free_mask(&m);
}

/* Only the first volume of a 4D mask counts. */
static void test_4d_mask_uses_first_volume(void **state)
{
	struct mask m;
	struct seeds *s;
	unsigned *hits;

	(void)state;
	make_mask(&m, 4, 3, 5, 2);
	for (size_t v = 0; v < 4 * 3 * 5; v++)
		m.vol.data[2 * v + 1] = 1;
	s = from_mask(&m, 1, true, 3);
	assert_int_equal(seeds_count(s), m.nvox);
	hits = hits_per_voxel(&m, s);
	for (size_t v = 0; v < 4 * 3 * 5; v++)
		assert_int_equal(hits[v], m.vol.data[2 * v] > 0);
	free(hits);
	seeds_free(s);
	free_mask(&m);
}

static void test_mask_errors(void **state)
{
	struct mask m;
	struct seeds *s = NULL;
	struct errbuf err = {0};

	(void)state;
	make_mask(&m, 3, 3, 3, 1);
	assert_int_equal(seeds_from_mask(&m.vol, 0, false, 1, &s, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.count");
	assert_int_equal(seeds_from_mask(&m.vol, UINT64_MAX / 2, true, 1, &s, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.count");
	assert_null(s);
	/* Large but representable totals are fine. */
	assert_int_equal(seeds_from_mask(&m.vol, UINT64_MAX / m.nvox, true, 1, &s, &err), 0);
	assert_int_equal(seeds_count(s), UINT64_MAX / m.nvox * m.nvox);
	seeds_free(s);
	s = NULL;
	for (int v = 0; v < 27; v++)
		m.vol.data[v] = v % 2 ? 0.0f : -1.0f;
	assert_int_equal(seeds_from_mask(&m.vol, 10, false, 1, &s, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.roi");
	assert_null(s);
	free_mask(&m);
	seeds_free(NULL);
}

static const int64_t grid[3] = {10, 20, 30};

static void test_points_in_voxels(void **state)
{
	static const double pts[] = {0, 0, 0, -0.5, -0.5, -0.5, 9.49, 19.49, 29.49, 3.25, 7.5, 11.125};
	double unused[4][4];
	struct seeds *s = NULL;
	struct errbuf err = {0};
	float out[12];

	(void)state;
	memset(unused, 0, sizeof(unused));   /* singular: ignored for voxel points */
	assert_int_equal(seeds_from_points("seeds.points", pts, 4, false, unused, grid, &s, &err), 0);
	assert_int_equal(seeds_count(s), 4);
	assert_int_equal(seeds_fill(s, 0, 4, out), 0);
	for (int i = 0; i < 12; i++)
		assert_true(out[i] == (float)pts[i]);
	assert_int_equal(seeds_fill(s, 2, 2, out), 0);
	assert_true(out[0] == (float)pts[6]);
	assert_int_equal(seeds_fill(s, 3, 2, out), -EINVAL);
	seeds_free(s);
}

/* seeds.first_index: the points keep their place in the list, and are
 * served under global indices first + i (a shard's first seed's way). */
static void test_points_numbered_from(void **state)
{
	static const double pts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
	double unused[4][4];
	struct seeds *s = NULL;
	struct errbuf err = {0};
	uint64_t first, end;
	float out[6];

	(void)state;
	memset(unused, 0, sizeof(unused));
	assert_int_equal(seeds_from_points("seeds.points_file", pts, 3, false, unused, grid, &s,
					   &err), 0);
	seeds_number_from(s, 1000);
	assert_int_equal(seeds_count(s), 3);
	assert_int_equal(seeds_index_end(s), 1003);
	seeds_range(s, &first, &end);
	assert_int_equal(first, 1000);
	assert_int_equal(end, 1003);
	assert_int_equal(seeds_fill(s, 1001, 2, out), 0);
	assert_true(out[0] == 4 && out[5] == 9);
	assert_int_equal(seeds_fill(s, 0, 1, out), -EINVAL);
	assert_int_equal(seeds_fill(s, 999, 1, out), -EINVAL);
	assert_int_equal(seeds_fill(s, 1002, 2, out), -EINVAL);
	/* A shard restricts within the list: global = first + list index. */
	seeds_restrict(s, 1, 3);
	seeds_range(s, &first, &end);
	assert_int_equal(first, 1001);
	assert_int_equal(end, 1003);
	assert_int_equal(seeds_fill(s, 1000, 1, out), -EINVAL);
	seeds_free(s);
}

static void to_world(const double affine[4][4], const double voxel[3], double world[3])
{
	for (int r = 0; r < 3; r++)
		world[r] = affine[r][0] * voxel[0] + affine[r][1] * voxel[1] +
			   affine[r][2] * voxel[2] + affine[r][3];
}

/* Two good points (voxels (1,1,1) and (2,2,2), given in mm when ras_mm) and
 * then p, which must be the one rejected. */
static void expect_point_rejected(const double p[3], bool ras_mm, const double affine[4][4],
				  const char *needle)
{
	static const double good[6] = {1, 1, 1, 2, 2, 2};
	double pts[9];
	struct seeds *s = NULL;
	struct errbuf err = {0};

	for (int i = 0; i < 2; i++) {
		if (ras_mm)
			to_world(affine, &good[3 * i], &pts[3 * i]);
		else
			memcpy(&pts[3 * i], &good[3 * i], 3 * sizeof(double));
	}
	memcpy(&pts[6], p, 3 * sizeof(double));
	assert_int_equal(seeds_from_points("seeds.points", pts, 3, ras_mm, affine, grid, &s, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.points[2]");
	assert_non_null(strstr(err.message, needle));
	assert_null(s);
}

static void test_points_rejected(void **state)
{
	double eye[4][4];

	(void)state;
	identity(eye);
	expect_point_rejected((const double[3]){-0.51, 0, 0}, false, eye, "voxel i");
	expect_point_rejected((const double[3]){0, 19.5, 0}, false, eye, "voxel j");
	expect_point_rejected((const double[3]){0, 0, 30}, false, eye, "voxel k");
	expect_point_rejected((const double[3]){0, NAN, 0}, false, eye, "not finite");
	expect_point_rejected((const double[3]){0, 0, -INFINITY}, true, eye, "not finite");
	expect_point_rejected((const double[3]){0, 0, 1e300}, true, eye, "voxel k");
}

static void test_points_errors(void **state)
{
	static const double pts[] = {1, 2, 3};
	double singular[4][4], eye[4][4];
	struct seeds *s = NULL;
	struct errbuf err = {0};

	(void)state;
	identity(eye);
	identity(singular);
	singular[2][2] = 0;
	assert_int_equal(seeds_from_points("seeds.points", pts, 0, false, eye, grid, &s, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.points");
	assert_int_equal(seeds_from_points("seeds.points", pts, 1, true, singular, grid, &s, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.points");
	assert_null(s);
}

/* World = A * voxel with rotation, anisotropic scaling, a flip and a shift;
 * points given in mm must come back as the voxel coordinates they came from. */
static void test_points_ras_mm(void **state)
{
	static const double voxel[] = {0, 0, 0, 4.25, 10.5, 20.75, 9.4, 19.4, 29.4, -0.4, 3, 7};
	const double c = cos(0.3), s30 = sin(0.3);
	const double affine[4][4] = {
		{2 * c, -1.5 * s30, 0, 10},
		{2 * s30, 1.5 * c, 0, -20},
		{0, 0, -1.25, 35},
		{0, 0, 0, 1},
	};
	double world[12];
	struct seeds *s = NULL;
	struct errbuf err = {0};
	float out[12];

	(void)state;
	for (int i = 0; i < 4; i++)
		to_world(affine, &voxel[3 * i], &world[3 * i]);
	assert_int_equal(seeds_from_points("seeds.points", world, 4, true, affine, grid, &s, &err), 0);
	assert_int_equal(seeds_fill(s, 0, 4, out), 0);
	for (int i = 0; i < 12; i++)
		assert_true(fabs(out[i] - voxel[i]) < 1e-5);
	seeds_free(s);

	/* The world origin maps outside this grid. */
	expect_point_rejected((const double[3]){0, 0, 0}, true, affine, "outside");
}

/* A 4x3x2 grid: white matter where x < 2, grey matter where x >= 2 but
 * for the voxel (3, 2, 1), which is neither: the interface is the 6 faces
 * at x = 1.5. */
static void make_tissues(struct volume *wm, struct volume *gm)
{
	int64_t v[3];

	memset(wm, 0, sizeof(*wm));
	wm->dim[0] = 4;
	wm->dim[1] = 3;
	wm->dim[2] = 2;
	wm->dim[3] = 1;
	identity(wm->affine);
	*gm = *wm;
	wm->data = calloc(24, sizeof(float));
	gm->data = calloc(24, sizeof(float));
	assert_non_null(wm->data);
	assert_non_null(gm->data);
	for (v[0] = 0; v[0] < 4; v[0]++)
		for (v[1] = 0; v[1] < 3; v[1]++)
			for (v[2] = 0; v[2] < 2; v[2]++) {
				size_t i = volume_index(wm, v[0], v[1], v[2]);

				wm->data[i] = v[0] < 2 ? 0.9f : 0.1f;
				gm->data[i] = v[0] < 2 ? 0.1f : 0.9f;
			}
	gm->data[volume_index(gm, 3, 2, 1)] = 0.5f;   /* not above 0.5 */
}

/* Every seed lies on one of the 6 faces at x = 1.5, uniform across it; each
 * round visits every face once; any chunking gives the same seeds. */
static void test_interface_faces(void **state)
{
	struct volume wm, gm;
	struct seeds *s = NULL;
	struct errbuf err = {0};
	unsigned hits[3][2] = {{0}};
	float *all, part[3 * 5];

	(void)state;
	make_tissues(&wm, &gm);
	assert_int_equal(seeds_from_interface(&wm, &gm, 60, 5, &s, &err), 0);
	assert_int_equal(seeds_count(s), 60);
	all = fill_all(s);
	for (int i = 0; i < 60; i++) {
		const float *p = &all[3 * i];

		assert_true(p[0] == 1.5f);
		assert_true(p[1] >= -0.5f && p[1] < 2.5f && p[2] >= -0.5f && p[2] < 1.5f);
		hits[(int)floorf(p[1] + 0.5f)][(int)floorf(p[2] + 0.5f)]++;
	}
	for (int y = 0; y < 3; y++)
		for (int z = 0; z < 2; z++)
			assert_int_equal(hits[y][z], 10);
	assert_int_equal(seeds_fill(s, 13, 5, part), 0);
	assert_memory_equal(part, all + 3 * 13, sizeof(part));
	free(all);
	seeds_free(s);
	free(wm.data);
	free(gm.data);
}

static void test_interface_errors(void **state)
{
	struct volume wm, gm;
	struct seeds *s = NULL;
	struct errbuf err = {0};

	(void)state;
	make_tissues(&wm, &gm);
	assert_int_equal(seeds_from_interface(&wm, &gm, 0, 5, &s, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.count");
	memset(gm.data, 0, 24 * sizeof(float));
	assert_int_equal(seeds_from_interface(&wm, &gm, 10, 5, &s, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.interface");
	assert_null(s);
	free(wm.data);
	free(gm.data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_deterministic_per_rng_seed),
		cmocka_unit_test(test_fewer_seeds_than_voxels),
		cmocka_unit_test(test_fractional_rounds),
		cmocka_unit_test(test_per_voxel_count),
		cmocka_unit_test(test_chunking_independent),
		cmocka_unit_test(test_large_fill_matches_small_fills),
		cmocka_unit_test(test_fill_range_checked),
		cmocka_unit_test(test_jitter_uniform_in_voxel),
		cmocka_unit_test(test_order_unbiased),
		cmocka_unit_test(test_4d_mask_uses_first_volume),
		cmocka_unit_test(test_mask_errors),
		cmocka_unit_test(test_points_in_voxels),
		cmocka_unit_test(test_points_numbered_from),
		cmocka_unit_test(test_points_rejected),
		cmocka_unit_test(test_points_errors),
		cmocka_unit_test(test_points_ras_mm),
		cmocka_unit_test(test_interface_faces),
		cmocka_unit_test(test_interface_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
