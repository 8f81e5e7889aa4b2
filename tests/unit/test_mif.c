/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for mif.c (the MRtrix3 header parser and reader) and image.c
 * (the reader picked by content): files written here, header text plus raw
 * data, with layouts whose axes are permuted and reversed.
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
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "tmpdir.h"
#include "formats/image.h"
#include "formats/mif.h"

#define FIELD "inputs.dwi"
#define DATA_OFFSET 1024

static char dir[] = "/tmp/test_mif.XXXXXX";

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(dir);
}

static const char *scratch(const char *name)
{
	static char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return path;
}

/* "mrtrix image", keys, the file line and END, zero-padded to DATA_OFFSET,
 * then data; through gzip when gz. */
static const char *write_mif(const char *name, const char *keys, const void *data, size_t len,
			     bool gz)
{
	char head[DATA_OFFSET] = { 0 };
	const char *path = scratch(name);
	int n = snprintf(head, sizeof(head), "mrtrix image\n%sfile: . %d\nEND\n", keys, DATA_OFFSET);

	assert_true(n > 0 && n < DATA_OFFSET);
	if (gz) {
		gzFile f = gzopen(path, "wb");
		assert_non_null(f);
		assert_int_equal(gzwrite(f, head, sizeof(head)), sizeof(head));
		assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
		assert_int_equal(gzclose(f), Z_OK);
	} else {
		FILE *f = fopen(path, "wb");
		assert_non_null(f);
		assert_int_equal(fwrite(head, 1, sizeof(head), f), sizeof(head));
		assert_int_equal(fwrite(data, 1, len, f), len);
		assert_int_equal(fclose(f), 0);
	}
	return path;
}

static float at(const struct volume *v, int64_t x, int64_t y, int64_t z, int64_t t)
{
	return v->data[volume_index(v, x, y, z) * (size_t)v->dim[3] + (size_t)t];
}

static int parse(const char *text, struct mif_header *h, struct errbuf *err)
{
	return mif_parse_header(text, strlen(text), "x.mif", FIELD, h, err);
}

static void test_parse_header(void **state)
{
	static const char text[] =
		"mrtrix image\n"
		"DIM: 4, 5,6,7\n"          /* the required keys in any case, as MRtrix3 */
		"vox: 2,2.5,3,nan\n"        /* as MRtrix3 writes a volume axis' size */
		"# a comment line\n"
		"layout: +1,-0,+2,+3\n"
		"datatype: float32be\n"
		"transform: 0,-1,0,10\n"
		"transform: 1,0,0,-20  # a trailing comment\n"
		"transform: 0,0,1,30\n"
		"scaling: 1.5,2\n"
		"command_history: mrconvert a b\n"
		"empty:\n"
		"dw_scheme: 0,0,0,0\n"
		"dw_scheme: 1,0,0,1000\n"
		"dw_scheme: 0,1,0,1000\n"
		"dw_scheme: 0,0,1,1000\n"
		"dw_scheme: 0,0,0,0\n"
		"dw_scheme: 0.6,0.8,0,1000\n"
		"dw_scheme: 0,0.6,0.8,1000\n"
		"file: . 4096\n"
		"END\n";
	struct mif_header h;
	struct errbuf err = { 0 };

	(void)state;
	assert_int_equal(mif_parse_header(text, sizeof(text) - 1, "x.mif", FIELD, &h, &err), 0);
	assert_int_equal(h.ndim, 4);
	assert_int_equal(h.dim[0], 4);
	assert_int_equal(h.dim[3], 7);
	assert_true(h.vox[1] == 2.5);
	assert_int_equal(h.order[0], 1);
	assert_true(h.reversed[1]);
	assert_int_equal(h.order[1], 0);
	assert_false(h.reversed[2]);
	assert_true(h.transform[1][0] == 1 && h.transform[0][3] == 10 && h.transform[2][3] == 30);
	assert_true(h.offset == 1.5 && h.scale == 2);
	assert_int_equal(h.data_offset, 4096);
	assert_int_equal(h.scheme.n, 7);
	assert_true(h.scheme.rows[4 * 5 + 1] == 0.8 && h.scheme.rows[4 * 6 + 3] == 1000);
	mif_scheme_free(&h.scheme);
}

