/* SPDX-License-Identifier: MIT */
/*
 * tctl_output: the tractogram file. Written to FILE.tmp and renamed to FILE
 * only on success, so that a failed or interrupted transfer never leaves a
 * truncated tractogram under the name asked for; "-" is standard output.
 */
#ifndef TCTL_OUTPUT_H
#define TCTL_OUTPUT_H

#include <stdio.h>

struct output {
	FILE *stream;
	char *path;       /* the name asked for; NULL for standard output */
	char *tmp_path;   /* path + ".tmp" */
};

/* Creates FILE.tmp (or takes standard output). Returns an exit code. */
int output_open(struct output *out, const char *path);

/* "tracks.trk", or "standard output". */
const char *output_name(const struct output *out);

/* Closes and renames into place. Returns an exit code; on failure nothing
 * is left behind. */
int output_commit(struct output *out);

/* Closes and removes FILE.tmp. */
void output_discard(struct output *out);

#endif
