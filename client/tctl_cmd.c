/* SPDX-License-Identifier: MIT */
/*
 * tctl_cmd: the commands of tractctl, each a short sequence of requests of
 * proto/API.md. Jobs are followed by polling GET /v1/jobs/{id}; a job's
 * outcome becomes the exit status (0 done, 3 failed on its request: its
 * inputs, parameters or a limit; 1 otherwise failed or cancelled), and only
 * a done job's tractogram is kept. `track` owns its job: a signal cancels it
 * on the daemon. The output file's extension asks for its format (track:
 * output.format; fetch: a conversion by the daemon). `track DWI OUTPUT`
 * composes its job with common/track_opts, as `tractd track` does.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/job_doc.h"
#include "common/track_opts.h"
#include "tctl.h"
#include "tctl_cmd.h"
#include "tctl_interrupt.h"
#include "tctl_job.h"
#include "tctl_msg.h"
#include "tctl_output.h"
#include "tctl_print.h"

#define POLL_INTERVAL_MS 500L
#define JOBS_PATH "/v1/jobs"

/* Monotonic seconds, for elapsed times. Only shown to people: a clock that
 * cannot be read shows 0. */
static double now_seconds(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) < 0)
		return 0.0;
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "/v1/jobs/ID" + suffix; NULL when out of memory (reported). */
static char *job_path(struct http_client *c, const char *id, const char *suffix)
{
	return http_path(c, JOBS_PATH "/", id, suffix);
}

static int get_job(struct http_client *c, const char *id, json_t **ret)
{
	char *path = job_path(c, id, "");
	int code;

	if (!path)
		return TCTL_EXIT_LOCAL;
	code = http_get_json(c, path, ret);
	free(path);
	return code;
}

static int job_without_status(const char *id)
{
	msg_error("the daemon's document of job %s has no \"status\"", id);
	return TCTL_EXIT_SERVER;
}

/* Polls the job until it has ended, drawing its progress on a terminal.
 * States other than the three final ones count as not ended yet. */
static int wait_for_end(struct http_client *c, const char *id, json_t **ret)
{
	double start = now_seconds();
	struct progress_pace pace = { 0 };
	json_t *job = NULL;
	int code;

	for (;;) {
		code = get_job(c, id, &job);
		if (code != TCTL_EXIT_OK)
			break;
		if (!json_is_string(json_object_get(job, "status"))) {
			json_decref(job);
			code = job_without_status(id);
			break;
		}
		if (job_has_ended(job)) {
			*ret = job;
			break;
		}
		show_job_progress(job, now_seconds() - start, &pace);
		json_decref(job);
		if (!interrupt_sleep_ms(POLL_INTERVAL_MS)) {
			code = interrupt_exit_code();
			break;
		}
	}
	msg_progress_end();
	return code;
}

/* Whether a failed job's error is one the API answers with a 4xx status
 * (proto/errors.def): the job, one of its inputs or a limit was at fault,
 * which the user must fix, as for a request the daemon refused at once. */
