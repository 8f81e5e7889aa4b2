/* SPDX-License-Identifier: MIT */
/*
 * track_opts: the options of `tractd track DWI OUTPUT` and `tractctl track
 * DWI OUTPUT`, one table for both: each option's name, argument, the job
 * field it sets and its help line, from which both getopt tables and both
 * help texts are made; what a command line gave, and the job composed from
 * it (job_doc's helpers). Owns the options it records only as pointers into
 * argv; the composed document is the caller's.
 */
#ifndef COMMON_TRACK_OPTS_H
#define COMMON_TRACK_OPTS_H

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "common/job_doc.h"

#define TRACK_MAX_FIELDS 64   /* options and --set's of one track command */

/* How --print-job prints the job (json_dumps), in both binaries. */
#define TRACK_JOB_DUMP_FLAGS JSON_INDENT(2)

/* The options, in the order of the help; the binaries' getopt values are
 * a base of their own plus these. */
enum track_opt {
	TRACK_OPT_BVALS,
	TRACK_OPT_BVECS,
	TRACK_OPT_BVECS_CONVENTION,
	TRACK_OPT_MASK,
	TRACK_OPT_SEED_ROI,
	TRACK_OPT_SEEDS,
	TRACK_OPT_SELECT,
	TRACK_OPT_RNG_SEED,
	TRACK_OPT_DG,
	TRACK_OPT_SH_ORDER,
	TRACK_OPT_SPHERE,
	TRACK_OPT_STEP_SIZE,
	TRACK_OPT_STEP,
	TRACK_OPT_MAX_ANGLE,
	TRACK_OPT_FA_THRESHOLD,
	TRACK_OPT_INCLUDE,
	TRACK_OPT_EXCLUDE,
	TRACK_OPT_SET,
	TRACK_OPT_PRINT_JOB,
	TRACK_OPT_FORCE,
	TRACK_OPT_COUNT,
};

/* A job field an option sets: key NULL for --set's KEY=VALUE. */
struct track_field {
	const char *key;
	const char *value;
	bool region;   /* --include/--exclude: value is a region appended to the list at key */
};

/* What a track command line gave, beside DWI and OUTPUT. */
struct track_request {
	const char *bvals, *bvecs, *mask, *seed_roi;
	struct track_field fields[TRACK_MAX_FIELDS];   /* in the order given */
	size_t n_fields;
	bool print_job, force;
	int first_given;   /* the first option given (enum track_opt), -1 for none */
};

/* An empty request (no option given). */
void track_request_init(struct track_request *t);

/* Fills out[TRACK_OPT_COUNT] with the options, each getopt value
 * first_val + its enum track_opt. */
void track_opts_getopt(struct option *out, int first_val);

/* "--mask": the option's name as written. */
const char *track_opts_name(enum track_opt opt);

/* Prints the options' help lines, help2man's two columns. */
void track_opts_print_help(FILE *f);

/* Records option opt with its argument (NULL for a flag); the values are
 * jobspec's to check, but for --include/--exclude's form: X,Y,Z,R (a
 * sphere, four numbers) or an existing mask FILE. -EINVAL (err) when there
 * are too many fields or a sphere is not four numbers, -ENOENT when the
 * mask FILE does not exist; both name the option. */
int track_request_take(struct track_request *t, enum track_opt opt, const char *arg,
		       struct job_doc_error *err);

/* The job of `track DWI OUTPUT` in *ret: inputs (the gradients given, else
 * found beside dwi), seeds in --seed-roi (else the mask), output by
 * OUTPUT's extension, every path absolute, then the options' fields in the
 * order given. An existing OUTPUT is refused (-EEXIST) unless --force or
 * --print-job. Errors as job_doc's. */
int track_job_compose(const struct track_request *t, const char *dwi, const char *output,
		      json_t **ret, struct job_doc_error *err);

#endif
