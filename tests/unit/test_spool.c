/* SPDX-License-Identifier: MIT */
/* Unit tests for spool.c: job records written and read back, what a load
 * keeps, skips and removes, and the records it refuses. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/spool.h"
#include "tmpdir.h"

struct fixture {
	char dir[64];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_spool.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(tmpdir_remove(f->dir), 0);
	free(f);
	return 0;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[256];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	assert_int_equal(fclose(fp), 0);
}

static bool exists(const char *dir, const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

static struct job_info done_job(const char *id, time_t created)
{
	struct job_info info = { .state = JOB_DONE, .created = created, .started = created + 1,
				 .finished = created + 2, .seeds_done = 100, .seeds_total = 100,
				 .streamlines = 115, .points = 6831, .format = OUTPUT_TCK,
				 .bytes = 83432 };

	snprintf(info.id, sizeof(info.id), "%s", id);
	snprintf(info.owner, sizeof(info.owner), "%s", "alice");
	info.stats.seeds = 100;
	info.stats.track_seconds = 0.1108092519971251;
	info.stats.encode_seconds = 0.25;
	info.stats.grid_dim[0] = 48;
	info.stats.grid_dim[1] = 48;
	info.stats.grid_dim[2] = 24;
	for (int i = 0; i < 4; i++)
		info.stats.grid_affine[i][i] = 1.0;
	info.stats.grid_affine[0][3] = -23.5;
	info.stats.stop_reasons[ENGINE_STOP_MAP] = 180;
	info.stats.stop_reasons[ENGINE_STOP_OUTSIDE] = 7;
	info.stats.stop_reasons[ENGINE_STOP_NO_DIRECTION] = 42;
	info.stats.stop_reasons[ENGINE_STOP_MAX_STEPS] = 1;
	info.stats.seeds_without_direction = 3;
	return info;
}

static void test_round_trip(void **state)
{
	struct fixture *f = *state;
	struct job_info info = done_job("j-00000000000000a1", 1000);
	struct spool_record *recs;
	size_t n;

	assert_int_equal(spool_record_write(f->dir, &info, "{\"seeds\":{\"count\":100}}", NULL), 0);
	assert_int_equal(spool_load(f->dir, &recs, &n, NULL), 0);
	assert_int_equal(n, 1);
	assert_string_equal(recs[0].info.id, info.id);
	assert_string_equal(recs[0].info.owner, "alice");
	assert_int_equal(recs[0].info.state, JOB_DONE);
	assert_int_equal(recs[0].info.format, OUTPUT_TCK);
	assert_int_equal(recs[0].info.created, 1000);
	assert_int_equal(recs[0].info.finished, 1002);
	assert_int_equal(recs[0].info.bytes, 83432);
	assert_int_equal(recs[0].info.points, 6831);
	assert_int_equal(recs[0].info.stats.grid_dim[2], 24);
	/* Doubles survive exactly: conversions use the grid. */
	assert_true(recs[0].info.stats.grid_affine[0][3] == -23.5);
	assert_true(recs[0].info.stats.track_seconds == 0.1108092519971251);
	assert_true(recs[0].info.stats.encode_seconds == 0.25);
	assert_memory_equal(recs[0].info.stats.stop_reasons, info.stats.stop_reasons,
			    sizeof(info.stats.stop_reasons));
	assert_int_equal(recs[0].info.stats.seeds_without_direction, 3);
	/* An ended job's document stays on disk: nothing writes its record again. */
	assert_null(recs[0].spec_json);
	spool_records_free(recs, n);
}

/* A job that was running keeps its document as sent, byte for byte: no
 * re-encoding (0.1 would come back as 0.10000000000000001). */
static void test_running_job_keeps_its_document(void **state)
{
	static const char doc[] = "{\"seeds\": {\"points\": [[0.1, 2.25, 3]]}, \"x\": \",\\\"job\\\":\"}";
	struct fixture *f = *state;
	struct job_info info = done_job("j-00000000000000a2", 1000);
	struct spool_record *recs;
	size_t n;

	info.state = JOB_RUNNING;
	assert_int_equal(spool_record_write(f->dir, &info, doc, NULL), 0);
	assert_int_equal(spool_load(f->dir, &recs, &n, NULL), 0);
	assert_int_equal(n, 1);
	assert_int_equal(recs[0].info.state, JOB_RUNNING);
	assert_string_equal(recs[0].spec_json, doc);
	spool_records_free(recs, n);
}

