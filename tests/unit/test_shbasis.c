/* SPDX-License-Identifier: MIT */
/*
 * shbasis: the four bases against DIPY 1.6 (sh_reference.h, written by
 * `/usr/bin/python3 tests/data/make_sh_reference.py`; rerun it to regenerate)
 * at the poles, the equator, negative z, unnormalised, zero and random
 * directions for orders 2, 4, 8 and 12; orthonormality by quadrature on a
 * Fibonacci sphere; antipodal symmetry; names; the coefficient-count helpers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/shbasis.h"
#include "sh_reference.h"

#define N_REFERENCE ((int)(sizeof(sh_reference) / sizeof(sh_reference[0])))
#define ALL_BASES 4

static const enum sh_basis bases[ALL_BASES] = {
	SH_DESCOTEAUX07_LEGACY, SH_DESCOTEAUX07, SH_TOURNIER07, SH_TOURNIER07_LEGACY,
};

static void assert_close(double got, double want, double tol, const char *what, int index)
{
	if (!(fabs(got - want) <= tol * fmax(1.0, fabs(want))))
		fail_msg("%s, coefficient %d: %.17g, DIPY %.17g", what, index, got, want);
}

static void test_matches_dipy(void **state)
{
	static const int orders[] = { 2, 4, 8, 12 };

	(void)state;
	assert_int_equal(N_REFERENCE, ALL_BASES);
	for (int b = 0; b < N_REFERENCE; b++)
		for (size_t o = 0; o < sizeof(orders) / sizeof(orders[0]); o++)
			for (int d = 0; d < SH_REFERENCE_NDIRS; d++) {
				double row[(SH_REFERENCE_ORDER + 1) * (SH_REFERENCE_ORDER + 2) / 2];
				char what[128];

				snprintf(what, sizeof(what), "%s order %d direction %d",
					 sh_basis_name(sh_reference[b].basis), orders[o], d);
				sh_eval(sh_reference[b].basis, orders[o], sh_reference_dirs[d], row);
				for (int k = 0; k < sh_ncoef(orders[o]); k++)
					assert_close(row[k], sh_reference[b].values[d][k], 1e-10, what, k);
			}
}

static void test_matrix_is_rows_of_eval(void **state)
{
	enum { ORDER = 8, NCOEF = 45 };
	double matrix[SH_REFERENCE_NDIRS * NCOEF], row[NCOEF];

	(void)state;
	for (int b = 0; b < ALL_BASES; b++) {
		sh_matrix(bases[b], ORDER, &sh_reference_dirs[0][0], SH_REFERENCE_NDIRS, matrix);
		for (int d = 0; d < SH_REFERENCE_NDIRS; d++) {
			sh_eval(bases[b], ORDER, sh_reference_dirs[d], row);
			assert_memory_equal(&matrix[d * NCOEF], row, sizeof(row));
		}
	}
}

static void fibonacci_sphere(double *xyz, int n)
{
	const double golden_turn = M_PI * (3 - sqrt(5));

	for (int i = 0; i < n; i++) {
		double z = 1 - (2 * i + 1) / (double)n, r = sqrt(1 - z * z);

		xyz[3 * i] = r * cos(golden_turn * i);
		xyz[3 * i + 1] = r * sin(golden_turn * i);
		xyz[3 * i + 2] = z;
	}
}

/* Equal-area points make (4 pi / N) sum Y_j Y_k a quadrature of the inner
 * product; the spiral's error for products up to degree 2 * SH_MAX_ORDER with
 * this many points is a few 1e-6 (measured), hence the 1e-5 tolerance. The
 * legacy tournier07 basis lacks the sqrt(2) of the m != 0 functions, so its
 * Gram diagonal is 1/2 there. */
