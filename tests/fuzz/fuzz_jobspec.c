/* SPDX-License-Identifier: MIT */
/*
 * fuzz_jobspec: libFuzzer harness for the job document parser.
 *
 * Each input is handed to jobspec_parse() as a job document (not
 * NUL-terminated, to catch reads past len); a parsed job is freed again, so
 * LeakSanitizer sees every allocation the parser keeps. Built by `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "job/jobspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jobspec js;
	struct errbuf err;
	/* A private copy of exactly size bytes, so ASan flags reads past the end. */
	char *json = malloc(size ? size : 1);

	if (!json)
		return 0;
	if (size)
		memcpy(json, data, size);
	memset(&js, 0, sizeof(js));
	memset(&err, 0, sizeof(err));
	if (jobspec_parse(json, size, "/fuzz/base", &js, &err) == 0)
		jobspec_free(&js);
	free(json);
	return 0;
}