static void test_failed_job_keeps_its_error(void **state)
{
	struct fixture *f = *state;
	struct job_info info = done_job("j-00000000000000b2", 1000);
	struct spool_record *recs;
	size_t n;

	info.state = JOB_FAILED;
	info.error_code = -ENOSPC;
	snprintf(info.error.field, sizeof(info.error.field), "output");
	/* A message cut inside a UTF-8 sequence still makes a record. */
	snprintf(info.error.message, sizeof(info.error.message), "full: caf\xc3");
	assert_int_equal(spool_record_write(f->dir, &info, NULL, NULL), 0);
	assert_int_equal(spool_load(f->dir, &recs, &n, NULL), 0);
	assert_int_equal(n, 1);
	assert_int_equal(recs[0].info.state, JOB_FAILED);
	assert_int_equal(recs[0].info.error_code, -ENOSPC);
	assert_string_equal(recs[0].info.error.field, "output");
	assert_string_equal(recs[0].info.error.message, "full: caf?");
	assert_null(recs[0].spec_json);
	spool_records_free(recs, n);
}

static void test_load_cleans_and_skips(void **state)
{
	struct fixture *f = *state;
	struct job_info a = done_job("j-00000000000000c3", 2000);
	struct job_info b = done_job("j-00000000000000c4", 1000);
	struct spool_record *recs;
	size_t n;

	assert_int_equal(spool_record_write(f->dir, &a, NULL, NULL), 0);
	assert_int_equal(spool_record_write(f->dir, &b, NULL, NULL), 0);
	write_file(f->dir, "j-00000000000000c3.tractogram", "kept: its job has a record");
	write_file(f->dir, "j-00000000000000d5.tractogram", "an orphan");
	write_file(f->dir, "j-00000000000000e6.job", "{not json");
	write_file(f->dir, "j-00000000000000e6.tractogram", "the result of a corrupt record");
	write_file(f->dir, "x.job", "{}");
	write_file(f->dir, ".rec-abcdef", "half a record");
	write_file(f->dir, ".convert-abcdef", "half a conversion");
	write_file(f->dir, "README", "not ours");
	assert_int_equal(spool_load(f->dir, &recs, &n, NULL), 0);
	assert_int_equal(n, 2);
	/* Oldest first. */
	assert_string_equal(recs[0].info.id, "j-00000000000000c4");
	assert_string_equal(recs[1].info.id, "j-00000000000000c3");
	spool_records_free(recs, n);
	assert_true(exists(f->dir, "j-00000000000000c3.tractogram"));
	assert_false(exists(f->dir, "j-00000000000000d5.tractogram"));
	assert_false(exists(f->dir, "j-00000000000000e6.tractogram"));
	assert_true(exists(f->dir, "j-00000000000000e6.job"));
	assert_true(exists(f->dir, "x.job"));
	assert_false(exists(f->dir, ".rec-abcdef"));
	assert_false(exists(f->dir, ".convert-abcdef"));
	assert_true(exists(f->dir, "README"));
}

static void test_remove(void **state)
{
	struct fixture *f = *state;
	struct job_info a = done_job("j-00000000000000f7", 1000);
	struct spool_record *recs;
	size_t n;

	assert_int_equal(spool_record_write(f->dir, &a, NULL, NULL), 0);
	spool_record_remove(f->dir, a.id);
	spool_record_remove(f->dir, a.id);   /* gone already: no error */
	assert_int_equal(spool_load(f->dir, &recs, &n, NULL), 0);
	assert_int_equal(n, 0);
	spool_records_free(recs, n);
}

/* The kind of a failure comes back with it: the API's answer depends on it. */
static void test_failed_job_keeps_its_kind(void **state)
{
	struct fixture *f = *state;
	struct job_info info = done_job("j-00000000000000b3", 1000);
	struct spool_record *recs;
	size_t n;

	info.state = JOB_FAILED;
	info.error_code = -ENOSPC;
	errbuf_set_kind(&info.error, ERR_KIND_STORAGE, -ENOSPC, "output", "the spool is full");
	assert_int_equal(spool_record_write(f->dir, &info, NULL, NULL), 0);
	assert_int_equal(spool_load(f->dir, &recs, &n, NULL), 0);
	assert_int_equal(n, 1);
	assert_int_equal(recs[0].info.error.kind, ERR_KIND_STORAGE);
	assert_string_equal(recs[0].info.error.field, "output");
	spool_records_free(recs, n);
}

