/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of daemon/job/jobspec.c: defaults, every bound of every parameter
 * from both sides, unknown fields, wrong types, the seed kinds, paths, size
 * and nesting limits, the input kinds (odf, sh, dwi) and the CSD model, and
 * the documents in proto/examples.
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "job/jobspec.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define INPUTS "\"inputs\": {\"odf\": \"odf.nii.gz\", \"stop_map\": \"fa.nii.gz\"}"
#define ROI_SEEDS "\"seeds\": {\"roi\": \"roi.nii.gz\"}"
/* A minimal valid job with `extra` (", \"key\": value" members) at the top. */
#define ROI_JOB(extra) "{" INPUTS ", " ROI_SEEDS extra "}"
#define TRACKING_JOB(members) ROI_JOB(", \"tracking\": {" members "}")
#define SEEDS_JOB(seeds) "{" INPUTS ", \"seeds\": {" seeds "}}"
#define DWI_INPUTS "\"dwi\": \"dwi.nii.gz\", \"bvals\": \"dwi.bval\", \"bvecs\": \"dwi.bvec\""
/* A job whose inputs object has exactly `members`, and ROI seeds. */
#define INPUTS_JOB(members) "{\"inputs\": {" members "}, " ROI_SEEDS "}"
#define DWI_JOB(extra) "{\"inputs\": {" DWI_INPUTS "}, " ROI_SEEDS extra "}"
#define MODEL_JOB(members) DWI_JOB(", \"model\": {" members "}")
#define SH_INPUTS(members) INPUTS_JOB("\"sh\": \"sh.nii.gz\", \"stop_map\": \"fa.nii.gz\"" members)

static int parse(const char *json, const char *base_dir, struct jobspec *js, struct errbuf *err)
{
	memset(err, 0, sizeof(*err));
	return jobspec_parse(json, strlen(json), base_dir, js, err);
}

static bool is_zeroed(const struct jobspec *js)
{
	static const struct jobspec zero;

	return !memcmp(js, &zero, sizeof(zero));
}

static void expect_ok(const char *json, const char *base_dir, struct jobspec *js)
{
	struct errbuf err;
	int rc = parse(json, base_dir, js, &err);

	if (rc)
		fail_msg("%s\n  rc %d, field \"%s\": %s", json, rc, err.field, err.message);
}

/* Fails unless json is refused with -EINVAL on field; when message is given,
 * err.message must contain it. The spec must come back zeroed. */
static void expect_error(const char *json, const char *field, const char *message)
{
	struct jobspec js;
	struct errbuf err;
	int rc = parse(json, NULL, &js, &err);

	if (rc != -EINVAL || strcmp(err.field, field) || (message && !strstr(err.message, message)))
		fail_msg("%s\n  got rc %d, field \"%s\": \"%s\"\n"
			 "  want -EINVAL, field \"%s\": \"%s\"",
			 json, rc, err.field, err.message, field, message ? message : "");
	assert_true(is_zeroed(&js));
}

/* Directory of the example documents, found from this file's name so the
 * test runs from the repository root (relative __FILE__) or anywhere
 * (absolute __FILE__). */
static void example_path(char *buf, size_t size, const char *name)
{
	const char *src = __FILE__;
	const char *cut = strstr(src, "tests/unit/");

	assert_non_null(cut);
	snprintf(buf, size, "%.*sproto/examples/%s", (int)(cut - src), src, name);
}

/* Writes len bytes of text to a new temporary file; path receives its name. */
static void write_temp(char path[static 64], const char *text, size_t len)
{
	int fd;

	snprintf(path, 64, "/tmp/test_jobspec.XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
}

/* A valid ROI job padded with spaces to exactly len bytes. */
static char *padded_job(size_t len)
{
	static const char job[] = ROI_JOB("");
	char *buf = malloc(len);

	assert_non_null(buf);
	assert_true(len >= sizeof(job) - 1);
	memset(buf, ' ', len);
	memcpy(buf, job, sizeof(job) - 1);
	return buf;
}

/* ---- defaults ---- */

static void test_defaults_roi(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(""), NULL, &js);
	assert_int_equal(js.input_kind, JOBSPEC_INPUT_ODF);
	assert_string_equal(js.odf_path, "odf.nii.gz");
	assert_string_equal(js.stop_map_path, "fa.nii.gz");
	assert_null(js.sh_path);
	assert_null(js.dwi_path);
	assert_null(js.bvals_path);
	assert_null(js.bvecs_path);
	assert_null(js.mask_path);
	assert_int_equal(js.seed_kind, JOBSPEC_SEEDS_ROI);
	assert_string_equal(js.seed_roi_path, "roi.nii.gz");
	assert_int_equal(js.seed_count, 10000);
	assert_false(js.seed_per_voxel);
	assert_int_equal(js.rng_seed, 0);
	assert_null(js.seed_points);
	assert_int_equal(js.n_seed_points, 0);
	assert_false(js.seed_points_ras);
	assert_string_equal(js.sphere_name, "repulsion724");
	assert_null(js.sphere_vertices);
	assert_int_equal(js.sphere_nv, 0);
	assert_true(js.step_size == 0.5);
	assert_true(js.max_angle == 60);
	assert_true(js.fa_threshold == 0.1);
	assert_true(js.relative_peak_threshold == 0.25);
	assert_true(js.min_separation_angle == 45);
	assert_true(js.pmf_threshold == 0.05);
	assert_int_equal(js.max_steps, 500);
	assert_true(js.min_length == 0);
	assert_true(isinf(js.max_length) && js.max_length > 0);
	assert_null(js.output_path);
	jobspec_free(&js);
	assert_true(is_zeroed(&js));
}

static void test_defaults_points(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(SEEDS_JOB("\"points\": [[1, 2, 3]]"), NULL, &js);
	assert_int_equal(js.seed_kind, JOBSPEC_SEEDS_POINTS);
	assert_null(js.seed_roi_path);
	assert_int_equal(js.n_seed_points, 1);
	assert_false(js.seed_points_ras);
	assert_int_equal(js.rng_seed, 0);
	jobspec_free(&js);
}

/* Every member given explicitly, none at its default. */
static void test_all_members(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok("{" INPUTS ", \"direction_getter\": \"prob\","
		  " \"seeds\": {\"roi\": \"r\", \"count\": 7, \"per_voxel\": true,"
		  " \"rng_seed\": 99},"
		  " \"tracking\": {\"sphere\": \"repulsion100\", \"step_size\": 0.2,"
		  " \"max_angle\": 30,"
		  " \"fa_threshold\": 0.3, \"relative_peak_threshold\": 0.5,"
		  " \"min_separation_angle\": 25, \"pmf_threshold\": 0.1, \"max_steps\": 42,"
		  " \"min_length\": 10, \"max_length\": 250.5},"
		  " \"output\": {\"format\": \"trk\", \"path\": \"out.trk\"}}",
		  NULL, &js);
	assert_int_equal(js.seed_count, 7);
	assert_true(js.seed_per_voxel);
	assert_int_equal(js.rng_seed, 99);
	assert_string_equal(js.sphere_name, "repulsion100");
	assert_true(js.step_size == 0.2);
	assert_true(js.max_angle == 30);
	assert_true(js.fa_threshold == 0.3);
	assert_true(js.relative_peak_threshold == 0.5);
	assert_true(js.min_separation_angle == 25);
	assert_true(js.pmf_threshold == 0.1);
	assert_int_equal(js.max_steps, 42);
	assert_true(js.min_length == 10);
	assert_true(js.max_length == 250.5);
	assert_string_equal(js.output_path, "out.trk");
	jobspec_free(&js);
}

/* ---- bounds ---- */

enum slot_type { NONE, DBL, INT, U64 };

static const struct range_case {
	const char *field;   /* "seeds.x" or "tracking.x" */
	const char *value;   /* JSON text */
	enum slot_type type; /* NONE: must be refused */
	size_t offset;
	double expect;
} range_cases[] = {
#define OK(f, v, t, member, x) { f, v, t, offsetof(struct jobspec, member), x }
#define BAD(f, v) { f, v, NONE, 0, 0 }
	BAD("tracking.step_size", "0"),
	OK("tracking.step_size", "1e-9", DBL, step_size, 1e-9),
	OK("tracking.step_size", "5", DBL, step_size, 5),
	BAD("tracking.step_size", "5.000001"),
	BAD("tracking.step_size", "-1"),
	BAD("tracking.max_angle", "0"),
	OK("tracking.max_angle", "0.001", DBL, max_angle, 0.001),
	OK("tracking.max_angle", "90", DBL, max_angle, 90),
	BAD("tracking.max_angle", "90.0001"),
	BAD("tracking.fa_threshold", "-0.001"),
	OK("tracking.fa_threshold", "0", DBL, fa_threshold, 0),
	OK("tracking.fa_threshold", "1e6", DBL, fa_threshold, 1e6),
	BAD("tracking.fa_threshold", "1000000.1"),
	BAD("tracking.relative_peak_threshold", "-1e-9"),
	OK("tracking.relative_peak_threshold", "0", DBL, relative_peak_threshold, 0),
	OK("tracking.relative_peak_threshold", "1", DBL, relative_peak_threshold, 1),
	BAD("tracking.relative_peak_threshold", "1.0000001"),
	BAD("tracking.min_separation_angle", "0.999"),
	OK("tracking.min_separation_angle", "1", DBL, min_separation_angle, 1),
	OK("tracking.min_separation_angle", "90", DBL, min_separation_angle, 90),
	BAD("tracking.min_separation_angle", "90.5"),
	BAD("tracking.pmf_threshold", "-0.0001"),
	OK("tracking.pmf_threshold", "0", DBL, pmf_threshold, 0),
	OK("tracking.pmf_threshold", "0.999999", DBL, pmf_threshold, 0.999999),
	BAD("tracking.pmf_threshold", "1"),
	BAD("tracking.max_steps", "0"),
	OK("tracking.max_steps", "1", INT, max_steps, 1),
	OK("tracking.max_steps", "10000", INT, max_steps, 10000),
	OK("tracking.max_steps", "700.0", INT, max_steps, 700),
	BAD("tracking.max_steps", "10001"),
	BAD("tracking.max_steps", "2.5"),
	BAD("tracking.max_steps", "-3"),
	BAD("tracking.min_length", "-0.1"),
	OK("tracking.min_length", "0", DBL, min_length, 0),
	OK("tracking.min_length", "1e300", DBL, min_length, 1e300),
	BAD("tracking.max_length", "0"),
	BAD("tracking.max_length", "-5"),
	OK("tracking.max_length", "1e-9", DBL, max_length, 1e-9),
	OK("tracking.max_length", "null", DBL, max_length, INFINITY),
	BAD("seeds.count", "0"),
	BAD("seeds.count", "-1"),
	OK("seeds.count", "1", U64, seed_count, 1),
	OK("seeds.count", "100000000", U64, seed_count, 1e8),
	OK("seeds.count", "2e3", U64, seed_count, 2000),
	BAD("seeds.count", "100000001"),
	BAD("seeds.count", "2.5"),
	BAD("seeds.count", "1e300"),
	BAD("seeds.rng_seed", "-1"),
	OK("seeds.rng_seed", "0", U64, rng_seed, 0),
	OK("seeds.rng_seed", "9007199254740992", U64, rng_seed, 9007199254740992.0),
	BAD("seeds.rng_seed", "9007199254740993"),
	BAD("seeds.rng_seed", "9223372036854775807"),
	BAD("seeds.rng_seed", "1.5"),
	BAD("seeds.select", "0"),
	BAD("seeds.select", "-5"),
	BAD("seeds.select", "100000001"),
	OK("seeds.select", "1", U64, seed_select, 1),
	OK("seeds.select", "100000000", U64, seed_select, 1e8),
	BAD("tracking.step_mm", "0"),
	BAD("tracking.step_mm", "-0.5"),
	OK("tracking.step_mm", "1e-9", DBL, step_mm, 1e-9),
	OK("tracking.step_mm", "10", DBL, step_mm, 10),
	BAD("tracking.step_mm", "10.000001"),
#undef OK
#undef BAD
};

static double slot_value(const struct jobspec *js, const struct range_case *rc)
{
	const char *p = (const char *)js + rc->offset;

	switch (rc->type) {
	case DBL:
		return *(const double *)(const void *)p;
	case INT:
		return *(const int *)(const void *)p;
	case U64:
		return (double)*(const uint64_t *)(const void *)p;
	case NONE:
		break;
	}
	fail_msg("no value for %s", rc->field);
	return NAN;
}

static void test_ranges(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(range_cases); i++) {
		const struct range_case *rc = &range_cases[i];
		const char *key = strchr(rc->field, '.') + 1;
		bool in_seeds = !strncmp(rc->field, "seeds.", 6);
		char member[128], json[512];
		struct jobspec js;

		snprintf(member, sizeof(member), "\"%s\": %s", key, rc->value);
		snprintf(json, sizeof(json),
			 in_seeds ? SEEDS_JOB("\"roi\": \"r\", %s") : TRACKING_JOB("%s"), member);
		if (rc->type == NONE) {
			expect_error(json, rc->field, "must be");
			continue;
		}
		expect_ok(json, NULL, &js);
		if (slot_value(&js, rc) != rc->expect)
			fail_msg("%s = %s stored as %.17g", rc->field, rc->value,
				 slot_value(&js, rc));
		jobspec_free(&js);
	}
}

