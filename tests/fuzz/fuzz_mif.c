/* SPDX-License-Identifier: MIT */
/*
 * fuzz_mif: libFuzzer harness for the MRtrix3 image reader.
 *
 * Each input is written to a file in a private temporary directory and read
 * by image_load(), which picks the reader by content as every job input is
 * read: an input starting "mrtrix image" (plain, or inflated from gzip)
 * goes to mif_load_fd() with its dw_scheme, anything else to the NIfTI
 * reader. A header that parses is also probed (mif_probe_fd's shape must
 * be the loaded one's). What loads is freed again. Built by `make fuzz`.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_files.h"
#include "formats/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/fuzz_mif.XXXXXX";
static char path[64];

static void remove_files(void)
{
	unlink(path);
	rmdir(dir);
}

static int setup(void)
{
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/in.mif", dir);
	atexit(remove_files);
	return 0;
}

/* The probe reads the header alone and must agree with the load. */
static void check_probe(const struct volume *vol)
{
	struct errbuf err;
	int64_t dim[4];
	size_t stored;

	memset(&err, 0, sizeof(err));
	if (image_probe(path, "job.inputs.dwi", dim, &stored, &err) != 0 ||
	    memcmp(dim, vol->dim, sizeof(dim)) != 0 || stored == 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	struct image_info info;
	struct volume vol;
	struct errbuf err;

	if (!ready) {
		if (setup())
			abort();
		ready = 1;
	}
	if (fuzz_write_file(path, data, size))
		abort();
	memset(&err, 0, sizeof(err));
	if (image_load(path, "job.inputs.dwi", &vol, &info, &err) == 0) {
		check_probe(&vol);
		mif_scheme_free(&info.scheme);
		volume_free(&vol);
	}
	unlink(path);
	return 0;
}