static void test_default_transform(void **state)
{
	struct mif_header h;
	struct errbuf err = { 0 };

	(void)state;
	assert_int_equal(parse("mrtrix image\ndim: 3,5,7\nvox: 2,2,2\nlayout: +0,+1,+2\n"
			       "datatype: UInt8\nfile: . 100\nEND\n", &h, &err), 0);
	/* MRtrix3's Transform::get_default: the grid centred on the origin. */
	assert_true(h.transform[0][0] == 1 && h.transform[1][1] == 1 && h.transform[2][2] == 1);
	assert_true(h.transform[0][3] == -2 && h.transform[1][3] == -4 && h.transform[2][3] == -6);
	assert_int_equal(h.scheme.n, 0);
}

/* Each malformed header fails naming the file, the field and the reason. */
static void test_malformed_headers(void **state)
{
	static const struct {
		const char *text;
		const char *reason;
	} cases[] = {
		{ "mrtrix imag\ndim: 2,2,2\nEND\n", "not an MRtrix image" },
		{ "mrtrix image\ndim: 2,2,2\n", "no END line" },
		{ "mrtrix image\nvox: 1,1,1\nlayout: +0,+1,+2\ndatatype: UInt8\nfile: . 99\nEND\n",
		  "dim is missing" },
		{ "mrtrix image\ndim: 2,0,2\nEND\n", "dim must be whole numbers" },
		{ "mrtrix image\ndim: 2,2\nEND\n", "dim must list 3" },
		{ "mrtrix image\ndim: 2,2,2,3,2\nvox: 1,1,1\nlayout: +0,+1,+2,+3,+4\n"
		  "datatype: UInt8\nfile: . 99\nEND\n", "more than 4 axes" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,-1,1\nlayout: +0,+1,+2\ndatatype: UInt8\n"
		  "file: . 99\nEND\n", "voxel sizes (vox) must be positive" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,nan,1\nlayout: +0,+1,+2\ndatatype: UInt8\n"
		  "file: . 99\nEND\n", "voxel sizes (vox) must be positive" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,1,1\nlayout: +0,+0,+2\ndatatype: UInt8\n"
		  "file: . 99\nEND\n", "layout must rank each axis of dim once" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1\ndatatype: UInt8\n"
		  "file: . 99\nEND\n", "layout must rank each axis of dim once" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,1,1\nlayout: +0;+1;+2\ndatatype: UInt8\n"
		  "file: . 99\nEND\n", "layout must be signed axis ranks" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2\ndatatype: CFloat32LE\n"
		  "file: . 99\nEND\n", "datatype is not supported" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2\nfile: . 99\nEND\n",
		  "datatype is missing" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2\ndatatype: UInt8\n"
		  "file: dwi.dat 0\nEND\n", "separate file" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2\ndatatype: UInt8\n"
		  "file: . 0\nEND\n", "positive byte offset" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2\ndatatype: UInt8\n"
		  "transform: 1,0,0,0\ntransform: 0,1,0,0\nfile: . 99\nEND\n",
		  "transform must have 3 rows" },
		{ "mrtrix image\ndim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2\ndatatype: UInt8\n"
		  "transform: 1,0,0\nEND\n", "transform row must have 4 numbers" },
		{ "mrtrix image\ndim: 2,2,2\nscaling: 2\nEND\n", "scaling must be" },
		{ "mrtrix image\ndim: 2,2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2,+3\ndatatype: UInt8\n"
		  "dw_scheme: 1,0,0\nfile: . 99\nEND\n", "dw_scheme row must be 4 numbers" },
		{ "mrtrix image\ndim: 2,2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2,+3\ndatatype: UInt8\n"
		  "dw_scheme: 1,0,0,1000\nfile: . 99\nEND\n", "dw_scheme has 1 rows for 2 volumes" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mif_header h;
		struct errbuf err = { 0 };
		int r = parse(cases[i].text, &h, &err);

		if (r != -EINVAL || !strstr(err.message, cases[i].reason) || !strstr(err.message, "x.mif") ||
		    strcmp(err.field, FIELD) != 0)
			fail_msg("case %zu: r=%d field=%s msg=%s (want \"%s\")", i, r, err.field,
				 err.message, cases[i].reason);
	}
}

/* Axis 1 is stored fastest, axis 0 next and reversed: voxel x is axis 1,
 * y axis 0 from its last index, and the affine follows (as mrconvert to
 * NIfTI writes it). Int16BE with scaling. */
static void test_permuted_reversed_layout(void **state)
{
	int16_t raw[12];
	struct volume v;
	struct errbuf err = { 0 };
	const char *path;

	(void)state;
	for (int m = 0; m < 12; m++)
		raw[m] = (int16_t)__builtin_bswap16((uint16_t)m);
	path = write_mif("perm.mif", "dim: 2,3,2\nvox: 2,3,4\nlayout: -1,+0,+2\n"
			 "datatype: Int16BE\nscaling: 1,0.5\ntransform: 1,0,0,10\n"
			 "transform: 0,1,0,20\ntransform: 0,0,1,30\n", raw, sizeof(raw), false);
	assert_int_equal(image_load(path, FIELD, &v, NULL, &err), 0);
	assert_int_equal(v.dim[0], 3);
	assert_int_equal(v.dim[1], 2);
	assert_int_equal(v.dim[2], 2);
	assert_int_equal(v.dim[3], 1);
	for (int z = 0; z < 2; z++)
		for (int y = 0; y < 2; y++)
			for (int x = 0; x < 3; x++)
				assert_true(at(&v, x, y, z, 0) == 1 + 0.5f * (float)(x + 3 * y + 6 * z));
	{
		const double want[4][4] = { { 0, -2, 0, 12 }, { 3, 0, 0, 20 }, { 0, 0, 4, 30 },
					    { 0, 0, 0, 1 } };
		for (int r = 0; r < 4; r++)
			for (int c = 0; c < 4; c++)
				if (v.affine[r][c] != want[r][c])
					fail_msg("affine[%d][%d] = %g, want %g", r, c, v.affine[r][c],
						 want[r][c]);
	}
	volume_free(&v);
}

/* A DWI stored volume-contiguous (layout +1,+2,+3,+0), gzip'd, with its
 * dw_scheme handed back through image_info. */
static void test_volume_contiguous_gz_with_scheme(void **state)
{
	float raw[2 * 2 * 1 * 3];
	struct image_info info;
	struct volume v;
	struct errbuf err = { 0 };
	const char *path;
	int64_t dim[4];
	size_t stored;

	(void)state;
	for (int m = 0; m < 12; m++)
		raw[m] = (float)m;
	path = write_mif("dwi.mif.gz", "dim: 2,2,1,3\nvox: 1,1,1,1\nlayout: +1,+2,+3,+0\n"
			 "datatype: Float32LE\ntransform: 1,0,0,0\ntransform: 0,1,0,0\n"
			 "transform: 0,0,1,0\ndw_scheme: 0,0,0,0\ndw_scheme: 1,0,0,1000\n"
			 "dw_scheme: 0,1,0,1000\n", raw, sizeof(raw), true);
	assert_int_equal(image_load(path, FIELD, &v, &info, &err), 0);
	assert_true(info.mif);
	assert_int_equal(info.scheme.n, 3);
	assert_true(info.scheme.rows[4 * 2 + 1] == 1 && info.scheme.rows[4 * 2 + 3] == 1000);
	for (int y = 0; y < 2; y++)
		for (int x = 0; x < 2; x++)
			for (int t = 0; t < 3; t++)
				assert_true(at(&v, x, y, 0, t) == (float)(t + 3 * (x + 2 * y)));
	mif_scheme_free(&info.scheme);
	volume_free(&v);
	assert_int_equal(image_probe(path, FIELD, dim, &stored, &err), 0);
	assert_true(dim[0] == 2 && dim[1] == 2 && dim[2] == 1 && dim[3] == 3 && stored == 4);
}

/* Bit: the high bit of each byte first (MRtrix3's raw.h). */
static void test_bit_mask(void **state)
{
	static const int bits[9] = { 1, 0, 1, 1, 0, 0, 0, 1, 1 };
	const unsigned char raw[2] = { 0xB1, 0x80 };
	struct volume v;
	struct errbuf err = { 0 };
	const char *path;

	(void)state;
	path = write_mif("mask.mif", "dim: 3,3,1\nvox: 1,1,1\nlayout: +0,+1,+2\ndatatype: Bit\n",
			 raw, sizeof(raw), false);
	assert_int_equal(image_load(path, "inputs.mask", &v, NULL, &err), 0);
	for (int y = 0; y < 3; y++)
		for (int x = 0; x < 3; x++)
			assert_true(at(&v, x, y, 0, 0) == (float)bits[x + 3 * y]);
	volume_free(&v);
}

static void test_data_errors(void **state)
{
	const float nan_raw[8] = { 0, 1, 2, NAN, 4, 5, 6, 7 };
	const unsigned char short_raw[3] = { 0 };
	struct volume v;
	struct errbuf err = { 0 };
	const char *path;

	(void)state;
	path = write_mif("short.mif", "dim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2\n"
			 "datatype: UInt8\n", short_raw, sizeof(short_raw), false);
	assert_int_equal(image_load(path, FIELD, &v, NULL, &err), -EIO);
	assert_non_null(strstr(err.message, "truncated"));
	path = write_mif("short.mif.gz", "dim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2\n"
			 "datatype: UInt8\n", short_raw, sizeof(short_raw), true);
	assert_int_equal(image_load(path, FIELD, &v, NULL, &err), -EIO);
	assert_non_null(strstr(err.message, "truncated"));
	path = write_mif("nan.mif", "dim: 2,2,2\nvox: 1,1,1\nlayout: +0,+1,+2\n"
			 "datatype: Float32LE\n", nan_raw, sizeof(nan_raw), false);
	assert_int_equal(image_load(path, FIELD, &v, NULL, &err), -EINVAL);
	assert_non_null(strstr(err.message, "non-finite value at voxel (1, 1, 0)"));
}

/* A NIfTI goes to volume.h's reader, with info saying so. */
static void test_nifti_still_read(void **state)
{
	struct image_info info;
	struct volume v = { 0 }, back;
	struct errbuf err = { 0 };
	const int64_t dim[4] = { 2, 2, 2, 1 };
	const char *path = scratch("plain.nii");

	(void)state;
	assert_int_equal(volume_alloc(&v, dim, 1.0), 0);
	v.data[3] = 7;
	assert_int_equal(volume_save(path, &v, &err), 0);
	assert_int_equal(image_load(path, FIELD, &back, &info, &err), 0);
	assert_false(info.mif);
	assert_int_equal(info.scheme.n, 0);
	assert_true(back.data[3] == 7);
	volume_free(&back);
	volume_free(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_header),
		cmocka_unit_test(test_default_transform),
		cmocka_unit_test(test_malformed_headers),
		cmocka_unit_test(test_permuted_reversed_layout),
		cmocka_unit_test(test_volume_contiguous_gz_with_scheme),
		cmocka_unit_test(test_bit_mask),
		cmocka_unit_test(test_data_errors),
		cmocka_unit_test(test_nifti_still_read),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