/* The wording of range messages: range, unit, null when allowed, value. */
static void test_range_messages(void **state)
{
	(void)state;
	expect_error(TRACKING_JOB("\"max_angle\": 120"), "tracking.max_angle",
		     "must be in (0, 90] degrees, got 120");
	expect_error(TRACKING_JOB("\"step_size\": 0"), "tracking.step_size",
		     "must be in (0, 5] voxels, got 0");
	expect_error(TRACKING_JOB("\"pmf_threshold\": 1"), "tracking.pmf_threshold",
		     "must be in [0, 1), got 1");
	expect_error(TRACKING_JOB("\"fa_threshold\": 2e6"), "tracking.fa_threshold",
		     "must be in [0, 1000000], got 2000000");
	/* the value is printed exactly, not rounded into the range */
	expect_error(TRACKING_JOB("\"relative_peak_threshold\": 1.0000000000000002"),
		     "tracking.relative_peak_threshold",
		     "must be in [0, 1], got 1.0000000000000002");
	expect_error(TRACKING_JOB("\"relative_peak_threshold\": 1.5"),
		     "tracking.relative_peak_threshold", "must be in [0, 1], got 1.5");
	expect_error(TRACKING_JOB("\"min_length\": -1"), "tracking.min_length",
		     "must be >= 0 mm, got -1");
	expect_error(TRACKING_JOB("\"max_length\": 0"), "tracking.max_length",
		     "must be > 0 mm or null, got 0");
	expect_error(TRACKING_JOB("\"max_steps\": 10001"), "tracking.max_steps",
		     "must be in [1, 10000], got 10001");
	expect_error("{" INPUTS ", \"seeds\": {\"roi\": \"r\", \"rng_seed\": 9007199254740993}}",
		     "seeds.rng_seed", "must be in [0, 9007199254740992], got 9007199254740993");
	expect_error("{" INPUTS ", \"seeds\": {\"roi\": \"r\", \"count\": 2.5}}", "seeds.count",
		     "must be an integer, got 2.5");
}

static void test_lengths(void **state)
{
	struct jobspec js;

	(void)state;
	expect_error(TRACKING_JOB("\"min_length\": 10, \"max_length\": 10"), "tracking.min_length",
		     "must be less than tracking.max_length (10 mm), got 10");
	expect_error(TRACKING_JOB("\"min_length\": 50, \"max_length\": 20"), "tracking.min_length",
		     NULL);
	expect_ok(TRACKING_JOB("\"min_length\": 10, \"max_length\": 10.5"), NULL, &js);
	jobspec_free(&js);
	expect_ok(TRACKING_JOB("\"min_length\": 1e300, \"max_length\": null"), NULL, &js);
	assert_true(isinf(js.max_length));
	jobspec_free(&js);
}

/* TRX's own options: defaults, and each value landing in the spec. */
static void test_trx_output(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(", \"output\": {\"format\": \"trx\"}"), NULL, &js);
	assert_int_equal(js.output_format, OUTPUT_TRX);
	assert_int_equal(js.output_positions, TRX_POSITIONS_FLOAT32);
	assert_int_equal(js.output_compression, TRX_COMPRESSION_STORE);
	jobspec_free(&js);
	expect_ok(ROI_JOB(", \"output\": {\"format\": \"trx\", \"positions\": \"float16\", "
			  "\"compression\": \"deflate\", \"save_seeds\": true}"), NULL, &js);
	assert_int_equal(js.output_positions, TRX_POSITIONS_FLOAT16);
	assert_int_equal(js.output_compression, TRX_COMPRESSION_DEFLATE);
	assert_true(js.save_seeds);
	jobspec_free(&js);
}

/* output.compress: off unless given, true for the defaults, an object for
 * tolerances of its own; any format. */
static void test_compress_output(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(""), NULL, &js);
	assert_false(js.compress);
	assert_true(js.compress_tolerance_mm == 0.01);
	assert_true(js.compress_max_segment_mm == 10);
	jobspec_free(&js);
	expect_ok(ROI_JOB(", \"output\": {\"compress\": null}"), NULL, &js);
	assert_false(js.compress);
	jobspec_free(&js);
	expect_ok(ROI_JOB(", \"output\": {\"format\": \"tck\", \"compress\": true}"), NULL, &js);
	assert_true(js.compress);
	assert_true(js.compress_tolerance_mm == 0.01);
	assert_true(js.compress_max_segment_mm == 10);
	jobspec_free(&js);
	expect_ok(ROI_JOB(", \"output\": {\"format\": \"trx\", \"compress\": "
			  "{\"tolerance_mm\": 0.1}}"), NULL, &js);
	assert_true(js.compress);
	assert_true(js.compress_tolerance_mm == 0.1);
	assert_true(js.compress_max_segment_mm == 10);
	jobspec_free(&js);
	expect_ok(ROI_JOB(", \"output\": {\"compress\": {\"tolerance_mm\": 10, "
			  "\"max_segment_mm\": 1000}}"), NULL, &js);
	assert_true(js.compress_tolerance_mm == 10);
	assert_true(js.compress_max_segment_mm == 1000);
	jobspec_free(&js);
	expect_ok(ROI_JOB(", \"output\": {\"compress\": {}}"), NULL, &js);
	assert_true(js.compress);
	jobspec_free(&js);
}

/* ---- unknown fields and types ---- */

static const struct {
	const char *json;
	const char *field;
	const char *message;
} bad_docs[] = {
	/* unknown keys, at every level */
	{ ROI_JOB(", \"version\": 1"), "version", "unknown field (known: inputs," },
	{ "{\"inputs\": {\"odf\": \"o\", \"stop_map\": \"s\", \"fa\": \"f\"}, " ROI_SEEDS "}",
	  "inputs.fa", "unknown field (known: odf, sh, sh_basis, sh_frame, dwi, bvals, bvecs, bvecs_convention, mask, stop_map)" },
	{ "{" INPUTS ", \"seeds\": {\"roi\": \"r\", \"cnt\": 5}}", "seeds.cnt", "unknown field" },
	{ TRACKING_JOB("\"stepsize\": 0.5"), "tracking.stepsize", "unknown field (known: sphere," },
	{ ROI_JOB(", \"output\": {\"gzip\": true}"), "output.gzip", "unknown field" },
	{ TRACKING_JOB("\"sphere\": {\"faces\": []}"), "tracking.sphere.faces", "unknown field" },
	/* wrong JSON types */
	{ "{\"inputs\": \"odf.nii.gz\", " ROI_SEEDS "}", "inputs", "must be an object" },
	{ "{\"inputs\": {\"odf\": 5, \"stop_map\": \"s\"}, " ROI_SEEDS "}", "inputs.odf",
	  "must be a string" },
	{ "{" INPUTS ", \"seeds\": [\"roi.nii.gz\"]}", "seeds", "must be an object" },
	{ "{" INPUTS ", \"seeds\": {\"roi\": \"r\", \"per_voxel\": \"yes\"}}", "seeds.per_voxel",
	  "must be a boolean" },
	{ "{" INPUTS ", \"seeds\": {\"roi\": \"r\", \"count\": \"2000\"}}", "seeds.count",
	  "must be an integer" },
	{ TRACKING_JOB("\"step_size\": \"0.5\""), "tracking.step_size", "must be a number" },
	{ TRACKING_JOB("\"step_size\": true"), "tracking.step_size", "must be a number" },
	{ TRACKING_JOB("\"step_size\": null"), "tracking.step_size", "must be a number" },
	{ TRACKING_JOB("\"max_steps\": \"5\""), "tracking.max_steps", "must be an integer" },
	{ TRACKING_JOB("\"max_length\": \"inf\""), "tracking.max_length",
	  "must be a number or null" },
	{ TRACKING_JOB("\"min_length\": null"), "tracking.min_length", "must be a number" },
	{ TRACKING_JOB("\"sphere\": 724"), "tracking.sphere", "must be a sphere name" },
	{ TRACKING_JOB("\"sphere\": \"repulsion999\""), "tracking.sphere",
	  "must be one of \"repulsion724\", \"repulsion100\", \"symmetric362\","
	  " got \"repulsion999\"" },
	{ TRACKING_JOB("\"sphere\": {}"), "tracking.sphere.vertices", "is required" },
	{ TRACKING_JOB("\"sphere\": {\"vertices\": {}}"), "tracking.sphere.vertices",
	  "must be an array" },
	{ ROI_JOB(", \"tracking\": null"), "tracking", "must be an object" },
	{ ROI_JOB(", \"tracking\": []"), "tracking", "must be an object" },
	{ ROI_JOB(", \"direction_getter\": 1"), "direction_getter", "must be a string" },
	{ ROI_JOB(", \"direction_getter\": \"det\""), "direction_getter",
	  "must be one of \"prob\", \"boot\", \"ptt\", got \"det\"" },
	{ ROI_JOB(", \"output\": \"out.trk\""), "output", "must be an object" },
	{ ROI_JOB(", \"output\": {\"format\": \"vtk\"}"), "output.format",
	  "must be one of \"trk\", \"tck\", \"trx\", got \"vtk\"" },
	{ ROI_JOB(", \"output\": {\"format\": \"tck\", \"positions\": \"float16\"}"),
	  "output.positions", "needs output.format \"trx\", got \"tck\"" },
	{ ROI_JOB(", \"output\": {\"positions\": \"float32\"}"), "output.positions",
	  "needs output.format \"trx\", got \"trk\"" },
	{ ROI_JOB(", \"output\": {\"format\": \"trk\", \"compression\": \"store\"}"),
	  "output.compression", "needs output.format \"trx\", got \"trk\"" },
	{ ROI_JOB(", \"output\": {\"format\": \"trx\", \"positions\": \"float64\"}"),
	  "output.positions", "must be one of \"float32\", \"float16\", got \"float64\"" },
	{ ROI_JOB(", \"output\": {\"format\": \"trx\", \"compression\": \"zstd\"}"),
	  "output.compression", "must be one of \"store\", \"deflate\", got \"zstd\"" },
	{ ROI_JOB(", \"output\": {\"format\": \"trx\", \"positions\": 16}"),
	  "output.positions", "must be a string" },
	{ ROI_JOB(", \"output\": {\"format\": null}"), "output.format", "must be a string" },
	{ ROI_JOB(", \"output\": {\"save_seeds\": 1}"), "output.save_seeds", "must be a boolean" },
	{ ROI_JOB(", \"output\": {\"format\": \"tck\", \"save_seed_index\": true}"),
	  "output.save_seed_index",
	  "needs output.format \"trk\" or \"trx\" (TCK keeps no per-streamline data)" },
	{ ROI_JOB(", \"output\": {\"format\": \"tck\", \"save_direction_getter\": true}"),
	  "output.save_direction_getter",
	  "needs output.format \"trk\" or \"trx\" (TCK keeps no per-streamline data)" },
	{ ROI_JOB(", \"output\": {\"save_seed_index\": 1}"), "output.save_seed_index",
	  "must be a boolean" },
	{ ROI_JOB(", \"output\": {\"path\": 1}"), "output.path", "must be a string" },
	{ ROI_JOB(", \"output\": {\"compress\": 0.01}"), "output.compress",
	  "must be null, true or an object" },
	{ ROI_JOB(", \"output\": {\"compress\": {\"tolerance_mm\": 0}}"),
	  "output.compress.tolerance_mm", "must be in (0, 10] mm, got 0" },
	{ ROI_JOB(", \"output\": {\"compress\": {\"tolerance_mm\": 10.5}}"),
	  "output.compress.tolerance_mm", "must be in (0, 10] mm, got 10.5" },
	{ ROI_JOB(", \"output\": {\"compress\": {\"tolerance_mm\": \"0.1\"}}"),
	  "output.compress.tolerance_mm", "must be a number" },
	{ ROI_JOB(", \"output\": {\"compress\": {\"max_segment_mm\": -1}}"),
	  "output.compress.max_segment_mm", "must be in (0, 1000] mm, got -1" },
	{ ROI_JOB(", \"output\": {\"compress\": {\"max_segment_mm\": 1001}}"),
	  "output.compress.max_segment_mm", "must be in (0, 1000] mm, got 1001" },
	{ ROI_JOB(", \"output\": {\"compress\": {\"tol_error\": 0.1}}"),
	  "output.compress.tol_error", "unknown field (known: tolerance_mm, max_segment_mm)" },
	{ SEEDS_JOB("\"points\": [[1, 2, 3]], \"space\": 2"), "seeds.space", "must be a string" },
	{ SEEDS_JOB("\"points\": [[1, 2, 3]], \"space\": \"mm\""), "seeds.space",
	  "must be one of \"voxel\", \"ras\", got \"mm\"" },
	/* the first problem in document order is the one reported */
	{ TRACKING_JOB("\"max_angle\": 120, \"stepsize\": 1"), "tracking.max_angle", NULL },
	{ TRACKING_JOB("\"stepsize\": 1, \"max_angle\": 120"), "tracking.stepsize", NULL },
	{ TRACKING_JOB("\"sphere\": {\"vertices\": [], \"faces\": []}"),
	  "tracking.sphere.vertices", "must have 6 to 65536 vertices, got 0" },
	/* required members */
	{ "{" ROI_SEEDS "}", "inputs", "needs exactly one of \"odf\" (an ODF on tracking.sphere), "
	  "\"sh\" (SH coefficients) or \"dwi\" (raw DWI with bvals and bvecs), got 0" },
	{ "{\"inputs\": {\"stop_map\": \"s\"}, " ROI_SEEDS "}", "inputs", "got 0" },
	{ "{\"inputs\": {\"odf\": \"o\"}, " ROI_SEEDS "}", "inputs.stop_map", "is required" },
	{ "{" INPUTS "}", "seeds", "is required, with either \"roi\", \"points\" or \"points_file\"" },
	{ "{" INPUTS ", \"seeds\": {}}", "seeds", "is required, with either" },
	{ "{" INPUTS ", \"seeds\": {\"count\": 5}}", "seeds", "is required, with either" },
	/* the document itself */
	{ "[]", "", "the job document must be a JSON object" },
	{ "42", "", "invalid JSON at line 1" },
	{ "", "", "invalid JSON at line 1" },
	{ "{\"inputs\": ", "", "invalid JSON at line 1, column " },
	{ "{\n  \"inputs\": {\"odf\": \"o\",}\n}", "", "invalid JSON at line 2, column " },
	{ ROI_JOB("") " trailing", "", "invalid JSON at line 1" },
	{ "{\"inputs\": {\"odf\": \"o\\u0000x\", \"stop_map\": \"s\"}, " ROI_SEEDS "}", "",
	  "invalid JSON" },
	{ "{\"inputs\": {\"odf\": \"\xff\", \"stop_map\": \"s\"}, " ROI_SEEDS "}", "",
	  "invalid JSON" },
	/* duplicate keys, at the top and nested */
	{ "{" INPUTS ", " INPUTS ", " ROI_SEEDS "}", "", "duplicate object key" },
	{ TRACKING_JOB("\"step_size\": 0.5, \"step_size\": 0.2"), "", "duplicate object key" },
};

