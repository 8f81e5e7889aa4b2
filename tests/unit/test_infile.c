/* SPDX-License-Identifier: MIT */
/*
 * infile: inputs opened once, regular files only, beneath the data roots and
 * as the identity that asked (the last part needs root: skipped otherwise).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/infile.h"
#include "tmpdir.h"

static char base[] = "/tmp/tractd-test-infile-XXXXXX";
static char root[100], outside[100];

static const char *in(const char *dir, const char *name)
{
	static char path[4][1400];
	static int next;
	char *p = path[next++ % 4];

	int n = snprintf(p, sizeof(path[0]), "%s/%s", dir, name);

	assert_true(n > 0 && (size_t)n < sizeof(path[0]));
	return p;
}

static void write_text(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(close(fd), 0);
	assert_int_equal(chmod(path, mode), 0);
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(base))
		return -1;
	assert_int_equal(chmod(base, 0755), 0);
	snprintf(root, sizeof(root), "%s/root", base);
	snprintf(outside, sizeof(outside), "%s/outside", base);
	assert_int_equal(mkdir(root, 0755), 0);
	assert_int_equal(mkdir(outside, 0755), 0);
	assert_int_equal(mkdir(in(root, "sub"), 0755), 0);
	assert_int_equal(mkdir(in(base, "rootsibling"), 0755), 0);
	write_text(in(root, "public.txt"), "public\n", 0644);
	write_text(in(root, "sub/deep.txt"), "deep\n", 0644);
	write_text(in(root, "secret.txt"), "secret\n", 0600);
	write_text(in(outside, "secret.txt"), "outside\n", 0644);
	write_text(in(base, "rootsibling/x.txt"), "sibling\n", 0644);
	assert_int_equal(symlink(in(outside, "secret.txt"), in(root, "escape.txt")), 0);
	assert_int_equal(symlink("../outside/secret.txt", in(root, "escape_rel.txt")), 0);
	assert_int_equal(symlink(in(root, "public.txt"), in(root, "inside_abs.txt")), 0);
	assert_int_equal(symlink("sub/deep.txt", in(root, "inside_rel.txt")), 0);
	assert_int_equal(symlink(outside, in(root, "dirlink")), 0);
	assert_int_equal(mkfifo(in(root, "fifo"), 0666), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove(base);
}

static struct infile_identity me(void)
{
	return (struct infile_identity){ .uid = geteuid(), .gid = getegid() };
}

/* Reads fd's first line into a static buffer. */
static const char *first_line(int fd)
{
	static char buf[64];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	assert_true(n > 0);
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return buf;
}

static void expect_opens(const char *roots, const char *path, const struct infile_identity *who,
			 const char *line)
{
	int fd = -1;

	if (infile_open_beneath(roots, path, who, &fd) != 0)
		fail_msg("%s was refused", path);
	assert_string_equal(first_line(fd), line);
	assert_int_equal(close(fd), 0);
}

static void expect_refused(const char *roots, const char *path,
			   const struct infile_identity *who, int code)
{
	int fd = -1;
	int r = infile_open_beneath(roots, path, who, &fd);

	if (r != code)
		fail_msg("%s: got %d, expected %d", path, r, code);
	assert_int_equal(fd, -1);
}

static void test_open_regular_files_only(void **state)
{
	int fd = -1;

	(void)state;
	assert_int_equal(infile_open(in(root, "public.txt"), &fd), 0);
	assert_string_equal(first_line(fd), "public");
	assert_int_equal(close(fd), 0);
	fd = -1;
	/* A FIFO without a writer: refused at once, not waited on. */
	assert_int_equal(infile_open(in(root, "fifo"), &fd), -EINVAL);
	assert_int_equal(infile_open(root, &fd), -EINVAL);
	assert_int_equal(infile_open("/dev/null", &fd), -EINVAL);
	assert_int_equal(infile_open(in(root, "missing"), &fd), -ENOENT);
	assert_int_equal(fd, -1);
}

