/* SPDX-License-Identifier: MIT */
/*
 * shard: the "K/N" parser (0-based K, bounds, junk refused with the field
 * named), the split of S seeds into N contiguous ranges that cover them
 * end to end (also where K*S overflows 64 bits), a restricted seed
 * generator serving the whole job's seeds at their global indices, and the
 * shard record's text round trip (merge.h), other versions' told apart,
 * and max_seeds_per_job counting a shard's seeds.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "formats/merge.h"
#include "job/shard.h"

static void test_parse_accepts(void **state)
{
	struct errbuf err = { 0 };
	struct shard s;

	(void)state;
	assert_int_equal(shard_parse("0/1", &s, &err), 0);
	assert_int_equal(s.index, 0);
	assert_int_equal(s.count, 1);
	assert_int_equal(shard_parse("3/4", &s, &err), 0);
	assert_int_equal(s.index, 3);
	assert_int_equal(s.count, 4);
	assert_int_equal(shard_parse("99999/100000", &s, &err), 0);
}

static void expect_refused(const char *text)
{
	struct errbuf err = { 0 };
	struct shard s;

	assert_int_equal(shard_parse(text, &s, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.shard");
	assert_non_null(strstr(err.message, "K/N"));
}

static void test_parse_refuses(void **state)
{
	(void)state;
	expect_refused("4/4");          /* K counts from 0 */
	expect_refused("1/0");
	expect_refused("0/0");
	expect_refused("-1/4");
	expect_refused("+1/4");
	expect_refused(" 1/4");
	expect_refused("1/4 ");
	expect_refused("1/");
	expect_refused("/4");
	expect_refused("1");
	expect_refused("1:4");
	expect_refused("1/4/5");
	expect_refused("0/100001");     /* over SHARD_MAX_COUNT */
	expect_refused("0/99999999999999999999999");
	expect_refused("");
}

/* Ranges of every shard tile [0, total) in order, sizes differing by one
 * at most, equal to floor(k * total / n). */
static void check_split(uint64_t total, uint32_t n)
{
	uint64_t at = 0, lo = UINT64_MAX, hi = 0;

	for (uint32_t k = 0; k < n; k++) {
		struct shard s = { k, n };
		uint64_t first, end;

		shard_range(&s, total, &first, &end);
		assert_true(first == at);
		assert_true(end >= first);
		if (total < (1ull << 32))
			assert_true(first == (uint64_t)k * total / n);
		lo = end - first < lo ? end - first : lo;
		hi = end - first > hi ? end - first : hi;
		at = end;
	}
	assert_true(at == total);
	assert_true(hi - lo <= 1);
}

static void test_range_split(void **state)
{
	static const uint64_t totals[] = { 1, 2, 3, 7, 10, 1000, 1001, 999999937,
					   UINT64_MAX / 3, UINT64_MAX };
	static const uint32_t counts[] = { 1, 2, 3, 4, 7, 16, 1000 };

	(void)state;
	for (size_t i = 0; i < sizeof(totals) / sizeof(totals[0]); i++)
		for (size_t j = 0; j < sizeof(counts) / sizeof(counts[0]); j++)
			if (totals[i] >= counts[j] || totals[i] > 100)
				check_split(totals[i], counts[j]);
	/* No shard: the whole range. */
	{
		struct shard none = { 0, 0 };
		uint64_t first, end;

		shard_range(&none, 12, &first, &end);
		assert_true(first == 0 && end == 12);
	}
}

/* A restricted generator gives the seeds the whole job gives at the same
 * global indices, and refuses others. */
