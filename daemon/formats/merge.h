/* SPDX-License-Identifier: MIT */
/*
 * merge: a shard's record in its tractogram, and the join of a job's shard
 * outputs into the tractogram the whole job writes, byte for byte.
 *
 * A shard's output carries its record (struct shard_tag) in the header:
 * TRK's reserved bytes, TCK's "tractd_shard" property, TRX's header.json
 * "TRACTD_SHARD" (output.h). merge_parts reads the records, checks that the
 * parts are one job's (same fingerprint, input digest, shard count, seed
 * count, format and header) and each shard given once, puts them in shard order and writes
 * the header of the whole job (no record, the summed counts) and the parts'
 * records after it; a TCK job's seeds files (PART.seeds.txt) are joined
 * likewise. Owns nothing past a call; does not log.
 */
#ifndef TRACTD_MERGE_H
#define TRACTD_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"

/* Shard index of count (index from 0) holding the job's global seeds
 * [first, end) of total; job: the job's fingerprint (jobspec.h); inputs:
 * the digest of the files it read (input_digest.h). */
struct shard_tag {
	uint32_t index, count;
	uint64_t first, end, total;
	uint64_t job;
	uint64_t inputs;
};

#define SHARD_TAG_MAX 160

/* "tractd-shard/2 K N FIRST END TOTAL JOBHEX INPUTSHEX" into buf. */
void shard_tag_format(const struct shard_tag *t, char buf[SHARD_TAG_MAX]);

/* The record text holds; -EPROTO for a record of another version (an
 * older tractd's "tractd-shard/1" has no input digest), -EINVAL when it
 * is none. */
int shard_tag_parse(const char *text, struct shard_tag *ret);

struct merge_result {
	uint32_t shards;
	uint64_t seeds;         /* the job's */
	uint64_t streamlines;
	const char *format;     /* "trk", "tck", "trx" */
};

/* Joins the n part files into out_path (replaced; with a TCK part's seeds
 * file, out_path.seeds.txt too). Errors name the part: -EINVAL (err's field
 * "PART") for parts that are not one job's whole set, -EIO for I/O. */
int merge_parts(const char *out_path, const char *const *parts, size_t n,
		struct merge_result *res, struct errbuf *err);

#endif
