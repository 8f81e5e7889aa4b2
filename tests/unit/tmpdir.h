/* SPDX-License-Identifier: MIT */
/*
 * tmpdir: the unit tests' scratch directories, removed with all they hold.
 */
#ifndef TRACTD_TEST_TMPDIR_H
#define TRACTD_TEST_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static inline int tmpdir_remove_entry(const char *path, const struct stat *st, int flag,
				      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Removes dir and everything under it (symlinks themselves, not their
 * targets). 0 or -1 with errno. */
static inline int tmpdir_remove(const char *dir)
{
	return nftw(dir, tmpdir_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