static void test_shard_seeds(void **state)
{
	double pts[3 * 10];
	const int64_t dim[3] = { 20, 20, 20 };
	const double affine[4][4] = { {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1} };
	struct seeds *whole, *part;
	struct errbuf err = { 0 };
	struct shard s = { 1, 3 }, many = { 0, 11 };
	float a[3 * 10], b[3 * 10];
	uint64_t first, end;

	(void)state;
	for (int i = 0; i < 30; i++)
		pts[i] = (double)(i % 19);
	assert_int_equal(seeds_from_points("seeds.points", pts, 10, false, affine, dim, &whole, &err), 0);
	assert_int_equal(seeds_from_points("seeds.points", pts, 10, false, affine, dim, &part, &err), 0);
	assert_int_equal(shard_seeds(&s, part, &err), 0);
	seeds_range(part, &first, &end);
	assert_true(first == 3 && end == 6);
	assert_true(seeds_count(part) == 10);
	assert_int_equal(seeds_fill(whole, 0, 10, a), 0);
	assert_int_equal(seeds_fill(part, 3, 3, b), 0);
	assert_memory_equal(a + 9, b, 9 * sizeof(float));
	assert_int_equal(seeds_fill(part, 2, 1, b), -EINVAL);
	assert_int_equal(seeds_fill(part, 5, 2, b), -EINVAL);
	/* More shards than seeds. */
	assert_int_equal(shard_seeds(&many, whole, &err), -EINVAL);
	assert_string_equal(err.field, "seeds.shard");
	seeds_free(whole);
	seeds_free(part);
}

static void test_tag_round_trip(void **state)
{
	struct shard_tag t = { 2, 4, 500, 750, 1000, 0xbe293fd1562e6b08ull, 0x0123456789abcdefull };
	struct shard_tag widest = { 99998, 99999, UINT64_MAX - 1, UINT64_MAX - 1, UINT64_MAX,
				    UINT64_MAX, UINT64_MAX }, back;
	char text[SHARD_TAG_MAX];

	(void)state;
	shard_tag_format(&t, text);
	assert_string_equal(text, "tractd-shard/2 2 4 500 750 1000 be293fd1562e6b08 "
			    "0123456789abcdef");
	assert_int_equal(shard_tag_parse(text, &back), 0);
	assert_memory_equal(&t, &back, sizeof(t));
	/* The widest record still fits (and so parses back whole). */
	shard_tag_format(&widest, text);
	assert_int_equal(shard_tag_parse(text, &back), 0);
	assert_memory_equal(&widest, &back, sizeof(widest));
	assert_int_equal(shard_tag_parse("tractd-shard/2 4 4 0 1 1 00 00", &back), -EINVAL);
	assert_int_equal(shard_tag_parse("tractd-shard/2 0 1 0 2 1 00 00", &back), -EINVAL);
	/* No input digest: not a record of this version. */
	assert_int_equal(shard_tag_parse("tractd-shard/2 0 1 0 1 1 00", &back), -EINVAL);
	assert_int_equal(shard_tag_parse("tractd-shard/1 0 1 0 1 1 00", &back), -EPROTO);
	assert_int_equal(shard_tag_parse("tractd-shard/3 0 1 0 1 1 00 00 00", &back), -EPROTO);
	assert_int_equal(shard_tag_parse("", &back), -EINVAL);
}

static void test_seed_limit(void **state)
{
	struct shard s = { .index = 99, .count = 100 };
	struct errbuf err = { 0 };

	(void)state;
	/* 10^8 seeds in 100 shards under a limit of 10^7 per job. */
	assert_int_equal(shard_check_seed_limit(&s, 100000000, 10000000, "seeds.count", &err), 0);
	assert_int_equal(shard_check_seed_limit(&s, 100000000, 0, "seeds.count", &err), 0);
	assert_int_equal(shard_check_seed_limit(&s, 100000000, 1000000, "seeds.count", &err), 0);
	assert_int_equal(shard_check_seed_limit(&s, 100000100, 1000000, "seeds.count", &err),
			 -E2BIG);
	assert_string_equal(err.field, "seeds.count");
	assert_int_equal(errbuf_kind(&err, -E2BIG), ERR_KIND_LIMIT);
	assert_non_null(strstr(err.message, "shard 99/100 tracks 1000001 of the job's 100000100"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_accepts),
		cmocka_unit_test(test_parse_refuses),
		cmocka_unit_test(test_range_split),
		cmocka_unit_test(test_shard_seeds),
		cmocka_unit_test(test_tag_round_trip),
		cmocka_unit_test(test_seed_limit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
