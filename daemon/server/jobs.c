/* SPDX-License-Identifier: MIT */
/*
 * jobs: the job registry: states, queue, fair scheduler, waits and spool
 * (see jobs.h). No GPU: the worker (worker.h) takes jobs from here and
 * reports back.
 *
 * Locking: `lock` guards the registry (jobs[], every job's public fields,
 * the counters and the cache statistics). The worker holds no lock while it
 * loads volumes and runs the engine; it reports back through the publishing
 * functions, which take the lock briefly, publish progress, wake followers
 * and return whether to go on.
 */
#include "server/jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/timing.h"
#include "server/spool.h"

/* The tractogram writers report any failed write as -EIO (stdio loses the
 * errno), so a failed output with less than this free in the spool is taken
 * for a full disk: what stdio could not write is one buffer, far less. */
#define SPOOL_FULL_BYTES (1u << 20)

struct job {
	struct job_info info;
	struct jobspec spec;        /* until the job ends */
	char *spec_json;            /* the job document as submitted, for its record;
				     * dropped once an ended job's record holds it */
	uint64_t record_bytes;      /* its record's size on disk, in spool_bytes */
	uint64_t doc_bytes;         /* of the document as submitted */
	bool record_stale;          /* its last record write failed (disk full): retried */
	bool cancel_requested;
	bool in_worker;             /* the worker holds it: only the worker may free it */
	bool deleted;               /* unlisted while the worker held it; freed when let go */
};

/* When an owner's latest job started, for fair scheduling. Kept apart from
 * the jobs so that deleting one's finished jobs does not erase one's turn. */
struct owner_turn {
	char owner[JOB_OWNER_LEN + 1];
	uint64_t last_start;        /* a jobs->start_clock value */
	uint64_t cache_hits, cache_misses;   /* this owner's, as jobs_count_cache counts */
};


struct jobs {
	struct jobs_config cfg;
	char spool_dir[1100];

	pthread_mutex_t lock;
	pthread_cond_t work;        /* a job was queued, or stopping */
	pthread_cond_t progress;    /* a job advanced or ended */
	bool stopping;

	struct job **jobs;          /* creation order */
	size_t n_jobs, cap_jobs;
	struct jobs_status status;  /* counters (queue depth is recomputed) */
	uint64_t start_clock;       /* counts jobs started, for fair scheduling */
	struct owner_turn *turns;   /* one per owner who ever had a job started */
	size_t n_turns;
};

static bool job_ended(const struct job *job)
{
	return job_state_ended(job->info.state);
}

static struct job *find_job(struct jobs *jobs, const char *id)
{
	for (size_t i = 0; i < jobs->n_jobs; i++)
		if (strcmp(jobs->jobs[i]->info.id, id) == 0)
			return jobs->jobs[i];
	return NULL;
}

static void result_path(const struct jobs *jobs, const char *id, char *path, size_t len)
{
	char name[JOB_ID_LEN + 32];

	spool_result_name(id, name, sizeof(name));
	snprintf(path, len, "%s/%s", jobs->spool_dir, name);
}

static void job_free(struct job *job)
{
	jobspec_free(&job->spec);
	free(job->spec_json);
	free(job);
}

static void spool_bytes_sub(struct jobs *jobs, uint64_t bytes)
{
	jobs->status.spool_bytes -= bytes < jobs->status.spool_bytes ? bytes
								      : jobs->status.spool_bytes;
}

/* Counts the job's record, as it is on disk now, in spool_bytes: records
 * hold job documents of up to max_request_bytes, so they are part of what
 * the spool takes. Lock held. */
static void count_record(struct jobs *jobs, struct job *job)
{
	char name[JOB_ID_LEN + 32], path[1200];
	struct stat st;

	spool_record_name(job->info.id, name, sizeof(name));
	snprintf(path, sizeof(path), "%s/%s", jobs->spool_dir, name);
	spool_bytes_sub(jobs, job->record_bytes);
	job->record_bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
	jobs->status.spool_bytes += job->record_bytes;
}

/* An ended job's document lives on in its record only: nothing runs it
 * again, and nothing writes its record again once that holds its outcome.
 * Kept while the record is stale, for the retry. */
static void drop_document(struct job *job)
{
	if (job_ended(job) && !job->record_stale) {
		free(job->spec_json);
		job->spec_json = NULL;
	}
}

