/* SPDX-License-Identifier: MIT */
/*
 * shard: one part of a job's seeds (seeds.shard, `--shard K/N`). Shard K of
 * N (K counted from 0) tracks the seeds of global index
 * [K*S/N, (K+1)*S/N) of the job's S seeds, with the draws of the whole job
 * (every draw is keyed by the global seed index), so that its parts joined
 * in order (`tractd merge`) are the whole job's tractogram. Owns nothing;
 * does not log.
 */
#ifndef TRACTD_SHARD_H
#define TRACTD_SHARD_H

#include <stdint.h>

#include "base/errbuf.h"
#include "job/seeds.h"

#define SHARD_MAX_COUNT 100000u

/* count 0: the whole job (no shard). */
struct shard {
	uint32_t index;
	uint32_t count;
};

/* "K/N", decimal, 0 <= K < N <= SHARD_MAX_COUNT, nothing else; -EINVAL with
 * the reason in err (field "seeds.shard"). */
int shard_parse(const char *text, struct shard *ret, struct errbuf *err);

/* The global seed indices [*first, *end) of shard s of total seeds. */
void shard_range(const struct shard *s, uint64_t total, uint64_t *first, uint64_t *end);

/* max_seeds_per_job counts the seeds a shard tracks, not its job's: the
 * limit bounds the work one daemon takes on, so that a 10^8-seed job in 100
 * shards goes to daemons capped at 10^7. 0 when shard s of total seeds
 * tracks at most limit (0: none); else -E2BIG, kind ERR_KIND_LIMIT, naming
 * field. */
int shard_check_seed_limit(const struct shard *s, uint64_t total, uint64_t limit,
			   const char *field, struct errbuf *err);

/* Restricts seeds to shard s (nothing for count 0); -EINVAL (field
 * "seeds.shard") when the job has fewer seeds than shards. */
int shard_seeds(const struct shard *s, struct seeds *seeds, struct errbuf *err);

#endif
