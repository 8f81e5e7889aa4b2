/* SPDX-License-Identifier: MIT */
/*
 * boot: the bootstrap getter's matrices against DIPY 1.6 (boot_reference.h,
 * written by `/usr/bin/python3 tests/data/make_boot_reference.py`; rerun it
 * to regenerate) for 40 directions at sh_order 4 and 6: hat(B) as U U^T,
 * lcr_matrix(H) d as the GPU computes it from inv_leverage, the OPDT and CSA
 * fit matrices, the sampling matrix, and both models' coefficients for a
 * two-fibre signal; then the errors for bad parameters, too few
 * directions, a direction of leverage 1 and a rank-deficient table.
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

#include "models/boot.h"
#include "boot_reference.h"
#include "base/errbuf.h"
#include "models/shbasis.h"
#include "models/sphere.h"

#define MAX_NC 28   /* sh_order 6 */

struct order_ref {
	int order;
	const double *hat, *lcr_d, *opdt_q, *opdt_b, *csa_fit, *sampling, *opdt_coef, *csa_coef;
};

static const struct order_ref refs[] = {
	{ 4, boot_ref_l4_hat, boot_ref_l4_lcr_d, boot_ref_l4_opdt_delta_q,
	  boot_ref_l4_opdt_delta_b, boot_ref_l4_csa_fit, boot_ref_l4_sampling,
	  boot_ref_l4_opdt_coef, boot_ref_l4_csa_coef },
	{ 6, boot_ref_l6_hat, boot_ref_l6_lcr_d, boot_ref_l6_opdt_delta_q,
	  boot_ref_l6_opdt_delta_b, boot_ref_l6_csa_fit, boot_ref_l6_sampling,
	  boot_ref_l6_opdt_coef, boot_ref_l6_csa_coef },
};
#define N_REFS ((int)(sizeof(refs) / sizeof(refs[0])))

/* |got - want| <= tol * max(1, |want|); returns the scaled error so callers
 * can report the worst. */
static double check_close(double got, double want, double tol, const char *what, int order,
			  int index)
{
	double scaled = fabs(got - want) / fmax(1.0, fabs(want));

	if (!(scaled <= tol))
		fail_msg("%s, sh_order %d, entry %d: %.17g, DIPY %.17g", what, order, index, got,
			 want);
	return scaled;
}

static double check_array(const double *got, const double *want, int n, double tol,
			  const char *what, int order)
{
	double worst = 0;

	for (int i = 0; i < n; i++)
		worst = fmax(worst, check_close(got[i], want[i], tol, what, order, i));
	return worst;
}

static void reference_sphere(struct sphere *s)
{
	struct errbuf err = {0};

	assert_int_equal(sphere_from_vertices(boot_ref_vertices, BOOT_REF_NV, "sphere", s,
					      &err), 0);
	/* The sampling matrix is compared at the very points DIPY was given. */
	assert_int_equal(s->nv, BOOT_REF_NV);
	for (int i = 0; i < 3 * BOOT_REF_NV; i++)
		assert_true(s->vertices[i] == boot_ref_vertices[i]);
}

static void build(enum boot_model model, int order, struct boot_matrices *m)
{
	struct boot_params p = { model, order, BOOT_REF_SMOOTH };
	struct errbuf err = {0};
	struct sphere s = {0};

	reference_sphere(&s);
	if (boot_matrices_build(boot_ref_dirs, BOOT_REF_N_DWI, &s, &p, m, &err) != 0)
		fail_msg("boot_matrices_build: %s: %s", err.field, err.message);
	sphere_free(&s);
	assert_int_equal(m->n_dwi, BOOT_REF_N_DWI);
	assert_int_equal(m->n_coef, sh_ncoef(order));
	assert_int_equal(m->nv, BOOT_REF_NV);
}

