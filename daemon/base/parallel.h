/* SPDX-License-Identifier: MIT */
/*
 * parallel: a piece of work split into independent parts, each run on a
 * thread of its own. Owns the threads for the length of a call, nothing
 * else: the parts' arguments are the caller's. A part whose thread cannot
 * be started runs on the calling thread instead, so the work always
 * completes, only more slowly. Does not log.
 */
#ifndef TRACTD_PARALLEL_H
#define TRACTD_PARALLEL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PARALLEL_MAX_PARTS 16

typedef void parallel_fn(void *arg);

struct parallel_call {
	parallel_fn *fn;
	void *arg;
};

/* Parts under way, from parallel_start() to parallel_finish(); the threads
 * read their calls from here. */
struct parallel {
	struct parallel_call call[PARALLEL_MAX_PARTS];
	pthread_t thread[PARALLEL_MAX_PARTS];
	bool started[PARALLEL_MAX_PARTS];
	parallel_fn *fn;
	char *args;
	size_t arg_size, n;
};

/* Starts fn(args + i * arg_size) for i < n, each on a thread, and returns
 * at once: the calling thread is free until parallel_finish(). Parts past
 * PARALLEL_MAX_PARTS wait for parallel_finish(), which runs them. */
void parallel_start(struct parallel *p, parallel_fn *fn, void *args, size_t arg_size, size_t n);

/* Waits for the parts, running those whose thread did not start. */
void parallel_finish(struct parallel *p);

/* parallel_start() of parts 1.. with part 0 on the calling thread, then
 * parallel_finish(). */
void parallel_run(parallel_fn *fn, void *args, size_t arg_size, size_t n);

/* How many parts to split `units` of work into so that each has at least
 * min_units: 1 to the online CPUs, at most PARALLEL_MAX_PARTS. */
size_t parallel_parts(uint64_t units, uint64_t min_units);

#endif
