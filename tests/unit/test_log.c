/* SPDX-License-Identifier: MIT */
/*
 * log: messages carry what clients sent, so log_escape writes control
 * characters as \xNN (a newline cannot start a forged line), keeps printable
 * and UTF-8 bytes, and when the output is full cuts between characters,
 * never inside an escape.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "base/log.h"

static void test_control_characters_escaped(void **state)
{
	char out[128];

	(void)state;
	assert_int_equal(log_escape("a\nb", out, sizeof(out)), 6);
	assert_string_equal(out, "a\\x0ab");
	log_escape("x\r\ntractd: error: forged\t\x1b[31m\x7f", out, sizeof(out));
	assert_string_equal(out, "x\\x0d\\x0atractd: error: forged\\x09\\x1b[31m\\x7f");
	assert_null(strchr(out, '\n'));
}

static void test_printable_and_utf8_kept(void **state)
{
	const char *in = "job=abc owner=bob path='/data/\xc3\xa9t\xc3\xa9 1.nii.gz' \\x0a";
	char out[128];

	(void)state;
	assert_int_equal(log_escape(in, out, sizeof(out)), strlen(in));
	assert_string_equal(out, in);
}

static void test_cut_between_characters(void **state)
{
	char out[6];

	(void)state;
	/* "ab" then an escape of 4 that does not fit before the NUL. */
	assert_int_equal(log_escape("ab\ncd", out, sizeof(out)), 2);
	assert_string_equal(out, "ab");
	assert_int_equal(log_escape("abcdefgh", out, sizeof(out)), 5);
	assert_string_equal(out, "abcde");
	assert_int_equal(log_escape("\n", out, 5), 4);
	assert_string_equal(out, "\\x0a");
	assert_int_equal(log_escape("abc", out, 1), 0);
	assert_string_equal(out, "");
	assert_int_equal(log_escape("abc", out, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_control_characters_escaped),
		cmocka_unit_test(test_printable_and_utf8_kept),
		cmocka_unit_test(test_cut_between_characters),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
