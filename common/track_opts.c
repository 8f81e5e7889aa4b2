/* SPDX-License-Identifier: MIT */
/*
 * track_opts: the one table of track's options (name, argument, job field,
 * help) behind both binaries' getopt tables and help texts, and the job
 * composed from a track command line. Values go into the document as the
 * user wrote them (JSON, else a string): jobspec, in tractd or the daemon,
 * is the one to check them and name the field. --include and --exclude
 * (tckgen's) each append a region to regions.include or regions.exclude: a
 * sphere X,Y,Z,R or a mask file, told apart here so that a malformed one is
 * the option's error.
 */
#include "common/track_opts.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HELP_COLUMN 29   /* where the help text starts, as in tractd's other options */

/* A file option (key NULL, field NULL) is placed by track_job_compose; a
 * region option appends to the list its field names. */
enum track_opt_kind { KIND_FIELD, KIND_FILE, KIND_REGION, KIND_SET, KIND_FLAG };

#define SPHERE_VALUES 4   /* a region sphere's X,Y,Z,R */

struct track_opt_spec {
	const char *name;
	const char *arg;     /* the argument's name in the help; NULL: a flag */
	enum track_opt_kind kind;
	const char *field;   /* KIND_FIELD: the dotted job field it sets */
	const char *help;    /* lines separated by '\n' */
};

static const struct track_opt_spec specs[TRACK_OPT_COUNT] = {
	[TRACK_OPT_BVALS] = { "bvals", "FILE", KIND_FILE, NULL,
			      "b-values (FSL text), with --bvecs" },
	[TRACK_OPT_BVECS] = { "bvecs", "FILE", KIND_FILE, NULL,
			      "b-vectors (FSL text), with --bvals" },
	[TRACK_OPT_BVECS_CONVENTION] = { "bvecs-convention", "fsl|voxel", KIND_FIELD,
					 "inputs.bvecs_convention",
					 "inputs.bvecs_convention: the frame of the\nb-vectors" },
	[TRACK_OPT_MASK] = { "mask", "FILE", KIND_FILE, NULL,
			     "where to fit the models (inputs.mask; default: every\n"
			     "voxel); the seed region too without --seed-roi" },
	[TRACK_OPT_SEED_ROI] = { "seed-roi", "FILE", KIND_FILE, NULL, "where to seed (seeds.roi)" },
	[TRACK_OPT_SEEDS] = { "seeds", "N", KIND_FIELD, "seeds.count", "seeds.count" },
	[TRACK_OPT_SELECT] = { "select", "N", KIND_FIELD, "seeds.select",
			       "seeds.select: the streamlines wanted (as tckgen\n-select)" },
	[TRACK_OPT_RNG_SEED] = { "rng-seed", "N", KIND_FIELD, "seeds.rng_seed", "seeds.rng_seed" },
	[TRACK_OPT_DG] = { "dg", "prob|boot|ptt", KIND_FIELD, "direction_getter",
			   "the direction getter" },
	[TRACK_OPT_SH_ORDER] = { "sh-order", "N", KIND_FIELD, "model.sh_order", "model.sh_order" },
	[TRACK_OPT_SPHERE] = { "sphere", "NAME", KIND_FIELD, "tracking.sphere", "tracking.sphere" },
	[TRACK_OPT_STEP_SIZE] = { "step-size", "VOXELS", KIND_FIELD, "tracking.step_size",
				  "tracking.step_size, in voxels" },
	[TRACK_OPT_STEP] = { "step", "MM", KIND_FIELD, "tracking.step_mm",
			     "tracking.step_mm, in millimetres" },
	[TRACK_OPT_MAX_ANGLE] = { "max-angle", "DEG", KIND_FIELD, "tracking.max_angle",
				  "tracking.max_angle" },
	[TRACK_OPT_FA_THRESHOLD] = { "fa-threshold", "X", KIND_FIELD, "tracking.fa_threshold",
				     "tracking.fa_threshold" },
	[TRACK_OPT_INCLUDE] = { "include", "X,Y,Z,R|FILE", KIND_REGION, "regions.include",
				"regions.include (as tckgen -include): a sphere\n"
				"in RAS+ mm or a mask image; repeatable" },
	[TRACK_OPT_EXCLUDE] = { "exclude", "X,Y,Z,R|FILE", KIND_REGION, "regions.exclude",
				"regions.exclude (as tckgen -exclude): a sphere\n"
				"in RAS+ mm or a mask image; repeatable" },
	[TRACK_OPT_SET] = { "set", "KEY=VALUE", KIND_SET, NULL,
			    "any other job field by its dotted path, VALUE as\n"
			    "JSON (else a string): --set tracking.max_steps=800" },
	[TRACK_OPT_PRINT_JOB] = { "print-job", NULL, KIND_FLAG, NULL,
				  "print the job document and run nothing (keep it\n"
				  "for `tractd run`)" },
	[TRACK_OPT_FORCE] = { "force", NULL, KIND_FLAG, NULL, "overwrite an existing OUTPUT" },
};

