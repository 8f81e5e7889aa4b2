/* SPDX-License-Identifier: MIT */
/*
 * track_opts and job_doc (common/): the one table of track's options makes
 * getopt entries and help2man-shaped help lines; a track command line
 * composes its job with absolute paths, the gradients found beside the DWI,
 * the seed region, the format from OUTPUT's extension and the options'
 * fields in the order given; an existing OUTPUT, a wrong extension, no seed
 * region and too many fields are the command line's faults, no gradients
 * an input's. --include/--exclude append spheres (X,Y,Z,R) and masks to
 * regions.include/exclude; a sphere not of four numbers is the option's
 * usage error, a missing mask its input error.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/job_doc.h"
#include "common/track_opts.h"
#include "tmpdir.h"

#define HELP_COLUMN 29

struct scratch {
	char dir[64];
	char dwi[PATH_MAX], mask[PATH_MAX], out[PATH_MAX];
};

static void touch(const char *dir, const char *name)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
}

static int setup(void **state)
{
	struct scratch *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	snprintf(s->dir, sizeof(s->dir), "/tmp/test_track_opts.XXXXXX");
	assert_non_null(mkdtemp(s->dir));
	touch(s->dir, "dwi.nii.gz");
	touch(s->dir, "dwi.bval");
	touch(s->dir, "dwi.bvec");
	touch(s->dir, "mask.nii.gz");
	snprintf(s->dwi, sizeof(s->dwi), "%s/dwi.nii.gz", s->dir);
	snprintf(s->mask, sizeof(s->mask), "%s/mask.nii.gz", s->dir);
	snprintf(s->out, sizeof(s->out), "%s/tracks.TCK", s->dir);
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct scratch *s = *state;

	tmpdir_remove(s->dir);
	free(s);
	return 0;
}

static void take(struct track_request *t, enum track_opt opt, const char *arg)
{
	struct job_doc_error err = { 0 };

	assert_int_equal(track_request_take(t, opt, arg, &err), 0);
}

static const char *field_text(const json_t *doc, const char *section, const char *name)
{
	return json_string_value(json_object_get(json_object_get(doc, section), name));
}

static void test_getopt_entries(void **state)
{
	struct option opts[TRACK_OPT_COUNT];

	(void)state;
	track_opts_getopt(opts, 300);
	for (int i = 0; i < TRACK_OPT_COUNT; i++) {
		assert_int_equal(opts[i].val, 300 + i);
		assert_string_equal(opts[i].name, track_opts_name((enum track_opt)i));
		assert_null(opts[i].flag);
	}
	assert_string_equal(opts[TRACK_OPT_SELECT].name, "select");
	assert_int_equal(opts[TRACK_OPT_STEP].has_arg, required_argument);
	assert_int_equal(opts[TRACK_OPT_PRINT_JOB].has_arg, no_argument);
}

/* Each option once, its help two blanks or more after it (help2man's
 * columns), continuation lines at the help's column. */
static void test_help_lines(void **state)
{
	char *text = NULL, *line, *save = NULL;
	size_t len = 0, options = 0;
	FILE *f = open_memstream(&text, &len);

	(void)state;
	assert_non_null(f);
	track_opts_print_help(f);
	fclose(f);
	assert_non_null(strstr(text, "--bvecs-convention fsl|voxel  inputs.bvecs_convention"));
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "      --", 8) == 0) {
			assert_true(strlen(line) > HELP_COLUMN);
			assert_non_null(strstr(line + 8, "  "));
			options++;
		} else {
			assert_int_equal(strspn(line, " "), HELP_COLUMN);
		}
	}
	assert_int_equal(options, TRACK_OPT_COUNT);
	free(text);
}

