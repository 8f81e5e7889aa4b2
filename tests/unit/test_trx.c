/* SPDX-License-Identifier: MIT */
/*
 * trx: the archive the TRX writer builds, read back with libzip (every
 * entry to its end: CRC-32 checked): entry names, header counts and affine,
 * offsets with their closing NB_VERTICES, positions in RAS+ mm (float32 and
 * float16), seeds, store versus deflate, empty streamlines skipped, an empty
 * tractogram, bad grids refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include "formats/half.h"
#include "formats/trx.h"

static const int64_t dims[3] = { 10, 20, 30 };
/* Oblique and scaled, so that a transposed or partial affine shows. */
static const double affine[4][4] = {
	{ 0.0, -2.0, 0.0, 5.0 }, { 1.5, 0.0, 0.5, -3.0 }, { 0.0, 0.0, 2.5, 7.0 }, { 0, 0, 0, 1 }
};
static const float line_a[] = { 1, 2, 3, 4, 5, 6 };
static const float line_b[] = { 0.5f, 0.25f, 8, 9, 10, 11, 2, 2, 2 };
static const float seed_a[] = { -1, -2, -3 }, seed_b[] = { 4, 5, 6 };

struct archive {
	char path[64];
	zip_t *za;
};

static void to_ras(const float *p, double out[3])
{
	for (int r = 0; r < 3; r++)
		out[r] = affine[r][0] * p[0] + affine[r][1] * p[1] + affine[r][2] * p[2] +
			 affine[r][3];
}