/* Writes the job's record after it changed state. Called with the lock held,
 * so that a record never lands after the job's deletion removed it. A
 * failure is logged, not fatal: the job goes on in memory, and after a
 * restart it would read as interrupted. */
static void save_record(struct jobs *jobs, struct job *job)
{
	struct errbuf err = { 0 };

	job->record_stale = spool_record_write(jobs->spool_dir, &job->info, job->spec_json,
					       &err) < 0;
	if (job->record_stale)
		log_warn("job=%s cannot save its record (tried again at the next job's end): %s",
			 job->info.id, err.message);
	count_record(jobs, job);
	drop_document(job);
}

/* Records that could not be written (a full disk) are written when the next
 * job ends, when space may have returned: a finished job whose record still
 * said "running" would read as interrupted after a restart, and lose its
 * result. Lock held. */
static void save_stale_records(struct jobs *jobs)
{
	for (size_t i = 0; i < jobs->n_jobs; i++)
		if (jobs->jobs[i]->record_stale)
			save_record(jobs, jobs->jobs[i]);
}

/* ---- spool housekeeping -------------------------------------------------- */

static void remove_result(struct jobs *jobs, struct job *job)
{
	char path[1200];

	result_path(jobs, job->info.id, path, sizeof(path));
	if (unlink(path) == 0 || errno == ENOENT) {
		spool_bytes_sub(jobs, job->info.bytes);
		job->info.expired = true;
	}
}

/* Oldest finished results go first when they outlive the TTL or the spool is
 * over its size. Called with the lock held. */
static void expire_results(struct jobs *jobs)
{
	time_t now = time(NULL);

	for (size_t i = 0; i < jobs->n_jobs; i++) {
		struct job *job = jobs->jobs[i];
		bool too_old = (uint64_t)(now - job->info.finished) > jobs->cfg.result_ttl_seconds;
		bool too_big = jobs->status.spool_bytes > jobs->cfg.spool_max_bytes;

		if (job_ended(job) && !job->info.expired && (too_old || too_big)) {
			log_info("job=%s result expired (%s)", job->info.id,
				 too_old ? "age" : "spool size");
			remove_result(jobs, job);
		}
	}
}

static int make_dir(const char *path, struct errbuf *err)
{
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return errbuf_set(err, -errno, "state_dir", "cannot create %s: %s", path,
				  strerror(errno));
	return 0;
}

/* Failed and interrupted jobs have no result to serve: their partial file
 * goes at once, so that it neither fills the spool nor outlives a restart. */
