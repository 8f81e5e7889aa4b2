/* SPDX-License-Identifier: MIT */
/*
 * fuzz_gradients: libFuzzer harness for the FSL bvals/bvecs reader.
 *
 * Input layout: the first byte is the expected number of volumes (0..255),
 * the rest is the bvals text, a NUL byte, then the bvecs text (no NUL: bvecs
 * is empty). Both go to files in a private temporary directory, and
 * gradients_load() reads them. Built by `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_files.h"
#include "models/gradients.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/fuzz_gradients.XXXXXX";
static char bvals_path[64], bvecs_path[64];

static void remove_files(void)
{
	unlink(bvals_path);
	unlink(bvecs_path);
	rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	struct gradients g;
	struct errbuf err;
	const uint8_t *sep;
	size_t n_bvals;
	int64_t n_volumes;

	if (!ready) {
		if (!mkdtemp(dir))
			abort();
		snprintf(bvals_path, sizeof(bvals_path), "%s/bvals", dir);
		snprintf(bvecs_path, sizeof(bvecs_path), "%s/bvecs", dir);
		atexit(remove_files);
		ready = 1;
	}
	if (size < 1)
		return 0;
	n_volumes = data[0];
	data++;
	size--;
	sep = memchr(data, '\0', size);
	n_bvals = sep ? (size_t)(sep - data) : size;
	if (fuzz_write_file(bvals_path, data, n_bvals))
		abort();
	if (sep) {
		data += n_bvals + 1;
		size -= n_bvals + 1;
	} else {
		size = 0;
	}
	if (fuzz_write_file(bvecs_path, data, size))
		abort();
	memset(&err, 0, sizeof(err));
	memset(&g, 0, sizeof(g));
	if (gradients_load(bvals_path, bvecs_path, n_volumes, "job.inputs.bvals",
			   "job.inputs.bvecs", &g, &err) == 0)
		gradients_free(&g);
	return 0;
}
