/* SPDX-License-Identifier: MIT */
/*
 * tokens: the bearer tokens that admit clients on TCP (config tokens_file).
 *
 * File format: one `NAME TOKEN [admin]` line per token, blanks between the
 * words, `#` comment lines and blank lines. NAME is who the client is (the
 * owner of its jobs; a token named like a Unix user shares that user's
 * jobs): 1..63 of letters, digits, '.', '_', '-', not starting with '.' or '-'.
 * TOKEN: 16..512 printable non-blank ASCII characters, unique in the file.
 * A name may have several tokens (one per pipeline, or while rotating).
 * "admin" lets the client see and cancel every user's jobs. Errors are
 * "FILE:LINE: REASON" as conf's are. Since the file holds secrets, it is
 * refused when group or others have any access to it. Does not log.
 */
#ifndef TRACTD_TOKENS_H
#define TRACTD_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/errbuf.h"

#define TOKEN_NAME_MAX 63
#define TOKEN_MIN_LEN 16
#define TOKEN_MAX_LEN 512

struct tokens;

struct token_identity {
	char name[TOKEN_NAME_MAX + 1];
	bool admin;
};

/* Opens path, checks its mode (no group or other access) and parses it.
 * At least one token is required. */
int tokens_load(const char *path, struct tokens **ret, struct errbuf *err);

/* Parses fp (path names it in messages); no mode check. */
int tokens_parse(FILE *fp, const char *path, struct tokens **ret, struct errbuf *err);

size_t tokens_count(const struct tokens *t);

/* Whose token presented[0..len) is: 0 and *ret, or -EACCES. Takes the same
 * time whatever token matches or how much of it does (every entry is
 * compared in full), so that timing does not reveal a token. */
int tokens_check(const struct tokens *t, const char *presented, size_t len,
		 struct token_identity *ret);

void tokens_free(struct tokens *t);   /* accepts NULL */

#endif
