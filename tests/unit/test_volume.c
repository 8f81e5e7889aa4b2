/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for volume.c against the fixtures written by
 * tests/data/make_fixtures.py (run from the repository root).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <nifti2_io.h>

#include "tmpdir.h"
#include "formats/volume.h"

#ifndef TESTS_DATA_DIR
#define TESTS_DATA_DIR "tests/data"
#endif

#define FIELD "inputs.odf"

/* cmocka 1.1 compares only as float; the affine checks need double. */
#define assert_near(a, b, tol)                                                          \
	do {                                                                            \
		double near_a_ = (a), near_b_ = (b);                                    \
		if (!(fabs(near_a_ - near_b_) <= (tol)))                                \
			fail_msg("%s = %.17g, expected %.17g (tolerance %g)", #a, near_a_, \
				 near_b_, (double)(tol));                               \
	} while (0)

static const char *fixture(const char *name)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/%s", TESTS_DATA_DIR, name);
	return path;
}

static float at(const struct volume *v, int64_t x, int64_t y, int64_t z, int64_t t)
{
	return v->data[volume_index(v, x, y, z) * (size_t)v->dim[3] + (size_t)t];
}

static void assert_dims(const struct volume *v, int64_t nx, int64_t ny, int64_t nz, int64_t nt)
{
	assert_int_equal(v->dim[0], nx);
	assert_int_equal(v->dim[1], ny);
	assert_int_equal(v->dim[2], nz);
	assert_int_equal(v->dim[3], nt);
}

static void assert_affine(const struct volume *v, const double expected[4][4], double tol)
{
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			assert_near(v->affine[r][c], expected[r][c], tol);
}

/* Loads a fixture that must be rejected and checks code, field and that the
 * message names the file and contains the expected words. */
static void expect_rejected(const char *name, int code, const char *words)
{
	struct volume v;
	struct errbuf err = { 0 };
	const char *path = fixture(name);

	memset(&v, 0xab, sizeof(v));
	assert_int_equal(volume_load(path, FIELD, &v, &err), code);
	assert_string_equal(err.field, FIELD);
	assert_non_null(strstr(err.message, path));
	if (!strstr(err.message, words))
		fail_msg("message \"%s\" lacks \"%s\"", err.message, words);
	assert_int_equal((int)((unsigned char *)&v)[0], 0xab);
}

static void test_datatypes_with_scaling(void **state)
{
	static const char *const types[] = { "uint8", "int8", "uint16", "int16", "uint32",
					     "int32", "uint64", "int64", "float32", "float64" };
	static const double diag2[4][4] = { { 2, 0, 0, 0 }, { 0, 2, 0, 0 }, { 0, 0, 2, 0 }, { 0, 0, 0, 1 } };

	(void)state;
	for (size_t n = 0; n < sizeof(types) / sizeof(types[0]); n++) {
		char name[64];
		struct volume v;
		struct errbuf err = { 0 };
		int is_signed = strncmp(types[n], "uint", 4) != 0;

		snprintf(name, sizeof(name), "dtype_%s.nii", types[n]);
		if (volume_load(fixture(name), FIELD, &v, &err) != 0)
			fail_msg("%s: %s", name, err.message);
		assert_dims(&v, 2, 3, 4, 1);
		assert_affine(&v, diag2, 0.0);
		for (int i = 0; i < 2; i++)
			for (int j = 0; j < 3; j++)
				for (int k = 0; k < 4; k++) {
					double raw = i * 12 + j * 4 + k - (is_signed ? 12 : 0);
					assert_near(at(&v, i, j, k, 0), raw * 2.0 + 1.0, 0.0);
				}
		volume_free(&v);
	}
}

static void expect_int16_scaled_oblique(const char *name)
{
	/* Stored as float32 srow, hence the 1e-6 tolerance. */
	static const double oblique[4][4] = {
		{ 1.8, 0.3, -0.2, -40.0 },
		{ -0.25, 1.9, 0.4, 12.5 },
		{ 0.1, -0.35, 2.2, 7.0 },
		{ 0, 0, 0, 1 },
	};
	struct volume v;

	assert_int_equal(volume_load(fixture(name), FIELD, &v, NULL), 0);
	assert_dims(&v, 3, 4, 5, 1);
	assert_affine(&v, oblique, 1e-6);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 4; j++)
			for (int k = 0; k < 5; k++)
				assert_near(at(&v, i, j, k, 0), (i * 100 + j * 10 + k - 50) * 0.5 - 3.0, 0.0);
	volume_free(&v);
}

