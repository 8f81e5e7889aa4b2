/* SPDX-License-Identifier: MIT */
/*
 * output_write_lines: the parallel encoder writes exactly the bytes of
 * output_write_streamline_dps called line by line, for TRK, TCK (and its
 * seeds file) and TRX (float32 and float16, every dps column), on 1 to 16
 * threads, for batches of 0 lines, 1 line, fewer lines than threads, and
 * several rounds whose lines split unevenly between the threads; empty
 * lines are skipped and counted out alike.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "formats/output.h"

/* Two rounds and more of 3 threads (4096 lines each in output.c), and a
 * multiple of none of the thread counts tried. */
#define MANY_LINES (2 * 3 * 4096 + 7)
#define MAX_POINTS 24

static const int64_t dims[3] = { 30, 40, 20 };
static const double affine[4][4] = {
	{ -1.25, 0.0, 0.1, 20.0 }, { 0.0, 1.25, 0.0, -30.0 }, { 0.2, 0.0, 2.5, -7.0 }, { 0, 0, 0, 1 }
};

/* The lines of a batch: a few points (none for every 13th, one for every
 * 17th, up to MAX_POINTS) at coordinates drawn from the index. */
struct batch {
	float points[MAX_POINTS * 3];
};

static uint32_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (uint32_t)x;
}

static uint32_t line_points(uint64_t i)
{
	if (i % 13 == 5)
		return 0;
	if (i % 17 == 3)
		return 1;
	return 2 + mix(i) % (MAX_POINTS - 1);
}

static void fill_line(uint64_t i, float *points, uint32_t n, struct output_line *line)
{
	for (uint32_t k = 0; k < 3 * n; k++)
		points[k] = (float)(mix(i * 131 + k) % 20000) / 1000.0f;
	line->points_vox = points;
	line->n = n;
	line->dps.seed_index = (uint32_t)i;
	line->dps.seed_vertex = n / 2;
	line->dps.direction_getter = (uint8_t)(i % 3);
	for (int c = 0; c < 3; c++)
		line->seed_ras[c] = (float)(mix(i + 7u * (unsigned)c) % 5000) / 97.0f;
	line->dps.seed_ras = line->seed_ras;
}

/* output_line_fn: each part fills its own points (the engine's compression
 * scratch). */
struct parts_scratch {
	float points[16][MAX_POINTS * 3];
	bool used[16];
};

static void batch_line(void *userdata, uint64_t i, unsigned part, struct output_line *line)
{
	struct parts_scratch *s = userdata;

	assert_true(part < 16);
	s->used[part] = true;
	fill_line(i, s->points[part], line_points(i), line);
}

struct config {
	const char *name;
	enum output_format format;
	struct output_options opts;
};

struct file_pair {
	FILE *out, *seeds;
};

static unsigned char *slurp(FILE *f, size_t *len)
{
	long end;
	unsigned char *buf;

	assert_int_equal(fflush(f), 0);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	end = ftell(f);
	assert_true(end >= 0);
	buf = malloc((size_t)end + 1);
	assert_non_null(buf);
	rewind(f);
	assert_int_equal(fread(buf, 1, (size_t)end, f), (size_t)end);
	*len = (size_t)end;
	return buf;
}

static struct output_writer *open_writer(const struct config *c, struct file_pair *fp)
{
	struct output_options o = c->opts;
	struct output_writer *w = NULL;

	fp->out = tmpfile();
	fp->seeds = tmpfile();
	assert_non_null(fp->out);
	assert_non_null(fp->seeds);
	o.seeds_file = fp->seeds;
	assert_int_equal(output_writer_new(c->format, fp->out, dims, affine, &o, &w, NULL), 0);
	return w;
}

/* Both files after the writer finished; closes them. */
static void finish(struct output_writer *w, struct file_pair *fp, unsigned char *bytes[2],
		   size_t len[2])
{
	assert_int_equal(output_writer_finish(w), 0);
	bytes[0] = slurp(fp->out, &len[0]);
	bytes[1] = slurp(fp->seeds, &len[1]);
	fclose(fp->out);
	fclose(fp->seeds);
}