static void drop_partial_result(struct jobs *jobs, struct job *job)
{
	char path[1200];

	result_path(jobs, job->info.id, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("job=%s cannot remove its partial result: %s", job->info.id,
			 strerror(errno));
	spool_bytes_sub(jobs, job->info.bytes);
	job->info.bytes = 0;
}

/* What a job stopped by the daemon's own stop (SIGTERM) or death (found at
 * the next start) reads as: failed, with the reason, never "cancelled",
 * which is what a client asked for. */
static void fail_interrupted(struct job *job, bool was_running)
{
	job->info.state = JOB_FAILED;
	job->info.finished = time(NULL);
	job->info.stage = NULL;
	job->info.error_code = -EINTR;
	errbuf_set_kind(&job->info.error, ERR_KIND_INTERRUPTED, -EINTR, "", "interrupted: the "
			"daemon stopped %s; submit it again", was_running
			? "while the job was running" : "before the job ran");
}

/* owner's record, or NULL if none of its jobs started yet. Lock held. */
static struct owner_turn *find_turn(struct jobs *jobs, const char *owner)
{
	for (size_t i = 0; i < jobs->n_turns; i++)
		if (strcmp(jobs->turns[i].owner, owner) == 0)
			return &jobs->turns[i];
	return NULL;
}

/* When owner's most recent job started (a start_clock value; 0: never). */
static uint64_t owner_last_start(struct jobs *jobs, const char *owner)
{
	const struct owner_turn *t = find_turn(jobs, owner);

	return t ? t->last_start : 0;
}

/* Records that one of owner's jobs starts now. Lock held. Out of memory,
 * the owner stays unrecorded and reads as never served: it may go first
 * once more, which is unfair to others by one job, not unsafe. */
static void note_start(struct jobs *jobs, const char *owner)
{
	struct owner_turn *grown, *t = find_turn(jobs, owner);
	uint64_t now = ++jobs->start_clock;

	if (t) {
		t->last_start = now;
		return;
	}
	grown = realloc(jobs->turns, sizeof(*grown) * (jobs->n_turns + 1));
	if (!grown)
		return;
	jobs->turns = grown;
	grown[jobs->n_turns] = (struct owner_turn){ .last_start = now };
	snprintf(grown[jobs->n_turns].owner, sizeof(grown[jobs->n_turns].owner), "%s", owner);
	jobs->n_turns++;
}

/* The next job to run, or NULL: round robin between owners (the owner
 * whose last job started longest ago goes first), FIFO within an owner.
 * Jobs are in creation order and only a strictly earlier turn replaces the
 * pick, so the winner is its owner's oldest queued job, and owners tied
 * (e.g. never served) go by their oldest job. Lock held; linear in the
 * registry times the owners, once per job start. */
static struct job *next_queued(struct jobs *jobs)
{
	struct job *best = NULL;
	uint64_t best_last = 0;

	for (size_t i = 0; i < jobs->n_jobs; i++) {
		struct job *job = jobs->jobs[i];
		uint64_t last;

		if (job->info.state != JOB_QUEUED)
			continue;
		last = owner_last_start(jobs, job->info.owner);
		if (!best || last < best_last) {
			best = job;
			best_last = last;
		}
	}
	return best;
}

/* ---- jobs of an earlier run ------------------------------------------------ */

static int add_job(struct jobs *jobs, struct job *job);

/* What a reloaded job becomes. Queued or running: the daemon died under it
 * (a stop by signal records the outcome), so it failed as interrupted and
 * its partial result goes. Done: its result is served again if the file is
 * whole. Failed or cancelled: nothing to serve, any file goes. */
static void restore_job(struct jobs *jobs, struct job *job)
{
	struct job_info *info = &job->info;
	char path[1200];
	struct stat st;

	result_path(jobs, info->id, path, sizeof(path));
	if (info->state == JOB_QUEUED || info->state == JOB_RUNNING) {
		fail_interrupted(job, info->state == JOB_RUNNING);
		info->bytes = 0;
		unlink(path);
		save_record(jobs, job);
		log_warn("job=%s was interrupted by the daemon's death: failed", info->id);
		return;
	}
	if (info->state == JOB_DONE && !info->expired) {
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == info->bytes) {
			jobs->status.spool_bytes += info->bytes;
			return;
		}
		log_warn("job=%s its result is missing or not of its recorded size: expired",
			 info->id);
		info->expired = true;
	}
	if (info->state != JOB_DONE)
		info->bytes = 0;
	unlink(path);
}

/* Reloads the records of the spool (before the worker starts: no lock
 * needed, but the helpers expect it held). */
static int restore_jobs(struct jobs *jobs, struct errbuf *err)
{
	struct spool_record *records;
	size_t n;
	int r = spool_load(jobs->spool_dir, &records, &n, err);

	if (r < 0)
		return r;
	pthread_mutex_lock(&jobs->lock);
	for (size_t i = 0; i < n && r == 0; i++) {
		struct job *job = calloc(1, sizeof(*job));

		if (!job || add_job(jobs, job) < 0) {
			free(job);
			r = errbuf_set(err, -ENOMEM, "", "out of memory");
			break;
		}
		job->info = records[i].info;
		job->spec_json = records[i].spec_json;   /* taken */
		records[i].spec_json = NULL;
		restore_job(jobs, job);
		count_record(jobs, job);
		drop_document(job);
	}
	if (r == 0) {
		expire_results(jobs);
		if (n)
			log_info("spool: %zu job(s) of an earlier run reloaded", n);
	}
	pthread_mutex_unlock(&jobs->lock);
	spool_records_free(records, n);
	return r;
}

/* ---- public API ----------------------------------------------------------- */

