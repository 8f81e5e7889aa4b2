/* SPDX-License-Identifier: MIT */
#include "base/philox.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_ROUNDS 10

static void mul_hi_lo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
	uint64_t product = (uint64_t)a * b;

	*hi = (uint32_t)(product >> 32);
	*lo = (uint32_t)product;
}

static void philox_round(uint32_t c[4], const uint32_t k[2])
{
	uint32_t hi0, lo0, hi1, lo1;

	mul_hi_lo(PHILOX_M0, c[0], &hi0, &lo0);
	mul_hi_lo(PHILOX_M1, c[2], &hi1, &lo1);
	c[0] = hi1 ^ c[1] ^ k[0];
	c[1] = lo1;
	c[2] = hi0 ^ c[3] ^ k[1];
	c[3] = lo0;
}

void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4])
{
	uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
	uint32_t k[2] = {key[0], key[1]};

	for (int round = 0; round < PHILOX_ROUNDS; round++) {
		if (round > 0) {
			k[0] += PHILOX_W0;
			k[1] += PHILOX_W1;
		}
		philox_round(c, k);
	}
	for (int i = 0; i < 4; i++)
		out[i] = c[i];
}

float philox_uniform_float(uint32_t x)
{
	return (float)(x >> 8) * 0x1p-24f;
}

void philox_key_from_seed(uint64_t seed, uint32_t key[2])
{
	key[0] = (uint32_t)seed;
	key[1] = (uint32_t)(seed >> 32);
}
