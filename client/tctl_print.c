/* SPDX-License-Identifier: MIT */
/*
 * tctl_print: what people read of the daemon's documents (proto/API.md): a
 * job, the job list, the volume list, the device, the progress line (with
 * the stage of a job that fits its model, and the time left of tracking),
 * and the one-line descriptions that summaries and errors are made of;
 * --json output too.
 * Members that are missing or of another type read as absent (or 0), so a
 * newer daemon that adds or drops members still prints. Write errors on
 * standard output are caught once, when main flushes it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tctl.h"
#include "tctl_msg.h"
#include "tctl_print.h"

#define BAR_WIDTH 20
/* The time left is estimated from the pace after this much tracking, so
 * that its first chunk (or a poll that came right after it) does not promise
 * what the rest does not keep. */
#define MIN_PACE_SECONDS 1.0

static const char *text_of(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

static unsigned long long count_of(const json_t *obj, const char *key)
{
	json_int_t v = json_integer_value(json_object_get(obj, key));

	return v > 0 ? (unsigned long long)v : 0;
}

static bool status_is(const json_t *job, const char *status)
{
	const char *s = text_of(job, "status");

	return s && strcmp(s, status) == 0;
}

bool job_has_ended(const json_t *job)
{
	return status_is(job, "done") || status_is(job, "failed") || status_is(job, "cancelled");
}

bool describe_error(const json_t *error, char *buf, size_t len)
{
	const char *field = text_of(error, "field"), *message = text_of(error, "message");

	if (!message || !*message)
		message = text_of(error, "code");
	if (!message || !*message)
		return false;
	if (field && *field)
		snprintf(buf, len, "%s: %s", field, message);
	else
		snprintf(buf, len, "%s", message);
	return true;
}

void describe_result(const json_t *job, char *buf, size_t len)
{
	const json_t *result = json_object_get(job, "result");

	snprintf(buf, len, "%llu streamlines (%llu points) from %llu seeds",
		 count_of(result, "streamlines"), count_of(result, "points"),
		 count_of(json_object_get(job, "progress"), "seeds_total"));
}

/* "4000 of 10000 seeds (40%), 4431 streamlines" */
static void describe_progress(const json_t *progress, char *buf, size_t len)
{
	unsigned long long done = count_of(progress, "seeds_done");
	unsigned long long total = count_of(progress, "seeds_total");

	snprintf(buf, len, "%llu of %llu seeds (%llu%%), %llu streamlines", done, total,
		 total ? 100 * done / total : 0, count_of(progress, "streamlines"));
}

/* What the daemon does before tracking (API.md, progress.stage), as people
 * say it. */
static const char *stage_label(const char *stage)
{
	static const struct {
		const char *stage, *label;
	} labels[] = {
		{ "compile", "compiling the GPU kernels (first run of this configuration)" },
		{ "load", "loading the inputs" },
		{ "dti", "fitting DTI" },
		{ "response", "estimating the response" },
		{ "csd", "fitting CSD" },
		{ "odf", "sampling the ODF" },
	};

	for (size_t i = 0; i < sizeof(labels) / sizeof(labels[0]); i++)
		if (strcmp(stage, labels[i].stage) == 0)
			return labels[i].label;
	return stage;
}

/* "fitting CSD 40 %" for a running job in a stage before tracking; false
 * when it tracks or is not running (the seeds then tell its progress). */
static bool describe_stage(const json_t *job, char *buf, size_t len)
{
	const json_t *progress = json_object_get(job, "progress");
	const char *stage = text_of(progress, "stage");

	if (!status_is(job, "running") || !stage || strcmp(stage, "track") == 0)
		return false;
	/* Compiling has no measure of how far it is. */
	if (strcmp(stage, "compile") == 0)
		snprintf(buf, len, "%s", stage_label(stage));
	else
		snprintf(buf, len, "%s %d %%", stage_label(stage),
			 (int)(100.0 * json_number_value(json_object_get(progress, "stage_fraction"))));
	return true;
}

/* "0:07", "1:02:03" */
static void format_elapsed(double seconds, char *buf, size_t len)
{
	unsigned long s = seconds > 0 ? (unsigned long)seconds : 0;

	if (s >= 3600)
		snprintf(buf, len, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
	else
		snprintf(buf, len, "%lu:%02lu", s / 60, s % 60);
}

/* " ETA 0:12" for tracking done to fraction (0..1) at elapsed seconds, from
 * its pace since pace first saw it track; "" until that can be told. Only
 * tracking is estimated: the fit stages before it take times that their
 * first one does not tell. */
static void estimate_time_left(struct progress_pace *pace, double fraction, double elapsed,
			       char *buf, size_t len)
{
	char clock[32];
	double seconds = elapsed - pace->since;

	buf[0] = '\0';
	if (!pace->tracking) {
		pace->tracking = true;
		pace->since = elapsed;
		pace->fraction = fraction;
		return;
	}
	if (seconds < MIN_PACE_SECONDS || fraction <= pace->fraction || fraction > 1.0)
		return;
	format_elapsed(seconds * (1.0 - fraction) / (fraction - pace->fraction), clock,
		       sizeof(clock));
	snprintf(buf, len, " ETA %s", clock);
}

void show_job_progress(const json_t *job, double elapsed_seconds, struct progress_pace *pace)
{
	const json_t *progress = json_object_get(job, "progress");
	unsigned long long done = count_of(progress, "seeds_done");
	unsigned long long total = count_of(progress, "seeds_total");
	const char *id = text_of(job, "id"), *status = text_of(job, "status");
	char bar[BAR_WIDTH + 1], clock[32], left[48], stage[128];
	size_t filled;

	if (!msg_progress_enabled())
		return;
	format_elapsed(elapsed_seconds, clock, sizeof(clock));
	if (describe_stage(job, stage, sizeof(stage))) {
		/* Before tracking: loading, or fitting the model for raw DWI inputs. */
		msg_progress("%s running: %s %s", id ? id : "job", stage, clock);
		return;
	}
	if (!status_is(job, "running") || total == 0 || done > total) {
		msg_progress("%s %s %s", id ? id : "job", status ? status : "", clock);
		return;
	}
	estimate_time_left(pace, (double)done / (double)total, elapsed_seconds, left, sizeof(left));
	filled = (size_t)(BAR_WIDTH * done / total);
	memset(bar, '#', filled);
	memset(bar + filled, '.', BAR_WIDTH - filled);
	bar[BAR_WIDTH] = '\0';
	msg_progress("[%s] %3llu%% %s%s  %llu/%llu seeds, %llu streamlines  %s", bar,
		     100 * done / total, clock, left, done, total,
		     count_of(progress, "streamlines"), id ? id : "");
}

static void print_member_line(const char *label, const char *text)
{
	printf("%-9s %s\n", label, text);
}

/* "load 0.120 s, upload 0.031 s, ...", in the daemon's order. */
static void print_seconds(json_t *seconds)
{
	const char *phase;
	json_t *value;
	const char *separator = "";

	if (!json_is_object(seconds))
		return;
	printf("%-9s ", "seconds");
	json_object_foreach(seconds, phase, value) {
		if (json_is_number(value)) {
			printf("%s%s %.3f", separator, phase, json_number_value(value));
			separator = ", ";
		}
	}
	putchar('\n');
}

/* "stopped   stop_map 0, outside 32, ... (streamline ends); 0 seeds without
 * direction", the reasons in the daemon's order. */
static void print_stop_reasons(const json_t *result)
{
	json_t *reasons = json_object_get(result, "stop_reasons");
	const char *reason;
	json_t *value;
	const char *separator = "";

	if (!json_is_object(reasons))
		return;
	printf("%-9s ", "stopped");
	json_object_foreach(reasons, reason, value) {
		if (json_is_integer(value)) {
			printf("%s%s %llu", separator, reason, count_of(reasons, reason));
			separator = ", ";
		}
	}
	printf(" (streamline ends); %llu seeds without direction\n",
	       count_of(result, "seeds_without_direction"));
}

static void print_result(const json_t *job)
{
	const json_t *result = json_object_get(job, "result");
	char size[MSG_SIZE_LEN], line[256];

	if (!json_is_object(result))
		return;
	snprintf(line, sizeof(line), "%llu streamlines, %llu points, %s",
		 count_of(result, "streamlines"), count_of(result, "points"),
		 msg_size(count_of(result, "bytes"), size));
	print_member_line("result", line);
	print_stop_reasons(result);
}

void print_job(const json_t *job)
{
	static const char *const times[] = { "created", "started", "finished" };
	const json_t *progress = json_object_get(job, "progress");
	char line[1024];

	print_member_line("id", text_of(job, "id") ? text_of(job, "id") : "?");
	/* Who submitted it: worth showing where an admin sees everyone's jobs. */
	if (text_of(job, "owner"))
		print_member_line("owner", text_of(job, "owner"));
	print_member_line("status", text_of(job, "status") ? text_of(job, "status") : "?");
	for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++)
		if (text_of(job, times[i]))
			print_member_line(times[i], text_of(job, times[i]));
	if (describe_stage(job, line, sizeof(line))) {
		print_member_line("progress", line);
	} else if (json_is_object(progress)) {
		describe_progress(progress, line, sizeof(line));
		print_member_line("progress", line);
	}
	print_result(job);
	print_seconds(json_object_get(job, "seconds"));
	if (describe_error(json_object_get(job, "error"), line, sizeof(line)))
		print_member_line("error", line);
}

/* The last column of `list`: what is most worth knowing in each state. */
static void describe_briefly(const json_t *job, char *buf, size_t len)
{
	const json_t *result = json_object_get(job, "result");
	char size[MSG_SIZE_LEN];

	buf[0] = '\0';
	if (describe_stage(job, buf, len))
		return;
	if (status_is(job, "running"))
		describe_progress(json_object_get(job, "progress"), buf, len);
	else if (status_is(job, "done"))
		snprintf(buf, len, "%llu streamlines, %s", count_of(result, "streamlines"),
			 msg_size(count_of(result, "bytes"), size));
	else if (status_is(job, "failed"))
		describe_error(json_object_get(job, "error"), buf, len);
}

void print_job_list(const json_t *jobs)
{
	size_t index;
	json_t *job;
	char detail[1024];

	printf("%-20s %-10s %-12s %-21s %s\n", "ID", "STATUS", "OWNER", "CREATED",
	       "PROGRESS/RESULT");
	json_array_foreach(jobs, index, job) {
		describe_briefly(job, detail, sizeof(detail));
		printf("%-20s %-10s %-12s %-21s %s\n", text_of(job, "id") ? text_of(job, "id") : "?",
		       text_of(job, "status") ? text_of(job, "status") : "?",
		       text_of(job, "owner") ? text_of(job, "owner") : "",
		       text_of(job, "created") ? text_of(job, "created") : "", detail);
	}
}

/* The memory limit in effect (null: none) and a job's budget under it. */
static void print_limit_line(const json_t *device)
{
	char line[256], limit[MSG_SIZE_LEN], budget[MSG_SIZE_LEN];
	const json_t *limit_bytes = json_object_get(device, "gpu_memory_limit_bytes");

	if (json_is_integer(limit_bytes))
		snprintf(line, sizeof(line), "%s (gpu_memory_limit); a job's budget %s",
			 msg_size(count_of(device, "gpu_memory_limit_bytes"), limit),
			 msg_size(count_of(device, "gpu_memory_budget_bytes"), budget));
	else
		snprintf(line, sizeof(line), "none; a job's budget %s",
			 msg_size(count_of(device, "gpu_memory_budget_bytes"), budget));
	print_member_line("limit", line);
}

static void print_device_line(const json_t *device)
{
	char line[512], memory[MSG_SIZE_LEN], alloc[MSG_SIZE_LEN], binding[MSG_SIZE_LEN];
	const char *name = text_of(device, "name"), *type = text_of(device, "type");

	snprintf(line, sizeof(line), "%s (%s), subgroup size %llu", name ? name : "?",
		 type ? type : "?", count_of(device, "subgroup_size"));
	print_member_line("device", line);
	snprintf(line, sizeof(line), "%s device-local; allocations up to %s, bindings up to %s",
		 msg_size(count_of(device, "device_local_bytes"), memory),
		 msg_size(count_of(device, "max_alloc_bytes"), alloc),
		 msg_size(count_of(device, "max_binding_bytes"), binding));
	print_member_line("memory", line);
	print_limit_line(device);
}

void print_volume_list(const json_t *doc)
{
	const json_t *volumes = json_object_get(doc, "volumes");
	char size[MSG_SIZE_LEN], used[MSG_SIZE_LEN], quota[MSG_SIZE_LEN];
	size_t index;
	json_t *volume;

	if (json_array_size(volumes) > 0)
		printf("%-71s %-8s %s\n", "ID", "KIND", "SIZE");
	json_array_foreach(volumes, index, volume)
		printf("%-71s %-8s %s\n", text_of(volume, "id") ? text_of(volume, "id") : "?",
		       text_of(volume, "kind") ? text_of(volume, "kind") : "?",
		       msg_size(count_of(volume, "bytes"), size));
	printf("%zu volume%s, %s used of a quota of %s\n", json_array_size(volumes),
	       json_array_size(volumes) == 1 ? "" : "s", msg_size(count_of(doc, "used_bytes"), used),
	       msg_size(count_of(doc, "quota_bytes"), quota));
}

void print_device(const json_t *doc)
{
	const json_t *device = json_object_get(doc, "device"), *cache = json_object_get(doc, "cache");
	const json_t *queue = json_object_get(doc, "queue");
	char line[512], used[MSG_SIZE_LEN], budget[MSG_SIZE_LEN];

	if (json_is_object(device))
		print_device_line(device);
	/* Only admins are told what the cache holds; others get their own
	 * hits and misses (proto/API.md). */
	if (json_is_object(cache) && json_object_get(cache, "used_bytes")) {
		snprintf(line, sizeof(line), "%s of %s used; entries %llu, hits %llu, misses %llu",
			 msg_size(count_of(cache, "used_bytes"), used),
			 msg_size(count_of(cache, "budget_bytes"), budget), count_of(cache, "entries"),
			 count_of(cache, "hits"), count_of(cache, "misses"));
		print_member_line("cache", line);
	} else if (json_is_object(cache)) {
		snprintf(line, sizeof(line), "%s budget; your jobs' hits %llu, misses %llu",
			 msg_size(count_of(cache, "budget_bytes"), budget), count_of(cache, "hits"),
			 count_of(cache, "misses"));
		print_member_line("cache", line);
	}
	if (json_is_object(queue)) {
		snprintf(line, sizeof(line), "%llu queued, %llu running", count_of(queue, "queued"),
			 count_of(queue, "running"));
		print_member_line("queue", line);
	}
}

/* 15 significant digits: enough for the daemon's counts and timings, and
 * "0.03" stays "0.03" instead of jansson's default "0.029999999999999999". */
int print_json(const json_t *doc)
{
	if (json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) < 0 ||
	    putchar('\n') == EOF) {
		msg_error("cannot write to standard output: %s", strerror(errno));
		return TCTL_EXIT_LOCAL;
	}
	return TCTL_EXIT_OK;
}