int jobs_start(const struct jobs_config *cfg, struct jobs **ret, struct errbuf *err)
{
	struct jobs *jobs = calloc(1, sizeof(*jobs));
	int r;

	if (!jobs)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	jobs->cfg = *cfg;
	pthread_mutex_init(&jobs->lock, NULL);
	pthread_cond_init(&jobs->work, NULL);
	pthread_cond_init(&jobs->progress, NULL);
	snprintf(jobs->spool_dir, sizeof(jobs->spool_dir), "%s/spool", cfg->state_dir);
	r = make_dir(cfg->state_dir, err);
	if (r == 0)
		r = make_dir(jobs->spool_dir, err);
	if (r == 0)
		r = restore_jobs(jobs, err);
	if (r < 0) {
		jobs_free(jobs);
		return r;
	}
	*ret = jobs;
	return 0;
}

void jobs_stop(struct jobs *jobs)
{
	if (!jobs)
		return;
	pthread_mutex_lock(&jobs->lock);
	jobs->stopping = true;
	for (size_t i = 0; i < jobs->n_jobs; i++) {
		struct job *job = jobs->jobs[i];
		if (job->info.state == JOB_QUEUED) {
			job->info.state = JOB_FAILED;
			job->info.finished = time(NULL);
			job->info.error_code = -ESHUTDOWN;
			errbuf_set_kind(&job->info.error, ERR_KIND_SHUTDOWN, -ESHUTDOWN, "",
					"the daemon stopped before the job ran");
			save_record(jobs, job);
		}
	}
	pthread_cond_broadcast(&jobs->work);
	pthread_cond_broadcast(&jobs->progress);
	pthread_mutex_unlock(&jobs->lock);
}

void jobs_free(struct jobs *jobs)
{
	if (!jobs)
		return;
	jobs_stop(jobs);
	for (size_t i = 0; i < jobs->n_jobs; i++)
		job_free(jobs->jobs[i]);
	free(jobs->jobs);
	free(jobs->turns);
	pthread_cond_destroy(&jobs->progress);
	pthread_cond_destroy(&jobs->work);
	pthread_mutex_destroy(&jobs->lock);
	free(jobs);
}

static int new_job_id(char id[JOB_ID_LEN + 1])
{
	unsigned char raw[8];

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return -EIO;
	snprintf(id, JOB_ID_LEN + 1, "j-%02x%02x%02x%02x%02x%02x%02x%02x", raw[0], raw[1], raw[2],
		 raw[3], raw[4], raw[5], raw[6], raw[7]);
	return 0;
}

static uint64_t count_state(const struct jobs *jobs, enum job_state state)
{
	uint64_t n = 0;

	for (size_t i = 0; i < jobs->n_jobs; i++)
		n += jobs->jobs[i]->info.state == state;
	return n;
}

static uint64_t count_queued_of(const struct jobs *jobs, const char *owner)
{
	uint64_t n = 0;

	for (size_t i = 0; i < jobs->n_jobs; i++)
		n += jobs->jobs[i]->info.state == JOB_QUEUED &&
		     strcmp(jobs->jobs[i]->info.owner, owner) == 0;
	return n;
}

/* What owner's queued jobs hold in memory grows with their documents (the
 * text, and the parsed seed points): bounded per owner, as their number is. */
static uint64_t queued_bytes_of(const struct jobs *jobs, const char *owner)
{
	uint64_t n = 0;

	for (size_t i = 0; i < jobs->n_jobs; i++)
		if (jobs->jobs[i]->info.state == JOB_QUEUED &&
		    strcmp(jobs->jobs[i]->info.owner, owner) == 0)
			n += jobs->jobs[i]->doc_bytes;
	return n;
}

static int add_job(struct jobs *jobs, struct job *job)
{
	if (jobs->n_jobs == jobs->cap_jobs) {
		size_t cap = jobs->cap_jobs ? 2 * jobs->cap_jobs : 64;
		struct job **grown = realloc(jobs->jobs, sizeof(*grown) * cap);
		if (!grown)
			return -ENOMEM;
		jobs->jobs = grown;
		jobs->cap_jobs = cap;
	}
	jobs->jobs[jobs->n_jobs++] = job;
	return 0;
}

