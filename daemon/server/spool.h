/* SPDX-License-Identifier: MIT */
/*
 * spool: the job records of the result spool, so that jobs outlive the
 * daemon process.
 *
 * Owns the files <spool>/<id>.job: one JSON document per job (its id, state,
 * timestamps, progress, statistics, error (errno, kind, field, message;
 * records written before kinds read as the kind their errno and field gave),
 * the name and size of its result file and the job document as submitted). A record is written whole to a
 * temporary file, synced and renamed over the old one, so a crash leaves
 * either the old record or the new one, never a mix. Also owns the cleaning
 * of the spool at start: temporary files of an earlier run (records being
 * written, converted tractograms) and results without a valid record are
 * removed; unreadable records and files it does not know are left alone with
 * a warning.
 * jobs.c owns the result files themselves (<id>.tractogram) and decides
 * what a reloaded job becomes.
 *
 * Not thread-safe by itself: jobs.c calls it under its lock. Logs warnings
 * about files it skips and removes.
 */
#ifndef TRACTD_SPOOL_H
#define TRACTD_SPOOL_H

#include <stddef.h>

#include "base/errbuf.h"
#include "server/job_info.h"

/* One reloaded job: its public fields and, for a job that was queued or
 * running (whose record is written again), the job document it was
 * submitted with, as the record holds it (JSON text, malloc'd; NULL when
 * the record has none, and for jobs that ended). */
struct spool_record {
	struct job_info info;
	char *spec_json;
};

/* The result file name of job id ("<id>.tractogram") into name[len]. */
void spool_result_name(const char *id, char *name, size_t len);
/* The record file name of job id ("<id>.job") into name[len]. */
void spool_record_name(const char *id, char *name, size_t len);

/* Writes the record of info (and spec_json, JSON text or NULL) atomically:
 * temporary file, rename; for an ended job with an fsync of the file before
 * the rename and of the directory after it, so that its outcome survives a
 * power cut. A queued or running job's record survives a crash of the
 * process but not a power cut, which costs nothing: a reloaded queued or
 * running job fails as interrupted either way (a lost record: it was never
 * there), and its four fsyncs were most of a small job's latency. Returns 0 or a
 * negative errno (-ENOSPC when the file system is full) with err set; the
 * temporary file never stays behind. */
int spool_record_write(const char *dir, const struct job_info *info, const char *spec_json,
		       struct errbuf *err);

/* Removes the record of id; a missing one is not an error. */
void spool_record_remove(const char *dir, const char *id);

/* Reads every record of dir into *ret (malloc'd, oldest first, *n of them;
 * free with spool_records_free) and cleans the spool as said above. Only a
 * directory that cannot be read fails (-errno, err set). */
int spool_load(const char *dir, struct spool_record **ret, size_t *n, struct errbuf *err);

/* Accepts NULL. */
void spool_records_free(struct spool_record *records, size_t n);

/* Parses one record document (text of len bytes) named file_id (the id its
 * file name says, or NULL to accept any); for spool_load and the tests.
 * Returns 0, or -EINVAL with err saying why. */
int spool_record_parse(const char *text, size_t len, const char *file_id,
		       struct spool_record *ret, struct errbuf *err);

#endif