static void test_int16_scaled_oblique(void **state)
{
	(void)state;
	expect_int16_scaled_oblique("int16_scaled.nii");
	expect_int16_scaled_oblique("int16_bigendian.nii");
}

static void test_nifti2_gz_4d_c_order(void **state)
{
	static const double lps[4][4] = {
		{ -1.5, 0, 0, 30 }, { 0, -2, 0, 20 }, { 0, 0, 2.5, -10 }, { 0, 0, 0, 1 }
	};
	struct volume v;

	(void)state;
	assert_int_equal(volume_load(fixture("nifti2_4d.nii.gz"), FIELD, &v, NULL), 0);
	assert_dims(&v, 3, 4, 2, 5);
	assert_affine(&v, lps, 0.0);
	assert_int_equal(volume_voxels(&v), 24);
	/* t fastest: the 5 values of voxel (1, 2, 1) are contiguous. */
	for (int t = 0; t < 5; t++)
		assert_near(v.data[(size_t)((1 * 4 + 2) * 2 + 1) * 5 + (size_t)t], 1210 + t, 0.0);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 4; j++)
			for (int k = 0; k < 2; k++)
				for (int t = 0; t < 5; t++)
					assert_near(at(&v, i, j, k, t), i * 1000 + j * 100 + k * 10 + t, 0.0);
	volume_free(&v);
}

static void expect_qform(const char *name)
{
	/* nibabel.load("tests/data/qform_only.nii").affine (nibabel 5.0.0); the
	 * negative-pixdim copy loads the same since nibabel takes abs(pixdim). */
	static const double expected[4][4] = {
		{ 1.082531756627949, -0.7499999960563265, 0.0, 10.0 },
		{ 0.6249999967136054, 1.299038107953539, 0.0, -20.0 },
		{ 0.0, 0.0, -2.0, 30.0 },
		{ 0, 0, 0, 1 },
	};
	struct volume v;

	assert_int_equal(volume_load(fixture(name), FIELD, &v, NULL), 0);
	assert_affine(&v, expected, 1e-6);
	assert_near(at(&v, 2, 3, 4, 0), 9.0, 0.0);
	volume_free(&v);
}

static void test_qform_only(void **state)
{
	(void)state;
	expect_qform("qform_only.nii");
	expect_qform("qform_negative_pixdim.nii");
}

static void expect_mask(const char *name)
{
	/* nibabel.load("tests/data/mask_uint8.nii").affine: get_base_affine();
	 * the negative-pixdim copy loads the same since nibabel takes abs(pixdim). */
	static const double expected[4][4] = {
		{ -2, 0, 0, 3 }, { 0, 3, 0, -3 }, { 0, 0, 4, -2 }, { 0, 0, 0, 1 }
	};
	struct volume v;

	assert_int_equal(volume_load(fixture(name), FIELD, &v, NULL), 0);
	assert_dims(&v, 4, 3, 2, 1);
	assert_affine(&v, expected, 0.0);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 2; k++)
				assert_near(at(&v, i, j, k, 0), (i + j + k) % 2, 0.0);
	volume_free(&v);
}

static void test_uint8_mask_pixdim_fallback(void **state)
{
	(void)state;
	expect_mask("mask_uint8.nii");
	expect_mask("mask_negative_pixdim.nii");
}

static void test_trailing_unit_fifth_dim_accepted(void **state)
{
	struct volume v;

	(void)state;
	assert_int_equal(volume_load(fixture("five_d_trailing1.nii"), FIELD, &v, NULL), 0);
	assert_dims(&v, 2, 2, 2, 3);
	volume_free(&v);
}