static bool failed_on_request(const json_t *job)
{
	static const struct {
		const char *code;
		int status;
	} statuses[] = {
#define X(name, code, status) { code, status },
#include "errors.def"
#undef X
	};
	const char *code = json_string_value(json_object_get(json_object_get(job, "error"),
							     "code"));

	for (size_t i = 0; code && i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (strcmp(code, statuses[i].code) == 0)
			return statuses[i].status >= 400 && statuses[i].status < 500;
	return false;
}

/* The exit status of a job that has ended (job_has_ended); says why when it
 * is not done, naming the files of job (NULL: none known) as the user named
 * them rather than by their volume ids. */
static int job_outcome(const char *id, const json_t *job, const struct job_file *names)
{
	const char *status = json_string_value(json_object_get(job, "status"));
	char why[2048], told[4096];

	if (strcmp(status, "done") == 0)
		return TCTL_EXIT_OK;
	if (strcmp(status, "cancelled") == 0) {
		msg_error("job %s was cancelled", id);
		return TCTL_EXIT_JOB_FAILED;
	}
	if (describe_error(json_object_get(job, "error"), why, sizeof(why))) {
		job_file_name_locally(names, why, told, sizeof(told));
		msg_error("job %s failed: %s", id, told);
	} else {
		msg_error("job %s failed", id);
	}
	return failed_on_request(job) ? TCTL_EXIT_REJECTED : TCTL_EXIT_JOB_FAILED;
}

/* format: another format than the job's, converted by the daemon; NULL for
 * the job's own. */
static int download_tractogram(struct http_client *c, const char *id, const char *format,
			       struct output *out, uint64_t *bytes)
{
	char suffix[40];
	char *path;
	char meter[256];
	const struct http_file sink = { .stream = out->stream, .name = output_name(out),
					.meter = meter };
	int code;

	snprintf(suffix, sizeof(suffix), "/tractogram%s%s", format ? "?format=" : "",
		 format ? format : "");
	path = job_path(c, id, suffix);
	if (!path)
		return TCTL_EXIT_LOCAL;
	snprintf(meter, sizeof(meter), "downloading %s", id);
	code = http_download(c, path, &sink, bytes);
	free(path);
	return code;
}

/* Uploads the inputs and queues the job; *ret is the daemon's answer, which
 * has the job's id. */
static int submit_job(struct http_client *c, struct job_file *job, json_t **ret)
{
	int code = job_file_upload_inputs(job, c);

	if (code == TCTL_EXIT_OK)
		code = http_post_json(c, JOBS_PATH, job->doc, ret);
	if (code == TCTL_EXIT_OK && !json_string_value(json_object_get(*ret, "id"))) {
		msg_error("the daemon's answer to POST " JOBS_PATH " has no \"id\"");
		json_decref(*ret);
		*ret = NULL;
		code = TCTL_EXIT_SERVER;
	}
	return code;
}

/* After a signal, the job must not keep the GPU busy for nobody. A second
 * signal kills tractctl (tctl_interrupt.c) should this request hang. */
static void cancel_after_interrupt(struct http_client *c, const char *id)
{
	char *path = job_path(c, id, "");
	json_t *answer = NULL;

	http_ignore_interrupts(c);
	/* 204, no answer: the job had ended already, and was deleted. */
	if (path && http_delete(c, path, &answer) == TCTL_EXIT_OK)
		msg_info("interrupted: job %s %s", id, answer ? "cancelled" : "deleted");
	else
		msg_note("job %s may still be running: 'tractctl cancel %s'", id, id);
	json_decref(answer);
	free(path);
}

/* Waits for the job of job file names, then writes its tractogram to out. */
static int follow_into(struct http_client *c, const char *id, const struct job_file *names,
		       struct output *out, json_t **final)
{
	uint64_t bytes = 0;
	int code = wait_for_end(c, id, final);

	if (code == TCTL_EXIT_OK)
		code = job_outcome(id, *final, names);
	if (code == TCTL_EXIT_OK)
		code = download_tractogram(c, id, NULL, out, &bytes);
	return code;
}

/* The summary is composed before output_commit, which forgets the name. */
static int finish_output(struct output *out, int code, char *summary, size_t len,
			 const char *id, const json_t *final, double seconds)
{
	char result[512];

	if (code != TCTL_EXIT_OK) {
		output_discard(out);
		return code;
	}
	describe_result(final, result, sizeof(result));
	snprintf(summary, len, "%s: %s in %.1f s -> %s", id, result, seconds, output_name(out));
	return output_commit(out);
}

static int track_job(struct http_client *c, const struct tctl_args *args, struct job_file *job,
		     const char *out_path)
{
	double start = now_seconds();
	json_t *accepted = NULL, *final = NULL;
	const char *id = NULL;
	struct output out;
	char summary[1024];
	int code = output_open(&out, out_path);

	if (code != TCTL_EXIT_OK)
		return code;
	code = submit_job(c, job, &accepted);
	if (code == TCTL_EXIT_OK) {
		id = json_string_value(json_object_get(accepted, "id"));
		code = follow_into(c, id, job, &out, &final);
	}
	code = finish_output(&out, code, summary, sizeof(summary), id, final, now_seconds() - start);
	if (id && interrupt_signal() && code == interrupt_exit_code())
		cancel_after_interrupt(c, id);
	if (code == TCTL_EXIT_OK && args->json)
		code = print_json(final);
	else if (code == TCTL_EXIT_OK)
		msg_info("%s", summary);
	json_decref(final);
	json_decref(accepted);
	return code;
}

/* The output file's extension sets output.format where the job has none;
 * naming another format than the job's is a usage error. */
static int format_from_extension(struct job_file *job, const char *out_path, const char *origin)
{
	const char *wanted = job_doc_format_of(out_path);
	const json_t *set = json_object_get(json_object_get(job->doc, "output"), "format");
	char message[PATH_MAX + 256];

	if (!wanted)
		return TCTL_EXIT_OK;
	if (!set)
		return job_file_set_output_format(job, wanted);
	/* Not a string: the daemon names the field. */
	if (json_is_string(set) && strcmp(json_string_value(set), wanted) != 0) {
		snprintf(message, sizeof(message), "%s %s asks for %s by its extension, but the "
			 "job's output.format is %s", origin, out_path, wanted,
			 json_string_value(set));
		return args_usage_error(CMD_TRACK, message);
	}
	return TCTL_EXIT_OK;
}

/* The job of `track DWI OUTPUT`, composed as `tractd track` composes it;
 * *ret is NULL with an exit code. The command line's faults are usage
 * errors; gradients not found (an input) and memory are local problems. */
static int compose_track_job(const struct tctl_args *args, json_t **ret)
{
	struct job_doc_error err = { 0 };
	char message[sizeof(err.field) + sizeof(err.message) + 2];
	int r = track_job_compose(&args->track, args->dwi, args->track_output, ret, &err);

	if (r == 0)
		return TCTL_EXIT_OK;
	*ret = NULL;
	if (r == -EINVAL || r == -EEXIST) {
		snprintf(message, sizeof(message), "%s%s%s", err.field, err.field[0] ? ": " : "",
			 err.message);
		return args_usage_error(CMD_TRACK, message);
	}
	if (err.field[0])
		msg_error("%s: %s", err.field, err.message);
	else
		msg_error("%s", err.message);
	return TCTL_EXIT_LOCAL;
}

/* --print-job: the job as `tractd track --print-job` prints it (unchecked:
 * only the daemon has jobspec). */
static int print_track_job(const struct tctl_args *args)
{
	json_t *doc;
	char *text;
	int code = compose_track_job(args, &doc);

	if (code != TCTL_EXIT_OK)
		return code;
	text = json_dumps(doc, TRACK_JOB_DUMP_FLAGS);
	json_decref(doc);
	if (!text) {
		msg_error("out of memory");
		return TCTL_EXIT_LOCAL;
	}
	printf("%s\n", text);
	free(text);
	return TCTL_EXIT_OK;
}

/* The job of the command line: JOB.json, or composed from DWI OUTPUT. */
static int load_track_job(const struct tctl_args *args, struct job_file *job)
{
	json_t *doc;
	int code;

	if (!args->dwi)
		return job_file_load(args->operand, job);
	*job = (struct job_file){ 0 };
	code = compose_track_job(args, &doc);
	return code == TCTL_EXIT_OK ? job_file_adopt(doc, job) : code;
}

int cmd_track(struct http_client *c, const struct tctl_args *args)
{
	struct job_file job;
	int code;
	const char *out_path;

	if (args->dwi && args->track.print_job)
		return print_track_job(args);
	code = load_track_job(args, &job);
	/* OUTPUT as the user wrote it, for the messages; the job has it absolute. */
	out_path = args->output ? args->output : args->dwi ? args->track_output : job.output_path;

	if (code == TCTL_EXIT_OK && !out_path)
		code = args_usage_error(CMD_TRACK, "no output: give -o FILE, or output.path in the job");
	if (code == TCTL_EXIT_OK)
		code = format_from_extension(&job, out_path, args->output ? "-o" : "output.path");
	if (code == TCTL_EXIT_OK)
		code = track_job(c, args, &job, out_path);
	job_file_free(&job);
	return code;
}

int cmd_submit(struct http_client *c, const struct tctl_args *args)
{
	struct job_file job;
	json_t *accepted = NULL;
	int code = job_file_load(args->operand, &job);

	if (code == TCTL_EXIT_OK)
		code = submit_job(c, &job, &accepted);
	if (code == TCTL_EXIT_OK && args->json)
		code = print_json(accepted);
	else if (code == TCTL_EXIT_OK)
		printf("%s\n", json_string_value(json_object_get(accepted, "id")));
	json_decref(accepted);
	job_file_free(&job);
	return code;
}

int cmd_status(struct http_client *c, const struct tctl_args *args)
{
	json_t *job = NULL;
	int code = get_job(c, args->operand, &job);

	if (code == TCTL_EXIT_OK && args->json)
		code = print_json(job);
	else if (code == TCTL_EXIT_OK)
		print_job(job);
	json_decref(job);
	return code;
}

int cmd_list(struct http_client *c, const struct tctl_args *args)
{
	json_t *answer = NULL;
	const json_t *jobs;
	int code = http_get_json(c, JOBS_PATH, &answer);

	jobs = json_object_get(answer, "jobs");
	if (code == TCTL_EXIT_OK && !json_is_array(jobs)) {
		msg_error("the daemon's answer to GET " JOBS_PATH " has no \"jobs\" array");
		code = TCTL_EXIT_SERVER;
	}
	if (code == TCTL_EXIT_OK && args->json)
		code = print_json(answer);
	else if (code == TCTL_EXIT_OK && json_array_size(jobs) == 0)
		msg_info("no jobs");
	else if (code == TCTL_EXIT_OK)
		print_job_list(jobs);
	json_decref(answer);
	return code;
}

int cmd_wait(struct http_client *c, const struct tctl_args *args)
{
	const char *id = args->operand;
	json_t *job = NULL;
	char result[512];
	int code = wait_for_end(c, id, &job), print_code = TCTL_EXIT_OK;

	if (code != TCTL_EXIT_OK)
		return code;
	code = job_outcome(id, job, NULL);
	if (args->json) {
		print_code = print_json(job);
	} else if (code == TCTL_EXIT_OK) {
		describe_result(job, result, sizeof(result));
		msg_info("%s: done: %s", id, result);
	}
	json_decref(job);
	return code != TCTL_EXIT_OK ? code : print_code;
}

/* The tractogram stream also ends when a running job fails: the job's final
 * state says whether the file is whole. */
static int check_fetched_job(struct http_client *c, const char *id, json_t **final)
{
	int code = get_job(c, id, final);

	if (code != TCTL_EXIT_OK)
		return code;
	if (!json_is_string(json_object_get(*final, "status")))
		return job_without_status(id);
	if (!job_has_ended(*final)) {
		msg_error("the tractogram of job %s ended before the job did", id);
		return TCTL_EXIT_SERVER;
	}
	return job_outcome(id, *final, NULL);
}

/* A download the daemon refused (409) or cut off may be explained by the
 * job having failed or been cancelled meanwhile: then that is the outcome. */
static int explain_failed_download(struct http_client *c, const char *id, int download_code)
{
	json_t *job = NULL;
	int code = download_code, outcome;

	if (download_code != TCTL_EXIT_REJECTED && download_code != TCTL_EXIT_SERVER)
		return download_code;
	if (get_job(c, id, &job) == TCTL_EXIT_OK && job_has_ended(job)) {
		outcome = job_outcome(id, job, NULL);
		if (outcome != TCTL_EXIT_OK)
			code = outcome;
	}
	json_decref(job);
	return code;
}

static int fetch_to(struct http_client *c, const struct tctl_args *args, const char *format,
		    const char *out_path)
{
	const char *id = args->operand;
	json_t *final = NULL;
	char summary[1024], size[MSG_SIZE_LEN];
	uint64_t bytes = 0;
	struct output out;
	int code = output_open(&out, out_path);

	if (code != TCTL_EXIT_OK)
		return code;
	code = download_tractogram(c, id, format, &out, &bytes);
	if (code == TCTL_EXIT_OK)
		code = check_fetched_job(c, id, &final);
	else
		code = explain_failed_download(c, id, code);
	snprintf(summary, sizeof(summary), "%s: %s written to %s", id, msg_size(bytes, size),
		 output_name(&out));
	if (code == TCTL_EXIT_OK)
		code = output_commit(&out);
	else
		output_discard(&out);
	if (code == TCTL_EXIT_OK && args->json)
		code = print_json(final);
	else if (code == TCTL_EXIT_OK)
		msg_info("%s", summary);
	json_decref(final);
	return code;
}

/* --format, else the format -o FILE's extension asks for; NULL: the job's
 * own. *ret is set when the two agree. */
static int requested_format(const struct tctl_args *args, const char **ret)
{
	const char *extension = args->output ? job_doc_format_of(args->output) : NULL;
	char message[PATH_MAX + 256];

	if (extension && args->format && strcmp(extension, args->format) != 0) {
		snprintf(message, sizeof(message), "-o %s asks for %s by its extension, but "
			 "--format is %s", args->output, extension, args->format);
		return args_usage_error(CMD_FETCH, message);
	}
	*ret = args->format ? args->format : extension;
	return TCTL_EXIT_OK;
}

int cmd_fetch(struct http_client *c, const struct tctl_args *args)
{
	const char *id = args->operand;
	char *default_path = NULL;
	json_t *job = NULL;
	const char *format, *wanted = NULL;
	bool converting;
	int code = requested_format(args, &wanted);

	if (code == TCTL_EXIT_OK)
		code = args->wait ? wait_for_end(c, id, &job) : get_job(c, id, &job);
	/* A failed or cancelled job has no tractogram (409): tell why instead,
	 * before an output file is created. */
	if (code == TCTL_EXIT_OK && job_has_ended(job))
		code = job_outcome(id, job, NULL);
	if (code != TCTL_EXIT_OK) {
		json_decref(job);
		return code;
	}
	/* The default name takes the format as its extension (trk, tck, trx). */
	format = json_string_value(json_object_get(job, "format"));
	if (!format)
		format = "trk";
	if (!args->output && asprintf(&default_path, "%s.%s", id, wanted ? wanted : format) < 0) {
		json_decref(job);
		msg_error("out of memory");
		return TCTL_EXIT_LOCAL;
	}
	/* The job's own format is asked for plainly, so that it streams while
	 * the job runs; another one is converted by the daemon once it is done. */
	converting = wanted && strcmp(wanted, format) != 0;
	code = fetch_to(c, args, converting ? wanted : NULL,
			args->output ? args->output : default_path);
	if (code == TCTL_EXIT_REJECTED && converting && !job_has_ended(job))
		msg_note("only a finished job converts to %s: 'tractctl fetch %s --wait' waits for it",
			 wanted, id);
	json_decref(job);
	free(default_path);
	return code;
}

/* DELETE on a job that has ended deletes it and its result (API.md): that
 * is not what `cancel` asks for, so an ended job is left alone. */
static int cancel_running(struct http_client *c, const struct tctl_args *args, const char *path)
{
	const char *id = args->operand;
	json_t *answer = NULL;
	int code = http_delete(c, path, &answer);

	if (code == TCTL_EXIT_OK && !answer)
		msg_info("job %s ended before it could be cancelled; the daemon deleted it and its "
			 "result", id);
	else if (code == TCTL_EXIT_OK && args->json)
		code = print_json(answer);
	else if (code == TCTL_EXIT_OK)
		msg_info("job %s cancelled", id);
	json_decref(answer);
	return code;
}

int cmd_cancel(struct http_client *c, const struct tctl_args *args)
{
	const char *id = args->operand;
	char *path = job_path(c, id, "");
	json_t *job = NULL;
	int code;

	if (!path)
		return TCTL_EXIT_LOCAL;
	code = http_get_json(c, path, &job);
	if (code == TCTL_EXIT_OK && !job_has_ended(job)) {
		code = cancel_running(c, args, path);
	} else if (code == TCTL_EXIT_OK) {
		msg_info("job %s has already ended (%s): nothing to cancel", id,
			 json_string_value(json_object_get(job, "status")));
		if (args->json)
			code = print_json(job);
	}
	json_decref(job);
	free(path);
	return code;
}

static int print_deleted(const char *id, bool json)
{
	json_t *doc;
	int code;

	if (!json) {
		msg_info("job %s deleted", id);
		return TCTL_EXIT_OK;
	}
	doc = json_pack("{s:s, s:b}", "id", id, "deleted", 1);
	if (!doc) {
		msg_error("out of memory");
		return TCTL_EXIT_LOCAL;
	}
	code = print_json(doc);
	json_decref(doc);
	return code;
}

/* DELETE cancels a queued or running job (202, the job) and deletes one
 * that has ended (204): a cancelled job has ended, so a second DELETE
 * deletes it. */
int cmd_delete(struct http_client *c, const struct tctl_args *args)
{
	const char *id = args->operand;
	char *path = job_path(c, id, "");
	json_t *answer = NULL;
	int code;

	if (!path)
		return TCTL_EXIT_LOCAL;
	code = http_delete(c, path, &answer);
	if (code == TCTL_EXIT_OK && answer) {
		msg_info("job %s cancelled", id);
		json_decref(answer);
		code = http_delete(c, path, &answer);
	}
	if (code == TCTL_EXIT_OK && answer) {
		msg_error("job %s was cancelled but not deleted: the daemon answered it as running",
			  id);
		code = TCTL_EXIT_SERVER;
	}
	if (code == TCTL_EXIT_OK)
		code = print_deleted(id, args->json);
	json_decref(answer);
	free(path);
	return code;
}

int cmd_device(struct http_client *c, const struct tctl_args *args)
{
	json_t *doc = NULL;
	int code = http_get_json(c, "/v1/device", &doc);

	if (code == TCTL_EXIT_OK && args->json)
		code = print_json(doc);
	else if (code == TCTL_EXIT_OK)
		print_device(doc);
	json_decref(doc);
	return code;
}
