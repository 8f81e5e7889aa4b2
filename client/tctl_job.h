/* SPDX-License-Identifier: MIT */
/*
 * tctl_job: a job file written for `tractd run`, turned into a job the daemon
 * takes: input paths replaced by the ids of uploaded volumes, output.path
 * taken out.
 */
#ifndef TCTL_JOB_H
#define TCTL_JOB_H

#include <jansson.h>
#include <stdbool.h>

#include "tctl_http.h"

#define VOLUME_ID_PREFIX "sha256:"
#define VOLUME_ID_LEN (sizeof(VOLUME_ID_PREFIX) - 1 + 64)

/* "sha256:" and 64 lowercase hex digits, as the daemon names volumes. */
bool job_is_volume_id(const char *s);

/* One input file named in the job, as uploaded. */
struct job_upload {
	char id[VOLUME_ID_LEN + 1];
	char *path;          /* the local file, joined to the job file's directory */
};

struct job_file {
	json_t *doc;         /* the document to POST to /v1/jobs */
	char *dir;           /* the job file's directory: relative paths start there */
	char *output_path;   /* output.path joined to dir; NULL when the job has none */
	struct job_upload *uploads;   /* after job_file_upload_inputs */
	size_t n_uploads;
};

/* Reads the job file ('-': standard input, relative paths from the current
 * directory); takes output.path out of the document. Returns an exit code. */
int job_file_load(const char *path, struct job_file *ret);

/* The job file of a document composed here (doc taken; its paths relative
 * to the current directory), output.path taken out as job_file_load does.
 * Returns an exit code. */
int job_file_adopt(json_t *doc, struct job_file *ret);

/* Makes sure the daemon has every input, and names each by its volume id.
 * Returns an exit code. */
int job_file_upload_inputs(struct job_file *job, struct http_client *c);

/* text (a daemon's message) into out[len] with each uploaded volume's id
 * replaced by the local file it was uploaded from: the daemon knows only
 * the id, the user only the file. */
void job_file_name_locally(const struct job_file *job, const char *text, char *out, size_t len);

/* Sets output.format (trk, tck or trx). Returns an exit code. */
int job_file_set_output_format(struct job_file *job, const char *format);

void job_file_free(struct job_file *job);

#endif
