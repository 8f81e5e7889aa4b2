/* SPDX-License-Identifier: MIT */
/*
 * gradients: FSL tables in both layouts DIPY's read_bvals_bvecs accepts,
 * every rejection with the words its message must contain, and shell
 * grouping against DIPY 1.6's unique_bvals_magnitude. Files are written to a
 * fresh directory (mkdtemp) by the tests themselves.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/gradients.h"

#define FIELD_BVALS "job.inputs.bvals"
#define FIELD_BVECS "job.inputs.bvecs"
#define N_GOOD 10

static char tmpdir[] = "/tmp/tractd-test-gradients-XXXXXX";
static char bvals_path[64], bvecs_path[64];

/* Two b0s (b = 5 is one too), the b0 vector of volume 7 kept as read and the
 * vector of volume 8 just inside DIPY's 0.01 norm tolerance. */
static const double good_bvals[N_GOOD] = { 0, 1000, 1000, 1000, 1000, 1000, 1000, 5, 1000, 1000 };
static const double good_bvecs[N_GOOD][3] = {
	{ 0, 0, 0 }, { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 }, { 0.6, 0.8, 0 },
	{ 0.6, 0, -0.8 }, { 0, -0.8, 0.6 }, { 0.3, 0.2, 0.1 }, { 1.005, 0, 0 }, { -0.6, 0.8, 0 },
};

/* good_bvals as one row and good_bvecs as 3 rows, the FSL layout. */
static const char good_bvals_row[] = "0 1000 1000 1000 1000 1000 1000 5 1000 1000\n";
static const char good_bvecs_rows[] =
	"0 1 0 0 0.6 0.6 0 0.3 1.005 -0.6\n"
	"0 0 1 0 0.8 0 -0.8 0.2 0 0.8\n"
	"0 0 0 1 0 -0.8 0.6 0.1 0 0\n";

static int make_tmpdir(void **state)
{
	(void)state;
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(bvals_path, sizeof(bvals_path), "%s/bvals", tmpdir);
	snprintf(bvecs_path, sizeof(bvecs_path), "%s/bvecs", tmpdir);
	return 0;
}

static int remove_tmpdir(void **state)
{
	(void)state;
	unlink(bvals_path);
	unlink(bvecs_path);
	return rmdir(tmpdir);
}