void track_request_init(struct track_request *t)
{
	*t = (struct track_request){ .first_given = -1 };
}

void track_opts_getopt(struct option *out, int first_val)
{
	for (int i = 0; i < TRACK_OPT_COUNT; i++)
		out[i] = (struct option){ specs[i].name,
					  specs[i].arg ? required_argument : no_argument, NULL,
					  first_val + i };
}

const char *track_opts_name(enum track_opt opt)
{
	return specs[opt].name;
}

void track_opts_print_help(FILE *f)
{
	for (int i = 0; i < TRACK_OPT_COUNT; i++) {
		const struct track_opt_spec *s = &specs[i];
		const char *line = s->help;
		int width = fprintf(f, "      --%s%s%s", s->name, s->arg ? " " : "",
				    s->arg ? s->arg : "");

		/* help2man needs two blanks between the columns. */
		fprintf(f, "%*s", width + 2 > HELP_COLUMN ? 2 : HELP_COLUMN - width, "");
		for (;;) {
			size_t n = strcspn(line, "\n");
			fprintf(f, "%.*s\n", (int)n, line);
			if (!line[n])
				break;
			line += n + 1;
			fprintf(f, "%*s", HELP_COLUMN, "");
		}
	}
}

static int add_field(struct track_request *t, const char *key, const char *value, bool region,
		     struct job_doc_error *err)
{
	if (t->n_fields == TRACK_MAX_FIELDS)
		return job_doc_fail(err, -EINVAL, "", "too many job fields on one command line "
				    "(%d at most)", TRACK_MAX_FIELDS);
	t->fields[t->n_fields++] = (struct track_field){ key, value, region };
	return 0;
}

/* text's comma-separated numbers into values (at most max of them): their
 * count, or -1 when text is not such a list (then it names a file). */
static int parse_numbers(const char *text, double *values, int max)
{
	int n = 0;

	for (;;) {
		char *end;
		double v = strtod(text, &end);

		if (end == text || !isfinite(v) || (*end && *end != ','))
			return -1;
		if (n < max)
			values[n] = v;
		n++;
		if (!*end)
			return n;
		text = end + 1;
	}
}

/* A region option's argument: a sphere of four numbers, else an existing
 * mask file (tckgen reads its -include and -exclude alike). */
static int check_region(enum track_opt opt, const char *arg, struct job_doc_error *err)
{
	double values[SPHERE_VALUES];
	int n = parse_numbers(arg, values, SPHERE_VALUES);

	if (n == SPHERE_VALUES)
		return 0;
	if (n >= 0)
		return job_doc_fail(err, -EINVAL, "", "--%s '%s': a sphere is X,Y,Z,R (%d numbers, "
				    "RAS+ mm), not %d", specs[opt].name, arg, SPHERE_VALUES, n);
	if (access(arg, F_OK) < 0)
		return job_doc_fail(err, -ENOENT, "", "--%s '%s': no such mask file (a region is "
				    "a mask FILE or a sphere X,Y,Z,R)", specs[opt].name, arg);
	return 0;
}

int track_request_take(struct track_request *t, enum track_opt opt, const char *arg,
		       struct job_doc_error *err)
{
	if (t->first_given < 0)
		t->first_given = (int)opt;
	switch (opt) {
	case TRACK_OPT_BVALS: t->bvals = arg; return 0;
	case TRACK_OPT_BVECS: t->bvecs = arg; return 0;
	case TRACK_OPT_MASK: t->mask = arg; return 0;
	case TRACK_OPT_SEED_ROI: t->seed_roi = arg; return 0;
	case TRACK_OPT_SET: return add_field(t, NULL, arg, false, err);
	case TRACK_OPT_PRINT_JOB: t->print_job = true; return 0;
	case TRACK_OPT_FORCE: t->force = true; return 0;
	case TRACK_OPT_INCLUDE:
	case TRACK_OPT_EXCLUDE: {
		int r = check_region(opt, arg, err);
		return r < 0 ? r : add_field(t, specs[opt].field, arg, true, err);
	}
	default: return add_field(t, specs[opt].field, arg, false, err);
	}
}

/* path as a JSON string, absolute (joined to the current directory), so
 * that a printed job runs from anywhere; NULL when out of memory or too
 * long. */
static json_t *absolute_path(const char *path)
{
	char cwd[PATH_MAX], joined[2 * PATH_MAX];

	if (path[0] == '/')
		return json_string(path);
	if (!getcwd(cwd, sizeof(cwd)))
		return NULL;
	if ((size_t)snprintf(joined, sizeof(joined), "%s/%s", cwd, path) >= sizeof(joined))
		return NULL;
	return json_string(joined);
}

