/* SPDX-License-Identifier: MIT */
/*
 * admission: whether what a client sent may enter the daemon, decided
 * before anything is queued or stored.
 *
 * For a job document (parsed by jobspec): the rules of server jobs (no
 * output.path, no TCK seeds file), max_seeds_per_job as far as the document
 * tells, every input opened now and held by the job (a volume id: the
 * store's file, for its uploader or an admin; a server path: under
 * data_roots, as the submitting user, a regular file), and
 * max_job_host_memory from the opened headers. For an upload: how many
 * bytes it may write (max_upload_bytes, or what is left of the uploader's
 * max_volume_bytes_per_user). Answers in the API's error codes, with the
 * field and reason in the errbuf. Owns nothing; thread-safe; does not log.
 */
#ifndef TRACTD_ADMISSION_H
#define TRACTD_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "base/infile.h"
#include "job/jobspec.h"
#include "server/api_error.h"
#include "server/job_info.h"
#include "server/store.h"

/* Who sent a request: owns the jobs it submits and the volumes it uploads. */
struct identity {
	char name[JOB_OWNER_LEN + 1];
	bool admin;
	/* Whom server-side paths are opened as; without an account (a token
	 * whose name is no user) none are. */
	bool has_account;
	struct infile_identity account;
};

struct admission_config {
	struct store *store;
	/* ':'-separated absolute directories (checked by conf) whose files jobs
	 * may name; "" = none, uploads only. */
	char data_roots[1024];
	uint64_t max_seeds_per_job;
	uint64_t max_job_host_memory;         /* resolved: never 0 */
	uint64_t max_upload_bytes;
	uint64_t max_volume_bytes_per_user;   /* what one owner's volumes take */
};

/* Admits spec, a job who submits, opening its inputs (spec holds them; on
 * refusal those opened so far are closed with spec by jobspec_free).
 * API_OK, or the error to answer with err's field and message. */
enum api_error admission_check_job(const struct admission_config *cfg, struct jobspec *spec,
				   const struct identity *who, struct errbuf *err);

/* The bytes an upload of who may write into *max, and whether the quota
 * (rather than max_upload_bytes) is what bounds it into *quota_binds.
 * 0; -EDQUOT when the quota has nothing left; -EIO (err set) when the
 * uploader's volumes cannot be counted. */
int admission_upload_limit(const struct admission_config *cfg, const struct identity *who,
			   uint64_t *max, bool *quota_binds, struct errbuf *err);

#endif
