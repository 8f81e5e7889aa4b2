/* SPDX-License-Identifier: MIT */
/* Unit tests for jobs.c, the registry without a GPU: the fair scheduler's
 * order, a cancellation reaching the running job, a stop failing the queue
 * and interrupting the running job, and the per-owner cache counts. The
 * test plays the worker through jobs.h's functions for it. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/jobs.h"
#include "tmpdir.h"

struct fixture {
	char dir[64];
	struct jobs *jobs;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct jobs_config cfg = {
		.max_queued_jobs = 100, .max_queued_jobs_per_user = 10,
		.max_queued_bytes_per_user = 1 << 20, .spool_max_bytes = 1 << 30,
		.result_ttl_seconds = 3600,
	};
	struct errbuf err = { 0 };

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_jobs.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	cfg.state_dir = f->dir;
	assert_int_equal(jobs_start(&cfg, &f->jobs, &err), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	jobs_free(f->jobs);
	assert_int_equal(tmpdir_remove(f->dir), 0);
	free(f);
	return 0;
}

/* Queues an empty spec (the registry never reads it) for owner. */
static void submit(struct jobs *jobs, const char *owner, struct job_info *info)
{
	struct jobspec spec = { 0 };
	struct errbuf err = { 0 };

	assert_int_equal(jobs_submit(jobs, &spec, "{}", owner, NULL, info, &err), 0);
	assert_int_equal(info->state, JOB_QUEUED);
}

static void state_is(struct jobs *jobs, const char *id, enum job_state state)
{
	struct job_info info;

	assert_int_equal(jobs_get(jobs, id, &info), 0);
	assert_int_equal(info.state, state);
}

/* Takes the next job, which must be expected's, and ends it with r. */
static void run_next(struct jobs *jobs, const struct job_info *expected, int r)
{
	struct engine_stats stats = { .seeds = 10, .streamlines = 7 };
	struct errbuf err = { 0 };
	struct jobs_running run;

	assert_true(jobs_next(jobs, &run));
	assert_string_equal(run.id, expected->id);
	state_is(jobs, run.id, JOB_RUNNING);
	jobs_finish(jobs, run.job, r, &stats, &err);
}

/* Bob's one job goes before Alice's second: owners take turns, each
 * owner's jobs in order. */
static void test_owners_take_turns(void **state)
{
	struct fixture *f = *state;
	struct job_info a1, a2, b1;
	struct jobs_status st;

	submit(f->jobs, "alice", &a1);
	submit(f->jobs, "alice", &a2);
	submit(f->jobs, "bob", &b1);
	run_next(f->jobs, &a1, 0);
	run_next(f->jobs, &b1, 0);
	run_next(f->jobs, &a2, 0);
	state_is(f->jobs, a2.id, JOB_DONE);
	jobs_status(f->jobs, &st);
	assert_int_equal(st.done_total, 3);
	assert_int_equal(st.streamlines_total, 21);
	assert_int_equal(st.queued, 0);
}

/* A client's cancellation tells the worker to stop at its next report;
 * the job stays cancelled when the worker lets it go. */
static void test_cancel_reaches_the_worker(void **state)
{
	struct fixture *f = *state;
	struct engine_stats stats = { 0 };
	struct errbuf err = { 0 };
	struct job_info a, cancelled;
	struct jobs_running run;
	struct jobs_status st;

	submit(f->jobs, "alice", &a);
	assert_true(jobs_next(f->jobs, &run));
	assert_true(jobs_publish_stage(f->jobs, run.job, "load", 0.0));
	assert_int_equal(jobs_cancel(f->jobs, a.id, &cancelled), 0);
	assert_int_equal(cancelled.state, JOB_CANCELLED);
	assert_false(jobs_publish_progress(f->jobs, run.job, 1, 2, 1, 0));
	jobs_finish(f->jobs, run.job, -ECANCELED, &stats, &err);
	state_is(f->jobs, a.id, JOB_CANCELLED);
	jobs_status(f->jobs, &st);
	assert_int_equal(st.cancelled_total, 1);
}

/* Stopping fails the queued jobs, interrupts the running one and ends the
 * worker's loop. */
static void test_stop_fails_and_interrupts(void **state)
{
	struct fixture *f = *state;
	struct engine_stats stats = { 0 };
	struct errbuf err = { 0 };
	struct job_info a, b, info;
	struct jobs_running run;

	submit(f->jobs, "alice", &a);
	submit(f->jobs, "bob", &b);
	assert_true(jobs_next(f->jobs, &run));
	jobs_stop(f->jobs);
	assert_false(jobs_publish_stage(f->jobs, run.job, "track", 0.5));
	assert_int_equal(jobs_get(f->jobs, b.id, &info), 0);
	assert_int_equal(info.state, JOB_FAILED);
	assert_int_equal(info.error_code, -ESHUTDOWN);
	jobs_finish(f->jobs, run.job, -ECANCELED, &stats, &err);
	assert_int_equal(jobs_get(f->jobs, a.id, &info), 0);
	assert_int_equal(info.state, JOB_FAILED);
	assert_int_equal(info.error_code, -EINTR);
	assert_false(jobs_next(f->jobs, &run));
}

/* The cache's counts go to the owner whose job asked. */
static void test_cache_counts_per_owner(void **state)
{
	struct fixture *f = *state;
	struct engine_stats stats = { 0 };
	struct errbuf err = { 0 };
	struct job_info a;
	struct jobs_running run;
	uint64_t hits, misses;

	submit(f->jobs, "alice", &a);
	assert_true(jobs_next(f->jobs, &run));
	jobs_count_cache(f->jobs, "alice", false);
	jobs_count_cache(f->jobs, "alice", true);
	jobs_finish(f->jobs, run.job, 0, &stats, &err);
	jobs_owner_cache(f->jobs, "alice", &hits, &misses);
	assert_int_equal(hits, 1);
	assert_int_equal(misses, 1);
	jobs_owner_cache(f->jobs, "bob", &hits, &misses);
	assert_int_equal(hits + misses, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_owners_take_turns, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_reaches_the_worker, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_fails_and_interrupts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_counts_per_owner, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