#define VALID_RECORD \
	"{\"tractd_job\":1,\"id\":\"j-0000000000000001\",\"owner\":\"alice\"," \
	"\"status\":\"done\"," \
	"\"format\":\"trk\",\"created\":1,\"started\":2,\"finished\":3," \
	"\"progress\":{\"seeds_done\":1,\"seeds_total\":1,\"streamlines\":1,\"points\":2}," \
	"\"result\":{\"file\":\"j-0000000000000001.tractogram\",\"bytes\":1000," \
	"\"expired\":false},\"stats\":{\"seeds\":1,\"streamlines\":1,\"points\":2," \
	"\"chunks\":1,\"batches\":1,\"load_seconds\":0,\"upload_seconds\":0," \
	"\"compile_seconds\":0,\"track_seconds\":0,\"kernel_seconds\":0,\"write_seconds\":0," \
	"\"grid_dim\":[1,1,1],\"grid_affine\":[1,0,0,0,0,1,0,0,0,0,1,0,0,0,0,1]}," \
	"\"error\":null,\"job\":null}"

/* Parses VALID_RECORD with its first `from` replaced by `to`. */
static int parse_replacing(const char *from, const char *to, const char *file_id)
{
	const char *valid = VALID_RECORD;
	const char *at = strstr(valid, from);
	struct spool_record rec;
	char text[2048];
	int r;

	assert_non_null(at);
	snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - valid), valid, to, at + strlen(from));
	r = spool_record_parse(text, strlen(text), file_id, &rec, NULL);
	if (r == 0)
		free(rec.spec_json);
	return r;
}

static void test_parse_refuses(void **state)
{
	(void)state;
	assert_int_equal(parse_replacing("{", "{", NULL), 0);
	assert_int_equal(parse_replacing("{", "{", "j-0000000000000001"), 0);
	/* Another job's record under this name. */
	assert_int_equal(parse_replacing("{", "{", "j-0000000000000002"), -EINVAL);
	/* A result elsewhere than <id>.tractogram, e.g. outside the spool. */
	assert_int_equal(parse_replacing("j-0000000000000001.tractogram", "../../etc/passwd",
					 NULL), -EINVAL);
	assert_int_equal(parse_replacing("\"id\":\"j-0000000000000001\"",
					 "\"id\":\"../x\"", NULL), -EINVAL);
	assert_int_equal(parse_replacing("\"tractd_job\":1", "\"tractd_job\":2", NULL), -EINVAL);
	assert_int_equal(parse_replacing("\"done\"", "\"finished\"", NULL), -EINVAL);
	assert_int_equal(parse_replacing("\"bytes\":1000", "\"bytes\":-1", NULL), -EINVAL);
	assert_int_equal(parse_replacing("[1,1,1]", "[1,1]", NULL), -EINVAL);
	/* A failed job needs its error, and only a failed job has one. */
	assert_int_equal(parse_replacing("\"done\"", "\"failed\"", NULL), -EINVAL);
	assert_int_equal(parse_replacing("\"error\":null", "\"error\":{\"errno\":-4,"
					 "\"field\":\"\",\"message\":\"m\"}", NULL), -EINVAL);
	assert_int_equal(parse_replacing("{\"tractd_job\"", "[{\"tractd_job\"", NULL), -EINVAL);
	assert_int_equal(spool_record_parse("", 0, NULL, &(struct spool_record){ 0 }, NULL),
			 -EINVAL);
	/* Stop reasons: counts in an object (absent ones read as 0). */
	assert_int_equal(parse_replacing("\"grid_dim\"", "\"stop_reasons\":{\"outside\":4},"
					 "\"grid_dim\"", NULL), 0);
	assert_int_equal(parse_replacing("\"grid_dim\"", "\"stop_reasons\":{\"outside\":-1},"
					 "\"grid_dim\"", NULL), -EINVAL);
	assert_int_equal(parse_replacing("\"grid_dim\"", "\"stop_reasons\":[4],\"grid_dim\"",
					 NULL), -EINVAL);
	assert_int_equal(parse_replacing("\"grid_dim\"", "\"seeds_without_direction\":0.5,"
					 "\"grid_dim\"", NULL), -EINVAL);
}