int jobs_submit(struct jobs *jobs, struct jobspec *spec, const char *spec_json, const char *owner,
		const struct job_timing *arrival, struct job_info *ret, struct errbuf *err)
{
	struct job *job = calloc(1, sizeof(*job));
	int r;

	if (!job) {
		jobspec_free(spec);
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	}
	job->spec = *spec;
	memset(spec, 0, sizeof(*spec));
	if (spec_json && !(job->spec_json = strdup(spec_json))) {
		job_free(job);
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	}
	job->doc_bytes = spec_json ? strlen(spec_json) : 0;
	job->info.format = job->spec.output_format;
	job->info.state = JOB_QUEUED;
	job->info.created = time(NULL);
	if (arrival)
		job->info.timing = *arrival;
	snprintf(job->info.owner, sizeof(job->info.owner), "%s", owner);
	r = new_job_id(job->info.id);
	pthread_mutex_lock(&jobs->lock);
	if (r < 0)
		r = errbuf_set(err, r, "", "cannot draw a job id");
	else if (jobs->stopping)
		r = errbuf_set(err, -ESHUTDOWN, "", "the daemon is stopping");
	else if (count_state(jobs, JOB_QUEUED) >= jobs->cfg.max_queued_jobs)
		r = errbuf_set(err, -EAGAIN, "", "%llu jobs are queued already (max_queued_jobs)",
			       (unsigned long long)jobs->cfg.max_queued_jobs);
	else if (count_queued_of(jobs, job->info.owner) >= jobs->cfg.max_queued_jobs_per_user)
		r = errbuf_set(err, -EAGAIN, "", "%s has %llu jobs queued already "
			       "(max_queued_jobs_per_user)", job->info.owner,
			       (unsigned long long)jobs->cfg.max_queued_jobs_per_user);
	else if (queued_bytes_of(jobs, job->info.owner) + job->doc_bytes >
		 jobs->cfg.max_queued_bytes_per_user)
		r = errbuf_set(err, -EAGAIN, "", "the job documents of %s's queued jobs would take "
			       "more than %llu bytes (max_queued_bytes_per_user)", job->info.owner,
			       (unsigned long long)jobs->cfg.max_queued_bytes_per_user);
	/* Recorded before it is listed: a job the client was told about is
	 * never lost by a crash of the process (a power cut may lose it: see
	 * spool_record_write). A full disk refuses the job rather than run
	 * one whose result could not be kept. */
	else
		r = spool_record_write(jobs->spool_dir, &job->info, job->spec_json, err);
	if (r == 0 && add_job(jobs, job) < 0) {
		spool_record_remove(jobs->spool_dir, job->info.id);
		r = errbuf_set(err, -ENOMEM, "", "out of memory");
	}
	if (r == 0) {
		count_record(jobs, job);
		job->info.timing.at[JOB_EVENT_QUEUED] = timing_now();
		*ret = job->info;
		log_info("job=%s queued owner=%s", job->info.id, job->info.owner);
		pthread_cond_signal(&jobs->work);
	}
	pthread_mutex_unlock(&jobs->lock);
	if (r < 0) {
		job_free(job);
		return r;
	}
	return 0;
}

int jobs_get(struct jobs *jobs, const char *id, struct job_info *ret)
{
	struct job *job;
	int r = -ENOENT;

	pthread_mutex_lock(&jobs->lock);
	job = find_job(jobs, id);
	if (job) {
		*ret = job->info;
		r = 0;
	}
	pthread_mutex_unlock(&jobs->lock);
	return r;
}

int jobs_list(struct jobs *jobs, struct job_info **ret, size_t *n)
{
	struct job_info *list;

	pthread_mutex_lock(&jobs->lock);
	list = malloc(sizeof(*list) * (jobs->n_jobs ? jobs->n_jobs : 1));
	if (list)
		for (size_t i = 0; i < jobs->n_jobs; i++)
			list[i] = jobs->jobs[jobs->n_jobs - 1 - i]->info;
	*n = jobs->n_jobs;
	pthread_mutex_unlock(&jobs->lock);
	if (!list)
		return -ENOMEM;
	*ret = list;
	return 0;
}

static void delete_job(struct jobs *jobs, struct job *job)
{
	for (size_t i = 0; i < jobs->n_jobs; i++) {
		if (jobs->jobs[i] == job) {
			memmove(&jobs->jobs[i], &jobs->jobs[i + 1],
				sizeof(*jobs->jobs) * (jobs->n_jobs - i - 1));
			jobs->n_jobs--;
			break;
		}
	}
	remove_result(jobs, job);
	spool_record_remove(jobs->spool_dir, job->info.id);
	spool_bytes_sub(jobs, job->record_bytes);
	job->record_bytes = 0;
	if (job->in_worker) {
		job->deleted = true;
		return;
	}
	job_free(job);
}

