/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tokens: libFuzzer harness for the TCP tokens file parser.
 *
 * Input: the file's text, read through a memory stream by tokens_parse();
 * when it parses, the whole input is also presented as a bearer token
 * (tokens_check), which must then be refused or name an entry. Built by
 * `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tokens *t = NULL;
	struct token_identity who;
	struct errbuf err;
	FILE *fp;

	/* fmemopen of 0 bytes fails on glibc: an empty file is "" plus nothing. */
	fp = fmemopen(size ? (void *)data : (void *)"", size ? size : 1, "r");
	if (!fp)
		abort();
	if (tokens_parse(fp, "tokens", &t, &err) == 0) {
		if (tokens_count(t) == 0)
			abort();   /* a parsed file has at least one token */
		if (tokens_check(t, (const char *)data, size, &who) == 0 &&
		    (who.name[0] == '\0' || strlen(who.name) > TOKEN_NAME_MAX))
			abort();
		tokens_free(t);
	} else if (t) {
		abort();   /* a failure hands nothing back */
	}
	fclose(fp);
	return 0;
}