static void test_orthonormal_by_quadrature(void **state)
{
	enum { N = 40000, NCOEF = (SH_MAX_ORDER + 1) * (SH_MAX_ORDER + 2) / 2 };
	double *xyz = malloc(3 * (size_t)N * sizeof(*xyz));
	double *y = malloc((size_t)N * NCOEF * sizeof(*y));
	double *gram = malloc((size_t)NCOEF * NCOEF * sizeof(*gram));
	double worst = 0;

	(void)state;
	assert_non_null(xyz);
	assert_non_null(y);
	assert_non_null(gram);
	fibonacci_sphere(xyz, N);
	for (int b = 0; b < ALL_BASES; b++) {
		sh_matrix(bases[b], SH_MAX_ORDER, xyz, N, y);
		memset(gram, 0, (size_t)NCOEF * NCOEF * sizeof(*gram));
		for (size_t i = 0; i < N; i++) {
			const double *row = &y[i * NCOEF];

			for (int j = 0; j < NCOEF; j++)
				for (int k = j; k < NCOEF; k++)
					gram[j * NCOEF + k] += row[j] * row[k];
		}
		for (int l = 0, j = 0; l <= SH_MAX_ORDER; l += 2)
			for (int m = -l; m <= l; m++, j++)
				for (int k = j; k < NCOEF; k++) {
					double inner = gram[j * NCOEF + k] * 4 * M_PI / N, expected = 0;

					if (j == k)
						expected = bases[b] == SH_TOURNIER07_LEGACY && m != 0 ? 0.5 : 1.0;
					worst = fmax(worst, fabs(inner - expected));
					if (!(fabs(inner - expected) <= 1e-5))
						fail_msg("%s: Gram[%d][%d] = %.9g, expected %g",
							 sh_basis_name(bases[b]), j, k, inner, expected);
				}
	}
	print_message("worst Gram error %.3g\n", worst);
	free(gram);
	free(y);
	free(xyz);
}

/* Only even degrees: every basis function takes the same value at d and -d. */
static void test_antipodally_symmetric(void **state)
{
	enum { NCOEF = (SH_MAX_ORDER + 1) * (SH_MAX_ORDER + 2) / 2 };

	(void)state;
	for (int b = 0; b < ALL_BASES; b++)
		for (int d = 0; d < SH_REFERENCE_NDIRS; d++) {
			const double *p = sh_reference_dirs[d];
			double opposite[3] = { -p[0], -p[1], -p[2] }, here[NCOEF], there[NCOEF];

			sh_eval(bases[b], SH_MAX_ORDER, p, here);
			sh_eval(bases[b], SH_MAX_ORDER, opposite, there);
			for (int k = 0; k < NCOEF; k++)
				assert_close(there[k], here[k], 1e-12, sh_basis_name(bases[b]), k);
		}
}

static void test_names_round_trip(void **state)
{
	static const char *const names[ALL_BASES] = {
		"descoteaux07_legacy", "descoteaux07", "tournier07", "tournier07_legacy",
	};

	(void)state;
	for (int b = 0; b < ALL_BASES; b++) {
		enum sh_basis parsed = SH_TOURNIER07_LEGACY;

		assert_string_equal(sh_basis_name(bases[b]), names[b]);
		assert_int_equal(sh_basis_from_name(names[b], &parsed), 0);
		assert_int_equal(parsed, bases[b]);
	}
}

static void test_bad_names(void **state)
{
	static const char *const bad[] = {
		"", "Descoteaux07", "tournier07 ", "descoteaux", "mrtrix", "descoteaux07_legacy2",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum sh_basis parsed = SH_TOURNIER07;

		assert_int_equal(sh_basis_from_name(bad[i], &parsed), -EINVAL);
		assert_int_equal(parsed, SH_TOURNIER07);
	}
}

static void test_ncoef_and_order(void **state)
{
	static const int64_t not_counts[] = { 0, -1, -6, 2, 3, 7, 10, 21, 44, 46, 152, 154, INT64_MAX };

	(void)state;
	assert_int_equal(sh_ncoef(0), 1);
	assert_int_equal(sh_ncoef(2), 6);
	assert_int_equal(sh_ncoef(4), 15);
	assert_int_equal(sh_ncoef(8), 45);
	assert_int_equal(sh_ncoef(SH_MAX_ORDER), 153);
	for (int order = 0; order <= 2000; order += 2)
		assert_int_equal(sh_order_from_ncoef(sh_ncoef(order)), order);
	for (size_t i = 0; i < sizeof(not_counts) / sizeof(not_counts[0]); i++)
		assert_int_equal(sh_order_from_ncoef(not_counts[i]), -1);
	/* Orders past SH_MAX_ORDER are still named, up to what an int holds. */
	assert_int_equal(sh_order_from_ncoef(INT64_C(2000000001) * 1000000001), 2000000000);
	assert_int_equal(sh_order_from_ncoef(INT64_C(2000000001) * 1000000001 + 1), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matches_dipy),
		cmocka_unit_test(test_matrix_is_rows_of_eval),
		cmocka_unit_test(test_orthonormal_by_quadrature),
		cmocka_unit_test(test_antipodally_symmetric),
		cmocka_unit_test(test_names_round_trip),
		cmocka_unit_test(test_bad_names),
		cmocka_unit_test(test_ncoef_and_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
