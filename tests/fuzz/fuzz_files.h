/* SPDX-License-Identifier: MIT */
/*
 * fuzz_files: what the harnesses whose target reads files share: writing one
 * fuzz input to a path. Header-only, as each harness is its own program.
 */
#ifndef TRACTD_FUZZ_FILES_H
#define TRACTD_FUZZ_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Writes size bytes of data to path; 0 or -1. */
static inline int fuzz_write_file(const char *path, const uint8_t *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	int ok;

	if (!f)
		return -1;
	ok = fwrite(data, 1, size, f) == size;
	return (fclose(f) == 0 && ok) ? 0 : -1;
}

#endif
