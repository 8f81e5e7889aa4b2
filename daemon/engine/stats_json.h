/* SPDX-License-Identifier: MIT */
/*
 * stats_json: the members of a run's statistics (engine.h) that the CLI's
 * --stats-json, the API's job result and the spool's job records share, in
 * one JSON shape: "stop_reasons", {"stop_map": N, "outside": N,
 * "no_direction": N, "max_steps": N} (streamline ends, keys from
 * proto/stop_reasons.def), and "seeds_without_direction": N.
 *
 * Owns nothing past a call; callable from any thread. Does not log.
 */
#ifndef TRACTD_STATS_JSON_H
#define TRACTD_STATS_JSON_H

#include <jansson.h>

#include "engine/engine.h"
#include "base/errbuf.h"

/* Adds the shared members of stats to the object doc. Returns 0 or -ENOMEM
 * (doc then holds some of them). */
int stats_json_add(json_t *doc, const struct engine_stats *stats);

/* Reads the shared members of the object doc into stats. A document without
 * them (a record written before they existed) reads as zeros. Returns 0 or
 * -EINVAL (err's field names the member) for a member that is not a count. */
int stats_json_read(const json_t *doc, struct engine_stats *stats, struct errbuf *err);

#endif
