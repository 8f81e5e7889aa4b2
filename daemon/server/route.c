/* SPDX-License-Identifier: MIT */
/* route: request routing and query checks of the HTTP API (see route.h). */
#include "server/route.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

enum route route_match(const char *path, struct route_match *ret)
{
	static const struct { const char *path; enum route route; } fixed[] = {
		{ "/healthz", ROUTE_HEALTH }, { "/metrics", ROUTE_METRICS },
		{ "/v1/device", ROUTE_DEVICE }, { "/v1/volumes", ROUTE_VOLUMES },
		{ "/v1/jobs", ROUTE_JOBS },
	};
	const char *rest;
	size_t n;

	ret->route = ROUTE_NONE;
	ret->id[0] = '\0';
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (strcmp(path, fixed[i].path) == 0)
			return ret->route = fixed[i].route;
	if (strncmp(path, "/v1/volumes/", 12) == 0) {
		rest = path + 12;
		n = strlen(rest);
		if (n == 0 || n > ROUTE_ID_MAX || strchr(rest, '/'))
			return ROUTE_NONE;
		memcpy(ret->id, rest, n + 1);
		return ret->route = ROUTE_VOLUME;
	}
	if (strncmp(path, "/v1/jobs/", 9) != 0)
		return ROUTE_NONE;
	rest = path + 9;
	n = strcspn(rest, "/");
	if (n == 0 || n > ROUTE_ID_MAX)
		return ROUTE_NONE;
	if (rest[n] != '\0' && strcmp(rest + n, "/tractogram") != 0)
		return ROUTE_NONE;
	memcpy(ret->id, rest, n);
	ret->id[n] = '\0';
	return ret->route = rest[n] == '\0' ? ROUTE_JOB : ROUTE_TRACTOGRAM;
}

const char *route_allowed_methods(enum route route)
{
	switch (route) {
	case ROUTE_NONE: return "";
	case ROUTE_HEALTH: return "GET";
	case ROUTE_METRICS: return "GET";
	case ROUTE_DEVICE: return "GET";
	case ROUTE_VOLUMES: return "GET, POST";
	case ROUTE_VOLUME: return "GET, HEAD, DELETE";
	case ROUTE_JOBS: return "GET, POST";
	case ROUTE_JOB: return "GET, DELETE";
	case ROUTE_TRACTOGRAM: return "GET";
	}
	return "";
}

bool route_method_allowed(enum route route, const char *method)
{
	const char *allowed = route_allowed_methods(route);
	size_t n = strlen(method);

	/* An empty method would match everywhere below. */
	if (n == 0)
		return false;
	/* The list reads "A, B": a match must start the list or follow ", ". */
	for (const char *p = strstr(allowed, method); p; p = strstr(p + 1, method))
		if ((p == allowed || (p - allowed >= 2 && p[-2] == ',')) &&
		    (p[n] == '\0' || p[n] == ','))
			return true;
	return false;
}

int route_query(enum route route, const char *method, const char *format, const char *wait,
		struct route_query *ret, struct errbuf *err)
{
	bool submit = route == ROUTE_JOBS && strcmp(method, "POST") == 0;

	memset(ret, 0, sizeof(*ret));
	/* A typo must not pass for "no wait": the client would take the job's
	 * JSON answer for its tractogram. */
	if (submit && wait && strcmp(wait, "stream") != 0)
		return errbuf_set(err, -EINVAL, "wait", "unknown value '%.40s': the only one is "
				  "\"stream\" (leave wait out for the job's id at once)", wait);
	ret->stream = submit && wait;
	if (route != ROUTE_TRACTOGRAM || !format)
		return 0;
	if (output_format_parse(format, &ret->format) < 0)
		return errbuf_set(err, -EINVAL, "format", "unknown format '%.40s': expected trk, "
				  "tck or trx", format);
	ret->has_format = true;
	return 0;
}
