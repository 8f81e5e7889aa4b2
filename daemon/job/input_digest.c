/* SPDX-License-Identifier: MIT */
/* input_digest: a sampled digest of a job's input files (see input_digest.h). */
#include "job/input_digest.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fdio.h"
#include "base/fnv.h"
#include "base/infile.h"

/* Sample i of a file of size bytes: a small file in consecutive pieces,
 * a larger one in blocks spread from its first byte to its last. */
static void sample_range(uint64_t i, uint64_t size, uint64_t *at, uint64_t *len)
{
	if (size <= INPUT_DIGEST_WHOLE_BYTES) {
		*at = i * size / INPUT_DIGEST_BLOCKS;
		*len = (i + 1) * size / INPUT_DIGEST_BLOCKS - *at;
		return;
	}
	*at = i * (size - INPUT_DIGEST_BLOCK_BYTES) / (INPUT_DIGEST_BLOCKS - 1);
	*len = INPUT_DIGEST_BLOCK_BYTES;
}

/* h carried on over the slot, the size and the sampled bytes of fd. */
static int digest_fd(int fd, uint64_t slot, uint64_t *h)
{
	unsigned char block[INPUT_DIGEST_BLOCK_BYTES];
	struct stat st;
	uint64_t size;

	if (fstat(fd, &st) < 0)
		return -errno;
	size = (uint64_t)st.st_size;
	*h = fnv1a64(*h, &slot, sizeof(slot));
	*h = fnv1a64(*h, &size, sizeof(size));
	for (uint64_t i = 0; i < INPUT_DIGEST_BLOCKS; i++) {
		uint64_t at, len;
		int r;

		sample_range(i, size, &at, &len);
		r = fdio_pread_all(fd, block, (size_t)len, (off_t)at);
		if (r)
			return r;
		*h = fnv1a64(*h, block, (size_t)len);
	}
	return 0;
}

/* The file of slot (at path, given) into h. */
static int digest_input(const struct jobspec *job, enum jobspec_file_slot slot, const char *path,
			const char *field, uint64_t *h, struct errbuf *err)
{
	int fd = jobspec_opened_fd(job, slot), r = 0;
	bool opened = fd < 0;

	if (opened)
		r = infile_open(path, &fd);
	if (r == 0)
		r = digest_fd(fd, (uint64_t)slot, h);
	if (opened && fd >= 0)
		close(fd);
	if (r)
		return errbuf_set(err, r, field, "cannot read %s for the shard's record: %s", path,
				  strerror(-r));
	return 0;
}

int input_digest(const struct jobspec *job, uint64_t *ret, struct errbuf *err)
{
	uint64_t h = FNV1A64_INIT;
	int r = 0;

	for (size_t i = 0; i < JOBSPEC_INPUT_FILES && r == 0; i++) {
		const char *path = jobspec_input_path(job, &jobspec_input_files[i]);

		if (path)
			r = digest_input(job, (enum jobspec_file_slot)i, path,
					 jobspec_input_files[i].field, &h, err);
	}
	if (r == 0 && job->seed_roi_path)
		r = digest_input(job, JOBSPEC_SLOT_SEED_ROI, job->seed_roi_path, "seeds.roi", &h,
				 err);
	if (r == 0)
		*ret = h;
	return r;
}
