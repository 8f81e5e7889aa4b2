/* SPDX-License-Identifier: MIT */
/*
 * errbuf: the one way a module reports *why* something failed to its caller.
 *
 * Functions that can fail on user input return a negative errno and, when the
 * caller passes a struct errbuf, fill in the offending field (a JSON-pointer-like
 * path such as "tracking.step_size" or an input name such as "inputs.odf"), a
 * human-readable reason and the kind of failure. The caller decides how to
 * present it (CLI message and exit code, HTTP status and error code) by the
 * kind alone: one switch each, never by the field's text. Modules below the
 * API never print user errors themselves.
 */
#ifndef TRACTD_ERRBUF_H
#define TRACTD_ERRBUF_H

/* What kind of failure an error is, set where the failure happens. */
enum err_kind {
	/* Not tied to the job by its site (no field) and none of the kinds
	 * below; also a failure returned without an errbuf. The CLI counts it
	 * as the job's, the API as its own. */
	ERR_KIND_UNTIED,
	/* A field of the job, or an input it names, is wrong: the user's to
	 * fix. What errbuf_set records when it names a field. */
	ERR_KIND_INPUT,
	/* Host memory ran out: every -ENOMEM (errbuf_kind). */
	ERR_KIND_MEMORY,
	/* The GPU, or the choice of one, failed or lacks what the job needs. */
	ERR_KIND_DEVICE,
	/* The job does not fit the GPU (its memory, a buffer, shared memory). */
	ERR_KIND_TOO_LARGE,
	/* The job goes over a limit the server sets (max_job_host_memory). */
	ERR_KIND_LIMIT,
	/* The result, or another file the CLI writes, could not be written. */
	ERR_KIND_OUTPUT,
	/* The result did not fit the disk under the server's state_dir. */
	ERR_KIND_STORAGE,
	/* The daemon stopped before it ran the job. */
	ERR_KIND_SHUTDOWN,
	/* The daemon stopped, or died, while the job waited or ran. */
	ERR_KIND_INTERRUPTED,
};

struct errbuf {
	char field[128];   /* "" when the error is not tied to one field */
	char message[512];
	enum err_kind kind;
};

/* Records field and formatted message (either may be NULL/empty) and returns
 * code, so callers can write `return errbuf_set(err, -EINVAL, "x", "...");`.
 * The kind is ERR_KIND_INPUT when field names one, else ERR_KIND_UNTIED.
 * err may be NULL, in which case only code is returned. */
int errbuf_set(struct errbuf *err, int code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* errbuf_set for a failure of another kind than its default. */
int errbuf_set_kind(struct errbuf *err, enum err_kind kind, int code, const char *field,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Changes the kind of the failure err holds, for a caller that knows more
 * than the site that set it (a volume the phantom writes is its output). */
void errbuf_reclassify(struct errbuf *err, enum err_kind kind);

/* Prefixes the existing field with "prefix." (or sets it when empty), used when
 * an inner parser reports a field relative to its own object. The kind stays. */
void errbuf_prefix_field(struct errbuf *err, const char *prefix);

/* The kind of the failure that returned code, err filled in by it or not
 * (err may be NULL): ERR_KIND_MEMORY for -ENOMEM, which allocations return
 * without an errbuf, else the kind its site recorded. */
enum err_kind errbuf_kind(const struct errbuf *err, int code);

/* The kind's name ("input", "device"...: how job records store it), and the
 * kind of a name; -EINVAL for an unknown name. */
const char *errbuf_kind_name(enum err_kind kind);
int errbuf_kind_from_name(const char *name, enum err_kind *kind);

#endif