/* Runs the writer over line_a, an empty line and line_b into a file. */
static void write_trx(struct archive *a, const struct trx_options *opts, bool empty)
{
	struct trx_writer *w;
	int fd;
	FILE *f;

	snprintf(a->path, sizeof(a->path), "/tmp/test-trx-XXXXXX");
	fd = mkstemp(a->path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w+b");
	assert_non_null(f);
	assert_int_equal(trx_writer_new(f, dims, affine, opts, &w, NULL), 0);
	if (!empty) {
		assert_int_equal(trx_write_streamline(w, line_a, 2, seed_a), 0);
		assert_int_equal(trx_write_streamline(w, line_a, 0, seed_a), 0);
		assert_int_equal(trx_flush(w), 0);
		assert_int_equal(trx_write_streamline(w, line_b, 3, seed_b), 0);
	}
	assert_int_equal(trx_writer_finish(w), 0);
	assert_int_equal(fclose(f), 0);
	a->za = zip_open(a->path, ZIP_RDONLY, NULL);
	assert_non_null(a->za);
}

static void close_archive(struct archive *a)
{
	zip_discard(a->za);
	unlink(a->path);
}

/* The entry's bytes (caller frees) and its compression method, read to
 * the end, where libzip checks the CRC-32. */
static unsigned char *read_entry(zip_t *za, const char *name, size_t *len, uint16_t *method)
{
	zip_stat_t st;
	zip_file_t *zf;
	unsigned char *buf, past_end;

	assert_int_equal(zip_stat(za, name, 0, &st), 0);
	buf = malloc(st.size + 1);
	assert_non_null(buf);
	zf = zip_fopen(za, name, 0);
	assert_non_null(zf);
	assert_int_equal(zip_fread(zf, buf, st.size), (zip_int64_t)st.size);
	assert_int_equal(zip_fread(zf, &past_end, 1), 0);
	zip_fclose(zf);
	*len = st.size;
	*method = st.comp_method;
	return buf;
}

static uint64_t get_u64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static float get_f32(const unsigned char *p)
{
	uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
		     (uint32_t)p[3] << 24;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static void check_header(zip_t *za, json_int_t n, json_int_t v)
{
	size_t len;
	uint16_t method;
	unsigned char *text = read_entry(za, "header.json", &len, &method);
	json_t *h = json_loadb((const char *)text, len, 0, NULL);

	assert_non_null(h);
	assert_int_equal(json_integer_value(json_object_get(h, "NB_STREAMLINES")), n);
	assert_int_equal(json_integer_value(json_object_get(h, "NB_VERTICES")), v);
	for (int i = 0; i < 3; i++)
		assert_int_equal(json_integer_value(
			json_array_get(json_object_get(h, "DIMENSIONS"), (size_t)i)), dims[i]);
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			assert_true(json_number_value(json_array_get(json_array_get(
				json_object_get(h, "VOXEL_TO_RASMM"), (size_t)r), (size_t)c)) ==
				    affine[r][c]);
	json_decref(h);
	free(text);
}

static void check_offsets(zip_t *za)
{
	static const uint64_t want[] = { 0, 2, 5 };
	size_t len;
	uint16_t method;
	unsigned char *b = read_entry(za, "offsets.uint64", &len, &method);

	assert_int_equal(len, sizeof(want));
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(get_u64(b + 8 * i), want[i]);
	free(b);
}

static void check_positions(zip_t *za, bool f16, uint16_t want_method)
{
	const float *pts[5] = { line_a, line_a + 3, line_b, line_b + 3, line_b + 6 };
	size_t len, size = f16 ? 2 : 4;
	uint16_t method;
	unsigned char *b = read_entry(za, f16 ? "positions.3.float16" : "positions.3.float32",
				      &len, &method);

	assert_int_equal(method, want_method);
	assert_int_equal(len, 5 * 3 * size);
	for (int i = 0; i < 5; i++) {
		double ras[3];
		to_ras(pts[i], ras);
		for (int c = 0; c < 3; c++) {
			const unsigned char *p = b + (size_t)(3 * i + c) * size;
			float got = f16 ? half_to_float((uint16_t)(p[0] | p[1] << 8)) : get_f32(p);
			float want = f16 ? half_to_float(half_from_float((float)ras[c]))
					 : (float)ras[c];
			assert_true(got == want);
		}
	}
	free(b);
}

static void test_float32_store_with_seeds(void **state)
{
	struct trx_options opts = { .with_seeds = true };
	struct archive a;
	size_t len;
	uint16_t method;
	unsigned char *s;

	(void)state;
	write_trx(&a, &opts, false);
	assert_int_equal(zip_get_num_entries(a.za, 0), 4);
	check_header(a.za, 2, 5);
	check_offsets(a.za);
	check_positions(a.za, false, ZIP_CM_STORE);
	s = read_entry(a.za, "dps/seeds.3.float32", &len, &method);
	assert_int_equal(len, 24);
	for (int c = 0; c < 3; c++) {
		assert_true(get_f32(s + 4 * c) == seed_a[c]);
		assert_true(get_f32(s + 12 + 4 * c) == seed_b[c]);
	}
	free(s);
	close_archive(&a);
}

static void test_float16_deflate(void **state)
{
	struct trx_options opts = { .positions = TRX_POSITIONS_FLOAT16,
				    .compression = TRX_COMPRESSION_DEFLATE };
	struct archive a;

	(void)state;
	write_trx(&a, &opts, false);
	assert_int_equal(zip_get_num_entries(a.za, 0), 3);
	assert_true(zip_name_locate(a.za, "dps/seeds.3.float32", 0) < 0);
	check_header(a.za, 2, 5);
	check_offsets(a.za);
	check_positions(a.za, true, ZIP_CM_DEFLATE);
	close_archive(&a);
}

/* No streamline: the header says 0 and 0, offsets hold the closing 0. */
static void test_empty(void **state)
{
	struct trx_options opts = { 0 };
	struct archive a;
	size_t len;
	uint16_t method;
	unsigned char *b;

	(void)state;
	write_trx(&a, &opts, true);
	check_header(a.za, 0, 0);
	b = read_entry(a.za, "offsets.uint64", &len, &method);
	assert_int_equal(len, 8);
	assert_int_equal(get_u64(b), 0);
	free(b);
	b = read_entry(a.za, "positions.3.float32", &len, &method);
	assert_int_equal(len, 0);
	free(b);
	close_archive(&a);
}

static void test_bad_grid(void **state)
{
	struct trx_options opts = { 0 };
	int64_t big[3] = { 10, 70000, 3 };
	double nan_affine[4][4];
	struct trx_writer *w = NULL;

	(void)state;
	assert_int_equal(trx_writer_new(stdout, big, affine, &opts, &w, NULL), -EINVAL);
	memcpy(nan_affine, affine, sizeof(nan_affine));
	nan_affine[1][2] = NAN;
	assert_int_equal(trx_writer_new(stdout, dims, nan_affine, &opts, &w, NULL), -EINVAL);
	assert_null(w);
	assert_int_equal(trx_writer_finish(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_float32_store_with_seeds),
		cmocka_unit_test(test_float16_deflate),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_bad_grid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
