/* SPDX-License-Identifier: MIT */
/*
 * tctl_print: what people read of the daemon's documents (API.md): a job, the
 * job list, the volume list, the device, the progress line and the one-line descriptions that
 * summaries and errors are made of. --json output is printed here too.
 */
#ifndef TCTL_PRINT_H
#define TCTL_PRINT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A job's "status" when it has ended: done, failed or cancelled. */
bool job_has_ended(const json_t *job);

/* "FIELD: MESSAGE", or "MESSAGE" when the field is empty, from an error
 * object (an error body's "error", or a failed job's). False when it has no
 * message. */
bool describe_error(const json_t *error, char *buf, size_t len);

/* "4431 streamlines (120345 points) from 10000 seeds" for a done job. */
void describe_result(const json_t *job, char *buf, size_t len);

/* What the progress line keeps between polls of one job: when and how far
 * along it first saw the job track, to tell the time left from the pace
 * since. Start zeroed. */
struct progress_pace {
	bool tracking;
	double since;      /* elapsed seconds */
	double fraction;   /* of the seeds done then, 0..1 */
};

/* The progress line of a queued or running job on a terminal: the stage
 * ("fitting CSD 40 %") or the seeds, the time elapsed and, once it can be
 * estimated, the time left of tracking ("ETA 0:12"). */
void show_job_progress(const json_t *job, double elapsed_seconds, struct progress_pace *pace);

/* Text on standard output, for `status`, `list`, `volumes` and `device`. A
 * job that fits its model shows its stage ("fitting CSD 40 %"). */
void print_job(const json_t *job);
void print_job_list(const json_t *jobs);
void print_volume_list(const json_t *doc);
void print_device(const json_t *doc);

/* --json: the document, indented, on standard output. Returns an exit code. */
int print_json(const json_t *doc);

#endif
