/* SPDX-License-Identifier: MIT */
/* Unit tests for tck.c: header text, record encoding, end marker, count patching. */
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

#include "formats/affine.h"
#include "formats/tck.h"

/* What the writer must produce: nibabel's key order, a fixed-width count and
 * the data at the next multiple of 4 after the text. */
#define HEADER_TEXT(count) \
	"mrtrix tracks\ncount: " count "\ndatatype: Float32LE\nfile: . 68\nEND\n"
#define DATA_OFFSET 68

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

static float get_f32(const unsigned char *p)
{
	uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
		     (uint32_t)p[3] << 24;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
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

static unsigned char *slurp_path(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	unsigned char *buf;

	assert_non_null(f);
	buf = slurp(f, len);
	fclose(f);
	return buf;
}

/* Checks the header text byte for byte, including the NUL padding up to the
 * data offset that the "file" line names. */
static void expect_header(const unsigned char *buf, size_t len, const char *text)
{
	size_t n = strlen(text);

	assert_true(len >= DATA_OFFSET);
	assert_memory_equal(buf, text, n);
	for (size_t i = n; i < DATA_OFFSET; i++)
		if (buf[i] != 0)
			fail_msg("padding byte %zu is %u, expected 0", i, buf[i]);
}

static void expect_marker(const unsigned char *buf, size_t len, size_t pos, int inf)
{
	assert_true(pos + 12 <= len);
	for (int c = 0; c < 3; c++) {
		float v = get_f32(buf + pos + 4 * c);
		if (inf ? !(isinf(v) && v > 0) : !isnan(v))
			fail_msg("marker at %zu coord %d is %g, expected %s", pos, c, v,
				 inf ? "+Inf" : "NaN");
	}
}

/* Checks one streamline at *pos (points, then its NaN triplet) against voxel
 * points p mapped through affine, and advances *pos. */
static void expect_record(const unsigned char *buf, size_t len, size_t *pos, const float *p,
			  uint32_t n, const double affine[4][4])
{
	assert_true(*pos + 12 * ((size_t)n + 1) <= len);
	for (uint32_t i = 0; i < n; i++) {
		double vox[3] = { p[3 * i], p[3 * i + 1], p[3 * i + 2] }, ras[3];

		affine_apply(affine, vox, ras);
		for (int c = 0; c < 3; c++) {
			float got = get_f32(buf + *pos + 12 * i + 4 * c);
			if (fabs(got - ras[c]) > 1e-6 * fmax(1.0, fabs(ras[c])))
				fail_msg("point %u coord %d: %.9g != %.9g", i, c, got, ras[c]);
		}
	}
	*pos += 12 * (size_t)n;
	expect_marker(buf, len, *pos, 0);
	*pos += 12;
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

static void test_empty_file(void **state)
{
	struct tck_writer *w;
	FILE *f = tmpfile();
	unsigned char *buf;
	size_t len;

	(void)state;
	assert_non_null(f);
	assert_int_equal(tck_writer_new(f, lps, NULL, &w, NULL), 0);
	assert_int_equal(tck_writer_finish(w), 0);
	buf = slurp(f, &len);
	assert_int_equal(len, DATA_OFFSET + 12);
	expect_header(buf, len, HEADER_TEXT("0000000000"));
	expect_marker(buf, len, DATA_OFFSET, 1);
	free(buf);
	fclose(f);
}

/* Properties go between datatype and file, as tckgen's parameters; the
 * data offset grows with them and stays aligned; the header's own keys,
 * END and lines without "key: " are refused. */
static void test_properties(void **state)
{
	static const char props[] = "step_size: 0.5\nmax_angle: 30\nmethod: tractd prob\n";
	static const char *const bad[] = { "count: 3\n", "file: . 9\n", "END\n", "no colon\n",
					   "step_size: 0.5", ": x\n", "step_size:0.5\n" };
	char want[256];
	struct tck_writer *w;
	struct errbuf err;
	FILE *f = tmpfile();
	unsigned char *buf;
	size_t len, offset;
	const char *file_line;

	(void)state;
	assert_non_null(f);
	assert_int_equal(tck_writer_new(f, lps, props, &w, NULL), 0);
	assert_int_equal(tck_writer_finish(w), 0);
	buf = slurp(f, &len);
	snprintf(want, sizeof(want), "mrtrix tracks\ncount: 0000000000\ndatatype: Float32LE\n%s"
		 "file: . ", props);
	assert_memory_equal(buf, want, strlen(want));
	file_line = (const char *)buf + strlen(want);
	offset = strtoul(file_line, NULL, 10);
	assert_int_equal(offset % 4, 0);
	assert_true(offset > DATA_OFFSET && len == offset + 12);
	expect_marker(buf, len, offset, 1);
	free(buf);
	fclose(f);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		f = tmpfile();
		assert_non_null(f);
		assert_int_equal(tck_writer_new(f, lps, bad[i], &w, &err), -EINVAL);
		fclose(f);
	}
}

static void test_write_and_decode(void **state)
{
	/* The long streamline is larger than the writer's buffer; the empty one
	 * is not written (nibabel would skip it and MRtrix count it). */
	const uint32_t counts[5] = { 5, 30000, 0, 1, 2 };
	float *pts[5];
	struct tck_writer *w;
	FILE *f = tmpfile();
	unsigned char *buf;
	size_t len, pos = DATA_OFFSET;

	(void)state;
	assert_non_null(f);
	assert_int_equal(tck_writer_new(f, oblique, NULL, &w, NULL), 0);
	for (int s = 0; s < 5; s++) {
		pts[s] = make_points(counts[s] ? counts[s] : 1, (float)s);
		assert_int_equal(tck_write_streamline(w, pts[s], counts[s]), 0);
	}
	assert_int_equal(tck_writer_finish(w), 0);
	buf = slurp(f, &len);
	expect_header(buf, len, HEADER_TEXT("0000000004"));
	for (int s = 0; s < 5; s++)
		if (counts[s])
			expect_record(buf, len, &pos, pts[s], counts[s], oblique);
	expect_marker(buf, len, pos, 1);
	assert_int_equal(pos + 12, len);
	for (int s = 0; s < 5; s++)
		free(pts[s]);
	free(buf);
	fclose(f);
}

/* A flush leaves a readable file on disk (ended by the marker) that the next
 * record extends, with the stream positioned after whole records only. */
static void test_flush_seals(void **state)
{
	const float a[6] = { 1, 2, 3, 4, 5, 6 }, b[3] = { 7.5f, -1, 0.25f };
	char path[] = "/tmp/test_tck_flushXXXXXX";
	int fd = mkstemp(path);
	struct tck_writer *w;
	FILE *f;
	unsigned char *buf;
	size_t len, pos = DATA_OFFSET;

	(void)state;
	assert_true(fd >= 0);
	f = fdopen(fd, "w+");
	assert_non_null(f);
	assert_int_equal(tck_writer_new(f, lps, NULL, &w, NULL), 0);
	assert_int_equal(tck_write_streamline(w, a, 2), 0);
	assert_int_equal(tck_flush(w), 0);
	assert_int_equal(ftell(f), DATA_OFFSET + 3 * 12);
	buf = slurp_path(path, &len);
	assert_int_equal(len, DATA_OFFSET + 4 * 12);
	/* The count is patched at the end only. */
	expect_header(buf, len, HEADER_TEXT("0000000000"));
	expect_record(buf, len, &pos, a, 2, lps);
	expect_marker(buf, len, pos, 1);
	free(buf);

	assert_int_equal(tck_write_streamline(w, b, 1), 0);
	assert_int_equal(tck_flush(w), 0);
	assert_int_equal(tck_flush(w), 0);
	assert_int_equal(tck_writer_finish(w), 0);
	assert_int_equal(ftell(f), DATA_OFFSET + 6 * 12);
	buf = slurp_path(path, &len);
	assert_int_equal(len, DATA_OFFSET + 6 * 12);
	expect_header(buf, len, HEADER_TEXT("0000000002"));
	pos = DATA_OFFSET;
	expect_record(buf, len, &pos, a, 2, lps);
	expect_record(buf, len, &pos, b, 1, lps);
	expect_marker(buf, len, pos, 1);
	free(buf);
	fclose(f);
	unlink(path);
}

static void test_pipe_keeps_zero_count(void **state)
{
	const float p[6] = { 1, 2, 3, 4, 5, 6 };
	struct tck_writer *w;
	int fds[2];
	FILE *wf, *rf;
	unsigned char buf[2048];
	size_t len, pos = DATA_OFFSET;

	(void)state;
	assert_int_equal(pipe(fds), 0);
	wf = fdopen(fds[1], "w");
	rf = fdopen(fds[0], "r");
	assert_non_null(wf);
	assert_non_null(rf);
	assert_int_equal(tck_writer_new(wf, lps, NULL, &w, NULL), 0);
	assert_int_equal(tck_write_streamline(w, p, 2), 0);
	/* No end marker on a flush: a pipe cannot take it back. */
	assert_int_equal(tck_flush(w), 0);
	assert_int_equal(tck_writer_finish(w), 0);
	assert_int_equal(fclose(wf), 0);
	len = fread(buf, 1, sizeof(buf), rf);
	assert_int_equal(len, DATA_OFFSET + 4 * 12);
	expect_header(buf, len, HEADER_TEXT("0000000000"));
	expect_record(buf, len, &pos, p, 2, lps);
	expect_marker(buf, len, pos, 1);
	fclose(rf);
}

static void test_append_stream_not_patched(void **state)
{
	const float p[3] = { 1, 2, 3 };
	char path[] = "/tmp/test_tck_appendXXXXXX";
	int fd = mkstemp(path);
	struct tck_writer *w;
	FILE *f;
	unsigned char *buf;
	size_t len, pos = DATA_OFFSET;

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	f = fopen(path, "a+");
	assert_non_null(f);
	assert_int_equal(tck_writer_new(f, lps, NULL, &w, NULL), 0);
	assert_int_equal(tck_write_streamline(w, p, 1), 0);
	assert_int_equal(tck_flush(w), 0);
	assert_int_equal(tck_writer_finish(w), 0);
	buf = slurp(f, &len);
	assert_int_equal(len, DATA_OFFSET + 3 * 12);
	expect_header(buf, len, HEADER_TEXT("0000000000"));
	expect_record(buf, len, &pos, p, 1, lps);
	expect_marker(buf, len, pos, 1);
	free(buf);
	fclose(f);
	unlink(path);
}

static void test_rejects_non_finite_affine(void **state)
{
	double bad[4][4];
	struct tck_writer *w = NULL;
	struct errbuf err = { 0 };
	FILE *f = tmpfile();

	(void)state;
	assert_non_null(f);
	memcpy(bad, lps, sizeof(bad));
	bad[1][3] = NAN;
	assert_int_equal(tck_writer_new(f, bad, NULL, &w, &err), -EINVAL);
	assert_null(w);
	assert_non_null(strstr(err.message, "non-finite"));
	bad[1][3] = 0.0;
	bad[2][0] = INFINITY;
	assert_int_equal(tck_writer_new(f, bad, NULL, &w, NULL), -EINVAL);
	/* Nothing was written. */
	assert_int_equal(ftell(f), 0);
	fclose(f);
}

static void test_write_errors(void **state)
{
	char path[] = "/tmp/test_tck_readonlyXXXXXX";
	int fd = mkstemp(path);
	struct tck_writer *w = NULL;
	struct errbuf err = { 0 };
	float *p = make_points(30000, 0.0f);
	FILE *ro, *full = fopen("/dev/full", "w");

	(void)state;
	assert_int_equal(tck_writer_finish(NULL), 0);
	assert_true(fd >= 0);
	close(fd);
	ro = fopen(path, "r");
	assert_non_null(ro);
	assert_non_null(full);
	assert_int_equal(tck_writer_new(ro, lps, NULL, &w, &err), -EIO);
	assert_null(w);
	assert_non_null(strstr(err.message, "header"));
	/* /dev/full accepts the buffered header and fails once data reach it. */
	assert_int_equal(tck_writer_new(full, lps, NULL, &w, NULL), 0);
	assert_int_equal(tck_write_streamline(w, p, 30000), -EIO);
	assert_int_equal(tck_write_streamline(w, p, 1), -EIO);
	assert_int_equal(tck_flush(w), -EIO);
	assert_int_equal(tck_writer_finish(w), -EIO);
	/* A failure that shows only when the end is written. */
	assert_int_equal(tck_writer_new(full, lps, NULL, &w, NULL), 0);
	assert_int_equal(tck_write_streamline(w, p, 3), 0);
	assert_int_equal(tck_writer_finish(w), -EIO);
	free(p);
	fclose(ro);
	fclose(full);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_file),
		cmocka_unit_test(test_properties),
		cmocka_unit_test(test_write_and_decode),
		cmocka_unit_test(test_flush_seals),
		cmocka_unit_test(test_pipe_keeps_zero_count),
		cmocka_unit_test(test_append_stream_not_patched),
		cmocka_unit_test(test_rejects_non_finite_affine),
		cmocka_unit_test(test_write_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