int jobs_cancel(struct jobs *jobs, const char *id, struct job_info *ret)
{
	struct job *job;
	int r;

	pthread_mutex_lock(&jobs->lock);
	job = find_job(jobs, id);
	if (!job) {
		r = -ENOENT;
	} else if (job_ended(job)) {
		log_info("job=%s deleted owner=%s", id, job->info.owner);
		delete_job(jobs, job);
		r = 1;
	} else {
		/* A running job stops at its next chunk; it reads as cancelled now. */
		if (job->info.state == JOB_QUEUED)
			jobspec_free(&job->spec);
		job->cancel_requested = true;
		job->info.state = JOB_CANCELLED;
		job->info.finished = time(NULL);
		jobs->status.cancelled_total++;
		/* A running job's record is written again when the worker lets it go. */
		if (!job->in_worker)
			save_record(jobs, job);
		log_info("job=%s cancelled owner=%s", id, job->info.owner);
		pthread_cond_broadcast(&jobs->progress);
		*ret = job->info;
		r = 0;
	}
	pthread_mutex_unlock(&jobs->lock);
	return r;
}

int jobs_wait(struct jobs *jobs, const char *id, uint64_t have_bytes, int timeout_ms,
	      struct job_info *ret)
{
	struct timespec deadline;
	struct job *job;
	int r = 0;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&jobs->lock);
	for (;;) {
		job = find_job(jobs, id);
		if (!job) {
			r = -ENOENT;
			break;
		}
		if (job->info.bytes > have_bytes || job_ended(job) ||
		    pthread_cond_timedwait(&jobs->progress, &jobs->lock, &deadline) == ETIMEDOUT) {
			*ret = job->info;
			break;
		}
	}
	pthread_mutex_unlock(&jobs->lock);
	return r;
}

int jobs_result_path(struct jobs *jobs, const char *id, char *path, size_t len)
{
	result_path(jobs, id, path, len);
	return 0;
}

void jobs_owner_cache(struct jobs *jobs, const char *owner, uint64_t *hits, uint64_t *misses)
{
	const struct owner_turn *t;

	pthread_mutex_lock(&jobs->lock);
	t = find_turn(jobs, owner);
	*hits = t ? t->cache_hits : 0;
	*misses = t ? t->cache_misses : 0;
	pthread_mutex_unlock(&jobs->lock);
}

void jobs_status(struct jobs *jobs, struct jobs_status *ret)
{
	pthread_mutex_lock(&jobs->lock);
	*ret = jobs->status;
	ret->queued = count_state(jobs, JOB_QUEUED);
	ret->running = count_state(jobs, JOB_RUNNING);
	pthread_mutex_unlock(&jobs->lock);
}

void jobs_expire(struct jobs *jobs)
{
	pthread_mutex_lock(&jobs->lock);
	expire_results(jobs);
	pthread_mutex_unlock(&jobs->lock);
}


/* ---- for the worker ------------------------------------------------------- */

bool jobs_wait_queued(struct jobs *jobs, double seconds)
{
	struct timespec until;
	bool ready;
	int r = 0;

	/* jobs->work waits on the default clock, CLOCK_REALTIME. */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)seconds;
	until.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&jobs->lock);
	while (!jobs->stopping && !next_queued(jobs) && r != ETIMEDOUT)
		r = pthread_cond_timedwait(&jobs->work, &jobs->lock, &until);
	ready = jobs->stopping || next_queued(jobs);
	pthread_mutex_unlock(&jobs->lock);
	return ready;
}

bool jobs_next(struct jobs *jobs, struct jobs_running *ret)
{
	struct job *job = NULL;

	pthread_mutex_lock(&jobs->lock);
	while (!jobs->stopping && !(job = next_queued(jobs)))
		pthread_cond_wait(&jobs->work, &jobs->lock);
	if (jobs->stopping) {
		pthread_mutex_unlock(&jobs->lock);
		return false;
	}
	job->info.state = JOB_RUNNING;
	job->info.started = time(NULL);
	note_start(jobs, job->info.owner);
	job->in_worker = true;
	/* So that a restart after a crash knows the job had begun. */
	save_record(jobs, job);
	job->info.timing.at[JOB_EVENT_STARTED] = timing_now();
	pthread_cond_broadcast(&jobs->progress);
	pthread_mutex_unlock(&jobs->lock);
	*ret = (struct jobs_running){ job, job->info.id, job->info.owner, &job->spec };
	return true;
}