/* The kind of VALID_RECORD failed with error, as parsed. */
static enum err_kind kind_of(const char *error)
{
	const char *valid = VALID_RECORD;
	char text[2048], failed[2048];
	const char *at = strstr(valid, "\"error\":null");
	struct spool_record rec = { 0 };
	const char *status;

	snprintf(text, sizeof(text), "%.*s\"error\":%s%s", (int)(at - valid), valid, error,
		 at + strlen("\"error\":null"));
	status = strstr(text, "\"done\"");
	snprintf(failed, sizeof(failed), "%.*s\"failed\"%s", (int)(status - text), text,
		 status + strlen("\"done\""));
	assert_int_equal(spool_record_parse(failed, strlen(failed), NULL, &rec, NULL), 0);
	free(rec.spec_json);
	return rec.info.error.kind;
}

/* A record that names its kind gives it; one written before kinds gives the
 * kind that leads to the answer its errno and field led to then. */
static void test_error_kinds_of_records(void **state)
{
	(void)state;
	assert_int_equal(kind_of("{\"errno\":-28,\"kind\":\"storage\",\"field\":\"output\","
				 "\"message\":\"m\"}"), ERR_KIND_STORAGE);
	assert_int_equal(kind_of("{\"errno\":-22,\"kind\":\"input\",\"field\":\"\","
				 "\"message\":\"m\"}"), ERR_KIND_INPUT);
	assert_int_equal(kind_of("{\"errno\":-7,\"field\":\"device\",\"message\":\"m\"}"),
			 ERR_KIND_TOO_LARGE);
	assert_int_equal(kind_of("{\"errno\":-27,\"field\":\"inputs.dwi\",\"message\":\"m\"}"),
			 ERR_KIND_LIMIT);
	assert_int_equal(kind_of("{\"errno\":-108,\"field\":\"\",\"message\":\"m\"}"),
			 ERR_KIND_SHUTDOWN);
	assert_int_equal(kind_of("{\"errno\":-4,\"field\":\"\",\"message\":\"m\"}"),
			 ERR_KIND_INTERRUPTED);
	assert_int_equal(kind_of("{\"errno\":-28,\"field\":\"output\",\"message\":\"m\"}"),
			 ERR_KIND_STORAGE);
	assert_int_equal(kind_of("{\"errno\":-28,\"field\":\"device\",\"message\":\"m\"}"),
			 ERR_KIND_DEVICE);
	assert_int_equal(kind_of("{\"errno\":-5,\"field\":\"output.path\","
				 "\"message\":\"m\"}"), ERR_KIND_OUTPUT);
	assert_int_equal(kind_of("{\"errno\":-22,\"field\":\"seeds.count\",\"message\":\"m\"}"),
			 ERR_KIND_INPUT);
	assert_int_equal(kind_of("{\"errno\":-5,\"field\":\"\",\"message\":\"m\"}"),
			 ERR_KIND_UNTIED);
	/* An unknown kind is refused like any malformed member. */
	assert_int_equal(parse_replacing("\"error\":null", "\"error\":{\"errno\":-4,"
					 "\"kind\":\"gpu\",\"field\":\"\",\"message\":\"m\"}",
					 NULL), -EINVAL);
}

/* A record of a daemon that did not count stop reasons reads them as 0. */
static void test_record_without_stop_reasons(void **state)
{
	const char *text = VALID_RECORD;
	struct spool_record rec;

	(void)state;
	memset(&rec, 0xff, sizeof(rec));
	assert_int_equal(spool_record_parse(text, strlen(text), NULL, &rec, NULL), 0);
	for (int k = 0; k < ENGINE_STOP_REASONS; k++)
		assert_int_equal(rec.info.stats.stop_reasons[k], 0);
	assert_int_equal(rec.info.stats.seeds_without_direction, 0);
	free(rec.spec_json);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_running_job_keeps_its_document, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_job_keeps_its_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_job_keeps_its_kind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_cleans_and_skips, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
		cmocka_unit_test(test_parse_refuses),
		cmocka_unit_test(test_error_kinds_of_records),
		cmocka_unit_test(test_record_without_stop_reasons),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