static void test_bad_documents(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad_docs); i++)
		expect_error(bad_docs[i].json, bad_docs[i].field, bad_docs[i].message);
}

/* ---- inputs kinds and the model ---- */

static void expect_model_defaults(const struct jobspec *js)
{
	assert_int_equal(js->model.sh_order, 8);
	assert_true(js->model.lambda == 1);
	assert_true(js->model.tau == 0.1);
	assert_int_equal(js->model.roi_radius, 10);
	assert_true(js->model.response_fa == 0.7);
	assert_false(js->model.response_given);
	assert_true(js->model.response_evals[0] == 0 && js->model.response_s0 == 0);
}

static void test_defaults_dwi(void **state)
{
	struct jobspec js;

	(void)state;
	/* no model, no mask, no stop_map: all optional with a dwi */
	expect_ok(DWI_JOB(""), "/data", &js);
	assert_int_equal(js.input_kind, JOBSPEC_INPUT_DWI);
	assert_string_equal(js.dwi_path, "/data/dwi.nii.gz");
	assert_string_equal(js.bvals_path, "/data/dwi.bval");
	assert_string_equal(js.bvecs_path, "/data/dwi.bvec");
	assert_null(js.mask_path);
	assert_null(js.stop_map_path);
	assert_null(js.odf_path);
	assert_null(js.sh_path);
	assert_true(js.fa_threshold == 0.1);   /* also the CSD fit mask */
	expect_model_defaults(&js);
	jobspec_free(&js);
	assert_true(is_zeroed(&js));

	expect_ok("{\"inputs\": {" DWI_INPUTS ", \"mask\": \"m.nii\", \"stop_map\": \"s.nii\"}, "
		  ROI_SEEDS "}", "/data", &js);
	assert_string_equal(js.mask_path, "/data/m.nii");
	assert_string_equal(js.stop_map_path, "/data/s.nii");
	jobspec_free(&js);

	/* the model as a name, as an object with only the name, response "auto" */
	expect_ok(DWI_JOB(", \"model\": \"csd\""), NULL, &js);
	expect_model_defaults(&js);
	jobspec_free(&js);
	expect_ok(MODEL_JOB("\"name\": \"csd\""), NULL, &js);
	expect_model_defaults(&js);
	jobspec_free(&js);
	expect_ok(MODEL_JOB("\"response\": \"auto\""), NULL, &js);
	expect_model_defaults(&js);
	jobspec_free(&js);
	expect_ok(MODEL_JOB(""), NULL, &js);
	expect_model_defaults(&js);
	jobspec_free(&js);
}

static void test_model_members(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(MODEL_JOB("\"name\": \"csd\", \"sh_order\": 6, \"lambda\": 0.5, \"tau\": 0.2,"
			    " \"roi_radius\": 5, \"response_fa\": 0.6,"
			    " \"response\": {\"evals\": [0.0017, 0.0003, 0.0003], \"s0\": 250}"),
		  NULL, &js);
	assert_int_equal(js.model.sh_order, 6);
	assert_true(js.model.lambda == 0.5);
	assert_true(js.model.tau == 0.2);
	assert_int_equal(js.model.roi_radius, 5);
	assert_true(js.model.response_fa == 0.6);
	assert_true(js.model.response_given);
	assert_true(js.model.response_evals[0] == 0.0017);
	assert_true(js.model.response_evals[1] == 0.0003);
	assert_true(js.model.response_evals[2] == 0.0003);
	assert_true(js.model.response_s0 == 250);
	jobspec_free(&js);
	assert_true(is_zeroed(&js));

	/* bounds that are accepted */
	expect_ok(MODEL_JOB("\"sh_order\": 2, \"lambda\": 1e6, \"tau\": 0, \"roi_radius\": 1"),
		  NULL, &js);
	assert_int_equal(js.model.sh_order, 2);
	assert_int_equal(js.model.roi_radius, 1);
	jobspec_free(&js);
	expect_ok(MODEL_JOB("\"sh_order\": 16, \"tau\": 1, \"roi_radius\": 128,"
			    " \"response_fa\": 0.999"), NULL, &js);
	assert_int_equal(js.model.sh_order, 16);
	assert_true(js.model.tau == 1);
	jobspec_free(&js);
	expect_ok(MODEL_JOB("\"sh_order\": 8.0"), NULL, &js);
	assert_int_equal(js.model.sh_order, 8);
	jobspec_free(&js);
}

static void test_sh_inputs(void **state)
{
	static const struct {
		const char *basis;
		enum sh_basis value;
		enum jobspec_sh_frame frame;   /* the default */
	} bases[] = {
		{ "descoteaux07_legacy", SH_DESCOTEAUX07_LEGACY, JOBSPEC_SH_FRAME_VOXEL },
		{ "descoteaux07", SH_DESCOTEAUX07, JOBSPEC_SH_FRAME_VOXEL },
		{ "tournier07", SH_TOURNIER07, JOBSPEC_SH_FRAME_WORLD },
		{ "tournier07_legacy", SH_TOURNIER07_LEGACY, JOBSPEC_SH_FRAME_WORLD },
	};
	struct jobspec js;
	char json[512];

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bases); i++) {
		snprintf(json, sizeof(json), SH_INPUTS(", \"sh_basis\": \"%s\""), bases[i].basis);
		expect_ok(json, "/d", &js);
		assert_int_equal(js.input_kind, JOBSPEC_INPUT_SH);
		assert_string_equal(js.sh_path, "/d/sh.nii.gz");
		assert_string_equal(js.stop_map_path, "/d/fa.nii.gz");
		assert_null(js.odf_path);
		assert_null(js.dwi_path);
		assert_int_equal(js.sh_basis, bases[i].value);
		if (js.sh_frame != bases[i].frame)
			fail_msg("%s: default sh_frame %d, want %d", bases[i].basis, js.sh_frame,
				 bases[i].frame);
		jobspec_free(&js);
		/* an explicit frame wins over the default, both ways */
		for (int f = 0; f < 2; f++) {
			snprintf(json, sizeof(json),
				 SH_INPUTS(", \"sh_basis\": \"%s\", \"sh_frame\": \"%s\""),
				 bases[i].basis, f ? "world" : "voxel");
			expect_ok(json, NULL, &js);
			assert_int_equal(js.sh_frame,
					 f ? JOBSPEC_SH_FRAME_WORLD : JOBSPEC_SH_FRAME_VOXEL);
			jobspec_free(&js);
		}
	}
}

/* bvecs_convention: voxel unless chosen; a .mif (or an upload, whose format
 * its content tells) may go without bvals and bvecs, and a .mif FOD
 * without sh_basis (tournier07, in world axes). */
static void test_gradient_conventions_and_mif(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(DWI_JOB(""), NULL, &js);
	assert_int_equal(js.bvecs_convention, JOBSPEC_BVECS_VOXEL);
	assert_false(js.bvecs_convention_given);
	jobspec_free(&js);
	expect_ok(INPUTS_JOB(DWI_INPUTS ", \"bvecs_convention\": \"fsl\""), NULL, &js);
	assert_int_equal(js.bvecs_convention, JOBSPEC_BVECS_FSL);
	assert_true(js.bvecs_convention_given);
	jobspec_free(&js);
	expect_ok(INPUTS_JOB(DWI_INPUTS ", \"bvecs_convention\": \"voxel\""), NULL, &js);
	assert_int_equal(js.bvecs_convention, JOBSPEC_BVECS_VOXEL);
	assert_true(js.bvecs_convention_given);
	jobspec_free(&js);
	expect_ok(INPUTS_JOB("\"dwi\": \"dwi.MIF.gz\""), "/d", &js);
	assert_string_equal(js.dwi_path, "/d/dwi.MIF.gz");
	assert_null(js.bvals_path);
	assert_null(js.bvecs_path);
	jobspec_free(&js);
	expect_ok(INPUTS_JOB("\"dwi\": \"sha256:" "0123456789abcdef0123456789abcdef"
			     "0123456789abcdef0123456789abcdef\""), NULL, &js);
	jobspec_free(&js);
	expect_ok(INPUTS_JOB("\"sh\": \"wmfod.mif\", \"stop_map\": \"fa.mif\""), NULL, &js);
	assert_false(js.sh_basis_given);
	assert_int_equal(js.sh_basis, SH_TOURNIER07);
	assert_int_equal(js.sh_frame, JOBSPEC_SH_FRAME_WORLD);
	jobspec_free(&js);
	expect_ok(INPUTS_JOB("\"sh\": \"fod.mif\", \"sh_basis\": \"descoteaux07\", "
			     "\"stop_map\": \"fa.mif\""), NULL, &js);
	assert_true(js.sh_basis_given);
	assert_int_equal(js.sh_basis, SH_DESCOTEAUX07);
	assert_int_equal(js.sh_frame, JOBSPEC_SH_FRAME_VOXEL);
	jobspec_free(&js);
}

