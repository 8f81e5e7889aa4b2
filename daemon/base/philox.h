/* SPDX-License-Identifier: MIT */
/*
 * philox: the Philox4x32-10 counter-based generator (Salmon et al. 2011),
 * bit-identical to shaders/philox.glsl, so host and GPU draw the same numbers.
 *
 * Every random number in tractd is a pure function of (key, counter): the key is
 * the job's rng_seed, the counter names what is drawn. Counter layout:
 *   c0 = draw index within the item, c1 = item index (low 32 bits),
 *   c2 = item index (high 32 bits) or a sub-stream, c3 = PHILOX_STREAM_*.
 * Output therefore does not depend on chunking, dispatch order or device count.
 */
#ifndef TRACTD_PHILOX_H
#define TRACTD_PHILOX_H

#include <stdint.h>

enum philox_stream {
	PHILOX_STREAM_SEED_ORDER = 1,   /* permutation of mask voxels */
	PHILOX_STREAM_SEED_JITTER = 2,  /* position of a seed inside its voxel */
	PHILOX_STREAM_PROB = 3,         /* prob getter: one uniform per step */
	PHILOX_STREAM_PHANTOM_NOISE = 4, /* phantom DWI noise (host only): one block per sample */
	PHILOX_STREAM_BOOT = 5,         /* boot getter: c3 = 5 | attempt << 8 | block << 16, one
					 * word per residual drawn (c0 = 0 at the seed) */
	PHILOX_STREAM_CMC = 7,          /* stopping cmc: one block per step (c0 step, c1 seed,
					 * c2 2 * direction + half) */
	PHILOX_STREAM_PFT = 8,          /* tracking.pft: resampling, one block per particle drawn
					 * (c0 = trial << 24 | step << 16 | particle, c1 seed,
					 * c2 2 * direction + half); shaders/pft.glsl */
	PHILOX_STREAM_PTT = 6,          /* ptt getter: c3 = 6 | candidate << 8 | phase << 24,
					 * one block per candidate curve (c0 = step, 0 at the seed) */
};

/* out = Philox4x32-10(counter, key). */
void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* Uniform float in [0,1) from one 32-bit output (top 24 bits). Same as GLSL. */
float philox_uniform_float(uint32_t x);

/* Key words from a 64-bit job seed. */
void philox_key_from_seed(uint64_t seed, uint32_t key[2]);

#endif
