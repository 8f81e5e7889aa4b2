/* SPDX-License-Identifier: MIT */
/*
 * half: float -> binary16 rounding (ties to even, subnormals, overflow to
 * infinity, NaN) checked against known encodings and, exhaustively, against
 * the midpoints between neighbouring halves.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>

#include "formats/half.h"

static void test_known_encodings(void **state)
{
	static const struct {
		float f;
		uint16_t h;
	} cases[] = {
		{ 0.0f, 0x0000 },  { -0.0f, 0x8000 },   { 1.0f, 0x3c00 },    { -2.0f, 0xc000 },
		{ 0.5f, 0x3800 },  { 65504.0f, 0x7bff }, { 0x1p-14f, 0x0400 }, /* smallest normal */
		{ 0x1p-24f, 0x0001 },                     /* smallest subnormal */
		{ 0x1.ff8p-15f, 0x03ff },                 /* largest subnormal */
		{ 0.333333343f, 0x3555 }, { 123.456f, 0x57b7 }, { -45.6789f, 0xd1b6 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(half_from_float(cases[i].f), cases[i].h);
}

static void test_overflow_and_specials(void **state)
{
	(void)state;
	assert_int_equal(half_from_float(65519.99f), 0x7bff);  /* below the tie */
	assert_int_equal(half_from_float(65520.0f), 0x7c00);   /* tie to even: infinity */
	assert_int_equal(half_from_float(1e10f), 0x7c00);
	assert_int_equal(half_from_float(-1e10f), 0xfc00);
	assert_int_equal(half_from_float(INFINITY), 0x7c00);
	assert_int_equal(half_from_float(-INFINITY), 0xfc00);
	assert_true(isnan(half_to_float(half_from_float(NAN))));
	assert_true((half_from_float(NAN) & 0x7c00) == 0x7c00 && (half_from_float(NAN) & 0x3ff));
	/* A NaN whose payload sits below the bits a half keeps is still a NaN. */
	assert_true(isnan(half_to_float(half_from_float(nanf("1")))));
	assert_true(isinf(half_to_float(0x7c00)) && half_to_float(0xfc00) < 0);
}

static void test_underflow(void **state)
{
	(void)state;
	assert_int_equal(half_from_float(0x1p-25f), 0x0000);             /* tie: to zero (even) */
	assert_int_equal(half_from_float(-0x1p-25f), 0x8000);
	assert_int_equal(half_from_float(nextafterf(0x1p-25f, 1.0f)), 0x0001);
	assert_int_equal(half_from_float(0x1.8p-24f), 0x0002);           /* 1.5 ulp: tie to 2 */
	assert_int_equal(half_from_float(0x1p-30f), 0x0000);
	assert_int_equal(half_from_float(1e-45f), 0x0000);               /* float subnormal */
	/* Rounding up out of the subnormals gives the smallest normal. */
	assert_int_equal(half_from_float(nextafterf(0x1p-14f, 0.0f)), 0x0400);
}

/* Every finite half survives the round trip, so the encoder hits each code. */
static void test_every_half_round_trips(void **state)
{
	(void)state;
	for (uint32_t h = 0; h <= 0xffff; h++) {
		float f = half_to_float((uint16_t)h);
		if (isnan(f))
			continue;
		assert_int_equal(half_from_float(f), h);
	}
}

/* Between each pair of neighbouring positive finite halves: the exact
 * midpoint goes to the even code, a float ulp either side to the nearer. */
static void test_every_midpoint_rounds_to_even(void **state)
{
	(void)state;
	for (uint16_t h = 0; h < 0x7bff; h++) {
		float lo = half_to_float(h), hi = half_to_float((uint16_t)(h + 1));
		float mid = (float)(((double)lo + (double)hi) / 2); /* exact: 12 bits */
		uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;

		assert_true((double)mid == ((double)lo + (double)hi) / 2);
		assert_int_equal(half_from_float(mid), even);
		assert_int_equal(half_from_float(nextafterf(mid, 0.0f)), h);
		assert_int_equal(half_from_float(nextafterf(mid, INFINITY)), h + 1);
		assert_int_equal(half_from_float(-mid), 0x8000 | even);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_encodings),
		cmocka_unit_test(test_overflow_and_specials),
		cmocka_unit_test(test_underflow),
		cmocka_unit_test(test_every_half_round_trips),
		cmocka_unit_test(test_every_midpoint_rounds_to_even),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