static const struct {
	const char *json;
	const char *field;
	const char *message;
} bad_inputs_models[] = {
	/* exactly one of odf, sh, dwi */
	{ INPUTS_JOB("\"odf\": \"o\", \"sh\": \"s\", \"sh_basis\": \"tournier07\", "
		     "\"stop_map\": \"f\""), "inputs", "needs exactly one of" },
	{ INPUTS_JOB("\"odf\": \"o\", " DWI_INPUTS), "inputs", "got 2" },
	{ INPUTS_JOB("\"odf\": \"o\", \"sh\": \"s\", " DWI_INPUTS), "inputs", "got 3" },
	{ INPUTS_JOB("\"bvals\": \"b\", \"bvecs\": \"v\""), "inputs", "got 0" },
	{ INPUTS_JOB(""), "inputs", "got 0" },
	/* keys that belong to one kind */
	{ INPUTS_JOB("\"odf\": \"o\", \"stop_map\": \"f\", \"mask\": \"m\""), "inputs.mask",
	  "is only allowed with inputs.dwi" },
	{ INPUTS_JOB("\"odf\": \"o\", \"stop_map\": \"f\", \"bvals\": \"b\""), "inputs.bvals",
	  "is only allowed with inputs.dwi" },
	{ SH_INPUTS(", \"sh_basis\": \"tournier07\", \"bvecs\": \"v\""), "inputs.bvecs",
	  "is only allowed with inputs.dwi" },
	{ INPUTS_JOB(DWI_INPUTS ", \"sh_basis\": \"tournier07\""), "inputs.sh_basis",
	  "is only allowed with inputs.sh" },
	{ INPUTS_JOB("\"odf\": \"o\", \"stop_map\": \"f\", \"sh_frame\": \"voxel\""),
	  "inputs.sh_frame", "is only allowed with inputs.sh" },
	/* what each kind requires */
	{ INPUTS_JOB("\"dwi\": \"d\", \"bvecs\": \"v\""), "inputs.bvals",
	  "is required with inputs.dwi" },
	{ INPUTS_JOB("\"dwi\": \"d\", \"bvals\": \"b\""), "inputs.bvecs",
	  "is required with inputs.dwi" },
	{ SH_INPUTS(""), "inputs.sh_basis", "is required with inputs.sh: \"tournier07\" for MRtrix3" },
	{ INPUTS_JOB("\"sh\": \"fod.nii\", \"stop_map\": \"f\""), "inputs.sh_basis",
	  "the default only for a .mif FOD" },
	/* a .mif may carry its gradients; bvals, bvecs and their convention go together */
	{ INPUTS_JOB("\"dwi\": \"d.mif\", \"bvecs\": \"v\""), "inputs.bvals",
	  "is required with inputs.dwi and inputs.bvecs" },
	{ INPUTS_JOB("\"dwi\": \"d.mif.gz\", \"bvals\": \"b\""), "inputs.bvecs",
	  "is required with inputs.dwi and inputs.bvals" },
	{ INPUTS_JOB("\"dwi\": \"d.nii\""), "inputs.bvals",
	  "is required with inputs.dwi (only a .mif may carry its gradient table instead)" },
	{ INPUTS_JOB("\"dwi\": \"d.mif\", \"bvecs_convention\": \"fsl\""),
	  "inputs.bvecs_convention", "applies to inputs.bvecs only" },
	{ INPUTS_JOB(DWI_INPUTS ", \"bvecs_convention\": \"lps\""), "inputs.bvecs_convention",
	  "must be one of \"voxel\", \"fsl\", got \"lps\"" },
	{ INPUTS_JOB("\"odf\": \"o\", \"stop_map\": \"f\", \"bvecs_convention\": \"fsl\""),
	  "inputs.bvecs_convention", "is only allowed with inputs.dwi" },
	{ SH_INPUTS(", \"sh_frame\": \"world\""), "inputs.sh_basis", "is required with inputs.sh" },
	{ INPUTS_JOB("\"sh\": \"s\", \"sh_basis\": \"tournier07\""), "inputs.stop_map",
	  "is required with inputs.sh (only a dwi input has a default: its DTI FA)" },
	{ INPUTS_JOB("\"odf\": \"o\""), "inputs.stop_map", "is required with inputs.odf" },
	/* values of the SH keys */
	{ SH_INPUTS(", \"sh_basis\": \"mrtrix\""), "inputs.sh_basis",
	  "must be one of \"descoteaux07_legacy\", \"descoteaux07\", \"tournier07\", "
	  "\"tournier07_legacy\", got \"mrtrix\"" },
	{ SH_INPUTS(", \"sh_basis\": \"tournier07\", \"sh_frame\": \"ras\""), "inputs.sh_frame",
	  "must be one of \"voxel\", \"world\", got \"ras\"" },
	{ SH_INPUTS(", \"sh_basis\": 7"), "inputs.sh_basis", "must be a string" },
	{ INPUTS_JOB("\"dwi\": 1, \"bvals\": \"b\", \"bvecs\": \"v\""), "inputs.dwi",
	  "must be a string" },
	/* the model belongs to dwi inputs only */
	{ ROI_JOB(", \"model\": \"csd\""), "model", "applies to inputs.dwi only" },
	{ ROI_JOB(", \"model\": {\"sh_order\": 6}"), "model", "applies to inputs.dwi only" },
	{ "{\"inputs\": {\"sh\": \"s\", \"sh_basis\": \"tournier07\", \"stop_map\": \"f\"}, "
	  ROI_SEEDS ", \"model\": \"csd\"}", "model", "applies to inputs.dwi only" },
	/* the model itself */
	{ DWI_JOB(", \"model\": \"dti\""), "model",
	  "must be one of \"csd\", \"opdt\", \"csa\", got \"dti\"" },
	{ DWI_JOB(", \"model\": 8"), "model",
	  "must be a model name (\"csd\", \"opdt\", \"csa\") or an object" },
	{ DWI_JOB(", \"model\": null"), "model", "must be a model name" },
	{ MODEL_JOB("\"name\": \"msmt\""), "model.name",
	  "must be one of \"csd\", \"opdt\", \"csa\", got \"msmt\"" },
	{ MODEL_JOB("\"order\": 8"), "model.order", "unknown field (known: name, sh_order," },
	{ MODEL_JOB("\"sh_order\": 7"), "model.sh_order",
	  "must be even (symmetric harmonics), got 7" },
	{ MODEL_JOB("\"sh_order\": 0"), "model.sh_order", "must be in [2, 16], got 0" },
	{ MODEL_JOB("\"sh_order\": 18"), "model.sh_order", "must be in [2, 16], got 18" },
	{ MODEL_JOB("\"sh_order\": -2"), "model.sh_order", "must be in [2, 16]" },
	{ MODEL_JOB("\"sh_order\": 17"), "model.sh_order", "must be in [2, 16], got 17" },
	{ MODEL_JOB("\"sh_order\": 2.5"), "model.sh_order", "must be an integer" },
	{ MODEL_JOB("\"sh_order\": \"8\""), "model.sh_order", "must be an integer" },
	{ MODEL_JOB("\"lambda\": 0"), "model.lambda", "must be" },
	{ MODEL_JOB("\"lambda\": 1000001"), "model.lambda", "must be" },
	{ MODEL_JOB("\"tau\": -0.1"), "model.tau", "must be in [0, 1]" },
	{ MODEL_JOB("\"tau\": 1.5"), "model.tau", "must be in [0, 1]" },
	{ MODEL_JOB("\"roi_radius\": 0"), "model.roi_radius", "must be in [1, 128] voxels, got 0" },
	{ MODEL_JOB("\"roi_radius\": 129"), "model.roi_radius", "must be in [1, 128] voxels" },
	{ MODEL_JOB("\"roi_radius\": 2.5"), "model.roi_radius", "must be an integer" },
	{ MODEL_JOB("\"response_fa\": 0"), "model.response_fa", "must be in (0, 1), got 0" },
	{ MODEL_JOB("\"response_fa\": 1"), "model.response_fa", "must be in (0, 1), got 1" },
	/* the response */
	{ MODEL_JOB("\"response\": \"estimate\""), "model.response",
	  "must be \"auto\" or an object {\"evals\": [...], \"s0\": ...}" },
	{ MODEL_JOB("\"response\": [0.0017, 0.0003, 0.0003]"), "model.response",
	  "must be \"auto\" or an object" },
	{ MODEL_JOB("\"response\": {\"evals\": [0.0017, 0.0003, 0.0003]}"), "model.response",
	  "needs both \"evals\" and \"s0\"" },
	{ MODEL_JOB("\"response\": {\"s0\": 100}"), "model.response",
	  "needs both \"evals\" and \"s0\"" },
	{ MODEL_JOB("\"response\": {}"), "model.response", "needs both \"evals\" and \"s0\"" },
	{ MODEL_JOB("\"response\": {\"evals\": [0.0017, 0.0003, 0.0004], \"s0\": 100}"),
	  "model.response.evals", "must describe an axially symmetric tensor" },
	{ MODEL_JOB("\"response\": {\"evals\": [0.0017, 0.0003], \"s0\": 100}"),
	  "model.response.evals", "must be an array of 3 eigenvalues (mm^2/s)" },
	{ MODEL_JOB("\"response\": {\"evals\": [0.0017, 0, 0], \"s0\": 100}"),
	  "model.response.evals", "eigenvalue 1 must be a number in (0, 1] mm^2/s" },
	{ MODEL_JOB("\"response\": {\"evals\": [1.7, 0.3, 0.3], \"s0\": 100}"),
	  "model.response.evals", "eigenvalue 0 must be a number in (0, 1] mm^2/s" },
	{ MODEL_JOB("\"response\": {\"evals\": [\"a\", 0.3, 0.3], \"s0\": 100}"),
	  "model.response.evals", "eigenvalue 0 must be a number" },
	{ MODEL_JOB("\"response\": {\"evals\": [0.0017, 0.0003, 0.0003], \"s0\": 0}"),
	  "model.response.s0", "must be > 0" },
	{ MODEL_JOB("\"response\": {\"evals\": [0.0017, 0.0003, 0.0003], \"s0\": \"100\"}"),
	  "model.response.s0", "must be a number" },
	{ MODEL_JOB("\"response\": {\"evals\": [0.0017, 0.0003, 0.0003], \"s0\": 100, "
		    "\"ratio\": 0.2}"), "model.response.ratio", "unknown field (known: evals, s0)" },
};

/* The boot getter and its models. */
#define BOOT_JOB(extra) DWI_JOB(", \"direction_getter\": \"boot\"" extra)
#define BOOT_MODEL_JOB(members) BOOT_JOB(", \"model\": {" members "}")

static const struct {
	const char *json;
	const char *field;
	const char *message;
} bad_boot[] = {
	/* boot resamples the raw signal */
	{ ROI_JOB(", \"direction_getter\": \"boot\""), "direction_getter",
	  "\"boot\" needs inputs.dwi with bvals and bvecs" },
	{ "{\"inputs\": {\"sh\": \"s\", \"sh_basis\": \"tournier07\", \"stop_map\": \"f\"}, "
	  ROI_SEEDS ", \"direction_getter\": \"boot\"}", "direction_getter",
	  "\"boot\" needs inputs.dwi" },
	/* each getter has its models */
	{ BOOT_JOB(", \"model\": \"csd\""), "model",
	  "must be \"opdt\" or \"csa\" with direction_getter \"boot\", got \"csd\"" },
	{ BOOT_MODEL_JOB("\"name\": \"csd\""), "model.name",
	  "must be \"opdt\" or \"csa\" with direction_getter \"boot\"" },
	{ DWI_JOB(", \"model\": \"opdt\""), "model",
	  "must be \"csd\" with direction_getter \"prob\" (\"opdt\" and \"csa\" are for "
	  "\"boot\"), got \"opdt\"" },
	{ MODEL_JOB("\"name\": \"csa\""), "model.name", "got \"csa\"" },
	/* members of the other family */
	{ BOOT_MODEL_JOB("\"tau\": 0.1"), "model.tau",
	  "applies to model \"csd\", not \"opdt\"" },
	{ BOOT_MODEL_JOB("\"name\": \"csa\", \"response\": \"auto\""), "model.response",
	  "applies to model \"csd\", not \"csa\"" },
	{ MODEL_JOB("\"sh_lambda\": 0.006"), "model.sh_lambda",
	  "applies to model \"opdt\" or \"csa\", not \"csd\"" },
	{ MODEL_JOB("\"min_signal\": 1"), "model.min_signal", "applies to model \"opdt\"" },
	/* values */
	{ BOOT_MODEL_JOB("\"sh_order\": 14"), "model.sh_order",
	  "must be at most 12 for model \"opdt\", got 14" },
	{ BOOT_MODEL_JOB("\"sh_order\": 5"), "model.sh_order", "must be even" },
	{ BOOT_MODEL_JOB("\"sh_lambda\": -0.1"), "model.sh_lambda", "must be in [0, 10]" },
	{ BOOT_MODEL_JOB("\"min_signal\": 0"), "model.min_signal", "must be in (0, 1000000]" },
	{ BOOT_JOB(", \"tracking\": {\"max_attempts\": 0}"), "tracking.max_attempts",
	  "must be in [1, 100], got 0" },
	{ BOOT_JOB(", \"tracking\": {\"max_attempts\": 1.5}"), "tracking.max_attempts",
	  "must be an integer" },
	{ DWI_JOB(", \"tracking\": {\"max_attempts\": 5}"), "tracking.max_attempts",
	  "applies to direction_getter \"boot\" only" },
};

/* tracking.odf_storage: prob only; "sh" needs coefficients to keep. */
static void test_odf_storage(void **state)
{
	static const char *const names[] = { "auto", "float32", "float16", "sh" };
	struct jobspec js;
	char json[256];

	(void)state;
	expect_ok(ROI_JOB(""), NULL, &js);
	assert_int_equal(js.odf_storage, JOBSPEC_ODF_AUTO);
	jobspec_free(&js);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(json, sizeof(json), DWI_JOB(", \"tracking\": {\"odf_storage\": \"%s\"}"),
			 names[i]);
		expect_ok(json, NULL, &js);
		assert_int_equal(js.odf_storage, (int)i);
		jobspec_free(&js);
	}
	expect_ok(SH_INPUTS(", \"sh_basis\": \"tournier07\"}, \"tracking\": {\"odf_storage\": "
			    "\"sh\""), NULL, &js);
	assert_int_equal(js.odf_storage, JOBSPEC_ODF_SH);
	jobspec_free(&js);
	expect_error(TRACKING_JOB("\"odf_storage\": \"sh\""), "tracking.odf_storage",
		     "\"sh\" needs SH coefficients: inputs.sh or inputs.dwi, not inputs.odf");
	expect_error(TRACKING_JOB("\"odf_storage\": \"half\""), "tracking.odf_storage",
		     "must be one of");
	expect_error(TRACKING_JOB("\"odf_storage\": 16"), "tracking.odf_storage", "must be");
	expect_error(BOOT_JOB(", \"tracking\": {\"odf_storage\": \"float16\"}"),
		     "tracking.odf_storage", "not \"boot\"");
	expect_ok(BOOT_JOB(", \"tracking\": {\"odf_storage\": \"auto\"}"), NULL, &js);
	jobspec_free(&js);
}

static void test_boot(void **state)
{
	struct jobspec js;

	(void)state;
	/* defaults: OPDT at order 4 (GPUStreamlines), DIPY's smoothing */
	expect_ok(BOOT_JOB(""), NULL, &js);
	assert_int_equal(js.direction_getter, JOBSPEC_DG_BOOT);
	assert_int_equal(js.model.name, JOBSPEC_MODEL_OPDT);
	assert_int_equal(js.model.sh_order, 4);
	assert_true(js.model.sh_lambda == 0.006);
	assert_true(js.model.min_signal == 1.0);
	assert_int_equal(js.max_attempts, 5);
	jobspec_free(&js);
	expect_ok(BOOT_JOB(", \"model\": \"csa\", \"tracking\": {\"max_attempts\": 1}"), NULL,
		  &js);
	assert_int_equal(js.model.name, JOBSPEC_MODEL_CSA);
	assert_int_equal(js.model.sh_order, 4);
	assert_int_equal(js.max_attempts, 1);
	jobspec_free(&js);
	expect_ok(BOOT_MODEL_JOB("\"name\": \"opdt\", \"sh_order\": 8, \"sh_lambda\": 0, "
				 "\"min_signal\": 0.5"), NULL, &js);
	assert_int_equal(js.model.sh_order, 8);
	assert_true(js.model.sh_lambda == 0.0);
	assert_true(js.model.min_signal == 0.5);
	jobspec_free(&js);
	/* prob keeps CSD at order 8 */
	expect_ok(DWI_JOB(""), NULL, &js);
	assert_int_equal(js.direction_getter, JOBSPEC_DG_PROB);
	assert_int_equal(js.model.name, JOBSPEC_MODEL_CSD);
	assert_int_equal(js.model.sh_order, 8);
	jobspec_free(&js);
	for (size_t i = 0; i < ARRAY_SIZE(bad_boot); i++)
		expect_error(bad_boot[i].json, bad_boot[i].field, bad_boot[i].message);
}

#define PTT_JOB(tracking) ROI_JOB(", \"direction_getter\": \"ptt\", \"tracking\": {" tracking "}")

