/* SPDX-License-Identifier: MIT */
/*
 * fuzz_npy: libFuzzer harness for the seed point file reader
 * (npy_points_parse, seeds.points_file). Input: the bytes of a .npy file.
 * A file that parses must give N points with 1 <= N <= the limit, every
 * one of them readable. Built by `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "formats/npy.h"

#define MAX_POINTS 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every point is read into it: ASan sees any overrun of the array. */
static volatile double sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct errbuf err;
	double *pts = NULL;
	uint64_t n = 0;

	if (npy_points_parse(data, size, "fuzz.npy", "seeds.points_file", MAX_POINTS, &pts, &n,
			     &err) != 0) {
		if (pts || !err.field[0])
			abort();
		return 0;
	}
	if (n == 0 || n > MAX_POINTS)
		abort();
	for (uint64_t i = 0; i < 3 * n; i++)
		sink += pts[i];
	free(pts);
	return 0;
}
