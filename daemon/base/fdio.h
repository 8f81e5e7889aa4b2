/* SPDX-License-Identifier: MIT */
/*
 * fdio: writing a whole buffer to a file descriptor, and reading one at an
 * offset, through short writes and reads and interrupted calls (the spool's
 * records and the store's uploads; an image's planes, an input's samples).
 */
#ifndef TRACTD_FDIO_H
#define TRACTD_FDIO_H

#include <errno.h>
#include <stddef.h>
#include <unistd.h>

/* 0, or a negative errno. */
static inline int fdio_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* len bytes at offset into buf; 0, -EIO when the file ends first, or a
 * negative errno. Leaves fd's offset alone. */
static inline int fdio_pread_all(int fd, void *buf, size_t len, off_t offset)
{
	char *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, offset);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		offset += n;
	}
	return 0;
}

#endif