static void test_hat_matches_dipy(void **state)
{
	double worst = 0;

	(void)state;
	for (int o = 0; o < N_REFS; o++) {
		struct boot_matrices m;
		int hr = BOOT_REF_N_DWI, nc;

		build(BOOT_MODEL_OPDT, refs[o].order, &m);
		nc = m.n_coef;
		for (int i = 0; i < hr; i++)
			for (int j = 0; j < hr; j++) {
				double h = 0;

				for (int k = 0; k < nc; k++)
					h += m.hat_u[i * nc + k] * m.hat_u[j * nc + k];
				worst = fmax(worst, check_close(h, refs[o].hat[i * hr + j], 1e-9,
								"H = U U^T", refs[o].order,
								i * hr + j));
			}
		for (int j = 0; j < hr; j++)
			worst = fmax(worst, check_close(m.inv_leverage[j],
							1 / sqrt(1 - refs[o].hat[j * hr + j]),
							1e-9, "inv_leverage", refs[o].order, j));
		boot_matrices_free(&m);
	}
	print_message("hat: worst error %.3g\n", worst);
}

/* R d, R = lcr_matrix(H), equals r - mean(r) with r = (d - U U^T d) *
 * inv_leverage: what the GPU computes. */
static void test_residuals_match_lcr_matrix(void **state)
{
	double worst = 0;

	(void)state;
	for (int o = 0; o < N_REFS; o++) {
		struct boot_matrices m;
		double ud[MAX_NC], r[BOOT_REF_N_DWI], mean = 0;
		int hr = BOOT_REF_N_DWI, nc;

		build(BOOT_MODEL_OPDT, refs[o].order, &m);
		nc = m.n_coef;
		for (int k = 0; k < nc; k++) {
			ud[k] = 0;
			for (int j = 0; j < hr; j++)
				ud[k] += m.hat_u[j * nc + k] * boot_ref_d[j];
		}
		for (int j = 0; j < hr; j++) {
			double h = 0;

			for (int k = 0; k < nc; k++)
				h += m.hat_u[j * nc + k] * ud[k];
			r[j] = (boot_ref_d[j] - h) * m.inv_leverage[j];
			mean += r[j] / hr;
		}
		for (int j = 0; j < hr; j++)
			r[j] -= mean;
		worst = fmax(worst, check_array(r, refs[o].lcr_d, hr, 1e-9, "lcr_matrix(H) d",
						refs[o].order));
		boot_matrices_free(&m);
	}
	print_message("lcr: worst error %.3g\n", worst);
}

static void test_fit_matrices_match_dipy(void **state)
{
	double worst_q = 0, worst_b = 0, worst_csa = 0;

	(void)state;
	for (int o = 0; o < N_REFS; o++) {
		struct boot_matrices opdt, csa;
		int n;

		build(BOOT_MODEL_OPDT, refs[o].order, &opdt);
		build(BOOT_MODEL_CSA, refs[o].order, &csa);
		n = opdt.n_coef * opdt.n_dwi;
		worst_q = fmax(worst_q, check_array(opdt.fit_q, refs[o].opdt_q, n, 1e-9,
						    "OPDT delta_q", refs[o].order));
		worst_b = fmax(worst_b, check_array(opdt.fit_b, refs[o].opdt_b, n, 1e-9,
						    "OPDT delta_b", refs[o].order));
		worst_csa = fmax(worst_csa, check_array(csa.fit_q, refs[o].csa_fit, n, 1e-9,
							"CSA fit matrix", refs[o].order));
		for (int i = 0; i < n; i++)
			assert_true(csa.fit_b[i] == 0.0);
		boot_matrices_free(&opdt);
		boot_matrices_free(&csa);
	}
	print_message("fit: worst error delta_q %.3g, delta_b %.3g, CSA %.3g\n", worst_q,
		      worst_b, worst_csa);
}

static void test_sampling_matches_dipy(void **state)
{
	double worst = 0;

	(void)state;
	for (int o = 0; o < N_REFS; o++) {
		struct boot_matrices m;

		build(BOOT_MODEL_CSA, refs[o].order, &m);
		worst = fmax(worst, check_array(m.sampling, refs[o].sampling, m.nv * m.n_coef,
						1e-9, "sampling matrix", refs[o].order));
		boot_matrices_free(&m);
	}
	print_message("sampling: worst error %.3g\n", worst);
}

