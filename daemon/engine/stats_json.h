/* SPDX-License-Identifier: MIT */
/*
 * stats_json: a run's statistics (engine.h) as JSON. The CLI's --stats-json
 * and the spool's job records are one statistics object (stats_json_new):
 * the counts "seeds", "streamlines", "points", "chunks" and "batches", what
 * that output adds (the CLI: device facts and its timings under "seconds";
 * the spool: its timings as "load_seconds"... and the grid, which a restart
 * needs), then the members that the API's job result shares too
 * (stats_json_add): "stop_reasons", {"stop_map": N, "outside": N,
 * "no_direction": N, "max_steps": N} (streamline ends, keys from
 * proto/stop_reasons.def), "seeds_without_direction": N, and with
 * seeds.select "select": N (asked) and "selected": N (written), with regions
 * "rejected": {"exclude_region": N, "include_missing": N}. The keys of
 * each output stay as documented and as earlier records hold them.
 *
 * Owns nothing past a call; callable from any thread. Does not log.
 */
#ifndef TRACTD_STATS_JSON_H
#define TRACTD_STATS_JSON_H

#include <jansson.h>

#include "engine/engine.h"
#include "base/errbuf.h"

/* The statistics object of stats: the counts, the members of extra (an
 * object: what one output adds; its reference is taken), then the shared
 * members. NULL when out of memory, extra being NULL included. */
json_t *stats_json_new(const struct engine_stats *stats, json_t *extra);

/* Adds the shared members of stats to the object doc. Returns 0 or -ENOMEM
 * (doc then holds some of them). */
int stats_json_add(json_t *doc, const struct engine_stats *stats);

/* Reads the shared members of the object doc into stats. A document without
 * them (a record written before they existed) reads as zeros. Returns 0 or
 * -EINVAL (err's field names the member) for a member that is not a count. */
int stats_json_read(const json_t *doc, struct engine_stats *stats, struct errbuf *err);

#endif
