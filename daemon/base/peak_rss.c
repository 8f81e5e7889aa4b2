/* SPDX-License-Identifier: MIT */
/*
 * peak_rss: VmHWM from procfs, and its reset (see peak_rss.h).
 */
#include "base/peak_rss.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "base/fdio.h"

int peak_rss_reset(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	int r;

	if (fd < 0)
		return -errno;
	r = fdio_write_all(fd, "5", 1);
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

int peak_rss_read(uint64_t *bytes)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	uint64_t kib;
	int r = -EINVAL;

	if (!f)
		return -errno;
	while (r < 0 && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %" SCNu64 " kB", &kib) == 1) {
			*bytes = kib * 1024;
			r = 0;
		}
	fclose(f);
	return r;
}
