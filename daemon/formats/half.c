/* SPDX-License-Identifier: MIT */
/*
 * half: float <-> binary16 conversion (see half.h).
 */
#include "formats/half.h"

#include <string.h>

#define F32_ABS_MASK 0x7fffffffu
#define F32_EXP_INF 0x7f800000u
/* The float bits of 65520, half way between the largest finite half (65504)
 * and the next power of two: from here on, ties to even give infinity. */
#define F32_HALF_OVERFLOW 0x477ff000u
/* 2^-14, the smallest normal half. */
#define F32_HALF_MIN_NORMAL 0x38800000u
/* 2^-25, half the smallest subnormal: at or below it the result is zero
 * (2^-25 itself is a tie, and zero is the even neighbour). */
#define F32_HALF_ZERO_MAX 0x33000000u
/* Exponent bias difference (127 - 15) in place. */
#define F32_REBIAS 0x38000000u
#define HALF_INF 0x7c00u
#define HALF_QUIET 0x0200u

static uint32_t float_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float bits_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* v >> shift, rounded to nearest, ties to even; shift in [1, 31], v below
 * 2^31. A carry out of the mantissa lands in the exponent, which is what
 * rounding up to the next binade means in this encoding. Without branches:
 * adding just under half rounds up past the tie, and the kept bit's parity
 * decides the tie itself (a data-dependent branch here mispredicted on
 * about every other coordinate a TRX float16 writer encodes). */
static uint32_t shift_round_even(uint32_t v, unsigned shift)
{
	uint32_t below_half = (1u << (shift - 1)) - 1;

	return (v + below_half + ((v >> shift) & 1)) >> shift;
}

uint16_t half_from_float(float f)
{
	uint32_t x = float_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
	uint32_t a = x & F32_ABS_MASK;

	if (a > F32_EXP_INF) /* NaN: keep the top payload bits, force quiet */
		return (uint16_t)(sign | HALF_INF | HALF_QUIET | ((a >> 13) & 0x3ffu));
	if (a >= F32_HALF_OVERFLOW)
		return (uint16_t)(sign | HALF_INF);
	if (a >= F32_HALF_MIN_NORMAL)
		return (uint16_t)(sign | shift_round_even(a - F32_REBIAS, 13));
	if (a <= F32_HALF_ZERO_MAX)
		return sign;
	/* Subnormal half: the float is m * 2^(e - 150) with the implicit bit in
	 * m; in units of 2^-24 that is m >> (126 - e), with e in [103, 112]. */
	{
		uint32_t e = a >> 23;
		uint32_t m = (a & 0x7fffffu) | 0x800000u;
		return (uint16_t)(sign | shift_round_even(m, 126 - e));
	}
}

float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu;
	uint32_t m = h & 0x3ffu;

	if (e == 0x1f)
		return bits_float(sign | F32_EXP_INF | (m << 13));
	if (e != 0)
		return bits_float(sign | ((e + 112) << 23) | (m << 13));
	/* Zero or subnormal: m * 2^-24, exact in float. */
	return bits_float(sign | float_bits((float)m * 0x1p-24f));
}
