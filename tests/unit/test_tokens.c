/* SPDX-License-Identifier: MIT */
/* Unit tests of the tokens file parser and the token check (daemon/server/tokens.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/tokens.h"

#define TOK_A "aaaaaaaaaaaaaaaa1"
#define TOK_B "bbbbbbbbbbbbbbbb22"

static int parse_text(const char *text, struct tokens **ret, struct errbuf *err)
{
	FILE *fp = fmemopen((void *)text, strlen(text), "r");
	int r;

	assert_non_null(fp);
	r = tokens_parse(fp, "tokens", ret, err);
	fclose(fp);
	return r;
}

static void test_good_file(void **state)
{
	const char *text = "# lab tokens\n"
			   "\n"
			   "alice " TOK_A "\n"
			   "  pipeline-1\t" TOK_B "   admin  \r\n"
			   "alice cccccccccccccccc333\n";
	struct tokens *t = NULL;
	struct errbuf err = { 0 };
	struct token_identity who;

	(void)state;
	assert_int_equal(parse_text(text, &t, &err), 0);
	assert_int_equal(tokens_count(t), 3);
	assert_int_equal(tokens_check(t, TOK_A, strlen(TOK_A), &who), 0);
	assert_string_equal(who.name, "alice");
	assert_false(who.admin);
	assert_int_equal(tokens_check(t, TOK_B, strlen(TOK_B), &who), 0);
	assert_string_equal(who.name, "pipeline-1");
	assert_true(who.admin);
	assert_int_equal(tokens_check(t, "cccccccccccccccc333", 19, &who), 0);
	assert_string_equal(who.name, "alice");
	/* Prefixes, extensions, other tokens and nothing: refused. */
	assert_int_equal(tokens_check(t, TOK_A, strlen(TOK_A) - 1, &who), -EACCES);
	assert_int_equal(tokens_check(t, TOK_A "x", strlen(TOK_A) + 1, &who), -EACCES);
	assert_int_equal(tokens_check(t, "aaaaaaaaaaaaaaaa2", 17, &who), -EACCES);
	assert_int_equal(tokens_check(t, "", 0, &who), -EACCES);
	tokens_free(t);
	tokens_free(NULL);
	assert_int_equal(tokens_check(NULL, TOK_A, strlen(TOK_A), &who), -EACCES);
}

static void test_bad_files(void **state)
{
	static const struct {
		const char *text, *message;
	} cases[] = {
		{ "", "tokens: has no tokens" },
		{ "# nothing\n\n", "tokens: has no tokens" },
		{ "alice\n", "tokens:1: expected 'NAME TOKEN [admin]'" },
		{ "#\nalice " TOK_A " admin x\n", "tokens:2: expected 'NAME TOKEN [admin]', got more" },
		{ "alice " TOK_A " root\n", "tokens:1: the third word may only be 'admin'" },
		{ "alice 0123456789abcde\n", "tokens:1: the token of alice must be 16 to 512" },
		{ "alice 0123456789abcdef\xc3\xa9\n", "tokens:1: the token of alice must be" },
		{ "-alice " TOK_A "\n", "tokens:1: NAME must be" },
		{ ".. " TOK_A "\n", "tokens:1: NAME must be" },
		{ "a/b " TOK_A "\n", "tokens:1: NAME must be" },
		{ "uid:1000 " TOK_A "\n", "tokens:1: NAME must be" },
		{ "a234567890123456789012345678901234567890123456789012345678901234 " TOK_A "\n",
		  "tokens:1: NAME must be 1 to 63" },
		{ "alice " TOK_A "\nbob " TOK_A "\n", "tokens:2: the token of bob is also alice's" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tokens *t = NULL;
		struct errbuf err = { 0 };
		int r = parse_text(cases[i].text, &t, &err);

		if (r != -EINVAL || strcmp(err.field, "tokens_file") ||
		    strncmp(err.message, cases[i].message, strlen(cases[i].message)))
			fail_msg("case %zu: rc %d, field '%s', message '%s'", i, r, err.field,
				 err.message);
		/* The secret itself never appears in a message. */
		assert_null(strstr(err.message, TOK_A));
		assert_null(t);
	}
}

static void test_load_checks_mode(void **state)
{
	char dir[] = "/tmp/test-tokens-XXXXXX", path[64];
	struct tokens *t = NULL;
	struct errbuf err = { 0 };
	FILE *fp;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tokens", dir);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("alice " TOK_A "\n", fp);
	assert_int_equal(fclose(fp), 0);

	assert_int_equal(chmod(path, 0640), 0);
	assert_int_equal(tokens_load(path, &t, &err), -EPERM);
	assert_non_null(strstr(err.message, "chmod 600"));
	assert_int_equal(chmod(path, 0604), 0);
	assert_int_equal(tokens_load(path, &t, &err), -EPERM);
	assert_int_equal(chmod(path, 0600), 0);
	assert_int_equal(tokens_load(path, &t, &err), 0);
	assert_int_equal(tokens_count(t), 1);
	tokens_free(t);
	assert_int_equal(chmod(path, 0400), 0);
	t = NULL;
	assert_int_equal(tokens_load(path, &t, &err), 0);
	tokens_free(t);

	assert_int_equal(tokens_load(dir, &t, &err), -EINVAL);   /* a directory */
	unlink(path);
	assert_int_equal(tokens_load(path, &t, &err), -ENOENT);
	assert_non_null(strstr(err.message, path));
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_file),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_load_checks_mode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
