/* SPDX-License-Identifier: MIT */
/*
 * errbuf: the one way a module reports *why* something failed to its caller.
 *
 * Functions that can fail on user input return a negative errno and, when the
 * caller passes a struct errbuf, fill in the offending field (a JSON-pointer-like
 * path such as "tracking.step_size" or an input name such as "inputs.odf") and a
 * human-readable reason. The caller decides how to present it (CLI message, HTTP
 * 4xx body). Modules below the API never print user errors themselves.
 */
#ifndef TRACTD_ERRBUF_H
#define TRACTD_ERRBUF_H

struct errbuf {
	char field[128];   /* "" when the error is not tied to one field */
	char message[512];
};

/* Records field and formatted message (either may be NULL/empty) and returns
 * code, so callers can write `return errbuf_set(err, -EINVAL, "x", "...");`.
 * err may be NULL, in which case only code is returned. */
int errbuf_set(struct errbuf *err, int code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Prefixes the existing field with "prefix." (or sets it when empty), used when
 * an inner parser reports a field relative to its own object. */
void errbuf_prefix_field(struct errbuf *err, const char *prefix);

#endif
