/* SPDX-License-Identifier: MIT */
/*
 * merge_job: `tractd merge OUT PART...`, the flow around merge.h's join:
 * OUT must not be a part, the join is written and its summary logged, and
 * the whole job's statistics are summed from its shards' (each shard's
 * --stats-json carries "shard": {"index", "count"}). Owns nothing past the
 * call; failures go to the caller through errbuf (kind input for parts or
 * statistics that are not one job's whole set, output for writing).
 */
#ifndef TRACTD_MERGE_JOB_H
#define TRACTD_MERGE_JOB_H

#include <stddef.h>

#include "base/errbuf.h"

#define MERGE_MAX_PART_STATS 4096

/* Statistics to sum: out NULL for none. */
struct merge_stats {
	const char *out;
	const char *parts[MERGE_MAX_PART_STATS];
	size_t n_parts;
};

int merge_job_run(const char *out, const char *const *parts, size_t n,
		  const struct merge_stats *stats, struct errbuf *err);

#endif
