/* SPDX-License-Identifier: MIT */
/* merge_job: the merge command's flow (see merge_job.h). */
#include "run/merge_job.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "base/log.h"
#include "engine/stats_json.h"
#include "formats/merge.h"

/* Writing OUT over a part would destroy it before it is read. */
static int check_out_is_no_part(const char *out, const char *const *parts, size_t n,
				struct errbuf *err)
{
	struct stat o, p;

	if (stat(out, &o) != 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (stat(parts[i], &p) == 0 && p.st_dev == o.st_dev && p.st_ino == o.st_ino)
			return errbuf_set(err, -EINVAL, "OUT", "%s is also a part (%s)", out,
					  parts[i]);
	return 0;
}

/* The counts a shard's statistics add to the job's. */
static void add_counts(struct engine_stats *sum, const struct engine_stats *s)
{
	sum->seeds += s->seeds;
	sum->streamlines += s->streamlines;
	sum->points += s->points;
	sum->chunks += s->chunks;
	sum->batches += s->batches;
	sum->seeds_without_direction += s->seeds_without_direction;
	for (int k = 0; k < ENGINE_STOP_REASONS; k++)
		sum->stop_reasons[k] += s->stop_reasons[k];
}

/* One shard's statistics file into sum; seen[] marks its index. */
static int add_part_stats(const char *path, uint32_t shards, bool *seen, struct engine_stats *sum,
			  struct errbuf *err)
{
	json_t *doc = json_load_file(path, 0, NULL), *shard = json_object_get(doc, "shard");
	json_int_t index = json_integer_value(json_object_get(shard, "index"));
	json_int_t count = json_integer_value(json_object_get(shard, "count"));
	struct engine_stats s = { 0 };
	int r = 0;

	if (!doc || !json_is_object(shard))
		r = errbuf_set(err, -EINVAL, path, "is no shard's statistics (tractd run --shard "
			       "K/N --stats-json FILE)");
	else if (count != (json_int_t)shards || index < 0 || index >= count)
		r = errbuf_set(err, -EINVAL, path, "is the statistics of shard %lld/%lld, not of "
			       "one of the %u shards merged", (long long)index, (long long)count,
			       (unsigned)shards);
	else if (seen[index])
		r = errbuf_set(err, -EINVAL, path, "is the statistics of shard %lld/%u again",
			       (long long)index, (unsigned)shards);
	if (r == 0)
		r = stats_json_read(doc, &s, err);
	if (r == 0) {
		/* stats_json_read reads the shared members; the counts lead the object. */
		s.seeds = (uint64_t)json_integer_value(json_object_get(doc, "seeds"));
		s.streamlines = (uint64_t)json_integer_value(json_object_get(doc, "streamlines"));
		s.points = (uint64_t)json_integer_value(json_object_get(doc, "points"));
		s.chunks = (uint64_t)json_integer_value(json_object_get(doc, "chunks"));
		s.batches = (uint64_t)json_integer_value(json_object_get(doc, "batches"));
		seen[index] = true;
		add_counts(sum, &s);
	}
	json_decref(doc);
	return r;
}

/* The whole job's statistics: the shards' counts summed, each shard once. */
static int merge_stats(const struct merge_stats *st, const struct merge_result *res,
		       struct errbuf *err)
{
	struct engine_stats sum = { 0 };
	bool *seen = calloc(res->shards, sizeof(*seen));
	json_t *doc;
	int r = seen ? 0 : errbuf_set(err, -ENOMEM, "", "out of memory");

	for (size_t i = 0; i < st->n_parts && r == 0; i++)
		r = add_part_stats(st->parts[i], res->shards, seen, &sum, err);
	for (uint32_t k = 0; k < res->shards && r == 0; k++)
		if (!seen[k])
			r = errbuf_set(err, -EINVAL, "--part-stats", "the statistics of shard "
				       "%u/%u are missing", (unsigned)k, (unsigned)res->shards);
	free(seen);
	if (r)
		return r;
	doc = stats_json_new(&sum, json_pack("{s:I}", "shards", (json_int_t)res->shards));
	if (!doc)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = json_dump_file(doc, st->out, JSON_INDENT(2));
	json_decref(doc);
	return r < 0 ? errbuf_set_kind(err, ERR_KIND_OUTPUT, -EIO, st->out, "cannot write") : 0;
}

int merge_job_run(const char *out, const char *const *parts, size_t n,
		  const struct merge_stats *stats, struct errbuf *err)
{
	struct merge_result res;
	int r = check_out_is_no_part(out, parts, n, err);

	if (r == 0 && stats->n_parts && !stats->out)
		r = errbuf_set(err, -EINVAL, "--part-stats", "needs --stats-json FILE to write");
	if (r == 0)
		r = merge_parts(out, parts, n, &res, err);
	if (r == 0 && stats->out)
		r = merge_stats(stats, &res, err);
	if (r == 0)
		log_info("merged %u shards of %s: %llu seeds, %llu streamlines into %s",
			 (unsigned)res.shards, res.format, (unsigned long long)res.seeds,
			 (unsigned long long)res.streamlines, out);
	return r;
}
