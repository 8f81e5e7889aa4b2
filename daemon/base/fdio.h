/* SPDX-License-Identifier: MIT */
/*
 * fdio: writing a whole buffer to a file descriptor, through short writes
 * and interrupted calls (the spool's records and the store's uploads).
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

#endif