static void test_reopen_starts_at_zero(void **state)
{
	int fd = -1, copy;
	char c;

	(void)state;
	assert_int_equal(infile_open(in(root, "public.txt"), &fd), 0);
	assert_int_equal(read(fd, &c, 1), 1);
	copy = infile_reopen(fd);
	assert_true(copy >= 0);
	assert_int_equal(read(copy, &c, 1), 1);
	assert_int_equal(c, 'p');
	assert_int_equal(close(copy), 0);
	assert_int_equal(close(fd), 0);
}

static void test_beneath_the_roots(void **state)
{
	struct infile_identity who = me();
	char roots[1400];

	(void)state;
	expect_opens(root, in(root, "public.txt"), &who, "public");
	expect_opens(root, in(root, "sub/deep.txt"), &who, "deep");
	expect_opens(root, in(root, "inside_abs.txt"), &who, "public");
	expect_opens(root, in(root, "inside_rel.txt"), &who, "deep");
	expect_opens(root, in(root, "sub/../public.txt"), &who, "public");
	/* A second root, and one that does not exist, are fine. */
	snprintf(roots, sizeof(roots), "%s/none:%s:%s", base, outside, root);
	expect_opens(roots, in(root, "public.txt"), &who, "public");
	expect_opens(roots, in(outside, "secret.txt"), &who, "outside");

	/* Out of the root, by name, symlink or "..": not found, all alike. */
	expect_refused(root, in(outside, "secret.txt"), &who, -ENOENT);
	expect_refused(root, in(root, "escape.txt"), &who, -ENOENT);
	expect_refused(root, in(root, "escape_rel.txt"), &who, -ENOENT);
	expect_refused(root, in(root, "dirlink/secret.txt"), &who, -ENOENT);
	expect_refused(root, in(root, "../outside/secret.txt"), &who, -ENOENT);
	expect_refused(root, in(base, "rootsibling/x.txt"), &who, -ENOENT);
	expect_refused(root, in(root, "missing.txt"), &who, -ENOENT);
	expect_refused(root, "public.txt", &who, -ENOENT);   /* relative */
	/* Not a regular file. */
	expect_refused(root, in(root, "fifo"), &who, -EINVAL);
	expect_refused(root, root, &who, -EINVAL);
}

/* As root: another identity reads only what it may, and this thread is
 * root again afterwards. */
static void test_as_another_identity(void **state)
{
	struct infile_identity nobody = { .uid = 65534, .gid = 65534, .n_groups = 0 };
	struct infile_identity other = { .uid = 23456, .gid = 23456, .n_groups = 1,
					 .groups = { 23457 } };
	char private_dir[1400];

	(void)state;
	if (geteuid() != 0) {
		skip();
		return;
	}
	expect_opens(root, in(root, "public.txt"), &nobody, "public");
	expect_refused(root, in(root, "secret.txt"), &nobody, -ENOENT);
	/* Root still reads it: the identity was given back. */
	expect_opens(root, in(root, "secret.txt"), &(struct infile_identity){ 0 }, "secret");

	/* Supplementary groups count; a directory the user cannot search hides
	 * what is in it. */
	assert_int_equal(chown(in(root, "secret.txt"), 0, 23457), 0);
	assert_int_equal(chmod(in(root, "secret.txt"), 0640), 0);
	expect_opens(root, in(root, "secret.txt"), &other, "secret");
	expect_refused(root, in(root, "secret.txt"), &nobody, -ENOENT);
	snprintf(private_dir, sizeof(private_dir), "%s/private", root);
	assert_int_equal(mkdir(private_dir, 0700), 0);
	write_text(in(private_dir, "x.txt"), "x\n", 0644);
	expect_refused(root, in(private_dir, "x.txt"), &nobody, -ENOENT);
	expect_opens(root, in(private_dir, "x.txt"), &(struct infile_identity){ 0 }, "x");
	assert_int_equal(access(in(root, "secret.txt"), R_OK), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_regular_files_only),
		cmocka_unit_test(test_reopen_starts_at_zero),
		cmocka_unit_test(test_beneath_the_roots),
		cmocka_unit_test(test_as_another_identity),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
