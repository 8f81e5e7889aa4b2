/* SPDX-License-Identifier: MIT */
/*
 * fnv: FNV-1a 64, the hash that tells tractd's own records apart (a job's
 * fingerprint, a shard's inputs); not a checksum against tampering.
 */
#ifndef TRACTD_FNV_H
#define TRACTD_FNV_H

#include <stddef.h>
#include <stdint.h>

#define FNV1A64_INIT 0xcbf29ce484222325ull

/* h (FNV1A64_INIT to start) carried on over n bytes. */
static inline uint64_t fnv1a64(uint64_t h, const void *bytes, size_t n)
{
	const unsigned char *p = bytes;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

#endif
