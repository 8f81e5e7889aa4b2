/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for parallel.c: every part runs exactly once, on threads or on
 * the calling thread, past PARALLEL_MAX_PARTS too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/parallel.h"

#define MANY_PARTS (3 * PARALLEL_MAX_PARTS + 5)

struct part {
	int runs;
	pthread_t ran_on;
};

static void count_run(void *arg)
{
	struct part *p = arg;

	p->runs++;
	p->ran_on = pthread_self();
}

static void init_parts(struct part *parts, size_t n)
{
	memset(parts, 0, n * sizeof(*parts));
}

static void assert_each_ran_once(const struct part *parts, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (parts[i].runs != 1)
			fail_msg("part %zu ran %d times", i, parts[i].runs);
}

static void test_run_every_part_once(void **state)
{
	static const size_t counts[] = { 1, 2, PARALLEL_MAX_PARTS, MANY_PARTS };
	struct part parts[MANY_PARTS];

	(void)state;
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		init_parts(parts, MANY_PARTS);
		parallel_run(count_run, parts, sizeof(parts[0]), counts[c]);
		assert_each_ran_once(parts, counts[c]);
		for (size_t i = counts[c]; i < MANY_PARTS; i++)
			assert_int_equal(parts[i].runs, 0);
		/* Part 0 and the parts past the cap run on the calling thread. */
		assert_true(pthread_equal(parts[0].ran_on, pthread_self()));
		for (size_t i = PARALLEL_MAX_PARTS; i < counts[c]; i++)
			assert_true(pthread_equal(parts[i].ran_on, pthread_self()));
	}
}

static void test_run_nothing(void **state)
{
	struct part parts[1];

	(void)state;
	init_parts(parts, 1);
	parallel_run(count_run, parts, sizeof(parts[0]), 0);
	assert_int_equal(parts[0].runs, 0);
}

static void test_start_then_finish(void **state)
{
	struct part parts[MANY_PARTS];
	struct parallel p;

	(void)state;
	init_parts(parts, MANY_PARTS);
	parallel_start(&p, count_run, parts, sizeof(parts[0]), MANY_PARTS);
	parallel_finish(&p);
	assert_each_ran_once(parts, MANY_PARTS);
	/* The same struct serves again once finished. */
	init_parts(parts, MANY_PARTS);
	parallel_start(&p, count_run, parts, sizeof(parts[0]), 3);
	parallel_finish(&p);
	assert_each_ran_once(parts, 3);
	assert_int_equal(parts[3].runs, 0);
}

static void test_parts_bounds(void **state)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t most = cpus > 0 && (size_t)cpus < PARALLEL_MAX_PARTS ? (size_t)cpus
								     : PARALLEL_MAX_PARTS;

	(void)state;
	assert_int_equal(parallel_parts(0, 10), 1);
	assert_int_equal(parallel_parts(9, 10), 1);
	assert_int_equal(parallel_parts(UINT64_MAX, 1), most);
	assert_int_equal(parallel_parts(UINT64_MAX, 0), most);
	assert_true(parallel_parts(25, 10) <= 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_every_part_once),
		cmocka_unit_test(test_run_nothing),
		cmocka_unit_test(test_start_then_finish),
		cmocka_unit_test(test_parts_bounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
