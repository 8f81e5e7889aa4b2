/* SPDX-License-Identifier: MIT */
/*
 * binio: what the tractogram writers (trk, tck, trx) and their reader
 * (tractogram_read) share: explicit little-endian encoding and decoding,
 * which keeps the file formats independent of the host (compilers turn the
 * shifts into plain loads and stores on little-endian CPUs), and the test for
 * whether a header field can be patched in place at the end.
 */
#ifndef TRACTD_BINIO_H
#define TRACTD_BINIO_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static inline void binio_put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static inline void binio_put_u16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static inline void binio_put_i16(unsigned char *p, int16_t v)
{
	binio_put_u16(p, (uint16_t)v);
}

static inline void binio_put_i32(unsigned char *p, int32_t v)
{
	binio_put_u32(p, (uint32_t)v);
}

static inline void binio_put_f32(unsigned char *p, float v)
{
	uint32_t u;

	memcpy(&u, &v, sizeof(u));
	binio_put_u32(p, u);
}

static inline void binio_put_u64(unsigned char *p, uint64_t v)
{
	binio_put_u32(p, (uint32_t)v);
	binio_put_u32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t binio_get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline int16_t binio_get_i16(const unsigned char *p)
{
	return (int16_t)(uint16_t)((uint32_t)p[0] | (uint32_t)p[1] << 8);
}

static inline float binio_get_f32(const unsigned char *p)
{
	uint32_t u = binio_get_u32(p);
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint64_t binio_get_u64(const unsigned char *p)
{
	return (uint64_t)binio_get_u32(p) | (uint64_t)binio_get_u32(p + 4) << 32;
}

/* Appends len bytes to a writer's buffer of cap bytes, *used of them
 * taken: a run that does not fit pushes the buffer to out first, and one
 * larger than the whole buffer goes to out as it is rather than through it.
 * Returns 0 or -EIO (the buffer's content is then lost). */
int binio_buffered_write(FILE *out, unsigned char *buf, size_t cap, size_t *used,
			 const unsigned char *bytes, size_t len);

/* The position of out when a field written there can later be patched in
 * place: the stream is seekable and not in append mode (whose writes would
 * land at the end). -1 otherwise. */
long binio_patch_position(FILE *out);

#endif
