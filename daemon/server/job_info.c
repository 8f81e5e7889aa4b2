/* SPDX-License-Identifier: MIT */
/*
 * job_info: the job states' and events' names (see job_info.h).
 */
#include "server/job_info.h"

#include <errno.h>
#include <string.h>

static const char *const state_names[] = {
	[JOB_QUEUED] = "queued", [JOB_RUNNING] = "running", [JOB_DONE] = "done",
	[JOB_FAILED] = "failed", [JOB_CANCELLED] = "cancelled",
};

static const char *const event_names[] = {
	[JOB_EVENT_SUBMITTED] = "submitted", [JOB_EVENT_VALIDATED] = "validated",
	[JOB_EVENT_QUEUED] = "queued", [JOB_EVENT_STARTED] = "started",
	[JOB_EVENT_LOADED] = "loaded", [JOB_EVENT_OUTPUT_OPENED] = "output_opened",
	[JOB_EVENT_TRACKING] = "tracking", [JOB_EVENT_FIRST_OUTPUT] = "first_output",
	[JOB_EVENT_TRACKED] = "tracked", [JOB_EVENT_SYNCED] = "synced",
	[JOB_EVENT_DONE] = "done",
};

const char *job_event_name(enum job_event event)
{
	return event_names[event];
}

const char *job_state_name(enum job_state state)
{
	return state_names[state];
}

int job_state_parse(const char *name, enum job_state *ret)
{
	for (size_t s = 0; s < sizeof(state_names) / sizeof(state_names[0]); s++)
		if (strcmp(name, state_names[s]) == 0) {
			*ret = (enum job_state)s;
			return 0;
		}
	return -EINVAL;
}

bool job_state_ended(enum job_state state)
{
	return state == JOB_DONE || state == JOB_FAILED || state == JOB_CANCELLED;
}
