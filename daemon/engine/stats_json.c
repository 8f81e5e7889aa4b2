/* SPDX-License-Identifier: MIT */
/* stats_json: the shared members of a run's statistics as JSON (see stats_json.h). */
#include "engine/stats_json.h"

#include <errno.h>

#define STOP_REASONS_KEY "stop_reasons"
#define SEEDS_WITHOUT_DIRECTION_KEY "seeds_without_direction"
#define SELECT_KEY "select"
#define SELECTED_KEY "selected"
#define REJECTED_KEY "rejected"
#define EXCLUDE_REGION_KEY "exclude_region"
#define INCLUDE_MISSING_KEY "include_missing"

static json_t *stop_reasons_json(const struct engine_stats *stats)
{
	json_t *reasons = json_object();

	for (int k = 0; reasons && k < ENGINE_STOP_REASONS; k++)
		if (json_object_set_new(reasons, engine_stop_key((enum engine_stop)k),
					json_integer((json_int_t)stats->stop_reasons[k])) < 0) {
			json_decref(reasons);
			return NULL;
		}
	return reasons;
}

json_t *stats_json_new(const struct engine_stats *stats, json_t *extra)
{
	json_t *doc = extra ? json_pack("{s:I, s:I, s:I, s:I, s:I}",
					"seeds", (json_int_t)stats->seeds,
					"streamlines", (json_int_t)stats->streamlines,
					"points", (json_int_t)stats->points,
					"chunks", (json_int_t)stats->chunks,
					"batches", (json_int_t)stats->batches) : NULL;

	if (doc && (json_object_update(doc, extra) < 0 || stats_json_add(doc, stats) < 0)) {
		json_decref(doc);
		doc = NULL;
	}
	json_decref(extra);
	return doc;
}

/* A job with seeds.select tells how many it asked for and how many it got
 * (fewer when the seeds ran out first). */
static int add_select(json_t *doc, const struct engine_stats *stats)
{
	if (!stats->select)
		return 0;
	if (json_object_set_new(doc, SELECT_KEY, json_integer((json_int_t)stats->select)) < 0 ||
	    json_object_set_new(doc, SELECTED_KEY,
				json_integer((json_int_t)stats->streamlines)) < 0)
		return -ENOMEM;
	return 0;
}

/* A job with regions tells how many streamlines they rejected, and why. */
static int add_rejected(json_t *doc, const struct engine_stats *stats)
{
	if (!stats->has_regions)
		return 0;
	if (json_object_set_new(doc, REJECTED_KEY, json_pack("{s:I, s:I}",
		    EXCLUDE_REGION_KEY, (json_int_t)stats->rejected_exclude_region,
		    INCLUDE_MISSING_KEY, (json_int_t)stats->rejected_include_missing)) < 0)
		return -ENOMEM;
	return 0;
}

int stats_json_add(json_t *doc, const struct engine_stats *stats)
{
	if (json_object_set_new(doc, STOP_REASONS_KEY, stop_reasons_json(stats)) < 0 ||
	    json_object_set_new(doc, SEEDS_WITHOUT_DIRECTION_KEY,
				json_integer((json_int_t)stats->seeds_without_direction)) < 0 ||
	    add_rejected(doc, stats) < 0)
		return -ENOMEM;
	return add_select(doc, stats);
}

/* A count member of doc into *ret: absent reads as 0. */
static int read_count(const json_t *doc, const char *key, uint64_t *ret)
{
	const json_t *v = json_object_get(doc, key);

	if (!v) {
		*ret = 0;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EINVAL;
	*ret = (uint64_t)json_integer_value(v);
	return 0;
}

static int read_rejected(const json_t *doc, struct engine_stats *stats, struct errbuf *err)
{
	const json_t *rejected = json_object_get(doc, REJECTED_KEY);

	stats->has_regions = rejected != NULL;
	if (rejected && !json_is_object(rejected))
		return errbuf_set(err, -EINVAL, REJECTED_KEY, "not an object");
	if (read_count(rejected, EXCLUDE_REGION_KEY, &stats->rejected_exclude_region) < 0 ||
	    read_count(rejected, INCLUDE_MISSING_KEY, &stats->rejected_include_missing) < 0)
		return errbuf_set(err, -EINVAL, REJECTED_KEY, "not counts");
	return 0;
}

int stats_json_read(const json_t *doc, struct engine_stats *stats, struct errbuf *err)
{
	const json_t *reasons = json_object_get(doc, STOP_REASONS_KEY);

	if (reasons && !json_is_object(reasons))
		return errbuf_set(err, -EINVAL, STOP_REASONS_KEY, "not an object");
	for (int k = 0; k < ENGINE_STOP_REASONS; k++) {
		const char *key = engine_stop_key((enum engine_stop)k);
		if (read_count(reasons, key, &stats->stop_reasons[k]) < 0)
			return errbuf_set(err, -EINVAL, STOP_REASONS_KEY, "%s: not a count", key);
	}
	if (read_count(doc, SEEDS_WITHOUT_DIRECTION_KEY, &stats->seeds_without_direction) < 0)
		return errbuf_set(err, -EINVAL, SEEDS_WITHOUT_DIRECTION_KEY, "not a count");
	if (read_count(doc, SELECT_KEY, &stats->select) < 0)
		return errbuf_set(err, -EINVAL, SELECT_KEY, "not a count");
	return read_rejected(doc, stats, err);
}
