/* SPDX-License-Identifier: MIT */
/*
 * job_doc: job documents composed or adjusted on the command line, by tractd
 * and tractctl alike, before the daemon's jobspec reads them: the format an
 * output file's extension asks for, a field set by its dotted path (`--set
 * tracking.max_steps=800`), and the gradient files found beside a DWI by
 * name. Owns nothing past a call; validates nothing jobspec validates; does
 * not print.
 *
 * Failures return a negative errno with a job_doc_error filled in: -EINVAL
 * and -EEXIST are the command line's to fix (usage), -ENOENT and
 * -ENAMETOOLONG an input's (none found, a name too long), -ENOMEM is out of
 * memory.
 */
#ifndef COMMON_JOB_DOC_H
#define COMMON_JOB_DOC_H

#include <jansson.h>

struct job_doc_error {
	char field[128];     /* the job field at fault; "" when none */
	char message[1024];  /* long enough for the four paths a search names */
};

/* Records field and the formatted message in err and returns code. */
int job_doc_fail(struct job_doc_error *err, int code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The format path's extension names ("trk", "tck" or "trx", in any case, as
 * MRtrix3 and DIPY pick a format), or NULL for another or no extension. */
const char *job_doc_format_of(const char *path);

/* Sets doc's output.format to format where the job names none and returns
 * 1; 0 where it names format; -EEXIST with *named set when the job names
 * another one; -ENOMEM. A document jobspec would refuse anyway (not an
 * object, output not one) is left as it is. */
int job_doc_set_format(json_t *doc, const char *format, const char **named);

/* Sets the field at the dotted path key ("tracking.max_steps") to value,
 * creating the objects on the way and replacing what was there; steals
 * value. -EINVAL (err naming key) for an empty part or a part under a
 * member that is not an object. */
int job_doc_set(json_t *doc, const char *key, json_t *value, struct job_doc_error *err);

/* The field at key to text read as JSON, or as a string where it is not
 * JSON (`tracking.sphere` to `repulsion100`). */
int job_doc_set_text(json_t *doc, const char *key, const char *text, struct job_doc_error *err);

/* KEY=VALUE as job_doc_set_text(doc, KEY, VALUE). */
int job_doc_assign(json_t *doc, const char *assignment, struct job_doc_error *err);

/* The b-values and b-vectors beside dwi: X.bval and X.bvec for X.nii.gz or
 * X.nii (BIDS and FSL), else bvals and bvecs in its directory. Both into
 * newly allocated paths; -ENOENT (err naming what was looked for) when
 * neither pair exists whole. A dwi named .mif or .mif.gz carries its own
 * (dw_scheme): 0 with both NULL, nothing looked for. */
int job_doc_find_gradients(const char *dwi, char **bvals, char **bvecs,
			   struct job_doc_error *err);

#endif
