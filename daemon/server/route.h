/* SPDX-License-Identifier: MIT */
/*
 * route: the HTTP API's request routing without the HTTP library: a request's
 * method, path and the query parameters the API reads become a route, the id
 * the path names and the checked parameters, or the reason they are refused
 * (404, 405 with the Allow list, 400 for a bad parameter). api.c answers;
 * this module decides. Pure: no I/O, no allocation, no global state, so
 * that it is fuzzed on its own (tests/fuzz/fuzz_http.c). Does not log.
 */
#ifndef TRACTD_ROUTE_H
#define TRACTD_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/errbuf.h"
#include "formats/output.h"

enum route {
	ROUTE_NONE,         /* no such resource */
	ROUTE_HEALTH,       /* /healthz */
	ROUTE_METRICS,      /* /metrics */
	ROUTE_DEVICE,       /* /v1/device */
	ROUTE_VOLUMES,      /* /v1/volumes */
	ROUTE_VOLUME,       /* /v1/volumes/ID */
	ROUTE_JOBS,         /* /v1/jobs */
	ROUTE_JOB,          /* /v1/jobs/ID */
	ROUTE_TRACTOGRAM,   /* /v1/jobs/ID/tractogram */
};

/* Longest id a path may carry; longer ones route nowhere. */
#define ROUTE_ID_MAX 127

struct route_match {
	enum route route;
	char id[ROUTE_ID_MAX + 1];   /* the path's ID (no '/'), else "" */
};

/* Splits path (without the query) into a route and its id. */
enum route route_match(const char *path, struct route_match *ret);

/* "GET, POST" etc.: the Allow header of a route ("" for ROUTE_NONE). */
const char *route_allowed_methods(enum route route);

/* Whether method (exact, case-sensitive) is in the route's Allow list. */
bool route_method_allowed(enum route route, const char *method);

/* The query parameters the API reads, as the HTTP layer decoded them (NULL
 * when absent), checked. */
struct route_query {
	bool stream;                 /* POST /v1/jobs?wait=stream */
	bool has_format;             /* GET .../tractogram?format=F */
	enum output_format format;
};

/* Checks the parameters of a request on route: -EINVAL with err naming the
 * parameter ("format", "wait") for a value it does not know; parameters a
 * route does not read are ignored. */
int route_query(enum route route, const char *method, const char *format, const char *wait,
		struct route_query *ret, struct errbuf *err);

#endif
