/* SPDX-License-Identifier: MIT */
#include "server/redact.h"

#include <stdio.h>
#include <string.h>

/* Messages about a job's inputs name the files the engine read: stored
 * volumes appear as ".../volumes/<hex>.nii.gz". Show the client the id it
 * sent (sha256:<hex>) instead of the server's path. */
static void volume_ids_for_paths(const char *in, char *out, size_t len)
{
	static const char hexdigits[] = "0123456789abcdef";
	const char *p = in;
	size_t o = 0;

	for (;;) {
		const char *tag = strstr(p, "/volumes/");
		const char *start, *hex;

		if (!tag || strspn(tag + 9, hexdigits) < 64) {
			size_t n = tag ? (size_t)(tag + 9 - p) : strlen(p);
			o += (size_t)snprintf(out + o, len - o, "%.*s", (int)n, p);
			if (!tag || o >= len)
				break;
			p = tag + 9;
			continue;
		}
		hex = tag + 9;
		for (start = tag; start > p && start[-1] != ' ' && start[-1] != '\''; start--)
			;
		o += (size_t)snprintf(out + o, len - o, "%.*ssha256:%.64s", (int)(start - p), p, hex);
		if (o >= len)
			break;
		p = hex + 64 + strspn(hex + 64, ".niigztxmf");
	}
}

/* Copies in to out with every occurrence of what written as instead. */
static void replace_all(const char *in, const char *what, const char *instead, char *out,
			size_t len)
{
	size_t n = strlen(what), o = 0;
	const char *p = in, *hit;

	while ((hit = strstr(p, what)) != NULL && o < len) {
		o += (size_t)snprintf(out + o, len - o, "%.*s%s", (int)(hit - p), p, instead);
		p = hit + n;
	}
	if (o < len)
		snprintf(out + o, len - o, "%s", p);
}

void redact_server_paths(const char *in, const char *state_dir, char *out, size_t len)
{
	/* Volume ids are shorter than the paths they replace. Messages are
	 * errbuf's 512 bytes or answers' 600; a longer one is cut here. */
	char ids[2048];

	if (len == 0)
		return;
	volume_ids_for_paths(in, ids, sizeof(ids));
	/* "/" would redact every slash; conf wants it absolute, so it is longer. */
	if (strlen(state_dir) > 1)
		replace_all(ids, state_dir, "<state_dir>", out, len);
	else
		snprintf(out, len, "%s", ids);
}
