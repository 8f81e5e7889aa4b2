/* SPDX-License-Identifier: MIT */
/*
 * job_info: what the daemon tells of one job (its id, owner, state, times,
 * progress, statistics, error), as the registry copies it out and the spool
 * records it, and the one table of the states' names. Owns nothing; no
 * locking, no logging.
 */
#ifndef TRACTD_JOB_INFO_H
#define TRACTD_JOB_INFO_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "base/errbuf.h"
#include "engine/engine.h"
#include "formats/output.h"

#define JOB_ID_LEN 18   /* "j-" and 16 hex digits */
#define JOB_OWNER_LEN 63 /* a user or token name (api.c: "alice", "uid:1000") */

enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_FAILED, JOB_CANCELLED };

/* A snapshot of one job, copied out under the lock. */
struct job_info {
	char id[JOB_ID_LEN + 1];
	char owner[JOB_OWNER_LEN + 1];   /* who submitted it; only they (and admins) see it */
	enum job_state state;
	time_t created, started, finished;   /* 0 until it happens */
	uint64_t seeds_done, seeds_total, streamlines, points;
	const char *stage;         /* while running: "load", a fit stage ("dti",
				    * "response", "csd", "odf") or "track"; else NULL */
	double stage_fraction;     /* of the stage done, 0..1 */
	enum output_format format; /* of the tractogram */
	uint64_t bytes;            /* tractogram bytes in the spool, whole records only */
	bool expired;              /* the result was removed from the spool */
	struct engine_stats stats; /* when done */
	int error_code;            /* negative errno when failed */
	struct errbuf error;       /* when failed: field and reason */
};

/* "queued", "running", "done", "failed", "cancelled". */
const char *job_state_name(enum job_state state);

/* The state named name into *ret: 0, or -EINVAL for no state's name. */
int job_state_parse(const char *name, enum job_state *ret);

/* Whether a job in state has ended (done, failed or cancelled). */
bool job_state_ended(enum job_state state);

#endif