/* The per-voxel formulas of boot.h on the two-fibre signal give DIPY's
 * OpdtModel / CsaOdfModel fit(...).shm_coeff. */
static void test_coefficients_match_dipy(void **state)
{
	double worst_opdt = 0, worst_csa = 0;

	(void)state;
	for (int o = 0; o < N_REFS; o++) {
		struct boot_matrices opdt, csa;
		double c_opdt[MAX_NC], c_csa[MAX_NC];
		int hr = BOOT_REF_N_DWI, nc;

		build(BOOT_MODEL_OPDT, refs[o].order, &opdt);
		build(BOOT_MODEL_CSA, refs[o].order, &csa);
		nc = opdt.n_coef;
		for (int i = 0; i < nc; i++) {
			c_opdt[i] = 0;
			c_csa[i] = 0;
			for (int j = 0; j < hr; j++) {
				double d = boot_ref_signal[j], ln = log(d);
				double clamped = fmin(fmax(d, BOOT_CSA_MIN_SIGNAL), BOOT_CSA_MAX_SIGNAL);

				c_opdt[i] += opdt.fit_q[i * hr + j] * (-ln * (1.5 + ln) * d) -
					     opdt.fit_b[i * hr + j] * d;
				c_csa[i] += csa.fit_q[i * hr + j] * log(-log(clamped));
			}
		}
		c_csa[0] = 0.5 / sqrt(M_PI);
		worst_opdt = fmax(worst_opdt, check_array(c_opdt, refs[o].opdt_coef, nc, 1e-8,
							  "OPDT coefficients", refs[o].order));
		worst_csa = fmax(worst_csa, check_array(c_csa, refs[o].csa_coef, nc, 1e-8,
							"CSA coefficients", refs[o].order));
		boot_matrices_free(&opdt);
		boot_matrices_free(&csa);
	}
	print_message("coefficients: worst error OPDT %.3g, CSA %.3g\n", worst_opdt, worst_csa);
}

/* Expects failure with code and field, *ret untouched. */
static void expect_error(const double *dirs, size_t n, const struct boot_params *p, int code,
			 const char *field, const char *in_message)
{
	struct boot_matrices m;
	struct errbuf err = {0};
	struct sphere s = {0};

	reference_sphere(&s);
	memset(&m, 0xA5, sizeof(m));
	assert_int_equal(boot_matrices_build(dirs, n, &s, p, &m, &err), code);
	assert_string_equal(err.field, field);
	if (in_message && !strstr(err.message, in_message))
		fail_msg("message \"%s\" lacks \"%s\"", err.message, in_message);
	for (size_t i = 0; i < sizeof(m); i++)
		assert_int_equal(((unsigned char *)&m)[i], 0xA5);
	sphere_free(&s);
}

static void test_too_few_directions(void **state)
{
	struct boot_params p4 = { BOOT_MODEL_OPDT, 4, BOOT_DEFAULT_SH_LAMBDA };
	struct boot_params p6 = { BOOT_MODEL_CSA, 6, BOOT_DEFAULT_SH_LAMBDA };

	(void)state;
	expect_error(boot_ref_dirs, 15, &p4, -EINVAL, "model.sh_order",
		     "boot with sh_order 4 fits 15 coefficients and needs more "
		     "diffusion-weighted directions than that, got 15");
	expect_error(boot_ref_dirs, 3, &p4, -EINVAL, "model.sh_order", "got 3");
	expect_error(boot_ref_dirs, 28, &p6, -EINVAL, "model.sh_order",
		     "sh_order 6 fits 28 coefficients");
}

