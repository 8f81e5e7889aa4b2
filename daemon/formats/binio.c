/* SPDX-License-Identifier: MIT */
#include "formats/binio.h"

#include <errno.h>
#include <fcntl.h>

long binio_patch_position(FILE *out)
{
	long pos = ftell(out);
	int fd = fileno(out);

	if (pos < 0)
		return -1;
	if (fd >= 0) {
		int flags = fcntl(fd, F_GETFL);
		if (flags < 0 || (flags & O_APPEND))
			return -1;
	}
	return pos;
}

int binio_buffered_write(FILE *out, unsigned char *buf, size_t cap, size_t *used,
			 const unsigned char *bytes, size_t len)
{
	if (len == 0)
		return 0;
	if (len > cap - *used) {
		size_t held = *used;

		*used = 0;
		if (held > 0 && fwrite(buf, 1, held, out) != held)
			return -EIO;
		if (len > cap)
			return fwrite(bytes, 1, len, out) == len ? 0 : -EIO;
	}
	memcpy(buf + *used, bytes, len);
	*used += len;
	return 0;
}