static void test_rejections(void **state)
{
	(void)state;
	expect_rejected("nan_4d.nii", -EINVAL, "voxel (2, 1, 3), volume 1");
	expect_rejected("five_d.nii", -EINVAL, "at most 4 dimensions");
	expect_rejected("complex64.nii", -EINVAL, "not supported");
	expect_rejected("zero_dim.nii", -EINVAL, "dimension 2 has size 0");
	expect_rejected("truncated.nii", -EIO, "truncated");
	expect_rejected("truncated.nii.gz", -EIO, "truncated");
	expect_rejected("no_such_file.nii", -ENOENT, "not found or not permitted");
	expect_rejected("make_fixtures.py", -EINVAL, "not a NIfTI-1/-2 image");
}

/* Values of the multi-block tests: unique per voxel and volume, exact in float32. */
static float block_value(int64_t x, int64_t y, int64_t z, int64_t t)
{
	return (float)(x * 100000 + y * 10000 + z * 1000 + t);
}

static void assert_block_values(const struct volume *v)
{
	for (int64_t x = 0; x < v->dim[0]; x++)
		for (int64_t y = 0; y < v->dim[1]; y++)
			for (int64_t z = 0; z < v->dim[2]; z++)
				for (int64_t t = 0; t < v->dim[3]; t++)
					if (at(v, x, y, z, t) != block_value(x, y, z, t))
						fail_msg("(%lld, %lld, %lld, %lld) = %g", (long long)x,
							 (long long)y, (long long)z, (long long)t,
							 (double)at(v, x, y, z, t));
}

/* A 4D float32 image of more volumes than the reader takes at once (and a
 * last group that is not full), written by volume_save as path. */
static void save_blocks(const char *path, const float *nan_at)
{
	static const int64_t dim[4] = { 5, 3, 4, 70 };
	struct volume v;

	assert_int_equal(volume_alloc(&v, dim, 2.0), 0);
	for (int64_t x = 0; x < dim[0]; x++)
		for (int64_t y = 0; y < dim[1]; y++)
			for (int64_t z = 0; z < dim[2]; z++)
				for (int64_t t = 0; t < dim[3]; t++)
					v.data[volume_index(&v, x, y, z) * 70 + (size_t)t] =
						block_value(x, y, z, t);
	/* nan_at: (x, y, z, t, value) quintuples, ended by x < 0. */
	for (; nan_at && nan_at[0] >= 0; nan_at += 5)
		v.data[volume_index(&v, (int64_t)nan_at[0], (int64_t)nan_at[1], (int64_t)nan_at[2]) *
		       70 + (size_t)nan_at[3]] = nan_at[4];
	assert_int_equal(volume_save(path, &v, NULL), 0);
	volume_free(&v);
}

static void test_many_volumes_in_blocks(void **state)
{
	static const char *const names[] = { "blocks.nii", "blocks.nii.gz" };
	char dir[] = "/tmp/test_volume_blocksXXXXXX", path[128];
	struct volume v;

	(void)state;
	assert_non_null(mkdtemp(dir));
	for (size_t n = 0; n < 2; n++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[n]);
		save_blocks(path, NULL);
		assert_int_equal(volume_load(path, FIELD, &v, NULL), 0);
		assert_dims(&v, 5, 3, 4, 70);
		assert_block_values(&v);
		volume_free(&v);
	}
	assert_int_equal(tmpdir_remove(dir), 0);
}

static void test_bigendian_float32_in_blocks(void **state)
{
	struct volume v;

	(void)state;
	assert_int_equal(volume_load(fixture("float32_bigendian_4d.nii"), FIELD, &v, NULL), 0);
	assert_dims(&v, 5, 3, 4, 70);
	assert_block_values(&v);
	volume_free(&v);
}

/* Non-finite values in several groups of volumes: the one reported is the
 * first in file order (the lowest volume, then z, y, x), whichever thread
 * or block met it first. */
