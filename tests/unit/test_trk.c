/* SPDX-License-Identifier: MIT */
/* Unit tests for trk.c: header layout, record encoding, n_count patching. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "formats/trk.h"

static const int64_t dims[3] = { 10, 20, 30 };

/* LPS, 2 x 2 x 2.5 mm. */
static const double lps[4][4] = {
	{ -2.0, 0, 0, 90.0 },
	{ 0, -2.0, 0, 126.0 },
	{ 0, 0, 2.5, -72.0 },
	{ 0, 0, 0, 1 },
};

static const double oblique[4][4] = {
	{ 1.8, 0.3, -0.2, -40.0 },
	{ -0.25, 1.9, 0.4, 12.5 },
	{ 0.1, -0.35, 2.2, 7.0 },
	{ 0, 0, 0, 1 },
};

static uint32_t get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int32_t get_i32(const unsigned char *p)
{
	return (int32_t)get_u32(p);
}

static int16_t get_i16(const unsigned char *p)
{
	return (int16_t)(uint16_t)(p[0] | p[1] << 8);
}

static float get_f32(const unsigned char *p)
{
	uint32_t u = get_u32(p);
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static void assert_zero_bytes(const unsigned char *buf, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (buf[i] != 0)
			fail_msg("header byte %zu is %u, expected 0", i, buf[i]);
}

static float column_norm(const double a[4][4], int c)
{
	float x = (float)a[0][c], y = (float)a[1][c], z = (float)a[2][c];

	return (float)sqrt((double)x * x + (double)y * y + (double)z * z);
}

static void test_header_layout(void **state)
{
	unsigned char h[TRK_HEADER_SIZE];

	(void)state;
	memset(h, 0xee, sizeof(h));
	assert_int_equal(trk_header_fill(h, dims, lps, 1234, NULL), 0);
	assert_memory_equal(h, "TRACK\0", 6);
	assert_int_equal(get_i16(h + 6), 10);
	assert_int_equal(get_i16(h + 8), 20);
	assert_int_equal(get_i16(h + 10), 30);
	assert_true(get_f32(h + 12) == 2.0f);
	assert_true(get_f32(h + 16) == 2.0f);
	assert_true(get_f32(h + 20) == 2.5f);
	assert_zero_bytes(h, 24, 440);   /* origin, scalars, properties */
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			assert_true(get_f32(h + 440 + 4 * (4 * r + c)) == (float)lps[r][c]);
	assert_zero_bytes(h, 504, 948);  /* reserved */
	assert_memory_equal(h + 948, "LPS\0", 4);
	assert_zero_bytes(h, 952, 988);  /* pad2, image_orientation_patient, pad1, invert/swap */
	assert_int_equal(get_i32(h + 988), 1234);
	assert_int_equal(get_i32(h + 992), 2);
	assert_int_equal(get_i32(h + 996), 1000);
}

static void test_header_oblique(void **state)
{
	unsigned char h[TRK_HEADER_SIZE];

	(void)state;
	assert_int_equal(trk_header_fill(h, dims, oblique, 0, NULL), 0);
	for (int c = 0; c < 3; c++)
		assert_true(get_f32(h + 12 + 4 * c) == column_norm(oblique, c));
	/* nibabel.orientations.aff2axcodes(oblique) == ('R', 'A', 'S'). */
	assert_memory_equal(h + 948, "RAS\0", 4);
}

static void test_header_rejects(void **state)
{
	const int64_t too_big[3] = { 10, 40000, 30 };
	const int64_t zero[3] = { 10, 0, 30 };
	double flat[4][4];
	unsigned char h[TRK_HEADER_SIZE];
	struct errbuf err = { 0 };

	(void)state;
	assert_int_equal(trk_header_fill(h, too_big, lps, 0, &err), -EINVAL);
	assert_non_null(strstr(err.message, "40000"));
	assert_int_equal(trk_header_fill(h, zero, lps, 0, &err), -EINVAL);
	assert_int_equal(trk_header_fill(h, dims, lps, (uint32_t)INT32_MAX + 1u, &err), -EINVAL);
	memcpy(flat, lps, sizeof(flat));
	flat[0][0] = 0.0;
	assert_int_equal(trk_header_fill(h, dims, flat, 0, &err), -EINVAL);
	assert_non_null(strstr(err.message, "degenerate"));
}

/* Reads everything from f (rewound) into a malloc'd buffer. */
static unsigned char *slurp(FILE *f, size_t *len)
{
	unsigned char *buf = NULL;
	size_t cap = 0, n = 0, got;

	rewind(f);
	do {
		if (n == cap) {
			cap = cap ? 2 * cap : 4096;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
	} while (got > 0);
	*len = n;
	return buf;
}

/* Checks one record at *pos against voxel points p and advances *pos. */
static void expect_record(const unsigned char *buf, size_t len, size_t *pos, const float *p,
			  uint32_t n, const double affine[4][4])
{
	assert_true(*pos + 4 <= len);
	assert_int_equal(get_i32(buf + *pos), (int32_t)n);
	*pos += 4;
	assert_true(*pos + 12 * (size_t)n <= len);
	for (uint32_t i = 0; i < n; i++)
		for (int c = 0; c < 3; c++) {
			float want = (p[3 * i + c] + 0.5f) * column_norm(affine, c);
			float got = get_f32(buf + *pos + 12 * i + 4 * c);
			if (got != want)
				fail_msg("point %u coord %d: %.9g != %.9g", i, c, got, want);
		}
	*pos += 12 * (size_t)n;
}

static float *make_points(uint32_t n, float base)
{
	float *p = malloc(3 * (size_t)n * sizeof(float));

	assert_non_null(p);
	for (uint32_t i = 0; i < n; i++) {
		p[3 * i + 0] = base + 0.01f * (float)(i % 900);
		p[3 * i + 1] = 2.0f - 0.003f * (float)(i % 500);
		p[3 * i + 2] = 0.25f * (float)(i % 97);
	}
	return p;
}

static void test_write_and_decode(void **state)
{
	/* The long streamline is larger than the writer's buffer. */
	const uint32_t counts[4] = { 5, 30000, 1, 0 };
	float *pts[4];
	struct trk_writer *w;
	FILE *f = tmpfile();
	unsigned char *buf;
	size_t len, pos = TRK_HEADER_SIZE;

	(void)state;
	assert_non_null(f);
	assert_int_equal(trk_writer_new(f, dims, oblique, &w, NULL), 0);
	for (int s = 0; s < 4; s++) {
		pts[s] = make_points(counts[s] ? counts[s] : 1, (float)s);
		assert_int_equal(trk_write_streamline(w, pts[s], counts[s]), 0);
	}
	/* The empty streamline is not written (nibabel would skip it): the
	 * decoded records below are three. */
	assert_int_equal(trk_writer_finish(w), 0);
	buf = slurp(f, &len);
	assert_int_equal(get_i32(buf + 988), 3);
	for (int s = 0; s < 3; s++)
		expect_record(buf, len, &pos, pts[s], counts[s], oblique);
	assert_int_equal(pos, len);
	for (int s = 0; s < 4; s++)
		free(pts[s]);
	free(buf);
	fclose(f);
}

static void test_pipe_keeps_zero_count(void **state)
{
	const float p[6] = { 1, 2, 3, 4, 5, 6 };
	struct trk_writer *w;
	int fds[2];
	FILE *wf, *rf;
	unsigned char buf[2048];
	size_t len, pos = TRK_HEADER_SIZE;

	(void)state;
	assert_int_equal(pipe(fds), 0);
	wf = fdopen(fds[1], "w");
	rf = fdopen(fds[0], "r");
	assert_non_null(wf);
	assert_non_null(rf);
	assert_int_equal(trk_writer_new(wf, dims, lps, &w, NULL), 0);
	assert_int_equal(trk_write_streamline(w, p, 2), 0);
	assert_int_equal(trk_writer_finish(w), 0);
	assert_int_equal(fclose(wf), 0);
	len = fread(buf, 1, sizeof(buf), rf);
	assert_int_equal(len, TRK_HEADER_SIZE + 4 + 24);
	assert_int_equal(get_i32(buf + 988), 0);
	expect_record(buf, len, &pos, p, 2, lps);
	fclose(rf);
}

static void test_append_stream_not_patched(void **state)
{
	const float p[3] = { 1, 2, 3 };
	char path[] = "/tmp/test_trk_appendXXXXXX";
	int fd = mkstemp(path);
	struct trk_writer *w;
	FILE *f;
	unsigned char *buf;
	size_t len, pos = TRK_HEADER_SIZE;

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	f = fopen(path, "a+");
	assert_non_null(f);
	assert_int_equal(trk_writer_new(f, dims, lps, &w, NULL), 0);
	assert_int_equal(trk_write_streamline(w, p, 1), 0);
	assert_int_equal(trk_writer_finish(w), 0);
	buf = slurp(f, &len);
	assert_int_equal(len, TRK_HEADER_SIZE + 4 + 12);
	assert_int_equal(get_i32(buf + 988), 0);
	expect_record(buf, len, &pos, p, 1, lps);
	free(buf);
	fclose(f);
	unlink(path);
}

static void test_write_errors(void **state)
{
	char path[] = "/tmp/test_trk_readonlyXXXXXX";
	int fd = mkstemp(path);
	struct trk_writer *w = NULL;
	struct errbuf err = { 0 };
	float *p = make_points(30000, 0.0f);
	FILE *ro, *full = fopen("/dev/full", "w");

	(void)state;
	assert_int_equal(trk_writer_finish(NULL), 0);
	assert_true(fd >= 0);
	close(fd);
	ro = fopen(path, "r");
	assert_non_null(ro);
	assert_non_null(full);
	assert_int_equal(trk_writer_new(ro, dims, lps, &w, &err), -EIO);
	assert_null(w);
	assert_non_null(strstr(err.message, "header"));
	/* /dev/full accepts the buffered header and fails once data reach it. */
	assert_int_equal(trk_writer_new(full, dims, lps, &w, NULL), 0);
	assert_int_equal(trk_write_streamline(w, p, 30000), -EIO);
	assert_int_equal(trk_write_streamline(w, p, 1), -EIO);
	assert_int_equal(trk_writer_finish(w), -EIO);
	free(p);
	fclose(ro);
	fclose(full);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_layout),
		cmocka_unit_test(test_header_oblique),
		cmocka_unit_test(test_header_rejects),
		cmocka_unit_test(test_write_and_decode),
		cmocka_unit_test(test_pipe_keeps_zero_count),
		cmocka_unit_test(test_append_stream_not_patched),
		cmocka_unit_test(test_write_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
