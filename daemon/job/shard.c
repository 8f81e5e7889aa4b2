/* SPDX-License-Identifier: MIT */
/* shard: seeds.shard's K/N and the seed range it stands for (see shard.h). */
#include "job/shard.h"

#include <errno.h>
#include <stdlib.h>

/* A decimal without sign or spaces, at most max; the rest of s in *end. */
static int parse_number(const char *s, unsigned long max, char **end, uint32_t *ret)
{
	unsigned long v;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, end, 10);
	if (errno || v > max)
		return -EINVAL;
	*ret = (uint32_t)v;
	return 0;
}

int shard_parse(const char *text, struct shard *ret, struct errbuf *err)
{
	struct shard s;
	char *end;

	if (parse_number(text, SHARD_MAX_COUNT, &end, &s.index) || *end != '/' ||
	    parse_number(end + 1, SHARD_MAX_COUNT, &end, &s.count) || *end)
		return errbuf_set(err, -EINVAL, "seeds.shard", "must be \"K/N\" with 0 <= K < N "
				  "<= %u (K counted from 0), got \"%s\"", SHARD_MAX_COUNT, text);
	if (s.count == 0 || s.index >= s.count)
		return errbuf_set(err, -EINVAL, "seeds.shard", "must be \"K/N\" with 0 <= K < N "
				  "(K counted from 0), got \"%s\"", text);
	*ret = s;
	return 0;
}

/* floor(k * total / n) without overflow: total = q n + r, and k r < n^2. */
static uint64_t split_point(uint64_t k, uint64_t n, uint64_t total)
{
	return k * (total / n) + k * (total % n) / n;
}

void shard_range(const struct shard *s, uint64_t total, uint64_t *first, uint64_t *end)
{
	if (s->count == 0) {
		*first = 0;
		*end = total;
		return;
	}
	*first = split_point(s->index, s->count, total);
	*end = split_point(s->index + 1ull, s->count, total);
}

int shard_seeds(const struct shard *s, struct seeds *seeds, struct errbuf *err)
{
	uint64_t total = seeds_count(seeds), first, end;

	if (s->count == 0)
		return 0;
	if (total < s->count)
		return errbuf_set(err, -EINVAL, "seeds.shard", "%u shards need at least as many "
				  "seeds; the job has %llu", (unsigned)s->count,
				  (unsigned long long)total);
	shard_range(s, total, &first, &end);
	seeds_restrict(seeds, first, end);
	return 0;
}

int shard_check_seed_limit(const struct shard *s, uint64_t total, uint64_t limit,
			   const char *field, struct errbuf *err)
{
	uint64_t first, end;

	shard_range(s, total, &first, &end);
	if (!limit || end - first <= limit)
		return 0;
	return errbuf_set_kind(err, ERR_KIND_LIMIT, -E2BIG, field, "shard %u/%u tracks %llu of "
			       "the job's %llu seeds, over the limit of %llu seeds per job "
			       "(max_seeds_per_job, which counts a shard's seeds): split the job "
			       "in more shards", (unsigned)s->index, (unsigned)s->count,
			       (unsigned long long)(end - first), (unsigned long long)total,
			       (unsigned long long)limit);
}