/* With the lock held, after the job's progress changed: wakes its
 * followers and says whether the job should go on. */
static bool progress_published(struct jobs *jobs, const struct job *job)
{
	pthread_cond_broadcast(&jobs->progress);
	return !job->cancel_requested && !jobs->stopping;
}

bool jobs_publish_stage(struct jobs *jobs, struct job *job, const char *stage, double fraction)
{
	bool go_on;

	pthread_mutex_lock(&jobs->lock);
	job->info.stage = stage;
	job->info.stage_fraction = fraction;
	go_on = progress_published(jobs, job);
	pthread_mutex_unlock(&jobs->lock);
	return go_on;
}

void jobs_publish_seeds(struct jobs *jobs, struct job *job, uint64_t seeds_total)
{
	pthread_mutex_lock(&jobs->lock);
	job->info.seeds_total = seeds_total;
	pthread_mutex_unlock(&jobs->lock);
}

bool jobs_publish_progress(struct jobs *jobs, struct job *job, uint64_t done, uint64_t total,
			   uint64_t streamlines, long result_bytes)
{
	bool go_on;

	pthread_mutex_lock(&jobs->lock);
	job->info.stage = "track";
	job->info.stage_fraction = total ? (double)done / (double)total : 1.0;
	job->info.seeds_done = done;
	job->info.seeds_total = total;
	job->info.streamlines = streamlines;
	if (result_bytes > 0 && !job->deleted) {
		jobs->status.spool_bytes += (uint64_t)result_bytes - job->info.bytes;
		job->info.bytes = (uint64_t)result_bytes;
		if (!job->info.timing.at[JOB_EVENT_FIRST_OUTPUT])
			job->info.timing.at[JOB_EVENT_FIRST_OUTPUT] = timing_now();
	}
	go_on = progress_published(jobs, job);
	pthread_mutex_unlock(&jobs->lock);
	return go_on;
}

void jobs_mark(struct jobs *jobs, struct job *job, enum job_event event, double at)
{
	pthread_mutex_lock(&jobs->lock);
	job->info.timing.at[event] = at;
	pthread_mutex_unlock(&jobs->lock);
}

void jobs_set_host_peak(struct jobs *jobs, struct job *job, uint64_t bytes)
{
	pthread_mutex_lock(&jobs->lock);
	job->info.host_peak_bytes = bytes;
	pthread_mutex_unlock(&jobs->lock);
}