static const struct {
	const char *json;
	const char *field;
	const char *message;
} bad_ptt[] = {
	{ TRACKING_JOB("\"probe_length\": 1"), "tracking.probe_length",
	  "applies to direction_getter \"ptt\" only" },
	{ TRACKING_JOB("\"rejection_tries\": 10"), "tracking.rejection_tries",
	  "applies to direction_getter \"ptt\" only" },
	{ PTT_JOB("\"max_attempts\": 5"), "tracking.max_attempts",
	  "applies to direction_getter \"boot\" only" },
	{ PTT_JOB("\"probe_length\": 0"), "tracking.probe_length", "must be in (0, 10]" },
	{ PTT_JOB("\"probe_quality\": 1"), "tracking.probe_quality", "must be in [2, 64], got 1" },
	{ PTT_JOB("\"probe_count\": 17"), "tracking.probe_count", "must be in [1, 16]" },
	{ PTT_JOB("\"probe_radius\": -1"), "tracking.probe_radius", "must be in [0, 5]" },
	{ PTT_JOB("\"rejection_samples\": 0"), "tracking.rejection_samples",
	  "must be in [1, 1000]" },
	{ DWI_JOB(", \"direction_getter\": \"ptt\", \"tracking\": {\"odf_storage\": \"sh\"}"),
	  "tracking.odf_storage", "\"sh\" is not available with direction_getter \"ptt\"" },
	{ DWI_JOB(", \"direction_getter\": \"ptt\", \"model\": \"csa\""), "model",
	  "must be \"csd\" with direction_getter \"ptt\" (\"opdt\" and \"csa\" are for "
	  "\"boot\"), got \"csa\"" },
};

static void test_ptt(void **state)
{
	struct jobspec js;

	(void)state;
	/* defaults: GPUStreamlines' probe, DIPY's rejection sampling */
	expect_ok(PTT_JOB(""), NULL, &js);
	assert_int_equal(js.direction_getter, JOBSPEC_DG_PTT);
	assert_true(js.probe_length == 2.0);
	assert_int_equal(js.probe_quality, 9);
	assert_int_equal(js.probe_count, 1);
	assert_true(js.probe_radius == 0.0);
	assert_int_equal(js.rejection_samples, 10);
	assert_int_equal(js.rejection_tries, 100);
	jobspec_free(&js);
	expect_ok(PTT_JOB("\"probe_length\": 1.5, \"probe_quality\": 7, \"probe_count\": 4, "
			  "\"probe_radius\": 0.5, \"rejection_samples\": 20, "
			  "\"rejection_tries\": 50"), NULL, &js);
	assert_true(js.probe_length == 1.5);
	assert_int_equal(js.probe_quality, 7);
	assert_int_equal(js.probe_count, 4);
	assert_true(js.probe_radius == 0.5);
	assert_int_equal(js.rejection_samples, 20);
	assert_int_equal(js.rejection_tries, 50);
	jobspec_free(&js);
	/* CSD fitted from raw DWI, as prob */
	expect_ok(DWI_JOB(", \"direction_getter\": \"ptt\""), NULL, &js);
	assert_int_equal(js.model.name, JOBSPEC_MODEL_CSD);
	assert_int_equal(js.model.sh_order, 8);
	jobspec_free(&js);
	for (size_t i = 0; i < ARRAY_SIZE(bad_ptt); i++)
		expect_error(bad_ptt[i].json, bad_ptt[i].field, bad_ptt[i].message);
}

static void test_bad_inputs_and_models(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad_inputs_models); i++)
		expect_error(bad_inputs_models[i].json, bad_inputs_models[i].field,
			     bad_inputs_models[i].message);
}

/* ---- seeds ---- */

/* seeds.select: the first N streamlines; without seeds.count, tckgen's
 * 1000 seeds per streamline selected, within the seed limit. */
/* seeds.shard: "K/N" (K from 0) or null, not with select; the fingerprint
 * is the same for every shard, output path and format and input names of
 * one job, and differs with its parameters. */
static void test_shard(void **state)
{
	struct jobspec js, other;
	struct errbuf err;

	(void)state;
	expect_ok(SEEDS_JOB("\"roi\": \"r\", \"shard\": \"1/4\""), NULL, &js);
	assert_int_equal(js.shard.index, 1);
	assert_int_equal(js.shard.count, 4);
	expect_ok("{\"inputs\": {\"odf\": \"o2\", \"stop_map\": \"f2\"}, \"seeds\": {\"roi\": "
		  "\"r2\", \"shard\": \"3/4\"}, \"output\": {\"format\": \"tck\", \"path\": "
		  "\"x.tck\"}}", "/elsewhere", &other);
	assert_true(js.fingerprint == other.fingerprint);
	jobspec_free(&other);
	expect_ok(SEEDS_JOB("\"roi\": \"r\", \"shard\": \"1/4\", \"rng_seed\": 1"), NULL, &other);
	assert_true(js.fingerprint != other.fingerprint);
	jobspec_free(&other);
	jobspec_free(&js);
	expect_ok(SEEDS_JOB("\"points\": [[1, 2, 3]], \"shard\": null"), NULL, &js);
	assert_int_equal(js.shard.count, 0);
	/* The CLI's --shard, with the document's checks. */
	assert_int_equal(jobspec_set_shard(&js, "0/2", &err), 0);
	assert_int_equal(js.shard.count, 2);
	assert_int_equal(jobspec_set_shard(&js, "2/2", &err), -EINVAL);
	assert_string_equal(err.field, "seeds.shard");
	jobspec_free(&js);
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"shard\": 3"), "seeds.shard", "K/N");
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"shard\": \"4/4\""), "seeds.shard", "K/N");
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"shard\": \"0/2\", \"select\": 5"), "seeds.shard",
		     "seeds.select");
	expect_ok(SEEDS_JOB("\"roi\": \"r\", \"select\": 5"), NULL, &js);
	assert_int_equal(jobspec_set_shard(&js, "0/2", &err), -EINVAL);
	assert_string_equal(err.field, "seeds.shard");
	jobspec_free(&js);
}

static void test_select(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(""), NULL, &js);
	assert_int_equal(js.seed_select, 0);
	jobspec_free(&js);
	expect_ok(SEEDS_JOB("\"roi\": \"r\", \"select\": 25"), NULL, &js);
	assert_int_equal(js.seed_select, 25);
	assert_int_equal(js.seed_count, 25000);
	jobspec_free(&js);
	expect_ok(SEEDS_JOB("\"roi\": \"r\", \"select\": 25, \"count\": 40"), NULL, &js);
	assert_int_equal(js.seed_select, 25);
	assert_int_equal(js.seed_count, 40);
	jobspec_free(&js);
	expect_ok(SEEDS_JOB("\"roi\": \"r\", \"select\": 100001"), NULL, &js);
	assert_int_equal(js.seed_count, 100000000);
	jobspec_free(&js);
	/* per_voxel's count is per voxel: 1000 x select would be per voxel too. */
	expect_ok(SEEDS_JOB("\"roi\": \"r\", \"select\": 5, \"per_voxel\": true"), NULL, &js);
	assert_int_equal(js.seed_count, 10000);
	jobspec_free(&js);
	expect_ok(SEEDS_JOB("\"points\": [[1, 2, 3]], \"select\": 1"), NULL, &js);
	assert_int_equal(js.seed_select, 1);
	jobspec_free(&js);
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"select\": 2.5"), "seeds.select",
		     "must be an integer, got 2.5");
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"select\": \"10\""), "seeds.select",
		     "must be an integer");
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"select\": 0"), "seeds.select",
		     "must be in [1, 100000000], got 0");
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"select\": -3"), "seeds.select",
		     "got -3");
}

/* The step in voxels or in mm, not both. */
static void test_step_mm(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(TRACKING_JOB("\"step_mm\": 0.75"), NULL, &js);
	assert_true(js.step_mm == 0.75);
	jobspec_free(&js);
	expect_ok(TRACKING_JOB("\"step_size\": 0.25"), NULL, &js);
	assert_true(js.step_mm == 0);
	assert_true(js.step_size == 0.25);
	jobspec_free(&js);
	expect_error(TRACKING_JOB("\"step_size\": 0.5, \"step_mm\": 1"), "tracking.step_mm",
		     "cannot be given with tracking.step_size");
	expect_error(TRACKING_JOB("\"step_mm\": 0"), "tracking.step_mm",
		     "must be in (0, 10] mm, got 0");
	expect_error(TRACKING_JOB("\"step_mm\": \"1mm\""), "tracking.step_mm",
		     "must be a number");
}

static void test_seed_kinds(void **state)
{
	struct jobspec js;

	(void)state;
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"points\": [[1, 2, 3]]"), "seeds",
		     "takes one of \"roi\", \"points\" or \"points_file\", not more");
	expect_error(SEEDS_JOB("\"points\": [[1, 2, 3]], \"count\": 5"), "seeds.count",
		     "is only allowed with seeds.roi");
	expect_error(SEEDS_JOB("\"points\": [[1, 2, 3]], \"per_voxel\": false"),
		     "seeds.per_voxel", "is only allowed with seeds.roi");
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"space\": \"voxel\""), "seeds.space",
		     "is only allowed with seeds.points");
	expect_error(SEEDS_JOB("\"points\": [[1, 2, 3]], \"points_file\": \"p.npy\""), "seeds",
		     "takes one of");
	expect_error(SEEDS_JOB("\"roi\": \"r\", \"first_index\": 5"), "seeds.first_index",
		     "is only allowed with seeds.points or seeds.points_file");
	expect_error(SEEDS_JOB("\"points\": [[1, 2, 3]], \"first_index\": -1"),
		     "seeds.first_index", "must be");
	expect_error(SEEDS_JOB("\"points\": [[1, 2, 3]], \"first_index\": 100000001"),
		     "seeds.first_index", "must be");
	expect_error(SEEDS_JOB("\"points\": [[1, 2, 3]], \"first_index\": 5, \"shard\": \"0/2\""),
		     "seeds.shard", "cannot be combined with seeds.first_index");
	expect_ok(SEEDS_JOB("\"points_file\": \"p.npy\", \"first_index\": 7, \"space\": \"ras\""),
		  "/data", &js);
	assert_int_equal(js.seed_kind, JOBSPEC_SEEDS_POINTS);
	assert_string_equal(js.seed_points_path, "/data/p.npy");
	assert_null(js.seed_points);
	assert_int_equal(js.seed_first_index, 7);
	assert_true(js.seed_points_ras);
	assert_int_equal(jobspec_set_shard(&js, "1/2", &(struct errbuf){0}), -EINVAL);
	jobspec_free(&js);
	/* rng_seed also drives direction sampling, so both kinds take it. */
	expect_ok(SEEDS_JOB("\"points\": [[1, 2, 3]], \"rng_seed\": 77"), NULL, &js);
	assert_int_equal(js.rng_seed, 77);
	jobspec_free(&js);
}

static void test_points(void **state)
{
	static const double want[9] = { 1, 2, 3, -4.5, 0.5, 6, 0, 0, 1000 };
	struct jobspec js;

	(void)state;
	expect_ok(SEEDS_JOB("\"points\": [[1, 2, 3], [-4.5, 5e-1, 6], [0, 0, 1e3]],"
			     " \"space\": \"ras\""),
		  NULL, &js);
	assert_int_equal(js.seed_kind, JOBSPEC_SEEDS_POINTS);
	assert_int_equal(js.n_seed_points, 3);
	assert_true(js.seed_points_ras);
	for (int i = 0; i < 9; i++)
		assert_true(js.seed_points[i] == want[i]);
	jobspec_free(&js);
	expect_ok(SEEDS_JOB("\"points\": [[1, 2, 3]], \"space\": \"voxel\""), NULL, &js);
	assert_false(js.seed_points_ras);
	jobspec_free(&js);

	expect_error(SEEDS_JOB("\"points\": []"), "seeds.points",
		     "must have 1 to 1000000 points, got 0");
	expect_error(SEEDS_JOB("\"points\": \"1 2 3\""), "seeds.points", "must be an array");
	expect_error(SEEDS_JOB("\"points\": [1, 2, 3]"), "seeds.points[0]",
		     "must be an array of 3 numbers");
	expect_error(SEEDS_JOB("\"points\": [[0, 0, 0], [1, 1, 1], [2, 2, 2], [1, 2]]"),
		     "seeds.points[3]", "must be an array of 3 numbers");
	expect_error(SEEDS_JOB("\"points\": [[1, 2, 3, 4]]"), "seeds.points[0]", NULL);
	expect_error(SEEDS_JOB("\"points\": [[1, \"2\", 3]]"), "seeds.points[0]", NULL);
	expect_error(SEEDS_JOB("\"points\": [[1, null, 3]]"), "seeds.points[0]", NULL);
	expect_error(SEEDS_JOB("\"points\": [[1, 2, 3], {}]"), "seeds.points[1]", NULL);
	expect_error(SEEDS_JOB("\"points\": [[1, 2, [3]]]"), "seeds.points[0]", NULL);
}

/* ---- sphere ---- */

/* A job whose sphere has n vertices. */
static char *sphere_job(size_t n)
{
	static const char head[] =
		"{" INPUTS ", " ROI_SEEDS ", \"tracking\": {\"sphere\": {\"vertices\": [";
	static const char vertex[] = "[0.5,-1,2e-1],";
	size_t len = sizeof(head) - 1 + n * (sizeof(vertex) - 1) + 8;
	char *buf = malloc(len);
	char *p = buf;

	assert_non_null(buf);
	p += sprintf(p, "%s", head);
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, "%s", vertex);
	p--; /* drop the last comma */
	sprintf(p, "]}}}");
	return buf;
}

