/* SPDX-License-Identifier: MIT */
#include "base/parallel.h"

#include <unistd.h>

static void *run_call(void *arg)
{
	struct parallel_call *call = arg;

	call->fn(call->arg);
	return NULL;
}

static size_t threaded_parts(const struct parallel *p)
{
	return p->n < PARALLEL_MAX_PARTS ? p->n : PARALLEL_MAX_PARTS;
}

static void set_calls(struct parallel *p, parallel_fn *fn, void *args, size_t arg_size, size_t n)
{
	p->fn = fn;
	p->args = args;
	p->arg_size = arg_size;
	p->n = n;
	for (size_t i = 0; i < threaded_parts(p); i++) {
		p->call[i] = (struct parallel_call){ fn, p->args + i * arg_size };
		p->started[i] = false;
	}
}

static void start_from(struct parallel *p, size_t first)
{
	for (size_t i = first; i < threaded_parts(p); i++)
		p->started[i] = pthread_create(&p->thread[i], NULL, run_call, &p->call[i]) == 0;
}

/* Joins the threads of parts first.., runs those that did not start and
 * those past PARALLEL_MAX_PARTS. */
static void finish_from(struct parallel *p, size_t first)
{
	for (size_t i = first; i < threaded_parts(p); i++) {
		if (p->started[i])
			pthread_join(p->thread[i], NULL);
		else
			run_call(&p->call[i]);
		p->started[i] = false;
	}
	for (size_t i = PARALLEL_MAX_PARTS; i < p->n; i++)
		p->fn(p->args + i * p->arg_size);
}

void parallel_start(struct parallel *p, parallel_fn *fn, void *args, size_t arg_size, size_t n)
{
	set_calls(p, fn, args, arg_size, n);
	start_from(p, 0);
}

void parallel_finish(struct parallel *p)
{
	finish_from(p, 0);
}

void parallel_run(parallel_fn *fn, void *args, size_t arg_size, size_t n)
{
	struct parallel p;

	set_calls(&p, fn, args, arg_size, n);
	if (p.n == 0)
		return;
	start_from(&p, 1);
	run_call(&p.call[0]);
	finish_from(&p, 1);
}

size_t parallel_parts(uint64_t units, uint64_t min_units)
{
	uint64_t n = min_units ? units / min_units : units;
	long cpus;

	/* Small uploads and seed fills, several a batch, end here: glibc reads
	 * the CPU count from a file in /sys. */
	if (n <= 1)
		return 1;
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	n = cpus > 0 && n > (uint64_t)cpus ? (uint64_t)cpus : n;
	return n > PARALLEL_MAX_PARTS ? PARALLEL_MAX_PARTS : (size_t)n;
}