static void test_first_non_finite_reported(void **state)
{
	static const char *const names[] = { "bad.nii", "bad.nii.gz" };
	const float bad[] = { 4, 2, 3, 65, NAN, 0, 0, 0, 66, INFINITY, 3, 1, 2, 40, -INFINITY,
			      1, 2, 3, 40, NAN, -1 };
	char dir[] = "/tmp/test_volume_badXXXXXX", path[128];
	struct errbuf err = { 0 };
	struct volume v;

	(void)state;
	assert_non_null(mkdtemp(dir));
	for (size_t n = 0; n < 2; n++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[n]);
		save_blocks(path, bad);
		assert_int_equal(volume_load(path, FIELD, &v, &err), -EINVAL);
		if (!strstr(err.message, "voxel (3, 1, 2), volume 40"))
			fail_msg("%s: \"%s\"", names[n], err.message);
	}
	assert_int_equal(tmpdir_remove(dir), 0);
}

/* A file cut inside a later group of volumes. */
static void test_truncated_in_later_block(void **state)
{
	char dir[] = "/tmp/test_volume_cutXXXXXX", path[128];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cut.nii", dir);
	save_blocks(path, NULL);
	assert_int_equal(truncate(path, 352 + 5 * 3 * 4 * 4 * 50), 0);
	{
		struct errbuf err = { 0 };
		struct volume v;
		assert_int_equal(volume_load(path, FIELD, &v, &err), -EIO);
		assert_non_null(strstr(err.message, "truncated"));
	}
	assert_int_equal(tmpdir_remove(dir), 0);
}

static void test_garbage_header_rejected(void **state)
{
	char path[] = "/tmp/test_volume_garbageXXXXXX.nii";
	struct errbuf err = { 0 };
	struct volume v;
	unsigned char junk[400];
	int fd = mkstemps(path, 4);
	FILE *f;

	(void)state;
	assert_true(fd >= 0);
	f = fdopen(fd, "wb");
	assert_non_null(f);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)(i * 37 + 11);
	assert_int_equal(fwrite(junk, 1, sizeof(junk), f), sizeof(junk));
	assert_int_equal(fclose(f), 0);
	assert_int_equal(volume_load(path, FIELD, &v, &err), -EINVAL);
	assert_non_null(strstr(err.message, path));
	unlink(path);
}

static void fill_pattern(struct volume *v)
{
	for (size_t n = 0; n < volume_voxels(v) * (size_t)v->dim[3]; n++)
		v->data[n] = (float)n * 0.25f - 7.0f;
}

static void check_saved_header(const char *path, const struct volume *v)
{
	nifti_image *nim = nifti_image_read(path, 0);

	assert_non_null(nim);
	assert_int_equal(nim->nifti_type, NIFTI_FTYPE_NIFTI1_1);
	assert_int_equal(nim->datatype, NIFTI_TYPE_FLOAT32);
	assert_int_equal(nim->sform_code, NIFTI_XFORM_SCANNER_ANAT);
	assert_int_equal(nim->qform_code, NIFTI_XFORM_SCANNER_ANAT);
	for (int c = 0; c < 3; c++) {
		double norm = sqrt(v->affine[0][c] * v->affine[0][c] + v->affine[1][c] * v->affine[1][c] +
				   v->affine[2][c] * v->affine[2][c]);
		assert_near(nim->pixdim[c + 1], norm, 1e-6);
	}
	nifti_image_free(nim);
}

static void round_trip(const char *path, double affine_tol)
{
	static const double oblique[4][4] = {
		{ 1.8, 0.3, -0.2, -40.0 },
		{ -0.25, 1.9, 0.4, 12.5 },
		{ 0.1, -0.35, 2.2, 7.0 },
		{ 0, 0, 0, 1 },
	};
	const int64_t dim[4] = { 5, 4, 3, 6 };
	struct volume v, back;
	struct errbuf err = { 0 };

	assert_int_equal(volume_alloc(&v, dim, 1.0), 0);
	memcpy(v.affine, oblique, sizeof(oblique));
	fill_pattern(&v);
	if (volume_save(path, &v, &err) != 0)
		fail_msg("save: %s", err.message);
	check_saved_header(path, &v);
	if (volume_load(path, FIELD, &back, &err) != 0)
		fail_msg("load: %s", err.message);
	assert_dims(&back, 5, 4, 3, 6);
	assert_affine(&back, oblique, affine_tol);
	assert_memory_equal(back.data, v.data, volume_voxels(&v) * 6 * sizeof(float));
	assert_true(volume_same_grid(&v, &back));
	volume_free(&back);
	volume_free(&v);
	unlink(path);
}

