/* SPDX-License-Identifier: MIT */
/*
 * fuzz_nifti: libFuzzer harness for the NIfTI loader.
 *
 * volume_load() takes a path and libnifti picks gzip by the file name, so each
 * input is written to a file in a private temporary directory: named .nii.gz
 * when it starts with the gzip magic (znzlib also reads a plain file under that
 * name), .nii otherwise. A loaded volume is freed again. Built by `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_files.h"
#include "formats/volume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/fuzz_nifti.XXXXXX";
static char nii_path[64], gz_path[64];

static void remove_files(void)
{
	unlink(nii_path);
	unlink(gz_path);
	rmdir(dir);
}

static int setup(void)
{
	if (!mkdtemp(dir))
		return -1;
	snprintf(nii_path, sizeof(nii_path), "%s/in.nii", dir);
	snprintf(gz_path, sizeof(gz_path), "%s/in.nii.gz", dir);
	atexit(remove_files);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	struct volume vol;
	struct errbuf err;
	const char *path;

	if (!ready) {
		if (setup())
			abort();
		ready = 1;
	}
	path = (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) ? gz_path : nii_path;
	if (fuzz_write_file(path, data, size))
		abort();
	memset(&err, 0, sizeof(err));
	if (volume_load(path, "job.inputs.dwi", &vol, &err) == 0)
		volume_free(&vol);
	unlink(path);
	return 0;
}
