/* SPDX-License-Identifier: MIT */
/*
 * compress: the points kept against DIPY 1.6's compress_streamlines
 * (compress_reference.h, written by
 * `/usr/bin/python3 tests/data/make_compress_reference.py`; rerun it to
 * regenerate) for lines, arcs, helices, zig-zags, repeated and noisy points,
 * under identity and oblique anisotropic affines; the points written match
 * the indices; short streamlines and the translation's irrelevance.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "formats/compress.h"
#include "compress_reference.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_POINTS 128

static const float *case_points(const struct compress_case *c)
{
	return compress_reference_vox[c->first];
}

/* Same point where the indices differ: DIPY's kept set is a set of points,
 * and a repeated point may be named by either of its indices. */
static void assert_same_point(const float *vox, unsigned a, unsigned b, const char *what,
			      unsigned i)
{
	if (memcmp(vox + 3 * a, vox + 3 * b, 3 * sizeof(float)))
		fail_msg("%s: kept point %u is index %u, DIPY keeps %u", what, i, a, b);
}

static void test_matches_dipy(void **state)
{
	(void)state;
	for (size_t r = 0; r < ARRAY_SIZE(compress_reference_runs); r++) {
		const struct compress_run *run = &compress_reference_runs[r];
		const struct compress_case *c = &compress_reference_cases[run->case_index];
		const float *vox = case_points(c);
		struct compress_params p;
		uint32_t keep[MAX_POINTS], n;

		assert_true(c->n <= MAX_POINTS);
		compress_params_init(&p, run->tolerance_mm, run->max_segment_mm, c->affine);
		n = compress_streamline(&p, vox, c->n, keep, NULL);
		if (n != run->n_kept)
			fail_msg("%s (%g mm, %g mm): %u points kept, DIPY keeps %u", c->name,
				 run->tolerance_mm, run->max_segment_mm, n, run->n_kept);
		for (uint32_t i = 0; i < n; i++)
			assert_same_point(vox, keep[i], run->kept[i], c->name, i);
	}
}

static void test_points_follow_indices(void **state)
{
	(void)state;
	for (size_t r = 0; r < ARRAY_SIZE(compress_reference_runs); r++) {
		const struct compress_run *run = &compress_reference_runs[r];
		const struct compress_case *c = &compress_reference_cases[run->case_index];
		const float *vox = case_points(c);
		struct compress_params p;
		uint32_t keep[MAX_POINTS];
		float out[3 * MAX_POINTS];

		compress_params_init(&p, run->tolerance_mm, run->max_segment_mm, c->affine);
		assert_int_equal(compress_streamline(&p, vox, c->n, NULL, out), run->n_kept);
		assert_int_equal(compress_streamline(&p, vox, c->n, keep, NULL), run->n_kept);
		for (unsigned i = 0; i < run->n_kept; i++)
			assert_memory_equal(out + 3 * i, vox + 3 * keep[i], 3 * sizeof(float));
	}
}

static void test_short_streamlines_unchanged(void **state)
{
	static const double identity[4][4] = { { 1, 0, 0, 0 }, { 0, 1, 0, 0 }, { 0, 0, 1, 0 },
					       { 0, 0, 0, 1 } };
	static const float two[6] = { 0, 0, 0, 50, 0, 0 };
	struct compress_params p;
	uint32_t keep[2] = { 7, 7 };
	float out[6];

	(void)state;
	compress_params_init(&p, 0.01, 10, identity);
	assert_int_equal(compress_streamline(&p, two, 0, keep, out), 0);
	assert_int_equal(compress_streamline(&p, two, 1, keep, out), 1);
	assert_int_equal(keep[0], 0);
	/* Longer than max_segment_mm, yet nothing can be added: kept as is. */
	assert_int_equal(compress_streamline(&p, two, 2, keep, out), 2);
	assert_int_equal(keep[1], 1);
	assert_memory_equal(out, two, sizeof(two));
}

/* Distances are differences, so the affine's translation cannot matter. */
static void test_translation_irrelevant(void **state)
{
	(void)state;
	for (size_t r = 0; r < ARRAY_SIZE(compress_reference_runs); r++) {
		const struct compress_run *run = &compress_reference_runs[r];
		const struct compress_case *c = &compress_reference_cases[run->case_index];
		double moved[4][4];
		struct compress_params p;
		uint32_t keep[MAX_POINTS];

		memcpy(moved, c->affine, sizeof(moved));
		moved[0][3] += 1000;
		moved[2][3] -= 77.5;
		compress_params_init(&p, run->tolerance_mm, run->max_segment_mm, moved);
		assert_int_equal(compress_streamline(&p, case_points(c), c->n, keep, NULL),
				 run->n_kept);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matches_dipy),
		cmocka_unit_test(test_points_follow_indices),
		cmocka_unit_test(test_short_streamlines_unchanged),
		cmocka_unit_test(test_translation_irrelevant),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
