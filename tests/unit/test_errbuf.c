/* SPDX-License-Identifier: MIT */
/*
 * errbuf: the kind of a failure is set where it happens (an errbuf_set that
 * names a field blames the input, one that names none is untied, a site
 * that knows says which), every -ENOMEM is out of memory (allocations return
 * it bare), prefixing the field keeps the kind, and kinds have names that
 * job records store.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>

#include "base/errbuf.h"

static void test_default_kinds(void **state)
{
	struct errbuf err = { 0 };

	(void)state;
	assert_int_equal(errbuf_kind(&err, -EIO), ERR_KIND_UNTIED);
	assert_int_equal(errbuf_set(&err, -EINVAL, "tracking.step_size", "bad"), -EINVAL);
	assert_int_equal(errbuf_kind(&err, -EINVAL), ERR_KIND_INPUT);
	errbuf_set(&err, -EINVAL, "", "invalid JSON");
	assert_int_equal(errbuf_kind(&err, -EINVAL), ERR_KIND_UNTIED);
	errbuf_set(&err, -EIO, NULL, NULL);
	assert_int_equal(errbuf_kind(&err, -EIO), ERR_KIND_UNTIED);
	assert_string_equal(err.message, "");
}

static void test_kind_set_by_site(void **state)
{
	struct errbuf err = { 0 };

	(void)state;
	assert_int_equal(errbuf_set_kind(&err, ERR_KIND_DEVICE, -ENODEV, "device", "no %s",
					 "GPU"), -ENODEV);
	assert_int_equal(errbuf_kind(&err, -ENODEV), ERR_KIND_DEVICE);
	assert_string_equal(err.field, "device");
	assert_string_equal(err.message, "no GPU");
	/* A later errbuf_set replaces the kind with its own. */
	errbuf_set(&err, -EINVAL, "seeds.count", "bad");
	assert_int_equal(errbuf_kind(&err, -EINVAL), ERR_KIND_INPUT);
	errbuf_reclassify(&err, ERR_KIND_OUTPUT);
	assert_int_equal(errbuf_kind(&err, -EINVAL), ERR_KIND_OUTPUT);
	/* NULL errbufs are allowed everywhere. */
	assert_int_equal(errbuf_set_kind(NULL, ERR_KIND_LIMIT, -EFBIG, "x", "y"), -EFBIG);
	errbuf_reclassify(NULL, ERR_KIND_OUTPUT);
	assert_int_equal(errbuf_kind(NULL, -EIO), ERR_KIND_UNTIED);
}

static void test_out_of_memory_whatever_the_site_said(void **state)
{
	struct errbuf err = { 0 };

	(void)state;
	assert_int_equal(errbuf_kind(&err, -ENOMEM), ERR_KIND_MEMORY);
	assert_int_equal(errbuf_kind(NULL, -ENOMEM), ERR_KIND_MEMORY);
	errbuf_set(&err, -ENOMEM, "inputs.dwi", "out of memory");
	assert_int_equal(errbuf_kind(&err, -ENOMEM), ERR_KIND_MEMORY);
	errbuf_set_kind(&err, ERR_KIND_DEVICE, -ENOMEM, "device", "out of memory");
	assert_int_equal(errbuf_kind(&err, -ENOMEM), ERR_KIND_MEMORY);
}

static void test_prefix_keeps_the_kind(void **state)
{
	struct errbuf err = { 0 };

	(void)state;
	errbuf_set_kind(&err, ERR_KIND_TOO_LARGE, -E2BIG, "odf", "too big");
	errbuf_prefix_field(&err, "inputs");
	assert_string_equal(err.field, "inputs.odf");
	assert_int_equal(errbuf_kind(&err, -E2BIG), ERR_KIND_TOO_LARGE);
}

static void test_names_round_trip(void **state)
{
	enum err_kind kinds[] = { ERR_KIND_UNTIED, ERR_KIND_INPUT, ERR_KIND_MEMORY,
				  ERR_KIND_DEVICE, ERR_KIND_TOO_LARGE, ERR_KIND_LIMIT,
				  ERR_KIND_OUTPUT, ERR_KIND_STORAGE, ERR_KIND_SHUTDOWN,
				  ERR_KIND_INTERRUPTED };
	enum err_kind back;

	(void)state;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		back = ERR_KIND_UNTIED;
		assert_int_equal(errbuf_kind_from_name(errbuf_kind_name(kinds[i]), &back), 0);
		assert_int_equal(back, kinds[i]);
	}
	assert_string_equal(errbuf_kind_name(ERR_KIND_STORAGE), "storage");
	assert_int_equal(errbuf_kind_from_name("gpu", &back), -EINVAL);
	assert_int_equal(errbuf_kind_from_name("", &back), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_kinds),
		cmocka_unit_test(test_kind_set_by_site),
		cmocka_unit_test(test_out_of_memory_whatever_the_site_said),
		cmocka_unit_test(test_prefix_keeps_the_kind),
		cmocka_unit_test(test_names_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
