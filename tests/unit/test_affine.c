/* SPDX-License-Identifier: MIT */
/* Unit tests for affine.c: inversion, application, voxel sizes, axcodes. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "formats/affine.h"

/* cmocka 1.1 compares only as float; the affine checks need double. */
#define assert_near(a, b, tol)                                                          \
	do {                                                                            \
		double near_a_ = (a), near_b_ = (b);                                    \
		if (!(fabs(near_a_ - near_b_) <= (tol)))                                \
			fail_msg("%s = %.17g, expected %.17g (tolerance %g)", #a, near_a_, \
				 near_b_, (double)(tol));                               \
	} while (0)

static const double oblique[4][4] = {
	{ 1.8, 0.3, -0.2, -40.0 },
	{ -0.25, 1.9, 0.4, 12.5 },
	{ 0.1, -0.35, 2.2, 7.0 },
	{ 0, 0, 0, 1 },
};

static void make_affine(const double m[3][3], const double t[3], double a[4][4])
{
	memset(a, 0, 16 * sizeof(double));
	for (int r = 0; r < 3; r++) {
		for (int c = 0; c < 3; c++)
			a[r][c] = m[r][c];
		a[r][3] = t ? t[r] : 0.0;
	}
	a[3][3] = 1.0;
}

static void test_invert_gives_identity(void **state)
{
	double inv[4][4];

	(void)state;
	assert_int_equal(affine_invert(oblique, inv), 0);
	for (int r = 0; r < 4; r++) {
		for (int c = 0; c < 4; c++) {
			double sum = 0.0;
			for (int k = 0; k < 4; k++)
				sum += oblique[r][k] * inv[k][c];
			assert_near(sum, r == c ? 1.0 : 0.0, 1e-12);
		}
	}
}

static void test_invert_in_place(void **state)
{
	double a[4][4], p[3] = { 3.0, -1.0, 7.5 }, w[3];

	(void)state;
	memcpy(a, oblique, sizeof(a));
	affine_apply(a, p, w);
	assert_int_equal(affine_invert(a, a), 0);
	affine_apply(a, w, w);
	for (int i = 0; i < 3; i++)
		assert_near(w[i], p[i], 1e-12);
}

static void test_invert_singular(void **state)
{
	const double m[3][3] = { { 1, 2, 3 }, { 2, 4, 6 }, { 0, 0, 1 } };
	double a[4][4], out[4][4];

	(void)state;
	make_affine(m, NULL, a);
	assert_int_equal(affine_invert(a, out), -EINVAL);
	a[0][0] = NAN;
	assert_int_equal(affine_invert(a, out), -EINVAL);
}

static void test_apply(void **state)
{
	const double p[3] = { 1.0, 2.0, 3.0 };
	double w[3];

	(void)state;
	affine_apply(oblique, p, w);
	assert_near(w[0], 1.8 + 0.6 - 0.6 - 40.0, 1e-12);
	assert_near(w[1], -0.25 + 3.8 + 1.2 + 12.5, 1e-12);
	assert_near(w[2], 0.1 - 0.7 + 6.6 + 7.0, 1e-12);
}

static void test_voxel_sizes(void **state)
{
	const double m[3][3] = { { 0, 0, 2 }, { -1.5, 0, 0 }, { 0, 3, 0 } };
	double a[4][4], v[3];

	(void)state;
	make_affine(m, NULL, a);
	affine_voxel_sizes(a, v);
	assert_near(v[0], 1.5, 1e-15);
	assert_near(v[1], 3.0, 1e-15);
	assert_near(v[2], 2.0, 1e-15);
	affine_voxel_sizes(oblique, v);
	assert_near(v[0], sqrt(1.8 * 1.8 + 0.25 * 0.25 + 0.1 * 0.1), 1e-15);
}

static void expect_axcodes(const double m[3][3], const char *expected)
{
	double a[4][4];
	char codes[4];

	make_affine(m, NULL, a);
	assert_int_equal(affine_axcodes(a, codes), 0);
	assert_string_equal(codes, expected);
}

/* Expected strings from nibabel 5.0.0:
 * ''.join(nibabel.orientations.aff2axcodes(A)) with A the 4x4 affine. */
static void test_axcodes_matches_nibabel(void **state)
{
	const double ras[3][3] = { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } };
	const double las[3][3] = { { -1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } };
	const double lps[3][3] = { { -2, 0, 0 }, { 0, -2, 0 }, { 0, 0, 2.5 } };
	const double permuted[3][3] = { { 0, 0, 2 }, { -1.5, 0, 0 }, { 0, 3, 0 } };
	const double greedy[3][3] = { { 0.9, 0.8, 0 }, { 0.1, -0.6, 0 }, { 0, 0, 1 } };
	const double sheared[3][3] = { { 1, 1.5, 0 }, { 0, 1, 0 }, { 0, 0.2, -1 } };
	/* Naive per-column argmax without the polar decomposition gives "RPI". */
	const double needs_polar[3][3] = { { 2, -2.6, 0.4 }, { -0.6, -0.5, -0.2 }, { -2, -0.2, -0.9 } };
	const double rot40_lps[3][3] = { { -0.76484219, 0.64421769, 0 },
					 { -0.64421769, -0.76484219, 0 },
					 { 0, 0, 1 } };
	/* Without removing a taken world axis the third axis would be 'I' again. */
	const double taken_axis[3][3] = { { 1.6, 0.3, -1.2 }, { -1, 1.6, 0.2 }, { -1.7, -0.1, -1.2 } };
	double ob[3][3];

	(void)state;
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 3; c++)
			ob[r][c] = oblique[r][c];
	expect_axcodes(ras, "RAS");
	expect_axcodes(las, "LAS");
	expect_axcodes(lps, "LPS");
	expect_axcodes(permuted, "PSR");
	expect_axcodes(ob, "RAS");
	expect_axcodes(greedy, "RPS");
	expect_axcodes(sheared, "RAI");
	expect_axcodes(needs_polar, "PLI");
	expect_axcodes(rot40_lps, "LPS");
	expect_axcodes(taken_axis, "IAL");
}

static void test_axcodes_degenerate(void **state)
{
	const double zero_col[3][3] = { { 1, 0, 0 }, { 0, 0, 0 }, { 0, 0, 1 } };
	const double collinear[3][3] = { { 1, 2, 0 }, { 1, 2, 0 }, { 0, 0, 1 } };
	double a[4][4];
	char codes[4];

	(void)state;
	make_affine(zero_col, NULL, a);
	assert_int_equal(affine_axcodes(a, codes), -EINVAL);
	make_affine(collinear, NULL, a);
	assert_int_equal(affine_axcodes(a, codes), -EINVAL);
	memcpy(a, oblique, sizeof(a));
	a[1][3] = INFINITY;
	assert_int_equal(affine_axcodes(a, codes), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_invert_gives_identity),
		cmocka_unit_test(test_invert_in_place),
		cmocka_unit_test(test_invert_singular),
		cmocka_unit_test(test_apply),
		cmocka_unit_test(test_voxel_sizes),
		cmocka_unit_test(test_axcodes_matches_nibabel),
		cmocka_unit_test(test_axcodes_degenerate),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