/* Copies fixture name to dir/as. */
static void copy_fixture(const char *name, const char *dir, const char *as)
{
	char path[512], buf[4096];
	FILE *in = fopen(fixture(name), "rb"), *out;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, as);
	out = fopen(path, "wb");
	assert_non_null(in);
	assert_non_null(out);
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		assert_int_equal(fwrite(buf, 1, n, out), n);
	assert_int_equal(fclose(in), 0);
	assert_int_equal(fclose(out), 0);
}

/* Only the file named is read: libnifti would take "x" for "x.nii" or
 * "x.nii.gz", and a ".hdr" for its ".img", names nobody checked. A FIFO is
 * refused without waiting for a writer. Compression is told by content. */
static void test_only_the_named_file_is_read(void **state)
{
	char dir[] = "/tmp/test_volume_namesXXXXXX", path[600];
	struct volume v;
	struct errbuf err = { 0 };
	unsigned char hdr[352] = { 0 };
	int32_t size = 348;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	copy_fixture("dtype_float32.nii", dir, "x.nii");
	copy_fixture("nifti2_4d.nii.gz", dir, "y.nii.gz");
	copy_fixture("nifti2_4d.nii.gz", dir, "gz-by-content");
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, i ? "y" : "x");
		assert_int_equal(volume_load(path, FIELD, &v, &err), -ENOENT);
		assert_non_null(strstr(err.message, "not found or not permitted"));
	}
	snprintf(path, sizeof(path), "%s/gz-by-content", dir);
	assert_int_equal(volume_load(path, FIELD, &v, &err), 0);
	volume_free(&v);

	/* A .hdr whose data are in x.img (here: x.nii's bytes). */
	copy_fixture("dtype_float32.nii", dir, "x.img");
	memcpy(hdr, &size, sizeof(size));
	hdr[40] = 3;   /* dim[0] */
	hdr[42] = hdr[44] = hdr[46] = 2;
	hdr[70] = 16;  /* datatype float32 */
	hdr[72] = 32;  /* bitpix */
	memcpy(hdr + 344, "ni1", 4);
	snprintf(path, sizeof(path), "%s/x.hdr", dir);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(hdr, 1, sizeof(hdr), f), sizeof(hdr));
	assert_int_equal(fclose(f), 0);
	assert_int_equal(volume_load(path, FIELD, &v, &err), -EINVAL);
	assert_non_null(strstr(err.message, "a .hdr/.img pair is not read"));

	snprintf(path, sizeof(path), "%s/fifo.nii", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(volume_load(path, FIELD, &v, &err), -EINVAL);
	assert_non_null(strstr(err.message, "not a regular file"));
	assert_int_equal(tmpdir_remove(dir), 0);
}

