/* SPDX-License-Identifier: MIT */
/*
 * half: IEEE 754 binary16 ("float16") encoding for the TRX writer's
 * float16 positions. Owns nothing; pure functions. Explicit bit arithmetic
 * rather than _Float16, whose support varies between compilers and targets.
 */
#ifndef TRACTD_HALF_H
#define TRACTD_HALF_H

#include <stdint.h>

/* The binary16 bits nearest to f, ties to even: values past the largest
 * finite half (65504) round to infinity, tiny ones to subnormals or a signed
 * zero; infinities keep their sign and NaNs stay (quiet) NaNs. */
uint16_t half_from_float(float f);

/* The exact float value of binary16 bits h (every half is a float). */
float half_to_float(uint16_t h);

#endif