static void test_sphere(void **state)
{
	struct jobspec js;
	char *json;

	(void)state;
	expect_ok(TRACKING_JOB("\"sphere\": \"symmetric362\""), NULL, &js);
	assert_string_equal(js.sphere_name, "symmetric362");
	assert_null(js.sphere_vertices);
	jobspec_free(&js);

	json = sphere_job(6);
	expect_ok(json, NULL, &js);
	free(json);
	assert_null(js.sphere_name);
	assert_int_equal(js.sphere_nv, 6);
	assert_true(js.sphere_vertices[15] == 0.5 && js.sphere_vertices[16] == -1 &&
		    js.sphere_vertices[17] == 0.2);
	jobspec_free(&js);

	json = sphere_job(65536);
	expect_ok(json, NULL, &js);
	free(json);
	assert_int_equal(js.sphere_nv, 65536);
	jobspec_free(&js);

	json = sphere_job(5);
	expect_error(json, "tracking.sphere.vertices", "must have 6 to 65536 vertices, got 5");
	free(json);
	json = sphere_job(65537);
	expect_error(json, "tracking.sphere.vertices", "got 65537");
	free(json);

	expect_error(TRACKING_JOB("\"sphere\": {\"vertices\": [[1,0,0],[0,1,0],[0,0,1],"
				  "[-1,0,0],[0,-1,0],[0,0]]}"),
		     "tracking.sphere.vertices[5]", "must be an array of 3 numbers");
}

/* ---- paths ---- */

static void test_paths(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(", \"output\": {\"path\": \"out/t.trk\"}"), "/data/jobs", &js);
	assert_string_equal(js.odf_path, "/data/jobs/odf.nii.gz");
	assert_string_equal(js.stop_map_path, "/data/jobs/fa.nii.gz");
	assert_string_equal(js.seed_roi_path, "/data/jobs/roi.nii.gz");
	assert_string_equal(js.output_path, "/data/jobs/out/t.trk");
	jobspec_free(&js);

	/* a trailing slash is not doubled; absolute paths are kept */
	expect_ok("{\"inputs\": {\"odf\": \"/abs/odf.nii.gz\", \"stop_map\": \"../fa.nii.gz\"}, "
		  ROI_SEEDS "}", "/data/", &js);
	assert_string_equal(js.odf_path, "/abs/odf.nii.gz");
	assert_string_equal(js.stop_map_path, "/data/../fa.nii.gz");
	jobspec_free(&js);

	/* no base directory, or an empty one: as given */
	expect_ok(ROI_JOB(""), NULL, &js);
	assert_string_equal(js.odf_path, "odf.nii.gz");
	jobspec_free(&js);
	expect_ok(ROI_JOB(""), "", &js);
	assert_string_equal(js.odf_path, "odf.nii.gz");
	jobspec_free(&js);
	expect_ok(ROI_JOB(""), "rel/dir", &js);
	assert_string_equal(js.odf_path, "rel/dir/odf.nii.gz");
	jobspec_free(&js);

	expect_error("{\"inputs\": {\"odf\": \"\", \"stop_map\": \"s\"}, " ROI_SEEDS "}",
		     "inputs.odf", "must not be empty");
	expect_error(ROI_JOB(", \"output\": {\"path\": \"\"}"), "output.path", "must not be empty");
}

/* A job whose odf path is len bytes long, parsed against base_dir. */
static int parse_long_path(size_t len, const char *base_dir, struct jobspec *js,
			   struct errbuf *err)
{
	char *json = malloc(len + 256);
	int rc;

	assert_non_null(json);
	memset(json, 0, len + 256);
	strcpy(json, "{\"inputs\": {\"stop_map\": \"s\", \"odf\": \"");
	memset(json + strlen(json), 'a', len);
	strcat(json, "\"}, " ROI_SEEDS "}");
	rc = parse(json, base_dir, js, err);
	free(json);
	return rc;
}

static void test_path_length(void **state)
{
	struct jobspec js;
	struct errbuf err;

	(void)state;
	assert_int_equal(parse_long_path(4095, NULL, &js, &err), 0);
	assert_int_equal(strlen(js.odf_path), 4095);
	jobspec_free(&js);
	assert_int_equal(parse_long_path(4096, NULL, &js, &err), -EINVAL);
	assert_string_equal(err.field, "inputs.odf");
	assert_non_null(strstr(err.message, "must be at most 4095 bytes"));
	assert_non_null(strstr(err.message, "got 4096"));
	/* 4090 + "/base" + "/" = 4096: too long once joined */
	assert_int_equal(parse_long_path(4090, "/base", &js, &err), -EINVAL);
	assert_string_equal(err.field, "inputs.odf");
	assert_int_equal(parse_long_path(4089, "/base", &js, &err), 0);
	jobspec_free(&js);
}

/* ---- document limits ---- */

static void test_size_limit(void **state)
{
	struct jobspec js;
	struct errbuf err;
	char *buf = padded_job((size_t)JOBSPEC_MAX_BYTES + 1);

	(void)state;
	assert_int_equal(jobspec_parse(buf, JOBSPEC_MAX_BYTES, NULL, &js, &err), 0);
	jobspec_free(&js);
	assert_int_equal(jobspec_parse(buf, (size_t)JOBSPEC_MAX_BYTES + 1, NULL, &js, &err),
			 -EINVAL);
	assert_string_equal(err.field, "");
	assert_string_equal(err.message,
			    "job document is 67108865 bytes; the limit is 67108864 bytes");
	assert_true(is_zeroed(&js));
	free(buf);
}

static void test_not_nul_terminated(void **state)
{
	static const char job[] = ROI_JOB("");
	size_t len = sizeof(job) - 1;
	char *exact = malloc(len);
	struct jobspec js;
	struct errbuf err;

	(void)state;
	/* exactly len bytes and no NUL after them: ASan catches any overread */
	assert_non_null(exact);
	memcpy(exact, job, len);
	assert_int_equal(jobspec_parse(exact, len, NULL, &js, &err), 0);
	jobspec_free(&js);
	free(exact);
}

/* A job whose tracking.sphere is a number inside k nested arrays, so the
 * number sits at nesting depth 2 + k. */
static void nested_job(char *buf, size_t size, int k)
{
	snprintf(buf, size, ROI_JOB(", \"tracking\": {\"sphere\": %.*s1%.*s}"), k,
		 "[[[[[[[[[[[[[[[[[[[[", k, "]]]]]]]]]]]]]]]]]]]]");
}

static void test_nesting(void **state)
{
	struct jobspec js;
	char json[256];

	(void)state;
	/* 17 levels: refused before jansson sees it */
	nested_job(json, sizeof(json), 15);
	expect_error(json, "", "nesting deeper than 16 levels at line 1, column ");
	/* 16 levels reach the walker, which names the field */
	nested_job(json, sizeof(json), 14);
	expect_error(json, "tracking.sphere", "must be a sphere name");
	/* brackets inside strings, escaped quotes included, do not count */
	snprintf(json, sizeof(json),
		 "{\"inputs\": {\"odf\": \"%s\", \"stop_map\": \"\\\"[[\"}, %s}",
		 "[[[[[[[[[[[[[[[[[[[[{{{{", ROI_SEEDS);
	expect_ok(json, NULL, &js);
	assert_string_equal(js.odf_path, "[[[[[[[[[[[[[[[[[[[[{{{{");
	assert_string_equal(js.stop_map_path, "\"[[");
	jobspec_free(&js);
}

static void test_null_errbuf_and_free(void **state)
{
	struct jobspec js;

	(void)state;
	assert_int_equal(jobspec_parse("{}", 2, NULL, &js, NULL), -EINVAL);
	assert_int_equal(jobspec_parse("{", 1, NULL, &js, NULL), -EINVAL);
	assert_int_equal(jobspec_load_file("/nonexistent/job.json", &js, NULL), -ENOENT);
	memset(&js, 0, sizeof(js));
	jobspec_free(&js);
	jobspec_free(&js);
	jobspec_free(NULL);
}

/* ---- files ---- */

static void test_load_file(void **state)
{
	static const char job[] = ROI_JOB(", \"output\": {\"path\": \"t.trk\"}");
	char path[64];
	struct jobspec js;
	struct errbuf err;

	(void)state;
	write_temp(path, job, sizeof(job) - 1); /* /tmp/test_jobspec.XXXXXX */
	assert_int_equal(jobspec_load_file(path, &js, &err), 0);
	assert_string_equal(js.odf_path, "/tmp/odf.nii.gz");
	assert_string_equal(js.output_path, "/tmp/t.trk");
	jobspec_free(&js);
	assert_int_equal(unlink(path), 0);

	assert_int_equal(jobspec_load_file("/nonexistent/job.json", &js, &err), -ENOENT);
	assert_string_equal(err.field, "");
	assert_non_null(strstr(err.message, "/nonexistent/job.json"));
	assert_true(is_zeroed(&js));

	assert_int_equal(jobspec_load_file("/tmp", &js, &err), -EISDIR);
	assert_true(is_zeroed(&js));

	/* parse errors come through unchanged */
	write_temp(path, "{\"x\": 1}", 8);
	assert_int_equal(jobspec_load_file(path, &js, &err), -EINVAL);
	assert_string_equal(err.field, "x");
	assert_int_equal(unlink(path), 0);
}

/* A bare file name resolves against "."; that is how the CLI runs jobs in
 * the current directory. */
static void test_load_file_bare_name(void **state)
{
	static const char job[] = ROI_JOB("");
	char path[64], cwd[4096];
	struct jobspec js;
	struct errbuf err;

	(void)state;
	write_temp(path, job, sizeof(job) - 1);
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir("/tmp"), 0);
	assert_int_equal(jobspec_load_file(path + strlen("/tmp/"), &js, &err), 0);
	assert_int_equal(chdir(cwd), 0);
	assert_string_equal(js.odf_path, "./odf.nii.gz");
	jobspec_free(&js);
	assert_int_equal(unlink(path), 0);
}

static void test_load_file_size_limit(void **state)
{
	char path[64];
	struct jobspec js;
	struct errbuf err;
	char *buf = padded_job(JOBSPEC_MAX_BYTES);
	int fd;

	(void)state;
	/* exactly at the limit: accepted */
	write_temp(path, buf, JOBSPEC_MAX_BYTES);
	free(buf);
	assert_int_equal(jobspec_load_file(path, &js, &err), 0);
	jobspec_free(&js);
	/* one byte more: refused from the file size, without reading */
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)JOBSPEC_MAX_BYTES + 1), 0);
	assert_int_equal(close(fd), 0);
	assert_int_equal(jobspec_load_file(path, &js, &err), -EINVAL);
	assert_string_equal(err.field, "");
	assert_non_null(strstr(err.message, "larger than the limit of 67108864 bytes"));
	assert_int_equal(unlink(path), 0);
}

/* Feeds len bytes through a FIFO, where the size is not known in advance and
 * the reader has to grow its buffer. */
static int load_via_fifo(const char *text, size_t len, struct jobspec *js, struct errbuf *err)
{
	char dir[] = "/tmp/test_jobspec.XXXXXX", path[64];
	pid_t pid;
	int rc, status;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/job.json", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(path, O_WRONLY);
		size_t done = 0;

		/* the reader stops early on oversized input */
		signal(SIGPIPE, SIG_IGN);
		while (fd >= 0 && done < len) {
			ssize_t n = write(fd, text + done, len - done);
			if (n <= 0)
				break;
			done += (size_t)n;
		}
		_exit(0);
	}
	rc = jobspec_load_file(path, js, err);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
	return rc;
}

static void test_load_fifo(void **state)
{
	struct jobspec js;
	struct errbuf err;
	char *buf = padded_job((size_t)JOBSPEC_MAX_BYTES + 1);

	(void)state;
	assert_int_equal(load_via_fifo(buf, 300000, &js, &err), 0);
	assert_non_null(strstr(js.odf_path, "/odf.nii.gz"));
	jobspec_free(&js);
	assert_int_equal(load_via_fifo(buf, JOBSPEC_MAX_BYTES, &js, &err), 0);
	jobspec_free(&js);
	assert_int_equal(load_via_fifo(buf, (size_t)JOBSPEC_MAX_BYTES + 1, &js, &err), -EINVAL);
	assert_non_null(strstr(err.message, "larger than the limit"));
	free(buf);
}

/* jobspec_input_files names every file member of inputs, each at the slot
 * the parser fills: every input is given, named after its own key, by one
 * of three documents. */
static void test_input_file_table(void **state)
{
	static const char *const docs[] = {
		"{\"inputs\": {\"odf\": \"odf\", \"stop_map\": \"stop_map\"}, " ROI_SEEDS "}",
		"{\"inputs\": {\"sh\": \"sh\", \"sh_basis\": \"tournier07\", "
		"\"stop_map\": \"stop_map\"}, " ROI_SEEDS "}",
		"{\"inputs\": {\"dwi\": \"dwi\", \"bvals\": \"bvals\", \"bvecs\": \"bvecs\", "
		"\"mask\": \"mask\", \"stop_map\": \"stop_map\"}, " ROI_SEEDS "}",
		"{\"inputs\": {\"odf\": \"odf\", \"stop_map\": \"stop_map\"}, " ROI_SEEDS
		", \"stopping\": {\"criterion\": \"act\", \"include\": \"include\", "
		"\"exclude\": \"exclude\"}}",
		"{\"inputs\": {\"odf\": \"odf\", \"stop_map\": \"stop_map\"}, " ROI_SEEDS
		", \"stopping\": {\"criterion\": \"cmc\", \"wm\": \"wm\", \"gm\": \"gm\", "
		"\"csf\": \"csf\"}}",
		"{\"inputs\": {\"odf\": \"odf\", \"stop_map\": \"stop_map\"}, " ROI_SEEDS
		", \"stopping\": {\"criterion\": \"act\", \"five_tt\": \"five_tt\"}}",
	};
	bool seen[JOBSPEC_INPUT_FILES] = { false };

	(void)state;
	for (size_t d = 0; d < ARRAY_SIZE(docs); d++) {
		struct jobspec js;
		struct errbuf err;

		if (parse(docs[d], NULL, &js, &err))
			fail_msg("%s: field \"%s\": %s", docs[d], err.field, err.message);
		for (size_t i = 0; i < JOBSPEC_INPUT_FILES; i++) {
			const char *path = jobspec_input_path(&js, &jobspec_input_files[i]);
			const char *field = jobspec_input_files[i].field;
			const char *key = strchr(field, '.') + 1;

			assert_true(!strncmp(field, "inputs.", 7) || !strncmp(field, "stopping.", 9));
			if (!path)
				continue;
			assert_string_equal(path, key);
			seen[i] = true;
		}
		jobspec_free(&js);
	}
	for (size_t i = 0; i < JOBSPEC_INPUT_FILES; i++)
		if (!seen[i])
			fail_msg("%s was never filled", jobspec_input_files[i].field);
}

