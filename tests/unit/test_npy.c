/* SPDX-License-Identifier: MIT */
/*
 * npy: seed point files as np.save writes them (versions 1.0 and 2.0,
 * float32 and float64, C and Fortran order) read to the same doubles, and
 * every malformed file refused with the field named: magic, version,
 * header, dtype, shape, data length, point limit.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/npy.h"

#define FIELD "seeds.points_file"

/* A .npy file: version major.0, the header dict text padded as np.save
 * pads it, then nbytes of data. The caller frees it. */
static unsigned char *npy(int major, const char *dict, const void *data, size_t nbytes,
			  size_t *len)
{
	size_t pre = major == 1 ? 10 : 12, hlen = strlen(dict) + 1;
	unsigned char *buf;

	hlen += (64 - (pre + hlen) % 64) % 64;
	*len = pre + hlen + nbytes;
	buf = malloc(*len);
	assert_non_null(buf);
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (unsigned char)major;
	buf[7] = 0;
	buf[8] = (unsigned char)(hlen & 0xff);
	buf[9] = (unsigned char)(hlen >> 8);
	if (major != 1)
		buf[10] = buf[11] = 0;
	memset(buf + pre, ' ', hlen);
	memcpy(buf + pre, dict, strlen(dict));
	buf[pre + hlen - 1] = '\n';
	memcpy(buf + pre + hlen, data, nbytes);
	return buf;
}

static const double want[6] = {1.5, 2.25, 3, -0.5, 10, 7.125};

static void expect_points(int major, const char *dict, const void *data, size_t nbytes)
{
	struct errbuf err = {0};
	double *pts = NULL;
	uint64_t n = 0;
	size_t len;
	unsigned char *buf = npy(major, dict, data, nbytes, &len);

	if (npy_points_parse(buf, len, "p.npy", FIELD, 10, &pts, &n, &err))
		fail_msg("%s: %s: %s", dict, err.field, err.message);
	assert_int_equal(n, 2);
	assert_memory_equal(pts, want, sizeof(want));
	free(pts);
	free(buf);
}

static void test_reads_np_save_layouts(void **state)
{
	const float f32[6] = {1.5f, 2.25f, 3, -0.5f, 10, 7.125f};
	const double fortran[6] = {1.5, -0.5, 2.25, 10, 3, 7.125};

	(void)state;
	expect_points(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", want,
		      sizeof(want));
	expect_points(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f32,
		      sizeof(f32));
	expect_points(1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", fortran,
		      sizeof(fortran));
	expect_points(2, "{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<f8\"}", want,
		      sizeof(want));
}

static void expect_refused(int major, const char *dict, size_t nbytes, const char *needle)
{
	static const double zeros[8];
	struct errbuf err = {0};
	double *pts = NULL;
	uint64_t n = 0;
	size_t len;
	unsigned char *buf = npy(major, dict, zeros, nbytes, &len);

	assert_int_equal(npy_points_parse(buf, len, "p.npy", FIELD, 10, &pts, &n, &err), -EINVAL);
	assert_string_equal(err.field, FIELD);
	if (!strstr(err.message, needle))
		fail_msg("%s: \"%s\" lacks \"%s\"", dict, err.message, needle);
	assert_null(pts);
	free(buf);
}

#define C_ORDER(descr, shape) \
	"{'descr': '" descr "', 'fortran_order': False, 'shape': " shape ", }"

static void test_refuses_other_arrays(void **state)
{
	(void)state;
	expect_refused(1, C_ORDER("<i8", "(2, 3)"), 48, "dtype must be float32 or float64");
	expect_refused(1, C_ORDER(">f8", "(2, 3)"), 48, "little-endian");
	expect_refused(1, C_ORDER("<f8", "(3, 2)"), 48, "(N, 3) array");
	expect_refused(1, C_ORDER("<f8", "(6,)"), 48, "(N, 3) array");
	expect_refused(1, C_ORDER("<f8", "(1, 2, 3)"), 48, "header");
	expect_refused(1, C_ORDER("<f8", "(0, 3)"), 0, "no point");
	expect_refused(1, C_ORDER("<f8", "(11, 3)"), 64, "more than the 10");
	expect_refused(1, C_ORDER("<f8", "(2, 3)"), 40, "40 bytes of data for 2 points");
	expect_refused(1, C_ORDER("<f8", "(2, 3)"), 56, "56 bytes of data");
	expect_refused(1, C_ORDER("<f8", "(99999999999999999999999, 3)"), 48, "header");
}

static void test_refuses_bad_headers(void **state)
{
	(void)state;
	expect_refused(1, "{'descr': '<f8', 'shape': (2, 3)}", 48, "header");
	expect_refused(1, "{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, "
		       "'shape': (2, 3)}", 48, "header");
	expect_refused(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), "
		       "'x': 1}", 48, "header");
	expect_refused(1, "{'descr': '<f8', 'fortran_order': Maybe, 'shape': (2, 3)}", 48,
		       "header");
	expect_refused(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)} x", 48,
		       "header");
	expect_refused(1, "{'descr': '<f\\8', 'fortran_order': False, 'shape': (2, 3)}", 48,
		       "header");
	expect_refused(1, "['descr', '<f8']", 48, "header");
}

static void test_refuses_other_files(void **state)
{
	static const unsigned char nifti[16] = "\x5c\x01\0\0";
	static const unsigned char v9[12] = "\x93NUMPY\x09\x00\x10\x00";
	static const unsigned char past_end[12] = "\x93NUMPY\x01\x00\xff\x00";
	struct errbuf err = {0};
	double *pts = NULL;
	uint64_t n;

	(void)state;
	assert_int_equal(npy_points_parse(nifti, sizeof(nifti), "p", FIELD, 10, &pts, &n, &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "not a NumPy .npy file"));
	assert_int_equal(npy_points_parse(v9, sizeof(v9), "p", FIELD, 10, &pts, &n, &err),
			 -EINVAL);
	assert_non_null(strstr(err.message, "version 9.0"));
	assert_int_equal(npy_points_parse(past_end, sizeof(past_end), "p", FIELD, 10, &pts, &n,
					  &err), -EINVAL);
	assert_non_null(strstr(err.message, "past the end"));
	assert_int_equal(npy_points_load(-1, "/nonexistent/p.npy", FIELD, 10, &pts, &n, &err),
			 -EINVAL);
	assert_string_equal(err.field, FIELD);
	assert_non_null(strstr(err.message, "not found"));
	assert_null(pts);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reads_np_save_layouts),
		cmocka_unit_test(test_refuses_other_arrays),
		cmocka_unit_test(test_refuses_bad_headers),
		cmocka_unit_test(test_refuses_other_files),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
