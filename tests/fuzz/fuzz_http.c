/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http: libFuzzer harness for the HTTP API's routing (daemon/server/route.c):
 * method + path + query -> route, id, allowed methods and checked
 * parameters, as api.c uses them.
 *
 * Input layout: a request line as a client would send it, "METHOD TARGET"
 * (text up to the first NUL; the target's path and query split at the first
 * '?', parameters at '&' and '=', the first "format" and "wait" kept, as
 * libmicrohttpd hands them over). Besides the sanitizers, the harness
 * checks that the route and id put back together give the path, that the
 * Allow list and method_allowed agree, and that only an unknown format or
 * wait value is refused. Built by `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT 4096

/* The first value of key in query ("a=1&b=2"), copied into out, or NULL. */
static const char *query_value(const char *query, const char *key, char *out, size_t len)
{
	size_t klen = strlen(key);

	for (const char *p = query; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
		size_t n = strcspn(p, "&");
		if (n > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
			snprintf(out, len, "%.*s", (int)(n - klen - 1), p + klen + 1);
			return out;
		}
		if (n == klen && strncmp(p, key, klen) == 0) {
			out[0] = '\0';   /* "?format": present and empty */
			return out;
		}
	}
	return NULL;
}

static void check_route(const char *path, const struct route_match *m)
{
	char rebuilt[MAX_INPUT + 64];
	const char *allowed = route_allowed_methods(m->route);

	if ((m->route == ROUTE_NONE) != (allowed[0] == '\0'))
		abort();
	switch (m->route) {
	case ROUTE_VOLUME:
		snprintf(rebuilt, sizeof(rebuilt), "/v1/volumes/%s", m->id);
		break;
	case ROUTE_JOB:
		snprintf(rebuilt, sizeof(rebuilt), "/v1/jobs/%s", m->id);
		break;
	case ROUTE_TRACTOGRAM:
		snprintf(rebuilt, sizeof(rebuilt), "/v1/jobs/%s/tractogram", m->id);
		break;
	default:
		if (m->id[0])
			abort();
		return;
	}
	if (!m->id[0] || strchr(m->id, '/') || strlen(m->id) > ROUTE_ID_MAX ||
	    strcmp(rebuilt, path) != 0)
		abort();
}

/* Every method of the Allow list is allowed, and nothing else on this one. */
static void check_methods(enum route route, const char *method)
{
	char list[64];
	bool listed = false;

	snprintf(list, sizeof(list), "%s", route_allowed_methods(route));
	for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok;
	     tok = strtok_r(NULL, ", ", &save)) {
		if (!route_method_allowed(route, tok))
			abort();
		listed |= strcmp(tok, method) == 0;
	}
	if (route_method_allowed(route, method) != listed)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[MAX_INPUT + 1], format_buf[MAX_INPUT + 1], wait_buf[MAX_INPUT + 1];
	const char *method, *format, *wait;
	char *target, *query;
	struct route_match m;
	struct route_query q;
	struct errbuf err;
	int r;

	if (size > MAX_INPUT)
		size = MAX_INPUT;
	memcpy(text, data, size);
	text[size] = '\0';
	method = text;
	target = strchr(text, ' ');
	if (target)
		*target++ = '\0';
	else
		target = text + strlen(text);
	query = strchr(target, '?');
	if (query)
		*query++ = '\0';
	format = query ? query_value(query, "format", format_buf, sizeof(format_buf)) : NULL;
	wait = query ? query_value(query, "wait", wait_buf, sizeof(wait_buf)) : NULL;

	route_match(target, &m);
	check_route(target, &m);
	check_methods(m.route, method);
	memset(&err, 0, sizeof(err));
	r = route_query(m.route, method, format, wait, &q, &err);
	/* Refused: an unknown format of a tractogram, or a wait other than
	 * "stream" on a submission; nothing else. */
	if (r < 0 && !(r == -22 && m.route == ROUTE_TRACTOGRAM && strcmp(err.field, "format") == 0) &&
	    !(r == -22 && m.route == ROUTE_JOBS && strcmp(method, "POST") == 0 && wait &&
	      strcmp(wait, "stream") != 0 && strcmp(err.field, "wait") == 0))
		abort();
	if (q.stream && (m.route != ROUTE_JOBS || strcmp(method, "POST") != 0 || !wait ||
			 strcmp(wait, "stream") != 0))
		abort();
	return 0;
}
