/* SPDX-License-Identifier: MIT */
/*
 * infile: input files opened once, as the identity that asked (see infile.h).
 *
 * Identity: the filesystem uid, gid and supplementary groups of the calling
 * thread are switched around the open and restored before returning. Linux
 * keeps credentials per thread; glibc's setgroups() would change every
 * thread of the daemon, so the raw system calls are used and other threads
 * keep their own.
 */
#include "base/infile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Non-blocking: opening a FIFO must not wait for a writer; it is refused
 * right after, at fstat. */
#define INFILE_OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)

/* Keeps fd when it is a regular file; closes it otherwise. */
static int keep_regular(int fd, int *ret_fd)
{
	struct stat st;
	int r = 0;

	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (!S_ISREG(st.st_mode))
		r = -EINVAL;
	if (r < 0) {
		close(fd);
		return r;
	}
	*ret_fd = fd;
	return 0;
}

/* What a caller may learn about a path it could not open: that it is not
 * there for it, whether missing, forbidden or outside the roots. */
static int not_found_or_not_permitted(int e)
{
	switch (e) {
	case ENOENT:
	case EACCES:
	case EPERM:
	case ELOOP:
	case EXDEV:
	case ENOTDIR:
	case ENAMETOOLONG:
		return -ENOENT;
	default:
		return -e;
	}
}

int infile_open(const char *path, int *ret_fd)
{
	int fd = open(path, INFILE_OPEN_FLAGS);

	if (fd < 0)
		return not_found_or_not_permitted(errno);
	return keep_regular(fd, ret_fd);
}

int infile_reopen(int fd)
{
	int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);

	if (copy < 0)
		return -errno;
	if (lseek(copy, 0, SEEK_SET) < 0) {
		int e = errno;
		close(copy);
		return -e;
	}
	return copy;
}

/* ---- the requesting identity, on this thread ------------------------------ */

struct saved_identity {
	uid_t fsuid;
	gid_t fsgid;
	gid_t *groups;
	int n_groups;
};

static int thread_setgroups(int n, const gid_t *groups)
{
	return syscall(SYS_setgroups, (size_t)n, groups) < 0 ? -errno : 0;
}

/* setfsuid/setfsgid return the previous id whether or not they changed it;
 * asking again with an invalid id tells which one is in effect. */
static bool fsuid_is(uid_t uid)
{
	return (uid_t)setfsuid((uid_t)-1) == uid;
}

static bool fsgid_is(gid_t gid)
{
	return (gid_t)setfsgid((gid_t)-1) == gid;
}

/* Restores what become() changed. A thread that cannot get its own identity
 * back would serve the next request as someone else: that must not go on. */
static void restore(struct saved_identity *saved)
{
	/* NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage): save() fails with errno set */
	setfsuid(saved->fsuid);
	setfsgid(saved->fsgid);
	if (!fsuid_is(saved->fsuid) || !fsgid_is(saved->fsgid) ||
	    thread_setgroups(saved->n_groups, saved->groups) < 0)
		abort();
	free(saved->groups);
}

static int save(struct saved_identity *saved)
{
	int n = getgroups(0, NULL);

	if (n < 0)
		return -errno;
	saved->groups = malloc(sizeof(gid_t) * (size_t)(n > 0 ? n : 1));
	if (!saved->groups)
		return -ENOMEM;
	saved->n_groups = getgroups(n, saved->groups);
	if (saved->n_groups < 0) {
		free(saved->groups);
		return -errno;
	}
	saved->fsuid = (uid_t)setfsuid((uid_t)-1);
	saved->fsgid = (gid_t)setfsgid((gid_t)-1);
	return 0;
}

/* Takes who's filesystem identity on this thread; -EPERM when not allowed
 * (the daemon is not root). Groups first: once the fsuid is not root, the
 * thread still may change groups (CAP_SETGID is not a filesystem
 * capability), but keeping this order makes every step a root's. */
static int become(const struct infile_identity *who, struct saved_identity *saved)
{
	int r = save(saved);

	if (r < 0)
		return r;
	r = thread_setgroups(who->n_groups, who->groups);
	if (r == 0) {
		setfsgid(who->gid);
		setfsuid(who->uid);
		if (!fsgid_is(who->gid) || !fsuid_is(who->uid))
			r = -EPERM;
	}
	if (r < 0) {
		restore(saved);
		return -EPERM;
	}
	return 0;
}

/* ---- beneath the data roots ----------------------------------------------- */

/* The part of path below dir ("" for dir itself), or NULL when path does
 * not name something under dir. The '/' boundary keeps /data/ab from
 * passing as under /data/a. */
static const char *below(const char *path, const char *dir, size_t dir_len)
{
	while (dir_len > 1 && dir[dir_len - 1] == '/')
		dir_len--;
	if (dir_len == 1 && dir[0] == '/')
		dir_len = 0;
	if (strncmp(path, dir, dir_len) != 0 || (path[dir_len] != '/' && path[dir_len] != '\0'))
		return NULL;
	return path + dir_len + strspn(path + dir_len, "/");
}

/* Opens rel beneath dir with the current identity. rel comes from a
 * canonical path, so no symlink is needed to reach it: one met now was put
 * there since, and fails the open rather than redirect it. */
static int open_beneath(const char *dir, const char *rel, int *ret_fd)
{
	struct open_how how = {
		.flags = INFILE_OPEN_FLAGS,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int fd, e;

	if (dir_fd < 0)
		return not_found_or_not_permitted(errno);
	fd = (int)syscall(SYS_openat2, dir_fd, rel[0] ? rel : ".", &how, sizeof(how));
	e = errno;
	close(dir_fd);
	if (fd < 0)
		return not_found_or_not_permitted(e);
	return keep_regular(fd, ret_fd);
}

/* real is canonical; so is each root once resolved. A root that cannot be
 * resolved (missing for now) admits nothing, so that one unmounted root
 * does not take the others down. */
static int open_in_roots(const char *roots, const char *real, int *ret_fd)
{
	const char *p = roots;

	for (;;) {
		size_t n = strcspn(p, ":");
		char root[PATH_MAX], *real_root;
		const char *rel;

		if (n > 0 && n < sizeof(root)) {
			memcpy(root, p, n);
			root[n] = '\0';
			real_root = realpath(root, NULL);
			rel = real_root ? below(real, real_root, strlen(real_root)) : NULL;
			if (rel) {
				int r = open_beneath(real_root, rel, ret_fd);
				free(real_root);
				return r;
			}
			free(real_root);
		}
		if (!p[n])
			return -ENOENT;
		p += n + 1;
	}
}

/* Resolves path (symlinks and ".." followed, with the current identity's
 * rights) and opens it if it lies under a root. */
static int resolve_and_open(const char *roots, const char *path, int *ret_fd)
{
	char *real = realpath(path, NULL);
	int r;

	if (!real)
		return not_found_or_not_permitted(errno);
	r = open_in_roots(roots, real, ret_fd);
	free(real);
	return r;
}

int infile_open_beneath(const char *roots, const char *path, const struct infile_identity *who,
			int *ret_fd)
{
	struct saved_identity saved;
	int r;

	if (path[0] != '/')
		return -ENOENT;
	/* A daemon run by the user itself (tests, a personal instance) opens
	 * as it is; a root daemon takes the user's identity; any other may not
	 * open for someone else. */
	if (geteuid() == who->uid && getegid() == who->gid)
		return resolve_and_open(roots, path, ret_fd);
	r = become(who, &saved);
	if (r < 0)
		return r;
	r = resolve_and_open(roots, path, ret_fd);
	restore(&saved);
	return r;
}
