/* SPDX-License-Identifier: MIT */
/* Unit tests for tractogram_read.c: what each writer wrote reads back in voxel
 * coordinates (with seeds where the format has them), TCK needs a grid,
 * malformed files are refused, and conversion keeps every streamline. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/output.h"
#include "formats/tractogram_read.h"

static const struct tractogram_grid grid = {
	.dim = { 40, 50, 30 },
	.affine = {
		{ 1.8, 0.3, -0.2, -40.0 },
		{ -0.25, 1.9, 0.4, 12.5 },
		{ 0.1, -0.35, 2.2, 7.0 },
		{ 0, 0, 0, 1 },
	},
};

#define N_LINES 3
static const uint32_t lengths[N_LINES] = { 4, 0, 2 };   /* the empty one is dropped */
static const float points[] = {
	1.0f, 2.0f, 3.0f, 1.5f, 2.25f, 3.5f, 2.0f, 2.5f, 4.0f, 10.75f, 20.5f, 5.0f,
	0.0f, 0.0f, 0.0f, 39.0f, 49.0f, 29.0f,
};
static const float seeds[N_LINES][3] = { { -3.5f, 4.0f, 9.25f }, { 0 }, { 7.0f, -1.0f, 2.0f } };

/* A tractogram of the fixture lines written by output.h's writer, rewound. */
static FILE *written(enum output_format format, const struct output_options *opts)
{
	struct output_writer *w;
	struct errbuf err = { 0 };
	FILE *f = tmpfile();
	const float *p = points;

	assert_non_null(f);
	assert_int_equal(output_writer_new(format, f, grid.dim, grid.affine, opts, &w, &err), 0);
	for (int i = 0; i < N_LINES; i++) {
		assert_int_equal(output_write_streamline(w, p, lengths[i],
							 opts && opts->with_seeds ? seeds[i] : NULL), 0);
		p += 3 * lengths[i];
	}
	assert_int_equal(output_writer_finish(w), 0);
	rewind(f);
	return f;
}

/* Reads f back and checks every non-empty line against the fixture. */
static void check_read_back(FILE *f, enum output_format format, const struct tractogram_grid *g,
			    bool want_seeds, float tol)
{
	struct tractogram_reader *r;
	struct errbuf err = { 0 };
	const float *got, *seed, *p = points;
	uint32_t n;

	assert_int_equal(tractogram_reader_open(f, format, g, &r, &err), 0);
	assert_int_equal(tractogram_reader_has_seeds(r), want_seeds);
	for (int i = 0; i < N_LINES; p += 3 * lengths[i], i++) {
		if (lengths[i] == 0)
			continue;
		assert_int_equal(tractogram_reader_next(r, &got, &n, &seed), 1);
		assert_int_equal(n, lengths[i]);
		for (uint32_t k = 0; k < 3 * n; k++)
			assert_float_equal(got[k], p[k], tol);
		if (want_seeds)
			assert_memory_equal(seed, seeds[i], sizeof(seeds[i]));
		else
			assert_null(seed);
	}
	assert_int_equal(tractogram_reader_next(r, &got, &n, &seed), 0);
	tractogram_reader_close(r);
	fclose(f);
}

static void test_trk(void **state)
{
	struct output_options opts = { .with_seeds = true };

	(void)state;
	check_read_back(written(OUTPUT_TRK, NULL), OUTPUT_TRK, NULL, false, 1e-4f);
	check_read_back(written(OUTPUT_TRK, &opts), OUTPUT_TRK, &grid, true, 1e-4f);
}

static void test_tck(void **state)
{
	struct tractogram_reader *r = NULL;
	struct errbuf err = { 0 };
	FILE *f;

	(void)state;
	check_read_back(written(OUTPUT_TCK, NULL), OUTPUT_TCK, &grid, false, 1e-4f);
	f = written(OUTPUT_TCK, NULL);
	assert_int_equal(tractogram_reader_open(f, OUTPUT_TCK, NULL, &r, &err), -EINVAL);
	assert_null(r);
	fclose(f);
}

static void test_trx(void **state)
{
	struct output_options seeded = { .with_seeds = true, .compression = TRX_COMPRESSION_DEFLATE };
	struct output_options half = { .positions = TRX_POSITIONS_FLOAT16 };

	(void)state;
	check_read_back(written(OUTPUT_TRX, &seeded), OUTPUT_TRX, NULL, true, 1e-4f);
	/* float16 keeps about 11 bits: tens of mm round to a few hundredths. */
	check_read_back(written(OUTPUT_TRX, &half), OUTPUT_TRX, &grid, false, 0.05f);
}

static void test_malformed(void **state)
{
	static const char junk[] = "not a tractogram at all, and too short for a TrackVis header";
	const enum output_format formats[] = { OUTPUT_TRK, OUTPUT_TCK, OUTPUT_TRX };
	struct tractogram_reader *r = NULL;
	struct errbuf err = { 0 };

	(void)state;
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
		FILE *f = tmpfile();
		assert_non_null(f);
		assert_int_equal(fwrite(junk, 1, sizeof(junk), f), sizeof(junk));
		rewind(f);
		assert_int_equal(tractogram_reader_open(f, formats[i], &grid, &r, &err), -EINVAL);
		assert_null(r);
		fclose(f);
	}
}

/* A TRK truncated inside a record is an error, not a shorter tractogram. */
static void test_truncated_trk(void **state)
{
	FILE *f = written(OUTPUT_TRK, NULL), *cut = tmpfile();
	struct tractogram_reader *r;
	struct errbuf err = { 0 };
	const float *got, *seed;
	char buf[1100];
	uint32_t n;
	size_t len;

	(void)state;
	assert_non_null(cut);
	len = fread(buf, 1, sizeof(buf), f);
	assert_true(len > 1000 + 4 + 12);
	assert_int_equal(fwrite(buf, 1, 1000 + 4 + 12, cut), 1000 + 4 + 12);
	rewind(cut);
	assert_int_equal(tractogram_reader_open(cut, OUTPUT_TRK, NULL, &r, &err), 0);
	assert_int_equal(tractogram_reader_next(r, &got, &n, &seed), -EINVAL);
	tractogram_reader_close(r);
	fclose(cut);
	fclose(f);
}

/* TRK with seeds -> TCK (seeds dropped) -> TRX -> TRK: every line survives. */
static void test_convert_chain(void **state)
{
	struct output_options opts = { .with_seeds = true };
	struct errbuf err = { 0 };
	FILE *trk = written(OUTPUT_TRK, &opts), *tck = tmpfile(), *trx = tmpfile(), *back = tmpfile();
	uint64_t count = 0;

	(void)state;
	assert_non_null(tck);
	assert_non_null(trx);
	assert_non_null(back);
	assert_int_equal(tractogram_convert(trk, OUTPUT_TRK, &grid, tck, OUTPUT_TCK, &count, &err), 0);
	assert_int_equal(count, 2);
	rewind(tck);
	assert_int_equal(tractogram_convert(tck, OUTPUT_TCK, &grid, trx, OUTPUT_TRX, &count, &err), 0);
	rewind(trx);
	assert_int_equal(tractogram_convert(trx, OUTPUT_TRX, NULL, back, OUTPUT_TRK, &count, &err), 0);
	assert_int_equal(count, 2);
	rewind(back);
	check_read_back(back, OUTPUT_TRK, NULL, false, 1e-4f);
	fclose(trk);
	fclose(tck);
	fclose(trx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trk),
		cmocka_unit_test(test_tck),
		cmocka_unit_test(test_trx),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_truncated_trk),
		cmocka_unit_test(test_convert_chain),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
