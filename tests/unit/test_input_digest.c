/* SPDX-License-Identifier: MIT */
/*
 * input_digest: the same bytes under another name give the same digest;
 * a byte changed in the header or at the end of a file (a gzip trailer),
 * the size, or the input a file is given as changes it; a large file is
 * sampled, not read whole; an unreadable input is named.
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
#include <unistd.h>

#include "job/input_digest.h"
#include "tmpdir.h"

#define LARGE_BYTES (1u << 20)

struct fixture {
	char root[64];
	char a[96], b[96];
	unsigned char *bytes;
};

static void write_file(const char *path, const unsigned char *bytes, size_t n)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(bytes, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_input_digest.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	snprintf(f->a, sizeof(f->a), "%s/a.nii.gz", f->root);
	snprintf(f->b, sizeof(f->b), "%s/b.nii.gz", f->root);
	f->bytes = malloc(LARGE_BYTES);
	assert_non_null(f->bytes);
	for (size_t i = 0; i < LARGE_BYTES; i++)
		f->bytes[i] = (unsigned char)(i * 2654435761u >> 13);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(tmpdir_remove(f->root), 0);
	free(f->bytes);
	free(f);
	return 0;
}

/* The digest of a job whose inputs.odf is odf and inputs.mask mask (NULL: none). */
static uint64_t digest_of(const char *odf, const char *mask)
{
	struct jobspec job = { .odf_path = (char *)odf, .mask_path = (char *)mask };
	struct errbuf err = { 0 };
	uint64_t h = 0;

	assert_int_equal(input_digest(&job, &h, &err), 0);
	return h;
}

static void test_content_not_name(void **state)
{
	struct fixture *f = *state;
	size_t sizes[] = { 0, 5, 1000, INPUT_DIGEST_WHOLE_BYTES, LARGE_BYTES };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		write_file(f->a, f->bytes, sizes[i]);
		write_file(f->b, f->bytes, sizes[i]);
		assert_true(digest_of(f->a, NULL) == digest_of(f->b, NULL));
	}
}

/* A byte changed at each of offsets changes the digest of a size-byte file. */
static void expect_seen(struct fixture *f, size_t size, const size_t *offsets, size_t n)
{
	write_file(f->a, f->bytes, size);
	uint64_t before = digest_of(f->a, NULL);

	for (size_t i = 0; i < n; i++) {
		f->bytes[offsets[i]] ^= 1;
		write_file(f->b, f->bytes, size);
		f->bytes[offsets[i]] ^= 1;
		assert_true(digest_of(f->b, NULL) != before);
	}
	write_file(f->b, f->bytes, size - 1);
	assert_true(digest_of(f->b, NULL) != before);
}

static void test_changes_seen(void **state)
{
	struct fixture *f = *state;
	/* A small file is read whole; a large one's header and trailer are sampled. */
	size_t small[] = { 0, 1, 777, 2000, 2999 };
	size_t middle_block = 8 * (LARGE_BYTES - INPUT_DIGEST_BLOCK_BYTES) / (INPUT_DIGEST_BLOCKS - 1);
	size_t large[] = { 0, 347, middle_block + 100, LARGE_BYTES - 8, LARGE_BYTES - 1 };

	expect_seen(f, 3000, small, sizeof(small) / sizeof(small[0]));
	expect_seen(f, INPUT_DIGEST_WHOLE_BYTES, small, sizeof(small) / sizeof(small[0]));
	expect_seen(f, LARGE_BYTES, large, sizeof(large) / sizeof(large[0]));
}

/* Between two sampled blocks of a large file: the cost bound (64 KiB read
 * per input), which input_digest.h states. */
static void test_large_file_sampled(void **state)
{
	struct fixture *f = *state;
	size_t between = INPUT_DIGEST_BLOCK_BYTES + 100;

	write_file(f->a, f->bytes, LARGE_BYTES);
	f->bytes[between] ^= 1;
	write_file(f->b, f->bytes, LARGE_BYTES);
	f->bytes[between] ^= 1;
	assert_true(digest_of(f->a, NULL) == digest_of(f->b, NULL));
}

static void test_slot_counts(void **state)
{
	struct fixture *f = *state;

	write_file(f->a, f->bytes, 1000);
	write_file(f->b, f->bytes + 1, 1000);
	assert_true(digest_of(f->a, NULL) != digest_of(f->a, f->b));
	assert_true(digest_of(f->a, f->b) != digest_of(f->b, f->a));
	assert_true(digest_of(f->a, f->a) != digest_of(f->a, NULL));
}

static void test_unreadable_named(void **state)
{
	struct fixture *f = *state;
	char missing[128];
	struct jobspec job = { .seed_roi_path = missing };
	struct errbuf err = { 0 };
	uint64_t h = 7;

	snprintf(missing, sizeof(missing), "%s/missing.nii", f->root);
	assert_int_equal(input_digest(&job, &h, &err), -ENOENT);
	assert_string_equal(err.field, "seeds.roi");
	assert_non_null(strstr(err.message, "missing.nii"));
	assert_true(h == 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_content_not_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_changes_seen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_file_sampled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slot_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unreadable_named, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