/* ---- proto/examples ---- */

#define REGIONS_JOB(members) ROI_JOB(", \"regions\": {" members "}")
#define SPHERE(x, y, z, r) "{\"center\": [" #x ", " #y ", " #z "], \"radius\": " #r "}"

/* regions: tckgen's spheres, each list at most JOBSPEC_MAX_REGIONS long;
 * every error names the region and its member. */
static void test_regions(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(""), NULL, &js);
	assert_int_equal(js.n_include_regions, 0);
	assert_int_equal(js.n_exclude_regions, 0);
	jobspec_free(&js);

	expect_ok(REGIONS_JOB("\"include\": [" SPHERE(1, -2, 3.5, 4) ", " SPHERE(0, 0, 0, 0.5) "], "
			      "\"exclude\": [" SPHERE(-8, -8, 0, 3) "]"), NULL, &js);
	assert_int_equal(js.n_include_regions, 2);
	assert_int_equal(js.n_exclude_regions, 1);
	assert_true(js.include_regions[0].center[1] == -2.0);
	assert_true(js.include_regions[0].center[2] == 3.5);
	assert_true(js.include_regions[1].radius == 0.5);
	assert_true(js.exclude_regions[0].radius == 3.0);
	assert_int_equal(js.include_regions[0].mask, -1);
	assert_int_equal(js.n_region_masks, 0);
	jobspec_free(&js);

	/* Masks take the next mask slots, in document order, and name their field. */
	expect_ok(REGIONS_JOB("\"include\": [" SPHERE(0, 0, 0, 1) ", \"gm.nii\"], "
			      "\"exclude\": [\"/abs/csf.nii\"]"), "/data", &js);
	assert_int_equal(js.n_region_masks, 2);
	assert_int_equal(js.include_regions[0].mask, -1);
	assert_int_equal(js.include_regions[1].mask, 0);
	assert_int_equal(js.exclude_regions[0].mask, 1);
	assert_string_equal(js.region_mask_path[0], "/data/gm.nii");
	assert_string_equal(js.region_mask_path[1], "/abs/csf.nii");
	assert_string_equal(js.region_mask_field[0], "regions.include[1]");
	assert_string_equal(js.region_mask_field[1], "regions.exclude[0]");
	jobspec_free(&js);

	/* A mask's name (a path to the CLI, a volume id to the daemon) is not
	 * part of the fingerprint; the regions are. */
	struct jobspec other;

	expect_ok(REGIONS_JOB("\"include\": [\"gm.nii\"]"), NULL, &js);
	expect_ok(REGIONS_JOB("\"include\": [\"sha256:0123\"]"), NULL, &other);
	assert_true(js.fingerprint == other.fingerprint);
	jobspec_free(&other);
	expect_ok(REGIONS_JOB("\"exclude\": [\"gm.nii\"]"), NULL, &other);
	assert_true(js.fingerprint != other.fingerprint);
	jobspec_free(&other);
	jobspec_free(&js);

	expect_error(REGIONS_JOB("\"include\": " SPHERE(0, 0, 0, 1)), "regions.include",
		     "must be an array of regions");
	expect_error(REGIONS_JOB("\"exclude\": [" SPHERE(0, 0, 0, 1) ", 3]"), "regions.exclude[1]",
		     "must be a mask image (a path) or a sphere");
	expect_error(REGIONS_JOB("\"exclude\": [\"\"]"), "regions.exclude[0]", "must not be empty");
	expect_error(REGIONS_JOB("\"include\": [\"a.nii\", \"b.nii\", \"c.nii\"], "
				 "\"exclude\": [\"d.nii\", " SPHERE(0, 0, 0, 1) ", \"e.nii\"]"),
		     "regions.exclude[2]", "is a mask image past the 4 a job may have");
	expect_error(REGIONS_JOB("\"include\": [{\"center\": [0, 0], \"radius\": 1}]"),
		     "regions.include[0].center", "must be an array of 3 numbers");
	expect_error(REGIONS_JOB("\"include\": [{\"radius\": 1}]"), "regions.include[0].center",
		     "is required");
	expect_error(REGIONS_JOB("\"include\": [{\"center\": [0, 0, 0]}]"),
		     "regions.include[0].radius", "is required");
	expect_error(REGIONS_JOB("\"exclude\": [" SPHERE(0, 0, 0, 0) "]"),
		     "regions.exclude[0].radius", "must be in (0, 1000000] mm, got 0");
	expect_error(REGIONS_JOB("\"include\": [{\"center\": [0, 0, 0], \"radius\": 1, "
				 "\"r\": 2}]"), "regions.include[0].r", "is not a member");
	expect_error(REGIONS_JOB("\"mask\": []"), "regions.mask", "unknown field");
	expect_error(REGIONS_JOB("\"include\": [" SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1) ", "
				 SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1)
				 ", " SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1) ", "
				 SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1)
				 ", " SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1) ", "
				 SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1)
				 ", " SPHERE(0, 0, 0, 1) ", " SPHERE(0, 0, 0, 1) "]"),
		     "regions.include", "must have at most 16 regions, got 17");
}

/* tracking.max_cross: DIPY's; null or absent is all directions (0). */
static void test_max_cross(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(""), NULL, &js);
	assert_int_equal(js.max_cross, 0);
	jobspec_free(&js);
	expect_ok(TRACKING_JOB("\"max_cross\": null"), NULL, &js);
	assert_int_equal(js.max_cross, 0);
	jobspec_free(&js);
	expect_ok(TRACKING_JOB("\"max_cross\": 1"), NULL, &js);
	assert_int_equal(js.max_cross, 1);
	jobspec_free(&js);
	expect_error(TRACKING_JOB("\"max_cross\": 0"), "tracking.max_cross",
		     "must be in [1, 10000] or null, got 0");
	expect_error(TRACKING_JOB("\"max_cross\": 1.5"), "tracking.max_cross",
		     "must be an integer");
	expect_error(TRACKING_JOB("\"max_cross\": \"all\""), "tracking.max_cross",
		     "must be an integer");
}

static void test_example_valid(void **state)
{
	char path[4096], want[4200];
	struct jobspec js;
	struct errbuf err;

	(void)state;
	example_path(path, sizeof(path), "prob-phantom.json");
	if (jobspec_load_file(path, &js, &err))
		fail_msg("%s: field \"%s\": %s", path, err.field, err.message);
	example_path(path, sizeof(path), "");
	path[strlen(path) - 1] = '\0'; /* the directory, without its slash */
	snprintf(want, sizeof(want), "%s/odf.nii.gz", path);
	assert_string_equal(js.odf_path, want);
	snprintf(want, sizeof(want), "%s/fa.nii.gz", path);
	assert_string_equal(js.stop_map_path, want);
	snprintf(want, sizeof(want), "%s/seed_roi.nii.gz", path);
	assert_string_equal(js.seed_roi_path, want);
	assert_int_equal(js.seed_kind, JOBSPEC_SEEDS_ROI);
	assert_int_equal(js.seed_count, 500);
	assert_string_equal(js.sphere_name, "repulsion724"); /* the default */
	jobspec_free(&js);

	example_path(path, sizeof(path), "dwi-phantom.json");
	if (jobspec_load_file(path, &js, &err))
		fail_msg("%s: field \"%s\": %s", path, err.field, err.message);
	assert_int_equal(js.input_kind, JOBSPEC_INPUT_DWI);
	assert_null(js.stop_map_path);
	assert_int_equal(js.model.sh_order, 8);
	jobspec_free(&js);

	example_path(path, sizeof(path), "boot-phantom.json");
	if (jobspec_load_file(path, &js, &err))
		fail_msg("%s: field \"%s\": %s", path, err.field, err.message);
	assert_int_equal(js.direction_getter, JOBSPEC_DG_BOOT);
	assert_int_equal(js.model.name, JOBSPEC_MODEL_OPDT);
	assert_int_equal(js.max_attempts, 5);
	jobspec_free(&js);

	example_path(path, sizeof(path), "ptt-phantom.json");
	if (jobspec_load_file(path, &js, &err))
		fail_msg("%s: field \"%s\": %s", path, err.field, err.message);
	assert_int_equal(js.direction_getter, JOBSPEC_DG_PTT);
	assert_true(js.max_angle == 20.0);
	assert_int_equal(js.probe_quality, 9);
	jobspec_free(&js);

	example_path(path, sizeof(path), "mrtrix-fod.json");
	if (jobspec_load_file(path, &js, &err))
		fail_msg("%s: field \"%s\": %s", path, err.field, err.message);
	assert_int_equal(js.input_kind, JOBSPEC_INPUT_SH);
	assert_int_equal(js.sh_basis, SH_TOURNIER07);
	assert_int_equal(js.sh_frame, JOBSPEC_SH_FRAME_WORLD);
	jobspec_free(&js);
}

/* Each proto/examples/invalid-*.json and the field its error must name. */
static const struct {
	const char *file;
	const char *field;
} invalid_examples[] = {
	{ "invalid-both-seed-kinds.json", "seeds" },
	{ "invalid-both-steps.json", "tracking.step_mm" },
	{ "invalid-boot-on-odf.json", "direction_getter" },
	{ "invalid-count-with-points.json", "seeds.count" },
	{ "invalid-direction-getter.json", "direction_getter" },
	{ "invalid-duplicate-key.json", "" },
	{ "invalid-fractional-count.json", "seeds.count" },
	{ "invalid-lengths.json", "tracking.min_length" },
	{ "invalid-max-angle.json", "tracking.max_angle" },
	{ "invalid-missing-stop-map.json", "inputs.stop_map" },
	{ "invalid-odd-sh-order.json", "model.sh_order" },
	{ "invalid-sh-without-basis.json", "inputs.sh_basis" },
	{ "invalid-short-point.json", "seeds.points[1]" },
	{ "invalid-sphere-name.json", "tracking.sphere" },
	{ "invalid-two-inputs.json", "inputs" },
	{ "invalid-unknown-field.json", "tracking.stepsize" },
};

static void test_examples_invalid(void **state)
{
	size_t n = ARRAY_SIZE(invalid_examples);
	char path[4096];
	glob_t g;

	(void)state;
	for (size_t i = 0; i < n; i++) {
		struct jobspec js;
		struct errbuf err;
		int rc;

		example_path(path, sizeof(path), invalid_examples[i].file);
		rc = jobspec_load_file(path, &js, &err);
		if (rc != -EINVAL || strcmp(err.field, invalid_examples[i].field))
			fail_msg("%s: rc %d, field \"%s\" (%s), want \"%s\"", path, rc, err.field,
				 err.message, invalid_examples[i].field);
	}
	/* every invalid example on disk is listed above */
	example_path(path, sizeof(path), "invalid-*.json");
	assert_int_equal(glob(path, 0, NULL, &g), 0);
	assert_int_equal(g.gl_pathc, n);
	globfree(&g);
}

/* ---- stopping and return_all ---- */

#define STOPPING_JOB(members) ROI_JOB(", \"stopping\": {" members "}")

static void test_stopping(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(""), NULL, &js);
	assert_int_equal(js.stopping, JOBSPEC_STOP_THRESHOLD);
	assert_true(js.return_all);
	assert_null(js.stop_include_path);
	assert_null(js.stop_exclude_path);
	jobspec_free(&js);

	expect_ok(STOPPING_JOB("\"criterion\": \"threshold\""), NULL, &js);
	assert_int_equal(js.stopping, JOBSPEC_STOP_THRESHOLD);
	jobspec_free(&js);

	expect_ok(ROI_JOB(", \"stopping\": {\"criterion\": \"act\", \"include\": \"gm.nii\", "
			  "\"exclude\": \"csf.nii\"}, \"tracking\": {\"return_all\": false}"),
		  "/data", &js);
	assert_int_equal(js.stopping, JOBSPEC_STOP_ACT);
	assert_string_equal(js.stop_include_path, "/data/gm.nii");
	assert_string_equal(js.stop_exclude_path, "/data/csf.nii");
	assert_false(js.return_all);
	jobspec_free(&js);

	expect_error(STOPPING_JOB("\"criterion\": \"cmc2\""), "stopping.criterion", "");
	expect_error(STOPPING_JOB("\"criterion\": \"act\", \"exclude\": \"csf.nii\""),
		     "stopping.include", "is required with stopping.criterion \"act\"");
	expect_error(STOPPING_JOB("\"criterion\": \"act\", \"include\": \"gm.nii\""),
		     "stopping.exclude", "is required with stopping.criterion \"act\"");
	expect_error(STOPPING_JOB("\"include\": \"gm.nii\""), "stopping.include",
		     "is only for stopping.criterion \"act\"");
	expect_error(STOPPING_JOB("\"criterion\": \"threshold\", \"exclude\": \"csf.nii\""),
		     "stopping.exclude", "is only for stopping.criterion \"act\"");
	expect_error(STOPPING_JOB("\"wm\": \"wm.nii\""), "stopping.wm",
		     "is only for stopping.criterion \"cmc\"");
	expect_error(STOPPING_JOB("\"criterion\": \"cmc\", \"wm\": \"wm.nii\", "
				  "\"csf\": \"csf.nii\""),
		     "stopping.gm", "is required with stopping.criterion \"cmc\"");
	expect_error(STOPPING_JOB("\"criterion\": \"cmc\", \"wm\": \"wm.nii\", \"gm\": \"gm.nii\", "
				  "\"csf\": \"csf.nii\", \"include\": \"gm.nii\""),
		     "stopping.include", "is only for stopping.criterion \"act\"");
	expect_ok(STOPPING_JOB("\"criterion\": \"cmc\", \"wm\": \"wm.nii\", \"gm\": \"gm.nii\", "
			       "\"csf\": \"csf.nii\""), NULL, &js);
	assert_int_equal(js.stopping, JOBSPEC_STOP_CMC);
	assert_string_equal(js.stop_wm_path, "wm.nii");
	assert_string_equal(js.stop_gm_path, "gm.nii");
	assert_string_equal(js.stop_csf_path, "csf.nii");
	jobspec_free(&js);
	expect_error(TRACKING_JOB("\"return_all\": 0"), "tracking.return_all", "a boolean");
}