static void test_format_of(void **state)
{
	(void)state;
	assert_string_equal(job_doc_format_of("a/b.TrK"), "trk");
	assert_string_equal(job_doc_format_of("x.tck"), "tck");
	assert_string_equal(job_doc_format_of("x.trx"), "trx");
	assert_null(job_doc_format_of("x.trk.gz"));
	assert_null(job_doc_format_of("dir.trk/x"));
	assert_null(job_doc_format_of("trk"));
}

static void test_compose(void **state)
{
	struct scratch *s = *state;
	struct track_request t;
	struct job_doc_error err = { 0 };
	json_t *doc = NULL;

	track_request_init(&t);
	take(&t, TRACK_OPT_MASK, s->mask);
	take(&t, TRACK_OPT_SET, "tracking.max_angle=30");
	take(&t, TRACK_OPT_MAX_ANGLE, "45");
	take(&t, TRACK_OPT_SELECT, "50");
	take(&t, TRACK_OPT_BVECS_CONVENTION, "voxel");
	take(&t, TRACK_OPT_SPHERE, "repulsion100");
	assert_int_equal(t.first_given, TRACK_OPT_MASK);
	assert_int_equal(track_job_compose(&t, s->dwi, s->out, &doc, &err), 0);
	assert_string_equal(field_text(doc, "inputs", "dwi"), s->dwi);
	assert_non_null(strstr(field_text(doc, "inputs", "bvals"), "/dwi.bval"));
	assert_string_equal(field_text(doc, "inputs", "mask"), s->mask);
	assert_string_equal(field_text(doc, "inputs", "bvecs_convention"), "voxel");
	/* The mask seeds without --seed-roi. */
	assert_string_equal(field_text(doc, "seeds", "roi"), s->mask);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "seeds"),
							    "select")), 50);
	/* The later of --set and --max-angle wins; numbers are JSON, names strings. */
	assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "tracking"),
							    "max_angle")), 45);
	assert_string_equal(field_text(doc, "tracking", "sphere"), "repulsion100");
	assert_string_equal(field_text(doc, "output", "format"), "tck");
	assert_string_equal(field_text(doc, "output", "path"), s->out);
	json_decref(doc);
}

static void test_relative_paths_made_absolute(void **state)
{
	struct scratch *s = *state;
	struct track_request t;
	struct job_doc_error err = { 0 };
	char cwd[PATH_MAX];
	json_t *doc = NULL;

	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(s->dir), 0);
	track_request_init(&t);
	take(&t, TRACK_OPT_SEED_ROI, "mask.nii.gz");
	assert_int_equal(track_job_compose(&t, "dwi.nii.gz", "out.trk", &doc, &err), 0);
	assert_int_equal(chdir(cwd), 0);
	assert_string_equal(field_text(doc, "inputs", "dwi"), s->dwi);
	assert_string_equal(field_text(doc, "seeds", "roi"), s->mask);
	assert_null(json_object_get(json_object_get(doc, "inputs"), "mask"));
	json_decref(doc);
}

static void test_command_line_faults(void **state)
{
	struct scratch *s = *state;
	struct track_request t;
	struct job_doc_error err = { 0 };
	char bad[PATH_MAX];
	json_t *doc = NULL;

	track_request_init(&t);
	assert_int_equal(track_job_compose(&t, s->dwi, s->out, &doc, &err), -EINVAL);
	assert_non_null(strstr(err.message, "--seed-roi"));
	take(&t, TRACK_OPT_MASK, s->mask);
	snprintf(bad, sizeof(bad), "%s/tracks.vtk", s->dir);
	assert_int_equal(track_job_compose(&t, s->dwi, bad, &doc, &err), -EINVAL);
	assert_non_null(strstr(err.message, ".trk, .tck, .trx"));
	/* An existing OUTPUT: kept without --force; --print-job writes nothing. */
	assert_int_equal(track_job_compose(&t, s->dwi, s->mask, &doc, &err), -EEXIST);
	assert_non_null(strstr(err.message, "--force"));
	take(&t, TRACK_OPT_BVALS, "only.bval");
	assert_int_equal(track_job_compose(&t, s->dwi, s->out, &doc, &err), -EINVAL);
	assert_non_null(strstr(err.message, "--bvals and --bvecs"));
	track_request_init(&t);
	for (int i = 0; i < TRACK_MAX_FIELDS; i++)
		take(&t, TRACK_OPT_SEEDS, "1");
	assert_int_equal(track_request_take(&t, TRACK_OPT_SEEDS, "1", &err), -EINVAL);
	assert_null(doc);
}

