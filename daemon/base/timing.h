/* SPDX-License-Identifier: MIT */
/*
 * timing: the monotonic clock in seconds, for the phase timings that jobs,
 * the engine, the GPU context and the CLI report.
 */
#ifndef TRACTD_TIMING_H
#define TRACTD_TIMING_H

#include <time.h>

static inline double timing_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
