/* SPDX-License-Identifier: MIT */
/*
 * tctl_job: a job file written for `tractd run`, turned into a job the daemon
 * takes: input paths replaced by the ids of uploaded volumes, output.path
 * taken out.
 */
#ifndef TCTL_JOB_H
#define TCTL_JOB_H

#include <jansson.h>

#include "tctl_http.h"

struct job_file {
	json_t *doc;         /* the document to POST to /v1/jobs */
	char *dir;           /* the job file's directory: relative paths start there */
	char *output_path;   /* output.path joined to dir; NULL when the job has none */
};

/* Reads the job file; takes output.path out of the document. Returns an
 * exit code. */
int job_file_load(const char *path, struct job_file *ret);

/* Makes sure the daemon has every input, and names each by its volume id.
 * Returns an exit code. */
int job_file_upload_inputs(struct job_file *job, struct http_client *c);

void job_file_free(struct job_file *job);

#endif