static double number_at(const json_t *list, size_t i, const char *member, size_t k)
{
	const json_t *v = json_object_get(json_array_get(list, i), member);

	return json_number_value(json_is_array(v) ? json_array_get(v, k) : v);
}

static void test_region_options(void **state)
{
	struct scratch *s = *state;
	struct track_request t;
	struct job_doc_error err = { 0 };
	json_t *doc = NULL, *include, *exclude;

	track_request_init(&t);
	take(&t, TRACK_OPT_MASK, s->mask);
	take(&t, TRACK_OPT_INCLUDE, "1,-2.5,3e1,4");
	take(&t, TRACK_OPT_EXCLUDE, s->mask);
	take(&t, TRACK_OPT_INCLUDE, "0,0,0,2");
	assert_int_equal(track_job_compose(&t, s->dwi, s->out, &doc, &err), 0);
	include = json_object_get(json_object_get(doc, "regions"), "include");
	exclude = json_object_get(json_object_get(doc, "regions"), "exclude");
	assert_int_equal(json_array_size(include), 2);
	assert_true(number_at(include, 0, "center", 1) == -2.5);
	assert_true(number_at(include, 0, "center", 2) == 30.0);
	assert_true(number_at(include, 0, "radius", 0) == 4.0);
	assert_true(number_at(include, 1, "radius", 0) == 2.0);
	assert_int_equal(json_array_size(exclude), 1);
	assert_string_equal(json_string_value(json_array_get(exclude, 0)), s->mask);
	json_decref(doc);

	assert_int_equal(track_request_take(&t, TRACK_OPT_INCLUDE, "1,2,3", &err), -EINVAL);
	assert_non_null(strstr(err.message, "--include '1,2,3'"));
	assert_int_equal(track_request_take(&t, TRACK_OPT_EXCLUDE, "1,2,3,4,5", &err), -EINVAL);
	assert_non_null(strstr(err.message, "--exclude"));
	assert_int_equal(track_request_take(&t, TRACK_OPT_EXCLUDE, "/no/such/mask.nii", &err),
			 -ENOENT);
	assert_non_null(strstr(err.message, "--exclude '/no/such/mask.nii'"));
}

static void test_no_gradients_is_the_inputs_fault(void **state)
{
	struct scratch *s = *state;
	struct track_request t;
	struct job_doc_error err = { 0 };
	char scan[PATH_MAX];
	json_t *doc = NULL;

	snprintf(scan, sizeof(scan), "%s/scan.nii", s->dir);
	touch(s->dir, "scan.nii");
	track_request_init(&t);
	take(&t, TRACK_OPT_MASK, s->mask);
	assert_int_equal(track_job_compose(&t, scan, s->out, &doc, &err), -ENOENT);
	assert_string_equal(err.field, "inputs.bvals");
	assert_non_null(strstr(err.message, "scan.bval"));
	assert_non_null(strstr(err.message, "/bvecs"));
	assert_null(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_getopt_entries),
		cmocka_unit_test(test_help_lines),
		cmocka_unit_test(test_format_of),
		cmocka_unit_test_setup_teardown(test_compose, setup, teardown),
		cmocka_unit_test_setup_teardown(test_relative_paths_made_absolute, setup, teardown),
		cmocka_unit_test_setup_teardown(test_command_line_faults, setup, teardown),
		cmocka_unit_test_setup_teardown(test_region_options, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_gradients_is_the_inputs_fault, setup,
						 teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
