/* SPDX-License-Identifier: MIT */
/*
 * merge_job: `tractd merge OUT PART...`, the flow around merge.h's join:
 * OUT must not be a part, the join is written and its summary logged.
 * Owns nothing past the call; failures go to the caller through errbuf
 * (kind input for parts that are not one job's whole set, output for
 * writing).
 */
#ifndef TRACTD_MERGE_JOB_H
#define TRACTD_MERGE_JOB_H

#include <stddef.h>

#include "base/errbuf.h"

int merge_job_run(const char *out, const char *const *parts, size_t n, struct errbuf *err);

#endif
