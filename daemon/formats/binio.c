/* SPDX-License-Identifier: MIT */
#include "formats/binio.h"

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