static void reference(const struct config *c, uint64_t n, unsigned char *bytes[2], size_t len[2])
{
	struct file_pair fp;
	struct output_writer *w = open_writer(c, &fp);
	float points[MAX_POINTS * 3];

	for (uint64_t i = 0; i < n; i++) {
		struct output_line line = { 0 };

		fill_line(i, points, line_points(i), &line);
		assert_int_equal(output_write_streamline_dps(w, line.points_vox, line.n, &line.dps),
				 0);
	}
	finish(w, &fp, bytes, len);
}

static uint64_t written_lines(uint64_t n)
{
	uint64_t k = 0;

	for (uint64_t i = 0; i < n; i++)
		k += line_points(i) > 0;
	return k;
}

static void check_config(const struct config *c)
{
	static const uint64_t counts[] = { 0, 1, 2, 5, MANY_LINES };
	static const size_t threads[] = { 1, 2, 3, 16 };

	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
		unsigned char *want[2];
		size_t want_len[2];

		reference(c, counts[k], want, want_len);
		for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
			struct parts_scratch *s = calloc(1, sizeof(*s));
			struct output_write_stats st = { 0 };
			struct file_pair fp;
			struct output_writer *w = open_writer(c, &fp);
			unsigned char *got[2];
			size_t got_len[2];

			assert_non_null(s);
			assert_int_equal(output_write_lines(w, counts[k], batch_line, s, threads[t],
							    &st), 0);
			assert_int_equal(st.streamlines, written_lines(counts[k]));
			for (size_t p = threads[t]; p < 16; p++)
				assert_false(s->used[p]);
			finish(w, &fp, got, got_len);
			for (int f = 0; f < 2; f++) {
				if (got_len[f] != want_len[f] || memcmp(got[f], want[f], got_len[f]))
					fail_msg("%s, %llu lines, %zu threads: %s differs", c->name,
						 (unsigned long long)counts[k], threads[t],
						 f ? "the seeds file" : "the tractogram");
				free(got[f]);
			}
			free(s);
		}
		free(want[0]);
		free(want[1]);
	}
}

static void test_trk(void **state)
{
	const struct config plain = { "trk", OUTPUT_TRK, { 0 } };
	const struct config dps = { "trk with properties", OUTPUT_TRK,
				    { .with_seeds = true, .with_seed_index = true,
				      .with_direction_getter = true } };

	(void)state;
	check_config(&plain);
	check_config(&dps);
}

static void test_tck(void **state)
{
	const struct config plain = { "tck", OUTPUT_TCK, { 0 } };
	const struct config seeds = { "tck with seeds", OUTPUT_TCK, { .with_seeds = true } };

	(void)state;
	check_config(&plain);
	check_config(&seeds);
}

static void test_trx(void **state)
{
	const struct config f32 = { "trx float32", OUTPUT_TRX,
				    { .with_seeds = true, .with_seed_index = true,
				      .with_direction_getter = true } };
	const struct config f16 = { "trx float16 deflated", OUTPUT_TRX,
				    { .positions = TRX_POSITIONS_FLOAT16,
				      .compression = TRX_COMPRESSION_DEFLATE } };

	(void)state;
	check_config(&f32);
	check_config(&f16);
}

/* A line the writer refuses fails the batch as it fails the call line by
 * line: TCK's seeds file needs every seed. */
static void no_seed_line(void *userdata, uint64_t i, unsigned part, struct output_line *line)
{
	static const float points[6] = { 1, 2, 3, 4, 5, 6 };

	(void)userdata;
	(void)part;
	line->points_vox = points;
	line->n = 2;
	line->dps.seed_index = (uint32_t)i;
}

static void test_refused_line(void **state)
{
	const struct config c = { "tck with seeds", OUTPUT_TCK, { .with_seeds = true } };
	struct output_write_stats st = { 0 };
	struct file_pair fp;
	struct output_writer *w = open_writer(&c, &fp);

	(void)state;
	assert_int_equal(output_write_lines(w, 9000, no_seed_line, NULL, 3, &st), -EINVAL);
	output_writer_finish(w);
	fclose(fp.out);
	fclose(fp.seeds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trk),
		cmocka_unit_test(test_tck),
		cmocka_unit_test(test_trx),
		cmocka_unit_test(test_refused_line),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