/* The inputs: dwi, the gradients (--bvals and --bvecs, else found beside
 * dwi) and the mask. */
static int track_inputs(const struct track_request *t, const char *dwi, json_t **ret,
			struct job_doc_error *err)
{
	char *found_bvals = NULL, *found_bvecs = NULL;
	json_t *inputs;
	int r = 0;

	if (!t->bvals != !t->bvecs)
		return job_doc_fail(err, -EINVAL, "", "--bvals and --bvecs go together");
	if (!t->bvals)
		r = job_doc_find_gradients(dwi, &found_bvals, &found_bvecs, err);
	if (r < 0)
		return r;
	inputs = json_pack("{s:o}", "dwi", absolute_path(dwi));
	/* A .mif's own gradients leave both NULL. */
	if (inputs && (t->bvals || found_bvals) &&
	    (json_object_set_new(inputs, "bvals",
				 absolute_path(t->bvals ? t->bvals : found_bvals)) < 0 ||
	     json_object_set_new(inputs, "bvecs",
				 absolute_path(t->bvecs ? t->bvecs : found_bvecs)) < 0)) {
		json_decref(inputs);
		inputs = NULL;
	}
	if (inputs && t->mask && json_object_set_new(inputs, "mask", absolute_path(t->mask)) < 0) {
		json_decref(inputs);
		inputs = NULL;
	}
	free(found_bvals);
	free(found_bvecs);
	if (!inputs)
		return job_doc_fail(err, -ENOMEM, "", "out of memory or a path too long");
	*ret = inputs;
	return 0;
}

/* A region option's argument as the job has it: {"center": [X, Y, Z],
 * "radius": R}, or the mask's absolute path; NULL when out of memory or a
 * path too long. */
static json_t *region_value(const char *arg)
{
	double v[SPHERE_VALUES];

	if (parse_numbers(arg, v, SPHERE_VALUES) != SPHERE_VALUES)
		return absolute_path(arg);
	return json_pack("{s:[f, f, f], s:f}", "center", v[0], v[1], v[2], "radius", v[3]);
}

/* Appends f's region to the list at f->key ("regions.include"), which an
 * earlier --set may have given; one that is not a list is the option's
 * error. */
static int append_region(json_t *doc, const struct track_field *f, struct job_doc_error *err)
{
	const char *name = strchr(f->key, '.') + 1;   /* the list's, and the option's */
	json_t *list = json_object_get(json_object_get(doc, "regions"), name), *value;

	if (!list) {
		int r;

		list = json_array();
		if (!list)
			return job_doc_fail(err, -ENOMEM, "", "out of memory");
		r = job_doc_set(doc, f->key, list, err);
		if (r < 0)
			return r;
	}
	if (!json_is_array(list))
		return job_doc_fail(err, -EINVAL, f->key, "not a list, so --%s cannot add to it",
				    name);
	value = region_value(f->value);
	if (!value || json_array_append_new(list, value) < 0)
		return job_doc_fail(err, -ENOMEM, "", "out of memory or a path too long");
	return 0;
}

/* The options' fields, in the order given, over the document. */
static int set_fields(const struct track_request *t, json_t *doc, struct job_doc_error *err)
{
	for (size_t i = 0; i < t->n_fields; i++) {
		const struct track_field *f = &t->fields[i];
		int r = f->region ? append_region(doc, f, err) :
			f->key ? job_doc_set_text(doc, f->key, f->value, err) :
				 job_doc_assign(doc, f->value, err);
		if (r < 0)
			return r;
	}
	return 0;
}

int track_job_compose(const struct track_request *t, const char *dwi, const char *output,
		      json_t **ret, struct job_doc_error *err)
{
	const char *format = job_doc_format_of(output), *roi = t->seed_roi ? t->seed_roi : t->mask;
	json_t *doc, *inputs = NULL;
	int r;

	if (!t->print_job && !t->force && access(output, F_OK) == 0)
		return job_doc_fail(err, -EEXIST, "", "%s exists: give --force to overwrite it",
				    output);
	if (!format)
		return job_doc_fail(err, -EINVAL, "", "OUTPUT '%s': its extension picks the format "
				    "(.trk, .tck, .trx)", output);
	if (!roi)
		return job_doc_fail(err, -EINVAL, "", "track needs --seed-roi FILE or --mask FILE "
				    "to seed in");
	r = track_inputs(t, dwi, &inputs, err);
	if (r < 0)
		return r;
	doc = json_pack("{s:o, s:{s:o}, s:{s:s, s:o}}", "inputs", inputs, "seeds", "roi",
			absolute_path(roi), "output", "format", format, "path",
			absolute_path(output));
	if (!doc)
		return job_doc_fail(err, -ENOMEM, "", "out of memory or a path too long");
	r = set_fields(t, doc, err);
	if (r < 0) {
		json_decref(doc);
		return r;
	}
	*ret = doc;
	return 0;
}
