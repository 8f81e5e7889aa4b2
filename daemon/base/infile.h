/* SPDX-License-Identifier: MIT */
/*
 * infile: opening a job's input files once, as the identity that asked.
 *
 * Every input a job reads is opened here and read afterwards from the
 * descriptor only, so that no name is resolved twice (a symlink or directory
 * swapped between a check and a reopen cannot redirect the read) and no
 * library opens a companion name of its own. Only regular files are
 * accepted: a FIFO or a device would block the reader or have side effects.
 * Does not log.
 */
#ifndef TRACTD_INFILE_H
#define TRACTD_INFILE_H

#include <stdbool.h>
#include <sys/types.h>

/* Groups beyond this many are dropped: fewer groups can only deny access. */
#define INFILE_MAX_GROUPS 64

/* Whom a server-side path is opened as: a Unix socket peer's credentials
 * (SO_PEERCRED, SO_PEERGROUPS) or the account a token name maps to. */
struct infile_identity {
	uid_t uid;
	gid_t gid;
	gid_t groups[INFILE_MAX_GROUPS];
	int n_groups;
};

/* Opens path read-only (as the calling process), refusing anything but a
 * regular file without blocking on it. Returns 0 with *ret_fd (close it), or
 * -ENOENT (missing or not permitted, not told apart), -EINVAL (not a
 * regular file) or another negative errno. */
int infile_open(const char *path, int *ret_fd);

/* Opens the absolute path, as who, if it resolves (symlinks and ".."
 * followed, as who may follow them) to a file under one of roots (a
 * ':'-separated list of directories). The file is then opened from the
 * root's directory by its canonical name, with no symlink allowed on the
 * way (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): a path changed
 * since it was resolved fails rather than leads elsewhere. who's
 * filesystem uid and groups are taken on this thread only. Returns as
 * infile_open (a path outside the roots is -ENOENT too), plus -EPERM when
 * this process cannot take who's identity (it is neither root nor who). */
int infile_open_beneath(const char *roots, const char *path, const struct infile_identity *who,
			int *ret_fd);

/* A new descriptor for the same open file, with its offset at 0 for a
 * reader that moves it (the offset is shared with fd). Returns it, or a
 * negative errno. */
int infile_reopen(int fd);

#endif