/* ---- tracking.pft ---- */

#define CMC_STOPPING ", \"stopping\": {\"criterion\": \"cmc\", \"wm\": \"wm.nii\", " \
	"\"gm\": \"gm.nii\", \"csf\": \"csf.nii\"}"
#define PFT_JOB(pft) ROI_JOB(", \"tracking\": {\"pft\": " pft "}" CMC_STOPPING)

static void test_pft(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(CMC_STOPPING), NULL, &js);
	assert_false(js.pft);
	jobspec_free(&js);
	expect_ok(PFT_JOB("null"), NULL, &js);
	assert_false(js.pft);
	jobspec_free(&js);

	/* An empty object: DIPY's defaults. */
	expect_ok(PFT_JOB("{}"), NULL, &js);
	assert_true(js.pft);
	assert_true(js.pft_back_mm == 2.0 && js.pft_front_mm == 1.0);
	assert_int_equal(js.pft_particles, 15);
	assert_int_equal(js.pft_max_trials, 20);
	assert_true(js.pft_min_wm_pve == 0.0);
	jobspec_free(&js);
	expect_ok(PFT_JOB("{\"back_mm\": 3, \"front_mm\": 0, \"particles\": 64, "
			  "\"max_trials\": 1, \"min_wm_pve_before_stopping\": 0.5}"), NULL, &js);
	assert_true(js.pft_min_wm_pve == 0.5);
	assert_true(js.pft_back_mm == 3.0 && js.pft_front_mm == 0.0);
	assert_int_equal(js.pft_particles, 64);
	assert_int_equal(js.pft_max_trials, 1);
	jobspec_free(&js);
	expect_ok(ROI_JOB(", \"tracking\": {\"pft\": {}}, \"stopping\": {\"criterion\": \"act\", "
			  "\"include\": \"gm.nii\", \"exclude\": \"csf.nii\"}"), NULL, &js);
	assert_true(js.pft);
	jobspec_free(&js);

	expect_error(PFT_JOB("true"), "tracking.pft", "null or an object");
	expect_error(PFT_JOB("{\"particles\": 0}"), "tracking.pft.particles", "");
	expect_error(PFT_JOB("{\"particles\": 65}"), "tracking.pft.particles", "");
	expect_error(PFT_JOB("{\"max_trials\": 51}"), "tracking.pft.max_trials", "");
	expect_error(PFT_JOB("{\"back_mm\": -1}"), "tracking.pft.back_mm", "");
	expect_error(PFT_JOB("{\"front_mm\": 11}"), "tracking.pft.front_mm", "");
	expect_error(PFT_JOB("{\"min_wm_pve_before_stopping\": 1.5}"),
		     "tracking.pft.min_wm_pve_before_stopping", "");
	expect_error(PFT_JOB("{\"min_wm_pve_before_stopping\": -0.1}"),
		     "tracking.pft.min_wm_pve_before_stopping", "");
	expect_error(PFT_JOB("{\"count\": 3}"), "tracking.pft.count", "unknown field");
	expect_error(TRACKING_JOB("\"pft\": {}"), "tracking.pft",
		     "needs stopping.criterion \"act\" or \"cmc\"");
	expect_error(ROI_JOB(", \"direction_getter\": \"ptt\", \"tracking\": {\"pft\": {}}"
			     CMC_STOPPING), "tracking.pft", "is only for direction_getter \"prob\"");
	/* Particle paths skip the region tests: either list refuses pft. */
	expect_error(ROI_JOB(", \"tracking\": {\"pft\": {}}" CMC_STOPPING ", \"regions\": "
			     "{\"include\": [{\"center\": [1, 2, 3], \"radius\": 2}]}"),
		     "tracking.pft", "cannot be combined with regions");
	expect_error(ROI_JOB(", \"tracking\": {\"pft\": {}}" CMC_STOPPING ", \"regions\": "
			     "{\"exclude\": [{\"center\": [1, 2, 3], \"radius\": 2}]}"),
		     "tracking.pft", "cannot be combined with regions");
}

/* The shards of one job share its fingerprint whatever its files are called
 * (a path to the CLI, a volume id to the daemon): the maps' names too. */
static void test_stopping_fingerprint(void **state)
{
	struct jobspec a, b;

	(void)state;
	expect_ok(STOPPING_JOB("\"criterion\": \"act\", \"include\": \"gm.nii\", "
			       "\"exclude\": \"csf.nii\""), NULL, &a);
	expect_ok(STOPPING_JOB("\"criterion\": \"act\", \"include\": \"vol-1\", "
			       "\"exclude\": \"vol-2\""), NULL, &b);
	assert_true(a.fingerprint == b.fingerprint);
	jobspec_free(&b);
	expect_ok(ROI_JOB(""), NULL, &b);
	assert_true(a.fingerprint != b.fingerprint);
	jobspec_free(&a);
	jobspec_free(&b);
}

/* stopping.five_tt: act's maps from a 5TT image, alone. */
static void test_stopping_5tt(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(STOPPING_JOB("\"criterion\": \"act\", \"five_tt\": \"5tt.mif\""), "/d", &js);
	assert_int_equal(js.stopping, JOBSPEC_STOP_ACT);
	assert_string_equal(js.stop_5tt_path, "/d/5tt.mif");
	assert_null(js.stop_include_path);
	jobspec_free(&js);
	expect_error(STOPPING_JOB("\"five_tt\": \"5tt.mif\""), "stopping.five_tt",
		     "is only for stopping.criterion \"act\"");
	expect_error(STOPPING_JOB("\"criterion\": \"cmc\", \"wm\": \"w\", \"gm\": \"g\", "
				  "\"csf\": \"c\", \"five_tt\": \"5tt.mif\""),
		     "stopping.five_tt", "is only for stopping.criterion \"act\"");
	expect_error(STOPPING_JOB("\"criterion\": \"act\", \"five_tt\": \"5tt.mif\", "
				  "\"exclude\": \"csf.nii\""),
		     "stopping.exclude", "cannot be combined with stopping.five_tt");
	expect_error(STOPPING_JOB("\"criterion\": \"act\""), "stopping.include",
		     "is required with stopping.criterion \"act\" (or give stopping.five_tt)");
}

#define INTERFACE_JOB(seeds) "{" INPUTS ", \"seeds\": {" seeds "}}"

/* seeds.interface: wm and gm, or five_tt; count as seeds.roi's. */
static void test_seeds_interface(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(INTERFACE_JOB("\"interface\": {\"wm\": \"wm.nii\", \"gm\": \"gm.nii\"}, "
				"\"count\": 7, \"rng_seed\": 3"), "/d", &js);
	assert_int_equal(js.seed_kind, JOBSPEC_SEEDS_INTERFACE);
	assert_string_equal(js.seed_wm_path, "/d/wm.nii");
	assert_string_equal(js.seed_gm_path, "/d/gm.nii");
	assert_null(js.seed_5tt_path);
	assert_int_equal(js.seed_count, 7);
	jobspec_free(&js);
	expect_ok(INTERFACE_JOB("\"interface\": {\"five_tt\": \"5tt.nii\"}, \"select\": 4"),
		  NULL, &js);
	assert_string_equal(js.seed_5tt_path, "5tt.nii");
	assert_int_equal(js.seed_count, 4000);   /* select's default, as with roi */
	assert_true(js.seed_count_from_select);
	jobspec_free(&js);
	expect_error(INTERFACE_JOB("\"interface\": {}"), "seeds.interface",
		     "needs \"wm\" and \"gm\"");
	expect_error(INTERFACE_JOB("\"interface\": {\"wm\": \"wm.nii\"}"), "seeds.interface.gm",
		     "is required with seeds.interface.wm");
	expect_error(INTERFACE_JOB("\"interface\": {\"gm\": \"gm.nii\", \"five_tt\": \"t\"}"),
		     "seeds.interface.gm", "cannot be combined with seeds.interface.five_tt");
	expect_error(INTERFACE_JOB("\"interface\": {\"csf\": \"c\"}"), "seeds.interface.csf",
		     "unknown field");
	expect_error(INTERFACE_JOB("\"interface\": {\"five_tt\": \"t\"}, \"roi\": \"r\""),
		     "seeds.interface", "cannot be combined with seeds.roi");
	expect_error(INTERFACE_JOB("\"interface\": {\"five_tt\": \"t\"}, \"per_voxel\": true"),
		     "seeds.per_voxel", "is only allowed with seeds.roi");
	expect_error(INTERFACE_JOB("\"interface\": {\"five_tt\": \"t\"}, \"space\": \"ras\""),
		     "seeds.space", "is only allowed with seeds.points");
	expect_error(INTERFACE_JOB("\"interface\": {\"five_tt\": \"t\"}, \"select\": 2, "
				   "\"shard\": \"0/2\""), "seeds.shard", "cannot be combined");
}

/* The interface's file names are not the job's: shards fingerprint alike. */
static void test_seeds_interface_fingerprint(void **state)
{
	struct jobspec a, b;

	(void)state;
	expect_ok(INTERFACE_JOB("\"interface\": {\"five_tt\": \"5tt.nii\"}"), NULL, &a);
	expect_ok(INTERFACE_JOB("\"interface\": {\"five_tt\": \"sha256:00\"}"), NULL, &b);
	assert_true(a.fingerprint == b.fingerprint);
	jobspec_free(&a);
	jobspec_free(&b);
}

/* tracking.angular_weight: off by default, any weight in [0, 1], and a weight
 * changes the job (its fingerprint) while an explicit 0 does not matter to
 * the walk. */
static void test_angular_weight(void **state)
{
	struct jobspec js;

	(void)state;
	expect_ok(ROI_JOB(""), NULL, &js);
	assert_true(js.angular_weight == 0.0);
	jobspec_free(&js);
	expect_ok(TRACKING_JOB("\"angular_weight\": 0.5"), NULL, &js);
	assert_true(js.angular_weight == 0.5);
	jobspec_free(&js);
	expect_ok(TRACKING_JOB("\"angular_weight\": 1"), NULL, &js);
	assert_true(js.angular_weight == 1.0);
	jobspec_free(&js);
	expect_error(TRACKING_JOB("\"angular_weight\": 1.5"), "tracking.angular_weight",
		     "must be in [0, 1], got 1.5");
	expect_error(TRACKING_JOB("\"angular_weight\": -0.1"), "tracking.angular_weight",
		     "must be in [0, 1], got -0.1");
	expect_error(TRACKING_JOB("\"angular_weight\": \"0.5\""), "tracking.angular_weight",
		     "a number");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_roi),
		cmocka_unit_test(test_defaults_points),
		cmocka_unit_test(test_all_members),
		cmocka_unit_test(test_ranges),
		cmocka_unit_test(test_range_messages),
		cmocka_unit_test(test_lengths),
		cmocka_unit_test(test_trx_output),
		cmocka_unit_test(test_compress_output),
		cmocka_unit_test(test_bad_documents),
		cmocka_unit_test(test_defaults_dwi),
		cmocka_unit_test(test_model_members),
		cmocka_unit_test(test_sh_inputs),
		cmocka_unit_test(test_gradient_conventions_and_mif),
		cmocka_unit_test(test_bad_inputs_and_models),
		cmocka_unit_test(test_seed_kinds),
		cmocka_unit_test(test_points),
		cmocka_unit_test(test_sphere),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_path_length),
		cmocka_unit_test(test_size_limit),
		cmocka_unit_test(test_not_nul_terminated),
		cmocka_unit_test(test_nesting),
		cmocka_unit_test(test_null_errbuf_and_free),
		cmocka_unit_test(test_load_file),
		cmocka_unit_test(test_load_file_bare_name),
		cmocka_unit_test(test_load_file_size_limit),
		cmocka_unit_test(test_load_fifo),
		cmocka_unit_test(test_input_file_table),
		cmocka_unit_test(test_boot),
		cmocka_unit_test(test_odf_storage),
		cmocka_unit_test(test_ptt),
		cmocka_unit_test(test_select),
		cmocka_unit_test(test_shard),
		cmocka_unit_test(test_step_mm),
		cmocka_unit_test(test_stopping),
		cmocka_unit_test(test_stopping_fingerprint),
		cmocka_unit_test(test_stopping_5tt),
		cmocka_unit_test(test_seeds_interface),
		cmocka_unit_test(test_seeds_interface_fingerprint),
		cmocka_unit_test(test_regions),
		cmocka_unit_test(test_max_cross),
		cmocka_unit_test(test_pft),
		cmocka_unit_test(test_angular_weight),
		cmocka_unit_test(test_example_valid),
		cmocka_unit_test(test_examples_invalid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
