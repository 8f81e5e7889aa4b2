/* SPDX-License-Identifier: MIT */
/*
 * input_digest: what a shard's record says of the files its job read, so
 * that `tractd merge` refuses parts of one job document run on other inputs
 * (another subject's, a re-made mask). The job's fingerprint (jobspec.h)
 * leaves the files' names out (a path to the CLI, a volume id to the
 * daemon); this digest stands for their bytes instead.
 *
 * Each file given (jobspec_input_files and seeds.roi) counts with its slot,
 * its size and a sample of its bytes: all of a file up to
 * INPUT_DIGEST_WHOLE_BYTES, else INPUT_DIGEST_BLOCKS blocks spread evenly
 * from its first byte to its last. A shard reads at most 64 KiB of each
 * input for it, however large the DWI: hashing every byte would cost each
 * shard a second pass over gigabytes. The first block holds the image's
 * header (grid, affine, type); the last holds a gzip file's trailer, whose
 * CRC-32 and length cover the whole uncompressed image, so for .nii.gz and
 * .mif.gz inputs any change of content changes the digest; for an
 * uncompressed image a change that misses every block goes unseen.
 * Owns nothing past a call; does not log.
 */
#ifndef TRACTD_INPUT_DIGEST_H
#define TRACTD_INPUT_DIGEST_H

#include <stdint.h>

#include "base/errbuf.h"
#include "job/jobspec.h"

#define INPUT_DIGEST_BLOCK_BYTES 4096u
#define INPUT_DIGEST_BLOCKS 16u
#define INPUT_DIGEST_WHOLE_BYTES (INPUT_DIGEST_BLOCKS * INPUT_DIGEST_BLOCK_BYTES)

/* The digest of job's input files into *ret, read from the descriptors the
 * job holds (a server job's) or else opened by path (the CLI's). A negative
 * errno with err naming the input that could not be read. */
int input_digest(const struct jobspec *job, uint64_t *ret, struct errbuf *err);

#endif
