/* SPDX-License-Identifier: MIT */
/*
 * peak_rss: the peak follows a large allocation touched, and a reset brings
 * it back down once that memory is returned (the daemon's per-job peak).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>
#include <sys/mman.h>

#include "base/peak_rss.h"

#define BIG (64u << 20)

static uint64_t peak(void)
{
	uint64_t bytes = 0;

	assert_int_equal(peak_rss_read(&bytes), 0);
	return bytes;
}

static void test_peak_follows_and_resets(void **state)
{
	uint64_t before, during, after;
	char *p;

	(void)state;
	assert_int_equal(peak_rss_reset(), 0);
	before = peak();
	assert_true(before > 0);
	/* mmap, not malloc: munmap hands the pages back at once. */
	p = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 1, BIG);
	during = peak();
	assert_true(during >= before + BIG / 2);
	assert_int_equal(munmap(p, BIG), 0);
	/* A peak, not the memory resident now (the kernel's counters are
	 * batched per thread: a few pages either way). */
	assert_true(peak() + BIG / 8 >= during);
	assert_int_equal(peak_rss_reset(), 0);
	after = peak();
	assert_true(after + BIG / 2 <= during);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_peak_follows_and_resets),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