static void test_bad_params(void **state)
{
	static const struct {
		struct boot_params p;
		const char *field;
	} bad[] = {
		{ { BOOT_MODEL_OPDT, 0, 0.006 }, "model.sh_order" },
		{ { BOOT_MODEL_OPDT, 5, 0.006 }, "model.sh_order" },
		{ { BOOT_MODEL_OPDT, 14, 0.006 }, "model.sh_order" },
		{ { BOOT_MODEL_OPDT, -2, 0.006 }, "model.sh_order" },
		{ { BOOT_MODEL_CSA, 4, -1e-9 }, "model.sh_lambda" },
		{ { BOOT_MODEL_CSA, 4, NAN }, "model.sh_lambda" },
		{ { BOOT_MODEL_CSA, 4, INFINITY }, "model.sh_lambda" },
		{ { (enum boot_model)7, 4, 0.006 }, "model.name" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_error(boot_ref_dirs, BOOT_REF_N_DWI, &bad[i].p, -EINVAL, bad[i].field, NULL);
}

/* At order 2 (6 coefficients), 6 general directions and a copy of the first:
 * every other direction alone determines one combination of coefficients,
 * so its leverage is 1. */
static void test_leverage_one(void **state)
{
	struct boot_params p = { BOOT_MODEL_OPDT, 2, BOOT_DEFAULT_SH_LAMBDA };
	double dirs[7 * 3];

	(void)state;
	memcpy(dirs, boot_ref_dirs, 6 * 3 * sizeof(double));
	memcpy(&dirs[18], boot_ref_dirs, 3 * sizeof(double));
	expect_error(dirs, 7, &p, -EINVAL, "model.sh_order", "leverage");
}

/* On the equator the order-2 zonal harmonic is constant, like Y00. */
static void test_rank_deficient(void **state)
{
	struct boot_params p = { BOOT_MODEL_CSA, 2, BOOT_DEFAULT_SH_LAMBDA };
	double dirs[10 * 3];

	(void)state;
	for (int i = 0; i < 10; i++) {
		dirs[3 * i] = cos(0.3 * i);
		dirs[3 * i + 1] = sin(0.3 * i);
		dirs[3 * i + 2] = 0;
	}
	expect_error(dirs, 10, &p, -EINVAL, "inputs.bvecs", "rank-deficient");
}

/* Zero lambda is DIPY's plain pinv(B): then fit_b = diag(F L) B^+ and
 * fit_b B is diag(F L). */
static void test_zero_lambda_is_pinv(void **state)
{
	struct boot_params p = { BOOT_MODEL_OPDT, 4, 0.0 };
	struct boot_matrices m;
	struct errbuf err = {0};
	struct sphere s = {0};
	double b[BOOT_REF_N_DWI * 15];
	static const double fl[15] = { 0, 3, 3, 3, 3, 3, -7.5, -7.5, -7.5, -7.5, -7.5, -7.5,
				       -7.5, -7.5, -7.5 };

	(void)state;
	reference_sphere(&s);
	assert_int_equal(boot_matrices_build(boot_ref_dirs, BOOT_REF_N_DWI, &s, &p, &m, &err),
			 0);
	sh_matrix(SH_DESCOTEAUX07_LEGACY, 4, boot_ref_dirs, BOOT_REF_N_DWI, b);
	for (int i = 0; i < 15; i++)
		for (int k = 0; k < 15; k++) {
			double x = 0;

			for (int j = 0; j < BOOT_REF_N_DWI; j++)
				x += m.fit_b[i * BOOT_REF_N_DWI + j] * b[j * 15 + k];
			assert_true(fabs(x - (i == k ? fl[i] : 0)) <= 1e-11);
		}
	boot_matrices_free(&m);
	boot_matrices_free(&m);   /* freed matrices are zeroed: a second free is harmless */
	sphere_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hat_matches_dipy),
		cmocka_unit_test(test_residuals_match_lcr_matrix),
		cmocka_unit_test(test_fit_matrices_match_dipy),
		cmocka_unit_test(test_sampling_matches_dipy),
		cmocka_unit_test(test_coefficients_match_dipy),
		cmocka_unit_test(test_too_few_directions),
		cmocka_unit_test(test_bad_params),
		cmocka_unit_test(test_leverage_one),
		cmocka_unit_test(test_rank_deficient),
		cmocka_unit_test(test_zero_lambda_is_pinv),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