/* The descriptor is what is read, whatever its name now says. */
static void test_load_from_descriptor(void **state)
{
	char dir[] = "/tmp/test_volume_fdXXXXXX", path[600];
	struct volume a, b;
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	copy_fixture("nifti2_4d.nii.gz", dir, "odf.nii.gz");
	snprintf(path, sizeof(path), "%s/odf.nii.gz", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(unlink(path), 0);
	copy_fixture("dtype_float32.nii", dir, "odf.nii.gz");   /* another file, same name */
	assert_int_equal(volume_load(fixture("nifti2_4d.nii.gz"), FIELD, &b, NULL), 0);
	for (int i = 0; i < 2; i++) {   /* twice: the first read does not leave the offset */
		assert_int_equal(volume_load_fd(fd, "odf", FIELD, &a, NULL), 0);
		assert_memory_equal(a.dim, b.dim, sizeof(a.dim));
		assert_memory_equal(a.data, b.data,
				    sizeof(float) * volume_voxels(&a) * (size_t)a.dim[3]);
		if (i == 0)
			volume_free(&a);
	}
	assert_int_equal(close(fd), 0);
	volume_free(&a);
	volume_free(&b);
	assert_int_equal(tmpdir_remove(dir), 0);
}

static void test_save_load_round_trip(void **state)
{
	char path[64];

	(void)state;
	snprintf(path, sizeof(path), "/tmp/test_volume_%ld.nii", (long)getpid());
	round_trip(path, 1e-6);
	snprintf(path, sizeof(path), "/tmp/test_volume_%ld.nii.gz", (long)getpid());
	round_trip(path, 1e-6);
}

static void test_save_errors(void **state)
{
	const int64_t dim[4] = { 2, 2, 2, 1 };
	const int64_t too_wide[4] = { 32768, 1, 1, 1 };
	struct errbuf err = { 0 };
	struct volume v;

	(void)state;
	assert_int_equal(volume_alloc(&v, dim, 2.0), 0);
	assert_int_equal(volume_save("/nonexistent-dir/x.nii", &v, &err), -EIO);
	assert_non_null(strstr(err.message, "/nonexistent-dir/x.nii"));
	volume_free(&v);
	assert_int_equal(volume_alloc(&v, too_wide, 1.0), 0);
	assert_int_equal(volume_save("/tmp/never-written.nii", &v, &err), -EINVAL);
	assert_non_null(strstr(err.message, "/tmp/never-written.nii: dimension 0 has size 32768"));
	assert_int_equal(access("/tmp/never-written.nii", F_OK), -1);
	volume_free(&v);
	assert_int_equal(volume_save("/tmp/never-written.nii", &v, &err), -EINVAL);
}

/* A zeroed volume of another's grid and affine, with its own 4th axis. */
static void test_alloc_on_grid(void **state)
{
	const int64_t dim[4] = { 3, 4, 5, 7 };
	struct volume grid, v;

	(void)state;
	assert_int_equal(volume_alloc(&grid, dim, 2.0), 0);
	grid.affine[0][3] = -10.5;
	grid.affine[1][0] = 0.25;
	assert_int_equal(volume_alloc_on_grid(&v, &grid, 45), 0);
	assert_int_equal(v.dim[0], 3);
	assert_int_equal(v.dim[1], 4);
	assert_int_equal(v.dim[2], 5);
	assert_int_equal(v.dim[3], 45);
	assert_memory_equal(v.affine, grid.affine, sizeof(grid.affine));
	for (size_t n = 0; n < 60 * 45; n++)
		assert_near(v.data[n], 0.0, 0.0);
	volume_free(&v);
	assert_int_equal(volume_alloc_on_grid(&v, &grid, 0), -EINVAL);
	volume_free(&grid);
}

static void test_alloc(void **state)
{
	const int64_t good[4] = { 3, 4, 5, 2 };
	const int64_t zero[4] = { 3, 0, 5, 1 };
	const int64_t huge[4] = { INT64_MAX, 2, 2, 1 };
	const int64_t overflow[4] = { 1 << 20, 1 << 20, 1 << 20, 1 << 10 };
	struct volume v;

	(void)state;
	assert_int_equal(volume_alloc(&v, good, 1.5), 0);
	assert_int_equal(volume_voxels(&v), 60);
	assert_near(v.affine[0][0], 1.5, 0.0);
	assert_near(v.affine[2][2], 1.5, 0.0);
	assert_near(v.affine[3][3], 1.0, 0.0);
	assert_near(v.affine[0][3], 0.0, 0.0);
	for (size_t n = 0; n < 120; n++)
		assert_near(v.data[n], 0.0, 0.0);
	volume_free(&v);
	assert_null(v.data);
	volume_free(&v);
	assert_int_equal(volume_alloc(&v, zero, 1.0), -EINVAL);
	assert_int_equal(volume_alloc(&v, huge, 1.0), -EINVAL);
	assert_int_equal(volume_alloc(&v, overflow, 1.0), -EINVAL);
	assert_int_equal(volume_alloc(&v, good, 0.0), -EINVAL);
	assert_int_equal(volume_alloc(&v, good, NAN), -EINVAL);
	assert_null(v.data);
}

static void test_same_grid(void **state)
{
	const int64_t dim[4] = { 3, 4, 5, 1 };
	const int64_t other_dim[4] = { 3, 4, 6, 1 };
	struct volume a, b;

	(void)state;
	assert_int_equal(volume_alloc(&a, dim, 2.0), 0);
	assert_int_equal(volume_alloc(&b, dim, 2.0), 0);
	assert_true(volume_same_grid(&a, &b));
	b.affine[0][3] += 1e-5;
	assert_true(volume_same_grid(&a, &b));
	b.affine[0][3] += 1e-3;
	assert_false(volume_same_grid(&a, &b));
	volume_free(&b);
	assert_int_equal(volume_alloc(&b, other_dim, 2.0), 0);
	assert_false(volume_same_grid(&a, &b));
	volume_free(&b);
	volume_free(&a);
}

/* The budget arithmetic: each value as stored plus its float32 copy, and
 * overflow past 2^64 - 1 refused rather than wrapped. */
static void test_host_bytes(void **state)
{
	const int64_t cube[4] = { 1024, 1024, 1024, 1 };
	const int64_t odf[4] = { 145, 174, 145, 724 };
	const int64_t huge[4] = { INT64_MAX, INT64_MAX, 2, 1 };
	const int64_t edge[4] = { 1ll << 31, 1ll << 29, 1, 1 };   /* 2^60 values */
	const int64_t zero[4] = { 4, 0, 4, 1 };
	uint64_t bytes = 7;

	(void)state;
	assert_int_equal(volume_host_bytes(cube, 1, &bytes), 0);
	assert_true(bytes == 5ull << 30);   /* uint8: 1 GiB stored, 4 GiB as floats */
	assert_int_equal(volume_host_bytes(odf, 4, &bytes), 0);
	assert_true(bytes == 145ull * 174 * 145 * 724 * 8);
	assert_int_equal(volume_host_bytes(edge, 8, &bytes), 0);
	assert_true(bytes == 12ull << 60);   /* 0.75 x 2^64 */
	bytes = 7;
	assert_int_equal(volume_host_bytes(edge, 16, &bytes), -EOVERFLOW);   /* 1.25 x 2^64 */
	assert_int_equal(volume_host_bytes(huge, 1, &bytes), -EOVERFLOW);
	assert_int_equal(volume_host_bytes(zero, 1, &bytes), -EOVERFLOW);
	assert_true(bytes == 7);   /* untouched on failure */
}

/* The probe reads the header only: the stored size from the datatype. */
static void test_probe(void **state)
{
	struct errbuf err = { 0 };
	int64_t dim[4] = { 0 };
	size_t stored = 0;

	(void)state;
	assert_int_equal(volume_probe(fixture("mask_uint8.nii"), FIELD, dim, &stored, &err), 0);
	assert_true(dim[0] == 4 && dim[1] == 3 && dim[2] == 2 && dim[3] == 1 && stored == 1);
	assert_int_equal(volume_probe(fixture("nifti2_4d.nii.gz"), FIELD, dim, &stored, &err), 0);
	assert_true(dim[0] == 3 && dim[1] == 4 && dim[2] == 2 && dim[3] == 5 && stored >= 1);
	assert_int_equal(volume_probe(fixture("no_such.nii"), FIELD, dim, &stored, &err), -ENOENT);
	assert_string_equal(err.field, FIELD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_datatypes_with_scaling),
		cmocka_unit_test(test_int16_scaled_oblique),
		cmocka_unit_test(test_nifti2_gz_4d_c_order),
		cmocka_unit_test(test_qform_only),
		cmocka_unit_test(test_uint8_mask_pixdim_fallback),
		cmocka_unit_test(test_trailing_unit_fifth_dim_accepted),
		cmocka_unit_test(test_rejections),
		cmocka_unit_test(test_many_volumes_in_blocks),
		cmocka_unit_test(test_bigendian_float32_in_blocks),
		cmocka_unit_test(test_first_non_finite_reported),
		cmocka_unit_test(test_truncated_in_later_block),
		cmocka_unit_test(test_garbage_header_rejected),
		cmocka_unit_test(test_only_the_named_file_is_read),
		cmocka_unit_test(test_load_from_descriptor),
		cmocka_unit_test(test_save_load_round_trip),
		cmocka_unit_test(test_save_errors),
		cmocka_unit_test(test_alloc),
		cmocka_unit_test(test_alloc_on_grid),
		cmocka_unit_test(test_same_grid),
		cmocka_unit_test(test_host_bytes),
		cmocka_unit_test(test_probe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
