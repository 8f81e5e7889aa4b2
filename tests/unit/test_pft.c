/* SPDX-License-Identifier: MIT */
/* engine/pft: tracking.pft's steps on the job's grid (DIPY's ceil(dist /
 * step)), their bound, and the scratch words per streamline. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/pft.h"

static struct jobspec pft_job(double back_mm, double front_mm)
{
	struct jobspec js;

	memset(&js, 0, sizeof(js));
	js.pft = true;
	js.pft_back_mm = back_mm;
	js.pft_front_mm = front_mm;
	js.pft_particles = 15;
	js.pft_max_trials = 20;
	js.max_steps = 500;
	return js;
}

static void test_steps_as_dipy(void **state)
{
	struct jobspec js = pft_job(2, 1);
	struct pft_plan plan;
	struct errbuf err;

	(void)state;
	assert_int_equal(pft_plan(&js, 0.5, &plan, &err), 0);
	assert_int_equal(plan.back_steps, 4);
	assert_int_equal(plan.front_steps, 2);
	/* Two sets of 15 particles of 7 (point, direction) pairs, a status and
	 * a step count; weights and their sums; 501 points of the half. */
	assert_int_equal(plan.line_words, 2 * 15 * (6 * 7 + 2) + 2 * 15 + 7 * 501);
	/* A partial step counts whole: ceil(2 / 0.3) = 7, ceil(1 / 0.3) = 4. */
	assert_int_equal(pft_plan(&js, 0.3, &plan, &err), 0);
	assert_int_equal(plan.back_steps, 7);
	assert_int_equal(plan.front_steps, 4);
}

static void test_no_pft(void **state)
{
	struct jobspec js = pft_job(2, 1);
	struct pft_plan plan;
	struct errbuf err;

	(void)state;
	js.pft = false;
	assert_int_equal(pft_plan(&js, 0.5, &plan, &err), 0);
	assert_int_equal(plan.line_words, 0);
	assert_int_equal(plan.back_steps + plan.front_steps, 0);
}

static void test_bounds_name_the_field(void **state)
{
	struct jobspec none = pft_job(0, 0), many = pft_job(10, 10);
	struct pft_plan plan;
	struct errbuf err;

	(void)state;
	assert_int_equal(pft_plan(&none, 0.5, &plan, &err), -EINVAL);
	assert_string_equal(err.field, "tracking.pft.back_mm");
	/* 20 mm in steps of 0.25 mm: 80 steps, over PFT_MAX_STEPS. */
	assert_int_equal(pft_plan(&many, 0.25, &plan, &err), -EINVAL);
	assert_string_equal(err.field, "tracking.pft.back_mm");
	assert_non_null(strstr(err.message, "1 to 64 steps"));
	assert_int_equal(pft_plan(&many, 0.5, &plan, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_steps_as_dipy),
		cmocka_unit_test(test_no_pft),
		cmocka_unit_test(test_bounds_name_the_field),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
