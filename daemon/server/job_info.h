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

/* The moments of a job's life in this daemon, in order, for finding where a
 * small job's latency goes (the API's "timing"): the request read, the
 * document validated, the job recorded and queued, picked by the worker
 * (start record written), its inputs loaded (or found warm), its devices
 * ready and output opened, the engine's work buffers ready and tracking
 * begun, the first records readable by a streaming client, the engine done
 * and the file finished, the result on disk (fsync), the done record
 * written and followers woken. */
enum job_event {
	JOB_EVENT_SUBMITTED, JOB_EVENT_VALIDATED, JOB_EVENT_QUEUED, JOB_EVENT_STARTED,
	JOB_EVENT_LOADED, JOB_EVENT_OUTPUT_OPENED, JOB_EVENT_TRACKING, JOB_EVENT_FIRST_OUTPUT,
	JOB_EVENT_TRACKED, JOB_EVENT_SYNCED, JOB_EVENT_DONE, JOB_EVENTS
};

/* When each event happened: timing_now() seconds (monotonic), 0 until it
 * does. Not kept in the job's record: a restarted daemon's clock is
 * another, so a reloaded job has none. */
struct job_timing {
	double at[JOB_EVENTS];
};

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
	struct job_timing timing;
	uint64_t host_peak_bytes;  /* when done: the daemon's peak resident memory
				    * while the job ran (0: unknown) */
	int error_code;            /* negative errno when failed */
	struct errbuf error;       /* when failed: field and reason */
};

/* "queued", "running", "done", "failed", "cancelled". */
const char *job_state_name(enum job_state state);

/* The state named name into *ret: 0, or -EINVAL for no state's name. */
int job_state_parse(const char *name, enum job_state *ret);

/* "submitted", "validated"...: the event's key in the API's "timing". */
const char *job_event_name(enum job_event event);

/* Whether a job in state has ended (done, failed or cancelled). */
bool job_state_ended(enum job_state state);

#endif
