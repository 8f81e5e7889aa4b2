/* SPDX-License-Identifier: MIT */
/*
 * philox: Random123's known-answer vectors for Philox4x32-10 and the exact
 * bit recipes of the uniform conversions, which the GLSL side repeats.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>

#include "base/philox.h"

struct known_answer {
	uint32_t counter[4], key[2], expected[4];
};

/* From Random123's kat_vectors (philox4x32 10 rounds). */
static const struct known_answer known_answers[] = {
	{{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
	{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
	 {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
	{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
	 {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

static void test_known_answers(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(known_answers) / sizeof(known_answers[0]); i++) {
		const struct known_answer *ka = &known_answers[i];
		uint32_t out[4];

		philox4x32_10(ka->counter, ka->key, out);
		for (int w = 0; w < 4; w++)
			assert_int_equal(out[w], ka->expected[w]);
	}
}

/* Counter words are independent inputs: flipping any one bit changes the
 * block (and the key words likewise). */
static void test_every_input_word_matters(void **state)
{
	const uint32_t counter[4] = {1, 2, 3, 4}, key[2] = {5, 6};
	uint32_t base[4];

	(void)state;
	philox4x32_10(counter, key, base);
	for (int w = 0; w < 6; w++) {
		uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
		uint32_t k[2] = {key[0], key[1]}, out[4];
		int differing = 0;

		if (w < 4)
			c[w] ^= 1u << 31;
		else
			k[w - 4] ^= 1;
		philox4x32_10(c, k, out);
		for (int i = 0; i < 4; i++)
			differing += out[i] != base[i];
		assert_int_equal(differing, 4);
	}
}

static void test_uniform_float_is_top_24_bits(void **state)
{
	(void)state;
	assert_true(philox_uniform_float(0) == 0.0f);
	assert_true(philox_uniform_float(0xff) == 0.0f);
	assert_true(philox_uniform_float(0x100) == 0x1p-24f);
	assert_true(philox_uniform_float(0x80000000u) == 0.5f);
	assert_true(philox_uniform_float(0xffffffffu) == 1.0f - 0x1p-24f);
	assert_true(philox_uniform_float(0xffffffffu) < 1.0f);
	assert_true(philox_uniform_float(0x12345678u) == (float)0x123456 * 0x1p-24f);
}

static void test_key_from_seed(void **state)
{
	uint32_t key[2];

	(void)state;
	philox_key_from_seed(0x0123456789abcdefull, key);
	assert_int_equal(key[0], 0x89abcdefu);
	assert_int_equal(key[1], 0x01234567u);
	philox_key_from_seed(42, key);
	assert_int_equal(key[0], 42);
	assert_int_equal(key[1], 0);
}

/* A coarse sanity check of the stream: means of 4*65536 uniforms. */
static void test_uniforms_average_one_half(void **state)
{
	uint32_t key[2], out[4];
	double sum_f = 0.0;
	const int n = 65536;

	(void)state;
	philox_key_from_seed(2024, key);
	for (int i = 0; i < n; i++) {
		const uint32_t counter[4] = {0, (uint32_t)i, 0, PHILOX_STREAM_PROB};

		philox4x32_10(counter, key, out);
		for (int w = 0; w < 4; w++)
			sum_f += philox_uniform_float(out[w]);
	}
	assert_true(fabs(sum_f / (4.0 * n) - 0.5) < 0.005);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_answers),
		cmocka_unit_test(test_every_input_word_matters),
		cmocka_unit_test(test_uniform_float_is_top_24_bits),
		cmocka_unit_test(test_key_from_seed),
		cmocka_unit_test(test_uniforms_average_one_half),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