static void write_file(const char *path, const char *text, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static void write_text(const char *path, const char *text)
{
	write_file(path, text, strlen(text));
}

static void assert_good_table(const struct gradients *g)
{
	assert_int_equal(g->n, N_GOOD);
	assert_int_equal(g->n_b0, 2);
	for (size_t i = 0; i < N_GOOD; i++) {
		double norm = 0;

		assert_true(g->bvals[i] == good_bvals[i]);
		assert_int_equal(g->is_b0[i], i == 0 || i == 7);
		for (int c = 0; c < 3; c++)
			norm += g->bvecs[3 * i + (size_t)c] * g->bvecs[3 * i + (size_t)c];
		if (!g->is_b0[i])
			assert_true(fabs(sqrt(norm) - 1) < 1e-15);
	}
	assert_true(g->bvecs[3 * 7] == 0.3 && g->bvecs[3 * 7 + 1] == 0.2 && g->bvecs[3 * 7 + 2] == 0.1);
	assert_true(g->bvecs[3 * 8] == 1.0 && g->bvecs[3 * 8 + 1] == 0.0);
	assert_true(g->bvecs[3 * 4] == 0.6 && g->bvecs[3 * 4 + 1] == 0.8);
}

static void load_good(const char *bvals, const char *bvecs)
{
	struct gradients g;
	struct errbuf err = { 0 };

	write_text(bvals_path, bvals);
	write_text(bvecs_path, bvecs);
	if (gradients_load(bvals_path, bvecs_path, N_GOOD, FIELD_BVALS, FIELD_BVECS, &g, &err))
		fail_msg("%s: %s", err.field, err.message);
	assert_good_table(&g);
	gradients_free(&g);
	assert_null(g.bvals);
	assert_int_equal(g.n, 0);
	gradients_free(&g);
}

static void test_fsl_layout(void **state)
{
	(void)state;
	load_good(good_bvals_row, good_bvecs_rows);
	/* Tabs, commas, CRLF, comments and blank lines, as DIPY reads them. */
	load_good("# b-values\r\n0\t1000,1000 1000 1000 1000 1000 5 1000 1000  \r\n\r\n",
		  "0,1,0,0,0.6,0.6,0,0.3,1.005,-0.6\n\n"
		  "0\t0\t1\t0\t0.8\t0\t-0.8\t0.2\t0\t0.8   # y\n"
		  "0e0 0 0 1 0 -8e-1 0.6 0.1 0 0");
}

static void test_transposed_layout(void **state)
{
	char bvals[256] = "", bvecs[512] = "";

	(void)state;
	for (int i = 0; i < N_GOOD; i++) {
		size_t used = strlen(bvals), used_vecs = strlen(bvecs);

		snprintf(bvals + used, sizeof(bvals) - used, "%g\n", good_bvals[i]);
		snprintf(bvecs + used_vecs, sizeof(bvecs) - used_vecs, "%.17g %.17g %.17g\n",
			 good_bvecs[i][0], good_bvecs[i][1], good_bvecs[i][2]);
	}
	load_good(bvals, bvecs);
	/* One layout per file: either may be transposed alone. */
	load_good(good_bvals_row, bvecs);
	load_good(bvals, good_bvecs_rows);
}

static void test_from_arrays(void **state)
{
	struct gradients g;
	struct errbuf err = { 0 };
	double bvals[N_GOOD];

	(void)state;
	assert_int_equal(gradients_from_arrays(good_bvals, &good_bvecs[0][0], N_GOOD, &g, &err), 0);
	assert_good_table(&g);
	gradients_free(&g);

	memcpy(bvals, good_bvals, sizeof(bvals));
	bvals[3] = -1;
	memset(&g, 0xab, sizeof(g));
	assert_int_equal(gradients_from_arrays(bvals, &good_bvecs[0][0], N_GOOD, &g, &err), -EINVAL);
	assert_string_equal(err.field, "inputs.bvals");
	assert_non_null(strstr(err.message, "volume 3 is negative"));
	assert_int_equal((int)((unsigned char *)&g)[0], 0xab);

	assert_int_equal(gradients_from_arrays(good_bvals, &good_bvecs[0][0], 0, &g, &err), -EINVAL);
	assert_non_null(strstr(err.message, "no volumes"));
}

/* Loads the two texts, which must be rejected with code, naming field, with a
 * message containing words, and leaving *ret alone. */
static void expect_rejected(const char *bvals, const char *bvecs, int64_t n_volumes,
			    int code, const char *field, const char *words)
{
	struct gradients g;
	struct errbuf err = { 0 };

	write_text(bvals_path, bvals);
	write_text(bvecs_path, bvecs);
	memset(&g, 0xab, sizeof(g));
	assert_int_equal(gradients_load(bvals_path, bvecs_path, n_volumes, FIELD_BVALS,
					FIELD_BVECS, &g, &err), code);
	assert_string_equal(err.field, field);
	if (!strstr(err.message, words))
		fail_msg("message \"%s\" lacks \"%s\"", err.message, words);
	assert_int_equal((int)((unsigned char *)&g)[0], 0xab);
}

static void test_rejects_bad_numbers(void **state)
{
	(void)state;
	expect_rejected("0 1000 abc 1000 1000 1000 1000 5 1000 1000", good_bvecs_rows, N_GOOD,
			-EINVAL, FIELD_BVALS, "line 1, value 3 is not a number");
	expect_rejected(good_bvals_row, "0 1 0 0 0.6 0.6 0 0.3 1.005 -0.6\n0 0 1 0 0.8 0 -0.8 0.2 0 "
			"0.8\n0 0 0 1 0 -0.8 0.6 0.1 0 0x\n", N_GOOD, -EINVAL, FIELD_BVECS,
			"line 3, value 10 is not a number");
	expect_rejected("0 1000 1000 1000 1000 1000 1000 5 1000 1e400", good_bvecs_rows, N_GOOD,
			-EINVAL, FIELD_BVALS, "line 1, value 10 is not finite");
	expect_rejected(good_bvals_row, "0 1 0 0 0.6 0.6 0 0.3 1.005 -0.6\n0 nan 1 0 0.8 0 -0.8 0.2 0 "
			"0.8\n0 0 0 1 0 -0.8 0.6 0.1 0 0\n", N_GOOD, -EINVAL, FIELD_BVECS,
			"b-vector of volume 1 (b-value 1000) is not finite");
	expect_rejected(good_bvals_row, "0 1 0 0 0.6 0.6 0 0.3 1.005 -0.6\n0 inf 1 0 0.8 0 -0.8 0.2 0 "
			"0.8\n0 0 0 1 0 -0.8 0.6 0.1 0 0\n", N_GOOD, -EINVAL, FIELD_BVECS,
			"line 2, value 2 is not finite");
	expect_rejected("0 1000 1000 1000 1000 -1000 1000 5 1000 1000", good_bvecs_rows, N_GOOD,
			-EINVAL, FIELD_BVALS, "b-value of volume 5 is negative (-1000)");
	expect_rejected("0 1000 1000 1000 1000 1000 1000 5 1000 1000 "
			"123456789012345678901234567890123456789012345678901234567890123456789",
			good_bvecs_rows, N_GOOD, -EINVAL, FIELD_BVALS, "value 11 is not a number (over 64 characters)");
	/* Vector of volume 4 scaled by 0.9: norm 0.9. */
	expect_rejected(good_bvals_row, "0 1 0 0 0.54 0.6 0 0.3 1.005 -0.6\n0 0 1 0 0.72 0 -0.8 0.2 0 "
			"0.8\n0 0 0 1 0 -0.8 0.6 0.1 0 0\n", N_GOOD, -EINVAL, FIELD_BVECS,
			"b-vector of volume 4 (b-value 1000) has norm 0.9;");
}

/* A table that is someone's secret must not come back in the message. */
static void test_errors_never_quote_the_file(void **state)
{
	(void)state;
	expect_rejected("db_password=hunter2\n", good_bvecs_rows, N_GOOD, -EINVAL, FIELD_BVALS,
			"line 1, value 1 is not a number");
	expect_rejected("0 1000 1000 1000 1000 1000 1000 5 1000 inf", good_bvecs_rows, N_GOOD,
			-EINVAL, FIELD_BVALS, "line 1, value 10 is not finite");
	write_text(bvals_path, "token: s3cr3t-value\n");
	{
		struct gradients g;
		struct errbuf err = { 0 };
		assert_int_equal(gradients_load(bvals_path, bvecs_path, N_GOOD, FIELD_BVALS,
						FIELD_BVECS, &g, &err), -EINVAL);
		assert_null(strstr(err.message, "s3cr3t"));
		assert_null(strstr(err.message, "token"));
	}
}

/* A FIFO would block the reader until a writer came: refused at once. */
static void test_fifo_refused_without_blocking(void **state)
{
	char fifo[600];
	struct gradients g;
	struct errbuf err = { 0 };

	(void)state;
	snprintf(fifo, sizeof(fifo), "%s/fifo.bval", tmpdir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	write_text(bvecs_path, good_bvecs_rows);
	assert_int_equal(gradients_load(fifo, bvecs_path, N_GOOD, FIELD_BVALS, FIELD_BVECS, &g,
					&err), -EINVAL);
	assert_string_equal(err.field, FIELD_BVALS);
	assert_non_null(strstr(err.message, "not a regular file"));
	assert_int_equal(unlink(fifo), 0);
}

static void test_rejects_count_mismatches(void **state)
{
	(void)state;
	expect_rejected(good_bvals_row, good_bvecs_rows, 11, -EINVAL, FIELD_BVALS,
			"bvals has 10 values but the DWI has 11 volumes");
	expect_rejected("0 1000 1000 1000 1000 1000 1000 5 1000 1000 1000", good_bvecs_rows, 11,
			-EINVAL, FIELD_BVECS, "bvecs has 10 vectors but bvals has 11 values");
	expect_rejected(good_bvals_row, "0 1 0 0 0.6 0.6 0 0.3 1.005 -0.6\n0 0 1 0 0.8 0 -0.8 0.2 0 "
			"0.8\n0 0 0 1 0 -0.8 0.6 0.1 0\n", N_GOOD, -EINVAL, FIELD_BVECS,
			"line 3 has 9 numbers but line 1 has 10");
	expect_rejected(good_bvals_row, "0 1 0 0 0.6 0.6 0 0.3 1.005 -0.6\n0 0 1 0 0.8 0 -0.8 0.2 0 "
			"0.8\n", N_GOOD, -EINVAL, FIELD_BVECS, "2 rows of 10 numbers");
	expect_rejected("0 1000 1000 1000 1000\n1000 1000 5 1000 1000\n", good_bvecs_rows, N_GOOD,
			-EINVAL, FIELD_BVALS, "2 rows of 5 numbers");
}

static void test_rejects_unusable_tables(void **state)
{
	(void)state;
	expect_rejected("60 1000 1000 1000 1000 1000 1000 55 1000 1000",
			"1 1 0 0 0.6 0.6 0 0 1.005 -0.6\n0 0 1 0 0.8 0 -0.8 0.6 0 0.8\n"
			"0 0 0 1 0 -0.8 0.6 0.8 0 0\n", N_GOOD, -EINVAL, FIELD_BVALS,
			"no b0 volume (b-value <= 50)");
	expect_rejected("0 1000 1000 1000 1000 1000 0 5 0 0", good_bvecs_rows, N_GOOD,
			-EINVAL, FIELD_BVALS, "5 diffusion-weighted volumes (b-value > 50); the "
			"tensor fit needs at least 6");
}

static void test_rejects_bad_files(void **state)
{
	struct gradients g;
	struct errbuf err = { 0 };
	char missing[96];
	size_t big = (1 << 20) + 1;
	char *spaces = malloc(big);

	(void)state;
	expect_rejected("", good_bvecs_rows, N_GOOD, -EINVAL, FIELD_BVALS, "empty file");
	expect_rejected(good_bvals_row, "# nothing here\n\n   \n", N_GOOD, -EINVAL, FIELD_BVECS,
			"empty file");

	assert_non_null(spaces);
	memset(spaces, ' ', big);
	write_file(bvecs_path, spaces, big);
	free(spaces);
	write_text(bvals_path, good_bvals_row);
	assert_int_equal(gradients_load(bvals_path, bvecs_path, N_GOOD, FIELD_BVALS, FIELD_BVECS,
					&g, &err), -EINVAL);
	assert_string_equal(err.field, FIELD_BVECS);
	assert_non_null(strstr(err.message, "1048577 bytes, larger than the 1048576"));

	write_file(bvals_path, "0 1000\0 1000", 12);
	assert_int_equal(gradients_load(bvals_path, bvecs_path, N_GOOD, FIELD_BVALS, FIELD_BVECS,
					&g, &err), -EINVAL);
	assert_string_equal(err.field, FIELD_BVALS);
	assert_non_null(strstr(err.message, "binary data"));

	snprintf(missing, sizeof(missing), "%s/missing.bvec", tmpdir);
	write_text(bvals_path, good_bvals_row);
	assert_int_equal(gradients_load(bvals_path, missing, N_GOOD, FIELD_BVALS, FIELD_BVECS,
					&g, &err), -ENOENT);
	assert_string_equal(err.field, FIELD_BVECS);
	assert_non_null(strstr(err.message, missing));

	assert_int_equal(gradients_load(tmpdir, bvecs_path, N_GOOD, FIELD_BVALS, FIELD_BVECS,
					&g, &err), -EINVAL);
	assert_string_equal(err.field, FIELD_BVALS);
	assert_non_null(strstr(err.message, "not a regular file"));
}

/* Unit vectors for n volumes, whatever their b-values. */
static double *spiral_vectors(size_t n)
{
	double *v = malloc(3 * n * sizeof(*v));

	assert_non_null(v);
	for (size_t i = 0; i < n; i++) {
		double z = 1 - (2.0 * (double)i + 1) / (double)n, r = sqrt(1 - z * z);

		v[3 * i] = r * cos(2.4 * (double)i);
		v[3 * i + 1] = r * sin(2.4 * (double)i);
		v[3 * i + 2] = z;
	}
	return v;
}

static void expect_shells(const double *bvals, size_t n, size_t shells,
			  const size_t *lowest, size_t n_lowest)
{
	struct gradients g;
	double *bvecs = spiral_vectors(n);
	size_t *out = malloc(n * sizeof(*out));

	assert_non_null(out);
	assert_int_equal(gradients_from_arrays(bvals, bvecs, n, &g, NULL), 0);
	assert_int_equal(gradients_shell_count(&g), shells);
	assert_int_equal(gradients_lowest_shell(&g, out), n_lowest);
	assert_memory_equal(out, lowest, n_lowest * sizeof(*out));
	gradients_free(&g);
	free(out);
	free(bvecs);
}

static void test_shells_as_dipy_groups_them(void **state)
{
	/* DIPY 1.6 unique_bvals_magnitude(bvals, rbvals=True) gives [0, 1000,
	 * 2000] and rounds 995, 1000, 1005 to 1000 and 2000, 2010 to 2000 (and
	 * the b0s 0 and 5 to 0). */
	static const double two_shells[] = { 0, 995, 1000, 1005, 2000, 2010, 5, 995,
					     1000, 2000, 1005, 2010, 0, 1000, 2000 };
	static const size_t two_shells_lowest[] = { 0, 1, 2, 3, 6, 7, 8, 10, 12, 13 };
	/* numpy rounds half to even: unique_bvals_magnitude([0, 50, 150, 250,
	 * 1000]) is [0, 200, 1000], so 150 and 250 are one shell. */
	static const double half_even[] = { 0, 150, 250, 150, 1000, 250, 150, 1000, 250 };
	static const size_t half_even_lowest[] = { 0, 1, 2, 3, 5, 6, 8 };
	static const size_t all_of_good[N_GOOD] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 };

	(void)state;
	expect_shells(two_shells, sizeof(two_shells) / sizeof(two_shells[0]), 2, two_shells_lowest,
		      sizeof(two_shells_lowest) / sizeof(two_shells_lowest[0]));
	expect_shells(half_even, sizeof(half_even) / sizeof(half_even[0]), 2, half_even_lowest,
		      sizeof(half_even_lowest) / sizeof(half_even_lowest[0]));
	expect_shells(good_bvals, N_GOOD, 1, all_of_good, N_GOOD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fsl_layout),
		cmocka_unit_test(test_transposed_layout),
		cmocka_unit_test(test_from_arrays),
		cmocka_unit_test(test_rejects_bad_numbers),
		cmocka_unit_test(test_errors_never_quote_the_file),
		cmocka_unit_test(test_fifo_refused_without_blocking),
		cmocka_unit_test(test_rejects_count_mismatches),
		cmocka_unit_test(test_rejects_unusable_tables),
		cmocka_unit_test(test_rejects_bad_files),
		cmocka_unit_test(test_shells_as_dipy_groups_them),
	};

	return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