void jobs_finish(struct jobs *jobs, struct job *job, int r, const struct engine_stats *stats,
		 const struct errbuf *err)
{
	struct job_info ended;
	char path[1200];
	struct stat st;

	result_path(jobs, job->info.id, path, sizeof(path));
	pthread_mutex_lock(&jobs->lock);
	job->in_worker = false;
	if (job->deleted) {
		/* Deleted by a client while it ran: no longer listed, nobody else holds it. */
		unlink(path);
		pthread_mutex_unlock(&jobs->lock);
		log_info("job=%s stopped and deleted owner=%s", job->info.id, job->info.owner);
		job_free(job);
		return;
	}
	if (stat(path, &st) == 0) {
		jobs->status.spool_bytes += (uint64_t)st.st_size - job->info.bytes;
		job->info.bytes = (uint64_t)st.st_size;
	}
	job->info.stage = NULL;
	if (job->info.state == JOB_CANCELLED) {
		/* Cancelled by a client while it ran: already counted and answered. */
	} else if (r == 0) {
		job->info.finished = time(NULL);
		job->info.state = JOB_DONE;
		job->info.stats = *stats;
		job->info.streamlines = stats->streamlines;
		job->info.points = stats->points;
		jobs->status.done_total++;
		jobs->status.seeds_total += stats->seeds;
		jobs->status.streamlines_total += stats->streamlines;
		jobs->status.track_seconds_total += stats->track_seconds;
	} else if (r == -ECANCELED && jobs->stopping) {
		fail_interrupted(job, true);
		jobs->status.failed_total++;
		drop_partial_result(jobs, job);
	} else if (r == -ECANCELED) {
		job->info.finished = time(NULL);
		job->info.state = JOB_CANCELLED;
		jobs->status.cancelled_total++;
	} else {
		job->info.finished = time(NULL);
		job->info.state = JOB_FAILED;
		job->info.error_code = r;
		job->info.error = *err;
		jobs->status.failed_total++;
		drop_partial_result(jobs, job);
	}
	jobspec_free(&job->spec);
	save_record(jobs, job);
	save_stale_records(jobs);
	expire_results(jobs);
	job->info.timing.at[JOB_EVENT_DONE] = timing_now();
	pthread_cond_broadcast(&jobs->progress);
	/* A copy for the log: once unlocked, a client may delete the job. */
	ended = job->info;
	pthread_mutex_unlock(&jobs->lock);
	if (ended.state == JOB_DONE)
		log_info("job=%s done owner=%s: %llu streamlines from %llu seeds, track %.3f s",
			 ended.id, ended.owner, (unsigned long long)stats->streamlines,
			 (unsigned long long)stats->seeds, stats->track_seconds);
	else if (ended.state == JOB_CANCELLED)
		log_info("job=%s cancelled owner=%s", ended.id, ended.owner);
	else
		log_info("job=%s failed owner=%s: %s%s%s", ended.id, ended.owner, ended.error.field,
			 ended.error.field[0] ? ": " : "", ended.error.message);
}

void jobs_count_cache(struct jobs *jobs, const char *owner, bool hit)
{
	struct owner_turn *t;

	pthread_mutex_lock(&jobs->lock);
	/* The job's start recorded its owner's turn (unless out of memory). */
	t = find_turn(jobs, owner);
	if (hit) {
		jobs->status.cache_hits++;
		if (t)
			t->cache_hits++;
	} else {
		jobs->status.cache_misses++;
		if (t)
			t->cache_misses++;
	}
	pthread_mutex_unlock(&jobs->lock);
}

void jobs_set_cache_usage(struct jobs *jobs, uint64_t entries, uint64_t bytes,
			  uint64_t host_bytes)
{
	pthread_mutex_lock(&jobs->lock);
	jobs->status.cache_entries = entries;
	jobs->status.cache_bytes = bytes;
	jobs->status.cache_host_bytes = host_bytes;
	pthread_mutex_unlock(&jobs->lock);
}

void jobs_set_spare_bytes(struct jobs *jobs, uint64_t bytes)
{
	pthread_mutex_lock(&jobs->lock);
	jobs->status.gpu_spare_bytes = bytes;
	pthread_mutex_unlock(&jobs->lock);
}

void jobs_set_devices(struct jobs *jobs, const struct gpu_limits *first, size_t n_devices,
		      uint64_t cache_budget, uint64_t job_budget)
{
	pthread_mutex_lock(&jobs->lock);
	jobs->status.device = *first;
	jobs->status.devices = n_devices;
	jobs->status.cache_budget = cache_budget;
	jobs->status.job_budget = job_budget;
	pthread_mutex_unlock(&jobs->lock);
}

static bool spool_is_full(const struct jobs *jobs)
{
	struct statvfs st;

	return statvfs(jobs->spool_dir, &st) == 0 &&
	       (uint64_t)st.f_bavail * st.f_frsize < SPOOL_FULL_BYTES;
}

/* A write of the result that failed for want of space becomes the client's
 * error "insufficient_storage" (field "output"), whatever the writer said. */
int jobs_check_spool_full(struct jobs *jobs, int r, int write_errno, struct errbuf *err)
{
	/* By kind, not code: the GPU reports its own memory running out as -ENOSPC. */
	bool output = err->kind == ERR_KIND_OUTPUT;

	if (r >= 0 || r == -ECANCELED || !output ||
	    !(write_errno == ENOSPC || write_errno == EDQUOT || spool_is_full(jobs)))
		return r;
	return errbuf_set_kind(err, ERR_KIND_STORAGE, -ENOSPC, "output", "the result spool is "
			       "full (no space left in the state_dir): the partial result was "
			       "removed; submit the job again once space is freed");
}

