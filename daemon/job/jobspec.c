/* SPDX-License-Identifier: MIT */
/*
 * jobspec: validation of job documents.
 *
 * Every JSON object of the job format is described by a table of its fields.
 * One walker rejects keys that are not in the table and hands each value to
 * the parser for its kind, which writes it into struct jobspec at the row's
 * offset; a row also holds the field's bounds and default (or its names, for
 * a choice), so a new parameter is one table row, and every error names the
 * full path of the field it is about. Rules that involve more than one field
 * (seed kinds, min_length < max_length, required inputs, defaults that depend
 * on other fields) run after the walk.
 */
#include "job/jobspec.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/fnv.h"
#include "formats/compress.h"
#include "models/sphere.h"

#define FIELD_MAX sizeof(((struct errbuf *)NULL)->field)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The deepest valid value, tracking.sphere.vertices[i][j], is at nesting
 * depth 5; the margin lets ordinary mistakes (one bracket too many) reach the
 * walker and be reported by field name. jansson itself stops only at 2048. */
#define MAX_DEPTH 16

/* Same limits as sphere_from_vertices, checked here so that an oversized list
 * is refused before it is copied and the error names the JSON field. */
#define SPHERE_MIN_NV 6
#define SPHERE_MAX_NV 65536

/* 2^53: the largest range in which every integer is exact in a double, so a
 * seed survives a trip through any JSON implementation unchanged. */
#define RNG_SEED_MAX 9007199254740992.0

#define DEFAULT_SPHERE "repulsion724"
#define READ_INITIAL (64u << 10)   /* buffer for input of unknown size */

enum kind {
	K_OBJECT,       /* nested object described by sub[0..n_sub) */
	K_PATH,         /* char *: non-empty string, resolved against base_dir */
	K_BOOL,         /* bool */
	K_REAL,         /* double within bounds; null means +inf when nullable */
	K_INT,          /* int within bounds (integral value) */
	K_U64,          /* uint64_t within bounds (integral value) */
	K_CHOICE,       /* an int-sized enum: the index of the string in names */
	K_CHOICE_BOOL,  /* bool: the string is names[1] (not names[0]) */
	K_CUSTOM,       /* handled by parse(); sub: the fields of its object form */
};

enum { CLOSED = 0, OPEN = 1 };

struct bounds {
	double min, max;         /* integer kinds use closed bounds only */
	bool min_open, max_open;
	bool nullable;
	const char *unit;        /* appended to the range in messages, or NULL */
};

struct ctx {
	struct jobspec *js;
	const char *base_dir;
	struct errbuf *err;
};

struct member {
	const char *key;
	enum kind kind;
	size_t offset;               /* into struct jobspec, for value kinds */
	struct bounds b;             /* K_REAL, K_INT, K_U64 */
	double def;                  /* K_REAL, K_INT, K_U64: the default */
	const char *const *names;    /* K_CHOICE, K_CHOICE_BOOL: NULL-terminated */
	const struct member *sub;    /* K_OBJECT, K_CUSTOM with an object form */
	size_t n_sub;
	int (*parse)(json_t *v, const char *field, struct ctx *c);   /* K_CUSTOM */
};

/* Table rows: the JSON key, the struct jobspec member it fills, its default
 * and bounds. Booleans, paths and choices default to zero (false, NULL, the
 * first name). */
#define REAL(k, member, dflt, lo, lo_open, hi, hi_open, u) \
	{ .key = k, .kind = K_REAL, .offset = offsetof(struct jobspec, member), .def = (dflt), \
	  .b = { .min = (lo), .max = (hi), .min_open = (lo_open), .max_open = (hi_open), \
		 .unit = (u) } }
#define INTEGER(k, member, type, dflt, lo, hi, u) \
	{ .key = k, .kind = type, .offset = offsetof(struct jobspec, member), .def = (dflt), \
	  .b = { .min = (lo), .max = (hi), .unit = (u) } }
#define BOOL(k, member) { .key = k, .kind = K_BOOL, .offset = offsetof(struct jobspec, member) }
#define PATH(k, member) \
	{ .key = k, .kind = K_PATH, .offset = offsetof(struct jobspec, member) }
#define CHOICE(k, member, table) \
	{ .key = k, .kind = K_CHOICE, .offset = offsetof(struct jobspec, member), .names = table }
#define CHOICE_BOOL(k, member, table) \
	{ .key = k, .kind = K_CHOICE_BOOL, .offset = offsetof(struct jobspec, member), \
	  .names = table }
#define OBJECT(k, table) { .key = k, .kind = K_OBJECT, .sub = table, .n_sub = ARRAY_SIZE(table) }
#define CUSTOM(k, fn) { .key = k, .kind = K_CUSTOM, .parse = fn }
/* A custom field whose object form fn walks with table. */
#define CUSTOM_OBJECT(k, fn, table) \
	{ .key = k, .kind = K_CUSTOM, .parse = fn, .sub = table, .n_sub = ARRAY_SIZE(table) }

/* In enum jobspec_direction_getter order. */
static const char *const direction_getters[] = { "prob", "boot", "ptt", NULL };
/* seed_points_ras false, true. */
static const char *const seed_spaces[] = { "voxel", "ras", NULL };
/* In enum output_format order. */
static const char *const output_formats[] = { "trk", "tck", "trx", NULL };
/* In enum jobspec_odf_storage order. */
static const char *const odf_storages[] = { "auto", "float32", "float16", "sh", NULL };
/* In enum trx_positions order. */
static const char *const output_positions[] = { "float32", "float16", NULL };
/* In enum trx_compression order. */
static const char *const output_compressions[] = { "store", "deflate", NULL };
/* In enum sh_basis order. */
static const char *const sh_bases[] = { "descoteaux07_legacy", "descoteaux07", "tournier07",
					"tournier07_legacy", NULL };
/* In enum jobspec_sh_frame order. */
static const char *const sh_frames[] = { "voxel", "world", NULL };
/* In enum jobspec_bvecs_convention order. */
static const char *const bvecs_conventions[] = { "voxel", "fsl", NULL };
/* In enum jobspec_model_name order. */
static const char *const stopping_criteria[] = { "threshold", "act", "cmc", NULL };

static const char *const models[] = { "csd", "opdt", "csa", NULL };

/* K_CHOICE writes the index as an int: the enums it fills are int-sized. */
#define INT_SIZED(member) _Static_assert(sizeof(((struct jobspec *)NULL)->member) == \
					 sizeof(int), #member " is written as an int")
INT_SIZED(direction_getter);
INT_SIZED(output_format);
INT_SIZED(odf_storage);
INT_SIZED(output_positions);
INT_SIZED(output_compression);
INT_SIZED(sh_basis);
INT_SIZED(sh_frame);
INT_SIZED(bvecs_convention);
INT_SIZED(model.name);

static int walk_object(json_t *obj, const char *field, const struct member *members, size_t n,
		       struct ctx *c);
static const struct member *find_member(const struct member *members, size_t n, const char *key);
static int parse_member(const struct member *m, json_t *v, const char *field, struct ctx *c);

/* ---- messages ---- */

/* Shortest of %.15g / %.17g that reads back as v: "got 0.1", not
 * "got 0.10000000000000001", while 1.0000000000000002 still prints exactly. */
static void fmt_num(double v, char buf[static 32])
{
	snprintf(buf, 32, "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, 32, "%.17g", v);
}

static int type_error(struct errbuf *err, const char *field, const char *what)
{
	return errbuf_set(err, -EINVAL, field, "must be %s", what);
}

static int oom(struct errbuf *err)
{
	return errbuf_set(err, -ENOMEM, "", "out of memory");
}

/* "must be in (0, 90] degrees, got 120", "must be > 0 mm or null, got 0". */
static int range_error(struct errbuf *err, const char *field, const struct bounds *b,
		       const char *got)
{
	char lo[32], hi[32], range[80];

	fmt_num(b->min, lo);
	fmt_num(b->max, hi);
	if (isinf(b->max))
		snprintf(range, sizeof(range), "%s %s", b->min_open ? ">" : ">=", lo);
	else
		snprintf(range, sizeof(range), "in %c%s, %s%c", b->min_open ? '(' : '[', lo, hi,
			 b->max_open ? ')' : ']');
	return errbuf_set(err, -EINVAL, field, "must be %s%s%s%s, got %s", range,
			  b->unit ? " " : "", b->unit ? b->unit : "", b->nullable ? " or null" : "",
			  got);
}

/* Appends item to the ", "-separated list in buf; truncates, never overflows. */
static void list_append(char *buf, size_t size, const char *item, bool quoted)
{
	size_t used = strnlen(buf, size);
	const char *q = quoted ? "\"" : "";

	if (used + 1 < size)
		snprintf(buf + used, size - used, "%s%s%s%s", used ? ", " : "", q, item, q);
}

/* ---- scalar parsers ---- */

static bool in_bounds(double x, const struct bounds *b)
{
	bool above = b->min_open ? x > b->min : x >= b->min;
	bool below = b->max_open ? x < b->max : x <= b->max;

	return above && below;
}

static int parse_real(json_t *v, const char *field, const struct bounds *b, double *out,
		      struct errbuf *err)
{
	char got[32];
	double x;

	if (b->nullable && json_is_null(v)) {
		*out = INFINITY;
		return 0;
	}
	/* JSON integers are numbers too: "max_angle": 60 is fine. */
	if (!json_is_number(v))
		return type_error(err, field, b->nullable ? "a number or null" : "a number");
	x = json_number_value(v);
	/* The JSON grammar has no NaN or infinity; guard anyway so that no
	 * non-finite value can ever reach the GPU parameters. */
	if (!isfinite(x))
		return type_error(err, field, "a finite number");
	if (!in_bounds(x, b)) {
		fmt_num(x, got);
		return range_error(err, field, b, got);
	}
	*out = x;
	return 0;
}

/* Counts must be integral. An integral real such as 2000.0 is accepted, as
 * JSON Schema's "integer" accepts it. JSON integers are compared as integers
 * so that 2^53 + 1 is not rounded into range on the way. */
static int parse_integer(json_t *v, const char *field, const struct bounds *b, json_int_t *out,
			 struct errbuf *err)
{
	char got[32];

	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);

		if (x >= (json_int_t)b->min && x <= (json_int_t)b->max) {
			*out = x;
			return 0;
		}
		snprintf(got, sizeof(got), "%" JSON_INTEGER_FORMAT, x);
	} else if (json_is_real(v)) {
		double x = json_real_value(v);

		fmt_num(x, got);
		if (!isfinite(x) || x != floor(x))
			return errbuf_set(err, -EINVAL, field, "must be an integer, got %s", got);
		if (in_bounds(x, b)) {
			*out = (json_int_t)x;
			return 0;
		}
	} else {
		return type_error(err, field, "an integer");
	}
	return range_error(err, field, b, got);
}

/* Joins a relative path to base_dir; absolute paths, and every path when
 * base_dir is NULL or empty, are kept as given. */
static int resolve_path(const char *base_dir, const char *s, size_t len, const char *field,
			char **out, struct errbuf *err)
{
	size_t blen = (base_dir && s[0] != '/') ? strlen(base_dir) : 0;
	size_t sep = (blen && base_dir[blen - 1] != '/') ? 1 : 0;
	size_t total = blen + sep + len;
	char *p;

	/* PATH_MAX counts the terminating NUL; a longer name cannot be opened. */
	if (total >= PATH_MAX)
		return errbuf_set(err, -EINVAL, field, "must be at most %d bytes%s, got %zu",
				  PATH_MAX - 1, blen ? " once joined to the base directory" : "",
				  total);
	p = malloc(total + 1);
	if (!p)
		return oom(err);
	if (blen)
		memcpy(p, base_dir, blen);
	if (sep)
		p[blen] = '/';
	memcpy(p + blen + sep, s, len);
	p[total] = '\0';
	*out = p;
	return 0;
}

static int parse_path(json_t *v, const char *field, struct ctx *c, char **out)
{
	const char *s;
	size_t len;

	if (!json_is_string(v))
		return type_error(c->err, field, "a string");
	s = json_string_value(v);
	len = json_string_length(v);
	if (len == 0)
		return errbuf_set(c->err, -EINVAL, field, "must not be empty");
	/* jansson refuses \u0000 unless JSON_ALLOW_NUL; checked here as well
	 * because a path cut short at a NUL would name a different file. */
	if (memchr(s, '\0', len))
		return errbuf_set(c->err, -EINVAL, field, "must not contain NUL bytes");
	return resolve_path(c->base_dir, s, len, field, out, c->err);
}

/* Sets *idx to the position of v's string in names. */
static int parse_choice(json_t *v, const char *field, const char *const *names, int *idx,
			struct errbuf *err)
{
	char list[256] = "";
	const char *s;

	if (!json_is_string(v))
		return type_error(err, field, "a string");
	s = json_string_value(v);
	for (int i = 0; names[i]; i++) {
		if (!strcmp(s, names[i])) {
			*idx = i;
			return 0;
		}
	}
	for (int i = 0; names[i]; i++)
		list_append(list, sizeof(list), names[i], true);
	return errbuf_set(err, -EINVAL, field, "must be one of %s, got \"%s\"", list, s);
}

/* An array of min_n..max_n arrays of exactly 3 finite numbers, flattened. */
static int parse_vec3_list(json_t *v, const char *field, size_t min_n, size_t max_n,
			   const char *noun, double **out, size_t *n_out, struct errbuf *err)
{
	size_t n, i;
	json_t *item;
	double *xyz;

	if (!json_is_array(v))
		return type_error(err, field, "an array");
	n = json_array_size(v);
	if (n < min_n || n > max_n)
		return errbuf_set(err, -EINVAL, field, "must have %zu to %zu %s, got %zu", min_n,
				  max_n, noun, n);
	xyz = calloc(n, 3 * sizeof(*xyz));
	if (!xyz)
		return oom(err);
	json_array_foreach(v, i, item) {
		bool ok = json_is_array(item) && json_array_size(item) == 3;

		for (size_t k = 0; ok && k < 3; k++) {
			json_t *num = json_array_get(item, k);

			ok = json_is_number(num) && isfinite(json_number_value(num));
			if (ok)
				xyz[3 * i + k] = json_number_value(num);
		}
		if (!ok) {
			char elem[FIELD_MAX];

			free(xyz);
			snprintf(elem, sizeof(elem), "%s[%zu]", field, i);
			return errbuf_set(err, -EINVAL, elem, "must be an array of 3 numbers");
		}
	}
	*out = xyz;
	*n_out = n;
	return 0;
}

/* ---- custom fields ---- */

static int parse_seed_points(json_t *v, const char *field, struct ctx *c)
{
	size_t n;
	int rc = parse_vec3_list(v, field, 1, JOBSPEC_MAX_POINTS, "points", &c->js->seed_points,
				 &n, c->err);

	if (!rc)
		c->js->n_seed_points = n;
	return rc;
}

static int parse_sh_order(json_t *v, const char *field, struct ctx *c)
{
	static const struct bounds b = { .min = 2, .max = SH_MAX_ORDER };
	json_int_t x = 0;   /* set when rc is 0; the analyzer cannot follow range_error */
	int rc = parse_integer(v, field, &b, &x, c->err);

	if (!rc && x % 2)
		rc = errbuf_set(c->err, -EINVAL, field, "must be even (symmetric harmonics), "
				"got %lld", (long long)x);
	if (!rc)
		c->js->model.sh_order = (int)x;
	return rc;
}

static int parse_response_evals(json_t *v, const char *field, struct ctx *c)
{
	size_t i;
	json_t *item;

	if (!json_is_array(v) || json_array_size(v) != 3)
		return type_error(c->err, field, "an array of 3 eigenvalues (mm^2/s)");
	json_array_foreach(v, i, item) {
		double x = json_number_value(item);

		if (!json_is_number(item) || !isfinite(x) || x <= 0.0 || x > 1.0)
			return errbuf_set(c->err, -EINVAL, field, "eigenvalue %zu must be a number "
					  "in (0, 1] mm^2/s (e.g. 0.0017)", i);
		c->js->model.response_evals[i] = x;
	}
	if (c->js->model.response_evals[1] != c->js->model.response_evals[2])
		return errbuf_set(c->err, -EINVAL, field, "must describe an axially symmetric "
				  "tensor: the 2nd and 3rd eigenvalues must be equal");
	return 0;
}

static const struct member response_members[] = {
	CUSTOM("evals", parse_response_evals),
	REAL("s0", model.response_s0, 0, 0, OPEN, INFINITY, CLOSED, NULL),
};

static int parse_response(json_t *v, const char *field, struct ctx *c)
{
	int rc;

	if (json_is_string(v) && !strcmp(json_string_value(v), "auto"))
		return 0;
	if (!json_is_object(v))
		return type_error(c->err, field, "\"auto\" or an object {\"evals\": [...], "
				  "\"s0\": ...}");
	rc = walk_object(v, field, response_members, ARRAY_SIZE(response_members), c);
	if (!rc && (!json_object_get(v, "evals") || !json_object_get(v, "s0")))
		rc = errbuf_set(c->err, -EINVAL, field, "needs both \"evals\" and \"s0\"");
	c->js->model.response_given = rc == 0;
	return rc;
}

/* sh_order's default depends on the model (check_model). */
static const struct member model_members[] = {
	CHOICE("name", model.name, models),
	CUSTOM("sh_order", parse_sh_order),
	REAL("lambda", model.lambda, 1.0, 0, OPEN, 1e6, CLOSED, NULL),
	REAL("tau", model.tau, 0.1, 0, CLOSED, 1, CLOSED, NULL),
	INTEGER("roi_radius", model.roi_radius, K_INT, 10, 1, 128, "voxels"),
	REAL("response_fa", model.response_fa, 0.7, 0, OPEN, 1, OPEN, NULL),
	CUSTOM_OBJECT("response", parse_response, response_members),
	REAL("sh_lambda", model.sh_lambda, 0.006, 0, CLOSED, 10, CLOSED, NULL),
	REAL("min_signal", model.min_signal, 1.0, 0, OPEN, 1e6, CLOSED, NULL),
};

/* The model's name alone, or an object. */
static int parse_model(json_t *v, const char *field, struct ctx *c)
{
	if (json_is_string(v))
		return parse_member(find_member(model_members, ARRAY_SIZE(model_members), "name"),
				    v, field, c);
	if (!json_is_object(v))
		return type_error(c->err, field, "a model name (\"csd\", \"opdt\", \"csa\") or "
				  "an object");
	return walk_object(v, field, model_members, ARRAY_SIZE(model_members), c);
}

static int parse_sphere_vertices(json_t *v, const char *field, struct ctx *c)
{
	size_t n;
	int rc = parse_vec3_list(v, field, SPHERE_MIN_NV, SPHERE_MAX_NV, "vertices",
				 &c->js->sphere_vertices, &n, c->err);

	if (!rc)
		c->js->sphere_nv = (int)n;
	return rc;
}

static const struct member sphere_members[] = {
	CUSTOM("vertices", parse_sphere_vertices),
};

/* A built-in sphere by name, or {"vertices": [...]}; the geometry of given
 * vertices is checked later by sphere_from_vertices. */
static int parse_sphere(json_t *v, const char *field, struct ctx *c)
{
	int idx, rc;

	if (json_is_object(v)) {
		rc = walk_object(v, field, sphere_members, ARRAY_SIZE(sphere_members), c);
		if (!rc && !c->js->sphere_vertices) {
			char sub[FIELD_MAX];

			snprintf(sub, sizeof(sub), "%s.vertices", field);
			rc = errbuf_set(c->err, -EINVAL, sub, "is required");
		}
		return rc;
	}
	if (!json_is_string(v))
		return type_error(c->err, field,
				  "a sphere name (string) or an object {\"vertices\": [...]}");
	rc = parse_choice(v, field, sphere_builtin_names, &idx, c->err);
	if (rc)
		return rc;
	c->js->sphere_name = strdup(sphere_builtin_names[idx]);
	return c->js->sphere_name ? 0 : oom(c->err);
}

/* ---- the document ---- */

/* sh_frame's default depends on sh_basis (check_inputs). */
static const struct member inputs_members[] = {
	PATH("odf", odf_path),
	PATH("sh", sh_path),
	CHOICE("sh_basis", sh_basis, sh_bases),
	CHOICE("sh_frame", sh_frame, sh_frames),
	PATH("dwi", dwi_path),
	PATH("bvals", bvals_path),
	PATH("bvecs", bvecs_path),
	CHOICE("bvecs_convention", bvecs_convention, bvecs_conventions),
	PATH("mask", mask_path),
	PATH("stop_map", stop_map_path),
};

#define INPUT_FILE(k, member) { "inputs." k, offsetof(struct jobspec, member) }

/* The PATH rows of inputs_members, in enum jobspec_file_slot's order. */
const struct jobspec_input_file jobspec_input_files[JOBSPEC_INPUT_FILES] = {
	INPUT_FILE("odf", odf_path),
	INPUT_FILE("sh", sh_path),
	INPUT_FILE("dwi", dwi_path),
	INPUT_FILE("bvals", bvals_path),
	INPUT_FILE("bvecs", bvecs_path),
	INPUT_FILE("mask", mask_path),
	INPUT_FILE("stop_map", stop_map_path),
	{ "stopping.include", offsetof(struct jobspec, stop_include_path) },
	{ "stopping.exclude", offsetof(struct jobspec, stop_exclude_path) },
	{ "stopping.wm", offsetof(struct jobspec, stop_wm_path) },
	{ "stopping.gm", offsetof(struct jobspec, stop_gm_path) },
	{ "stopping.csf", offsetof(struct jobspec, stop_csf_path) },
	{ "stopping.five_tt", offsetof(struct jobspec, stop_5tt_path) },
};

/* The PATH rows of seeds_members and seed_interface_members, in enum
 * jobspec_file_slot's order. */
const struct jobspec_input_file jobspec_seed_files[JOBSPEC_SEED_FILES] = {
	{ "seeds.roi", offsetof(struct jobspec, seed_roi_path) },
	{ "seeds.interface.wm", offsetof(struct jobspec, seed_wm_path) },
	{ "seeds.interface.gm", offsetof(struct jobspec, seed_gm_path) },
	{ "seeds.interface.five_tt", offsetof(struct jobspec, seed_5tt_path) },
	{ "seeds.points_file", offsetof(struct jobspec, seed_points_path) },
};

/* "K/N" (shard.h); null is the whole job. */
static int parse_seed_shard(json_t *v, const char *field, struct ctx *c)
{
	if (json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return type_error(c->err, field, "a string \"K/N\" (shard K of N, K from 0) or null");
	return shard_parse(json_string_value(v), &c->js->shard, c->err);
}

/* seeds.interface: the partial volumes, or a 5TT image (check_seed_interface). */
static const struct member seed_interface_members[] = {
	PATH("wm", seed_wm_path),
	PATH("gm", seed_gm_path),
	PATH("five_tt", seed_5tt_path),
};

static const struct member seeds_members[] = {
	PATH("roi", seed_roi_path),
	OBJECT("interface", seed_interface_members),
	INTEGER("count", seed_count, K_U64, 10000, 1, (double)JOBSPEC_MAX_SEEDS, NULL),
	BOOL("per_voxel", seed_per_voxel),
	INTEGER("rng_seed", rng_seed, K_U64, 0, 0, RNG_SEED_MAX, NULL),
	/* 0, the default, is "not given": the bounds refuse an explicit 0. */
	INTEGER("select", seed_select, K_U64, 0, 1, (double)JOBSPEC_MAX_SEEDS, NULL),
	CUSTOM("points", parse_seed_points),
	PATH("points_file", seed_points_path),
	CHOICE_BOOL("space", seed_points_ras, seed_spaces),
	CUSTOM("shard", parse_seed_shard),
	INTEGER("first_index", seed_first_index, K_U64, 0, 0, (double)JOBSPEC_MAX_SEEDS, NULL),
};

/* tracking.max_cross: null (DIPY's None) or absent tracks every initial
 * direction, as 0 in struct jobspec. */
static int parse_max_cross(json_t *v, const char *field, struct ctx *c)
{
	static const struct bounds b = { .min = 1, .max = 10000, .nullable = true };
	json_int_t x = 0;   /* set when rc is 0; the analyzer cannot follow range_error */
	int rc;

	if (json_is_null(v))
		return 0;
	rc = parse_integer(v, field, &b, &x, c->err);
	if (!rc)
		c->js->max_cross = (int)x;
	return rc;
}

/* DIPY ParticleFilteringTracking's defaults. */
static const struct member pft_members[] = {
	REAL("back_mm", pft_back_mm, 2, 0, CLOSED, 10, CLOSED, "mm"),
	REAL("front_mm", pft_front_mm, 1, 0, CLOSED, 10, CLOSED, "mm"),
	INTEGER("particles", pft_particles, K_INT, 15, 1, JOBSPEC_MAX_PFT_PARTICLES, NULL),
	INTEGER("max_trials", pft_max_trials, K_INT, 20, 1, JOBSPEC_MAX_PFT_TRIALS, NULL),
	REAL("min_wm_pve_before_stopping", pft_min_wm_pve, 0, 0, CLOSED, 1, CLOSED, NULL),
};

/* null leaves particle filtering off; an object (maybe empty: the defaults)
 * turns it on. */
static int parse_pft(json_t *v, const char *field, struct ctx *c)
{
	if (json_is_null(v)) {
		c->js->pft = false;
		return 0;
	}
	if (!json_is_object(v))
		return type_error(c->err, field, "null or an object {\"back_mm\": ..., "
				  "\"front_mm\": ..., \"particles\": ..., \"max_trials\": ...}");
	c->js->pft = true;
	return walk_object(v, field, pft_members, ARRAY_SIZE(pft_members), c);
}

/* The ptt defaults: GPUStreamlines' probe (8 steps of 0.25 voxels) and
 * DIPY's rejection sampling (reference 3.3). */
static const struct member tracking_members[] = {
	CUSTOM_OBJECT("sphere", parse_sphere, sphere_members),
	REAL("step_size", step_size, 0.5, 0, OPEN, JOBSPEC_MAX_STEP_VOXELS, CLOSED, "voxels"),
	/* 0, the default, is "not given": the bounds refuse an explicit 0. */
	REAL("step_mm", step_mm, 0, 0, OPEN, 10, CLOSED, "mm"),
	REAL("max_angle", max_angle, 60, 0, OPEN, 90, CLOSED, "degrees"),
	REAL("fa_threshold", fa_threshold, 0.1, 0, CLOSED, 1e6, CLOSED, NULL),
	REAL("relative_peak_threshold", relative_peak_threshold, 0.25, 0, CLOSED, 1, CLOSED, NULL),
	REAL("min_separation_angle", min_separation_angle, 45, 1, CLOSED, 90, CLOSED, "degrees"),
	REAL("pmf_threshold", pmf_threshold, 0.05, 0, CLOSED, 1, OPEN, NULL),
	INTEGER("max_steps", max_steps, K_INT, 500, 1, 10000, NULL),
	REAL("min_length", min_length, 0, 0, CLOSED, INFINITY, CLOSED, "mm"),
	{ .key = "max_length", .kind = K_REAL, .offset = offsetof(struct jobspec, max_length),
	  .def = INFINITY,
	  .b = { .min = 0, .max = INFINITY, .min_open = OPEN, .nullable = true, .unit = "mm" } },
	INTEGER("max_attempts", max_attempts, K_INT, 5, 1, 100, NULL),
	CHOICE("odf_storage", odf_storage, odf_storages),
	REAL("probe_length", probe_length, 2.0, 0, OPEN, 10, CLOSED, "voxels"),
	INTEGER("probe_quality", probe_quality, K_INT, 9, 2, 64, NULL),
	INTEGER("probe_count", probe_count, K_INT, 1, 1, 16, NULL),
	REAL("probe_radius", probe_radius, 0.0, 0, CLOSED, 5, CLOSED, "voxels"),
	INTEGER("rejection_samples", rejection_samples, K_INT, 10, 1, 1000, NULL),
	INTEGER("rejection_tries", rejection_tries, K_INT, 100, 1, 10000, NULL),
	{ .key = "return_all", .kind = K_BOOL, .offset = offsetof(struct jobspec, return_all),
	  .def = 1 },
	CUSTOM("max_cross", parse_max_cross),
	CUSTOM_OBJECT("pft", parse_pft, pft_members),
	REAL("angular_weight", angular_weight, 0, 0, CLOSED, 1, CLOSED, NULL),
};

static const struct member stopping_members[] = {
	CHOICE("criterion", stopping, stopping_criteria),
	PATH("include", stop_include_path),
	PATH("exclude", stop_exclude_path),
	PATH("wm", stop_wm_path),
	PATH("gm", stop_gm_path),
	PATH("csf", stop_csf_path),
	PATH("five_tt", stop_5tt_path),
};

static const struct member compress_members[] = {
	REAL("tolerance_mm", compress_tolerance_mm, COMPRESS_DEFAULT_TOLERANCE_MM, 0, OPEN, 10,
	     CLOSED, "mm"),
	REAL("max_segment_mm", compress_max_segment_mm, COMPRESS_DEFAULT_MAX_SEGMENT_MM, 0, OPEN,
	     1000, CLOSED, "mm"),
};

/* null (or false) leaves compression off; true turns it on with DIPY's
 * defaults, an object with its own tolerances. */
static int parse_output_compress(json_t *v, const char *field, struct ctx *c)
{
	if (json_is_null(v) || json_is_boolean(v)) {
		c->js->compress = json_is_true(v);
		return 0;
	}
	if (!json_is_object(v))
		return type_error(c->err, field, "null, true or an object {\"tolerance_mm\": ..., "
				  "\"max_segment_mm\": ...}");
	c->js->compress = true;
	return walk_object(v, field, compress_members, ARRAY_SIZE(compress_members), c);
}

static const struct member output_members[] = {
	CHOICE("format", output_format, output_formats),
	PATH("path", output_path),
	BOOL("save_seeds", save_seeds),
	BOOL("save_seed_index", save_seed_index),
	BOOL("save_direction_getter", save_direction_getter),
	CHOICE("positions", output_positions, output_positions),
	CHOICE("compression", output_compression, output_compressions),
	CUSTOM_OBJECT("compress", parse_output_compress, compress_members),
};

/* A mask region: its path in the job's next mask slot. */
static int parse_region_mask(json_t *v, const char *field, struct ctx *c,
			     struct jobspec_region *out)
{
	struct jobspec *js = c->js;
	int k = js->n_region_masks;

	if (k == JOBSPEC_MAX_REGION_MASKS)
		return errbuf_set(c->err, -EINVAL, field, "is a mask image past the %d a job may "
				  "have among its regions", JOBSPEC_MAX_REGION_MASKS);
	out->mask = k;
	snprintf(js->region_mask_field[k], sizeof(js->region_mask_field[k]), "%s", field);
	js->n_region_masks++;
	return parse_path(v, field, c, &js->region_mask_path[k]);
}

/* One region of a regions list: a mask image's path, or a sphere
 * {"center": [x, y, z], "radius": r} in RAS+ mm. */
static int parse_region(json_t *v, const char *field, struct ctx *c, struct jobspec_region *out)
{
	static const struct bounds radius = { .min = 0, .max = 1e6, .min_open = true,
					      .unit = "mm" };
	char sub[FIELD_MAX + 16];   /* room for field's longest and a key (errbuf cuts) */
	struct errbuf *err = c->err;
	const char *key;
	json_t *item;
	size_t n;

	out->mask = -1;
	if (json_is_string(v))
		return parse_region_mask(v, field, c, out);
	if (!json_is_object(v))
		return type_error(err, field, "a mask image (a path) or a sphere {\"center\": "
				  "[x, y, z], \"radius\": r} (RAS+ mm)");
	json_object_foreach(v, key, item) {
		if (strcmp(key, "center") != 0 && strcmp(key, "radius") != 0) {
			snprintf(sub, sizeof(sub), "%s.%s", field, key);
			return errbuf_set(err, -EINVAL, sub, "is not a member of a region "
					  "(\"center\", \"radius\")");
		}
	}
	snprintf(sub, sizeof(sub), "%s.center", field);
	item = json_object_get(v, "center");
	if (!item)
		return errbuf_set(err, -EINVAL, sub, "is required");
	n = json_is_array(item) ? json_array_size(item) : 0;
	for (size_t k = 0; n == 3 && k < 3; k++) {
		json_t *num = json_array_get(item, k);

		if (!json_is_number(num) || !isfinite(json_number_value(num)))
			n = 0;
		else
			out->center[k] = json_number_value(num);
	}
	if (n != 3)
		return errbuf_set(err, -EINVAL, sub, "must be an array of 3 numbers (RAS+ mm)");
	snprintf(sub, sizeof(sub), "%s.radius", field);
	item = json_object_get(v, "radius");
	if (!item)
		return errbuf_set(err, -EINVAL, sub, "is required");
	return parse_real(item, sub, &radius, &out->radius, err);
}

/* regions.include or regions.exclude: an array of up to JOBSPEC_MAX_REGIONS
 * regions. */
static int parse_regions(json_t *v, const char *field, struct ctx *c, struct jobspec_region *out,
			 int *n_out)
{
	struct errbuf *err = c->err;
	char elem[FIELD_MAX];
	json_t *item;
	size_t i;
	int rc;

	if (!json_is_array(v))
		return type_error(err, field, "an array of regions");
	if (json_array_size(v) > JOBSPEC_MAX_REGIONS)
		return errbuf_set(err, -EINVAL, field, "must have at most %d regions, got %zu",
				  JOBSPEC_MAX_REGIONS, json_array_size(v));
	json_array_foreach(v, i, item) {
		snprintf(elem, sizeof(elem), "%s[%zu]", field, i);
		rc = parse_region(item, elem, c, &out[i]);
		if (rc)
			return rc;
	}
	*n_out = (int)json_array_size(v);
	return 0;
}

static int parse_include_regions(json_t *v, const char *field, struct ctx *c)
{
	return parse_regions(v, field, c, c->js->include_regions, &c->js->n_include_regions);
}

static int parse_exclude_regions(json_t *v, const char *field, struct ctx *c)
{
	return parse_regions(v, field, c, c->js->exclude_regions, &c->js->n_exclude_regions);
}

static const struct member regions_members[] = {
	CUSTOM("include", parse_include_regions),
	CUSTOM("exclude", parse_exclude_regions),
};

/* model's name defaults by direction_getter (check_model). */
static const struct member root_members[] = {
	OBJECT("inputs", inputs_members),
	CUSTOM_OBJECT("model", parse_model, model_members),
	CHOICE("direction_getter", direction_getter, direction_getters),
	OBJECT("seeds", seeds_members),
	OBJECT("tracking", tracking_members),
	OBJECT("stopping", stopping_members),
	OBJECT("output", output_members),
	OBJECT("regions", regions_members),
};

/* A member of an object (inputs, seeds, model, output) that belongs to one
 * kind of it only: an input kind, a seed kind, a model family, a format. */
struct kind_key {
	const char *key;
	int kind;
};

/* The first of the n keys present in obj whose kind is not kind, or NULL. */
static const struct kind_key *foreign_key(json_t *obj, const struct kind_key *keys, size_t n,
					  int kind)
{
	for (size_t i = 0; json_is_object(obj) && i < n; i++)
		if (keys[i].kind != kind && json_object_get(obj, keys[i].key))
			return &keys[i];
	return NULL;
}

/* Options that belong to one seed kind only. rng_seed is in neither list:
 * the tracker draws from it whichever way the seeds were given. */
static const struct kind_key seed_kind_keys[] = {
	{ "count", JOBSPEC_SEEDS_ROI },
	{ "per_voxel", JOBSPEC_SEEDS_ROI },
	{ "space", JOBSPEC_SEEDS_POINTS },
	{ "first_index", JOBSPEC_SEEDS_POINTS },
};

/* The same for seeds.interface, which takes count as seeds.roi does. */
static const struct kind_key interface_seed_kind_keys[] = {
	{ "per_voxel", JOBSPEC_SEEDS_ROI },
	{ "space", JOBSPEC_SEEDS_POINTS },
	{ "first_index", JOBSPEC_SEEDS_POINTS },
};

static int parse_member(const struct member *m, json_t *v, const char *field, struct ctx *c)
{
	void *slot = (char *)c->js + m->offset;
	json_int_t x = 0;   /* set when rc is 0; the analyzer cannot follow range_error */
	int rc, idx;

	switch (m->kind) {
	case K_OBJECT:
		if (!json_is_object(v))
			return type_error(c->err, field, "an object");
		return walk_object(v, field, m->sub, m->n_sub, c);
	case K_PATH:
		return parse_path(v, field, c, slot);
	case K_BOOL:
		if (!json_is_boolean(v))
			return type_error(c->err, field, "a boolean");
		*(bool *)slot = json_is_true(v);
		return 0;
	case K_REAL:
		return parse_real(v, field, &m->b, slot, c->err);
	case K_INT:
		rc = parse_integer(v, field, &m->b, &x, c->err);
		if (!rc)
			*(int *)slot = (int)x;
		return rc;
	case K_U64:
		rc = parse_integer(v, field, &m->b, &x, c->err);
		if (!rc)
			*(uint64_t *)slot = (uint64_t)x;
		return rc;
	case K_CHOICE:
		rc = parse_choice(v, field, m->names, &idx, c->err);
		if (!rc)
			*(int *)slot = idx;
		return rc;
	case K_CHOICE_BOOL:
		rc = parse_choice(v, field, m->names, &idx, c->err);
		if (!rc)
			*(bool *)slot = idx == 1;
		return rc;
	case K_CUSTOM:
		break;
	}
	return m->parse(v, field, c);
}

static int unknown_field(const char *field, const struct member *members, size_t n,
			 struct errbuf *err)
{
	char known[400] = "";

	for (size_t i = 0; i < n; i++)
		list_append(known, sizeof(known), members[i].key, false);
	return errbuf_set(err, -EINVAL, field, "unknown field (known: %s)", known);
}

static const struct member *find_member(const struct member *members, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(members[i].key, key))
			return &members[i];
	return NULL;
}

static int walk_object(json_t *obj, const char *field, const struct member *members, size_t n,
		       struct ctx *c)
{
	const char *key;
	json_t *v;

	/* jansson keeps insertion order, so the first bad key in the document is
	 * the one reported. */
	json_object_foreach(obj, key, v) {
		char sub[FIELD_MAX];
		const struct member *m = find_member(members, n, key);
		int rc;

		snprintf(sub, sizeof(sub), "%s%s%s", field, *field ? "." : "", key);
		if (!m)
			return unknown_field(sub, members, n, c->err);
		rc = parse_member(m, v, sub, c);
		if (rc)
			return rc;
	}
	return 0;
}

/* Inputs that belong to one input kind only. */
static const struct kind_key input_kind_keys[] = {
	{ "sh_basis", JOBSPEC_INPUT_SH },
	{ "sh_frame", JOBSPEC_INPUT_SH },
	{ "bvals", JOBSPEC_INPUT_DWI },
	{ "bvecs", JOBSPEC_INPUT_DWI },
	{ "bvecs_convention", JOBSPEC_INPUT_DWI },
	{ "mask", JOBSPEC_INPUT_DWI },
};

static const char *const input_kind_names[] = { "odf", "sh", "dwi" };

static int check_input_kind(json_t *inputs, struct jobspec *js, struct errbuf *err)
{
	int given = !!js->odf_path + !!js->sh_path + !!js->dwi_path;
	const struct kind_key *k;
	char field[FIELD_MAX];

	if (given != 1)
		return errbuf_set(err, -EINVAL, "inputs", "needs exactly one of \"odf\" (an ODF "
				  "on tracking.sphere), \"sh\" (SH coefficients) or \"dwi\" "
				  "(raw DWI with bvals and bvecs), got %d", given);
	js->input_kind = js->odf_path ? JOBSPEC_INPUT_ODF :
			 js->sh_path ? JOBSPEC_INPUT_SH : JOBSPEC_INPUT_DWI;
	k = foreign_key(inputs, input_kind_keys, ARRAY_SIZE(input_kind_keys), js->input_kind);
	if (!k)
		return 0;
	snprintf(field, sizeof(field), "inputs.%s", k->key);
	return errbuf_set(err, -EINVAL, field, "is only allowed with inputs.%s",
			  input_kind_names[k->kind]);
}

/* Whether path names an MRtrix3 image (.mif, .mif.gz) or an upload
 * ("sha256:", whose format its content tells): an image that may carry
 * its gradient table or default its SH basis, which inputs.c settles. */
static bool may_be_mif(const char *path)
{
	static const char *const suffixes[] = { ".mif", ".mif.gz" };
	size_t len = strlen(path);

	if (strncmp(path, "sha256:", 7) == 0)
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
		size_t n = strlen(suffixes[i]);
		if (len > n && strcasecmp(path + len - n, suffixes[i]) == 0)
			return true;
	}
	return false;
}

/* bvals and bvecs go together, and a NIfTI DWI needs them (a .mif may
 * carry its own table); bvecs_convention says how bvecs is read. */
static int check_gradient_inputs(json_t *inputs, struct jobspec *js, struct errbuf *err)
{
	js->bvecs_convention_given = json_object_get(inputs, "bvecs_convention") != NULL;
	if (!js->bvals_path && (js->bvecs_path || !may_be_mif(js->dwi_path)))
		return errbuf_set(err, -EINVAL, "inputs.bvals", "is required with inputs.dwi%s",
				  js->bvecs_path ? " and inputs.bvecs" : " (only a .mif may carry "
				  "its gradient table instead)");
	if (!js->bvecs_path && (js->bvals_path || !may_be_mif(js->dwi_path)))
		return errbuf_set(err, -EINVAL, "inputs.bvecs", "is required with inputs.dwi%s",
				  js->bvals_path ? " and inputs.bvals" : " (only a .mif may carry "
				  "its gradient table instead)");
	if (js->bvecs_convention_given && !js->bvecs_path)
		return errbuf_set(err, -EINVAL, "inputs.bvecs_convention", "applies to inputs.bvecs "
				  "only (a .mif's dw_scheme is in scanner coordinates)");
	return 0;
}

static int check_inputs(json_t *root, const struct ctx *c)
{
	struct jobspec *js = c->js;
	struct errbuf *err = c->err;
	json_t *inputs = json_object_get(root, "inputs");
	int rc = check_input_kind(inputs, js, err);

	if (rc)
		return rc;
	if (js->input_kind == JOBSPEC_INPUT_DWI)
		return check_gradient_inputs(inputs, js, err);
	if (json_object_get(root, "model"))
		return errbuf_set(err, -EINVAL, "model", "applies to inputs.dwi only (the model "
				  "is fitted to raw DWI; an ODF or SH input is already fitted)");
	js->sh_basis_given = json_object_get(inputs, "sh_basis") != NULL;
	if (js->input_kind == JOBSPEC_INPUT_SH && !js->sh_basis_given && !may_be_mif(js->sh_path))
		return errbuf_set(err, -EINVAL, "inputs.sh_basis", "%s", JOBSPEC_SH_BASIS_REQUIRED);
	if (js->input_kind == JOBSPEC_INPUT_SH && !js->sh_basis_given)
		js->sh_basis = SH_TOURNIER07;   /* MRtrix3's, the basis of every .mif FOD */
	if (js->input_kind == JOBSPEC_INPUT_SH && !json_object_get(inputs, "sh_frame"))
		js->sh_frame = js->sh_basis == SH_TOURNIER07 || js->sh_basis == SH_TOURNIER07_LEGACY ?
			       JOBSPEC_SH_FRAME_WORLD : JOBSPEC_SH_FRAME_VOXEL;
	if (!js->stop_map_path)
		return errbuf_set(err, -EINVAL, "inputs.stop_map", "is required with inputs.%s "
				  "(only a dwi input has a default: its DTI FA)",
				  input_kind_names[js->input_kind]);
	return 0;
}

/* Model members that belong to one family of models only: kind 1 for
 * csd's, 0 for opdt's and csa's. */
static const struct kind_key model_family_keys[] = {
	{ "lambda", 1 }, { "tau", 1 }, { "roi_radius", 1 }, { "response_fa", 1 },
	{ "response", 1 }, { "sh_lambda", 0 }, { "min_signal", 0 },
};

static int check_model_members(json_t *model, const struct jobspec *js, struct errbuf *err)
{
	const struct kind_key *k = foreign_key(model, model_family_keys,
					       ARRAY_SIZE(model_family_keys),
					       js->model.name == JOBSPEC_MODEL_CSD);
	char field[FIELD_MAX];

	if (!k)
		return 0;
	snprintf(field, sizeof(field), "model.%s", k->key);
	return errbuf_set(err, -EINVAL, field, "applies to model %s, not \"%s\"",
			  k->kind ? "\"csd\"" : "\"opdt\" or \"csa\"", models[js->model.name]);
}

/* Tracking options of one direction getter only. */
static const struct kind_key getter_tracking_keys[] = {
	{ "max_attempts", JOBSPEC_DG_BOOT },
	{ "probe_length", JOBSPEC_DG_PTT },
	{ "probe_quality", JOBSPEC_DG_PTT },
	{ "probe_count", JOBSPEC_DG_PTT },
	{ "probe_radius", JOBSPEC_DG_PTT },
	{ "rejection_samples", JOBSPEC_DG_PTT },
	{ "rejection_tries", JOBSPEC_DG_PTT },
};

/* Each direction getter has its models: prob and ptt track a CSD fit of the
 * whole volume, boot refits OPDT or CSA at every step from the raw signal. */
static int check_model(json_t *root, struct ctx *c)
{
	struct jobspec *js = c->js;
	json_t *model = json_object_get(root, "model");
	bool boot = js->direction_getter == JOBSPEC_DG_BOOT;
	const struct kind_key *k;
	char field[FIELD_MAX];
	bool csd;

	if (boot && js->input_kind != JOBSPEC_INPUT_DWI)
		return errbuf_set(c->err, -EINVAL, "direction_getter", "\"boot\" needs inputs.dwi "
				  "with bvals and bvecs: it resamples the raw signal at every step");
	k = foreign_key(json_object_get(root, "tracking"), getter_tracking_keys,
			ARRAY_SIZE(getter_tracking_keys), (int)js->direction_getter);
	if (k) {
		snprintf(field, sizeof(field), "tracking.%s", k->key);
		return errbuf_set(c->err, -EINVAL, field, "applies to direction_getter \"%s\" only",
				  direction_getters[k->kind]);
	}
	if (boot && js->odf_storage != JOBSPEC_ODF_AUTO)
		return errbuf_set(c->err, -EINVAL, "tracking.odf_storage", "applies to direction "
				  "getters that sample an ODF, not \"boot\" (which keeps the DWI)");
	if (js->odf_storage == JOBSPEC_ODF_SH && js->direction_getter == JOBSPEC_DG_PTT)
		return errbuf_set(c->err, -EINVAL, "tracking.odf_storage", "\"sh\" is not available "
				  "with direction_getter \"ptt\" yet: use \"float32\" or \"float16\"");
	if (js->odf_storage == JOBSPEC_ODF_SH && js->input_kind == JOBSPEC_INPUT_ODF)
		return errbuf_set(c->err, -EINVAL, "tracking.odf_storage", "\"sh\" needs SH "
				  "coefficients: inputs.sh or inputs.dwi, not inputs.odf");
	if (!json_is_string(model) && !json_object_get(model, "name"))
		js->model.name = boot ? JOBSPEC_MODEL_OPDT : JOBSPEC_MODEL_CSD;
	csd = js->model.name == JOBSPEC_MODEL_CSD;
	if (csd && boot)
		return errbuf_set(c->err, -EINVAL, json_is_object(model) ? "model.name" : "model",
				  "must be \"opdt\" or \"csa\" with direction_getter \"boot\", "
				  "got \"csd\"");
	if (!csd && !boot)
		return errbuf_set(c->err, -EINVAL, json_is_object(model) ? "model.name" : "model",
				  "must be \"csd\" with direction_getter \"%s\" (\"opdt\" and "
				  "\"csa\" are for \"boot\"), got \"%s\"",
				  direction_getters[js->direction_getter], models[js->model.name]);
	if (!json_object_get(model, "sh_order"))
		js->model.sh_order = csd ? 8 : 4;
	else if (!csd && js->model.sh_order > JOBSPEC_BOOT_MAX_SH_ORDER)
		return errbuf_set(c->err, -EINVAL, "model.sh_order", "must be at most %d for "
				  "model \"%s\", got %d", JOBSPEC_BOOT_MAX_SH_ORDER,
				  models[js->model.name], js->model.sh_order);
	return check_model_members(model, js, c->err);
}

/* tckgen's default number of seeds for -select without -seeds: 1000 per
 * streamline to select. */
#define SELECT_SEEDS_PER_STREAMLINE 1000

/* Which streamlines are the first select ones depends on every shard
 * before this one: no shard can tell its part alone. */
static int check_shard(const struct jobspec *js, struct errbuf *err)
{
	if (js->shard.count && js->seed_first_index)
		return errbuf_set(err, -EINVAL, "seeds.shard", "cannot be combined with "
				  "seeds.first_index: both say which global seed indices the "
				  "points stand for; give the part's first_index instead");
	if (!js->shard.count || !js->seed_select)
		return 0;
	return errbuf_set(err, -EINVAL, "seeds.shard", "cannot be combined with seeds.select: "
			  "the first %llu streamlines depend on all the shards before this "
			  "one; shard the job without select", (unsigned long long)js->seed_select);
}

/* seeds.interface: wm and gm (partial volumes), or five_tt alone. */
static int check_seed_interface(const struct jobspec *js, struct errbuf *err)
{
	bool wm = js->seed_wm_path != NULL, gm = js->seed_gm_path != NULL;

	if (js->seed_5tt_path && (wm || gm))
		return errbuf_set(err, -EINVAL, wm ? "seeds.interface.wm" : "seeds.interface.gm",
				  "cannot be combined with seeds.interface.five_tt: give either "
				  "\"wm\" and \"gm\" (partial volumes) or \"five_tt\"");
	if (js->seed_5tt_path || (wm && gm))
		return 0;
	if (!wm && !gm)
		return errbuf_set(err, -EINVAL, "seeds.interface", "needs \"wm\" and \"gm\" "
				  "(partial volume maps) or \"five_tt\" (a 5TT image)");
	return errbuf_set(err, -EINVAL, wm ? "seeds.interface.gm" : "seeds.interface.wm",
			  "is required with seeds.interface.%s", wm ? "wm" : "gm");
}

/* The seed kind: exactly one of roi, points, interface. */
static int seed_kind_of(json_t *seeds, struct jobspec *js, struct errbuf *err)
{
	bool roi = js->seed_roi_path != NULL, points = js->seed_points != NULL;
	bool points_file = js->seed_points_path != NULL;
	bool interface = json_object_get(seeds, "interface") != NULL;

	if (interface && (roi || points || points_file))
		return errbuf_set(err, -EINVAL, "seeds.interface", "cannot be combined with "
				  "seeds.%s: give one kind of seeds",
				  roi ? "roi" : points ? "points" : "points_file");
	if (roi + points + points_file > 1)
		return errbuf_set(err, -EINVAL, "seeds", "takes one of \"roi\", \"points\" or "
				  "\"points_file\", not more");
	if (!roi && !points && !points_file && !interface)
		return errbuf_set(err, -EINVAL, "seeds", "is required, with either \"roi\", "
				  "\"points\" or \"points_file\" (or \"interface\")");
	js->seed_kind = roi ? JOBSPEC_SEEDS_ROI : points || points_file ? JOBSPEC_SEEDS_POINTS :
			JOBSPEC_SEEDS_INTERFACE;
	return interface ? check_seed_interface(js, err) : 0;
}

static int check_seeds(json_t *seeds, struct jobspec *js, struct errbuf *err)
{
	bool interface;
	const struct kind_key *k;
	char field[FIELD_MAX];

	if (seed_kind_of(seeds, js, err))
		return -EINVAL;
	if (check_shard(js, err))
		return -EINVAL;
	interface = js->seed_kind == JOBSPEC_SEEDS_INTERFACE;
	js->seed_count_from_select = js->seed_kind != JOBSPEC_SEEDS_POINTS && js->seed_select &&
				     !js->seed_per_voxel && !json_object_get(seeds, "count");
	if (js->seed_count_from_select)
		js->seed_count = js->seed_select > JOBSPEC_MAX_SEEDS / SELECT_SEEDS_PER_STREAMLINE ?
				 JOBSPEC_MAX_SEEDS : js->seed_select * SELECT_SEEDS_PER_STREAMLINE;
	k = interface ? foreign_key(seeds, interface_seed_kind_keys,
				    ARRAY_SIZE(interface_seed_kind_keys), (int)js->seed_kind) :
			foreign_key(seeds, seed_kind_keys, ARRAY_SIZE(seed_kind_keys),
				    (int)js->seed_kind);
	if (!k)
		return 0;
	snprintf(field, sizeof(field), "seeds.%s", k->key);
	return errbuf_set(err, -EINVAL, field, "is only allowed with seeds.%s",
			  k->kind == JOBSPEC_SEEDS_ROI ? "roi" : "points or seeds.points_file");
}

/* One step, in voxels or in mm: two would contradict each other. */
static int check_step(json_t *tracking, struct errbuf *err)
{
	if (!json_object_get(tracking, "step_size") || !json_object_get(tracking, "step_mm"))
		return 0;
	return errbuf_set(err, -EINVAL, "tracking.step_mm", "cannot be given with "
			  "tracking.step_size: give the step either in voxels (step_size) or "
			  "in mm (step_mm)");
}

/* The maps of stopping: which criterion reads each (every one is required
 * there and refused elsewhere). */
static const struct {
	const char *field;
	size_t offset;
	enum jobspec_stopping criterion;
	const char *criterion_name;
} stopping_maps[] = {
	{ "stopping.include", offsetof(struct jobspec, stop_include_path), JOBSPEC_STOP_ACT, "act" },
	{ "stopping.exclude", offsetof(struct jobspec, stop_exclude_path), JOBSPEC_STOP_ACT, "act" },
	{ "stopping.wm", offsetof(struct jobspec, stop_wm_path), JOBSPEC_STOP_CMC, "cmc" },
	{ "stopping.gm", offsetof(struct jobspec, stop_gm_path), JOBSPEC_STOP_CMC, "cmc" },
	{ "stopping.csf", offsetof(struct jobspec, stop_csf_path), JOBSPEC_STOP_CMC, "cmc" },
};

/* stopping.five_tt: act's include and exclude, from a 5TT image. */
static int check_stopping_5tt(const struct jobspec *js, struct errbuf *err)
{
	if (!js->stop_5tt_path)
		return 0;
	if (js->stopping != JOBSPEC_STOP_ACT)
		return errbuf_set(err, -EINVAL, "stopping.five_tt",
				  "is only for stopping.criterion \"act\"");
	if (js->stop_include_path || js->stop_exclude_path)
		return errbuf_set(err, -EINVAL, js->stop_include_path ? "stopping.include" :
				  "stopping.exclude", "cannot be combined with stopping.five_tt: "
				  "the 5TT image gives both maps");
	return 0;
}

static int check_stopping(const struct jobspec *js, struct errbuf *err)
{
	if (check_stopping_5tt(js, err))
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(stopping_maps); i++) {
		const char *path = *(char *const *)((const char *)js + stopping_maps[i].offset);
		bool wanted = js->stopping == stopping_maps[i].criterion;
		bool from_5tt = stopping_maps[i].criterion == JOBSPEC_STOP_ACT && js->stop_5tt_path;

		if (wanted && !path && !from_5tt)
			return errbuf_set(err, -EINVAL, stopping_maps[i].field,
					  "is required with stopping.criterion \"%s\"%s",
					  stopping_maps[i].criterion_name,
					  stopping_maps[i].criterion == JOBSPEC_STOP_ACT ?
					  " (or give stopping.five_tt)" : "");
		if (!wanted && path)
			return errbuf_set(err, -EINVAL, stopping_maps[i].field,
					  "is only for stopping.criterion \"%s\"",
					  stopping_maps[i].criterion_name);
	}
	return 0;
}

/* Particle filtering weighs its particles by the exclude map, which only act
 * and cmc have, and retries with prob's stateless draws (boot's and ptt's
 * per-step state is not kept for particles). */
static int check_pft(const struct jobspec *js, struct errbuf *err)
{
	if (!js->pft)
		return 0;
	if (js->stopping == JOBSPEC_STOP_THRESHOLD)
		return errbuf_set(err, -EINVAL, "tracking.pft",
				  "needs stopping.criterion \"act\" or \"cmc\" (particles are "
				  "weighted by the exclude map), got \"threshold\"");
	if (js->direction_getter != JOBSPEC_DG_PROB)
		return errbuf_set(err, -EINVAL, "tracking.pft",
				  "is only for direction_getter \"prob\", got \"%s\"",
				  direction_getters[js->direction_getter]);
	/* A particle's path replaces the end of a half without passing the
	 * region tests a kept point passes (track.glsl), so the verdict would
	 * not be tckgen's. */
	if (js->n_include_regions + js->n_exclude_regions > 0)
		return errbuf_set(err, -EINVAL, "tracking.pft",
				  "cannot be combined with regions: particle paths are not "
				  "tested against include and exclude regions");
	return 0;
}

static int check_lengths(const struct jobspec *js, struct errbuf *err)
{
	char lo[32], hi[32];

	if (js->min_length < js->max_length)
		return 0;
	fmt_num(js->min_length, lo);
	fmt_num(js->max_length, hi);
	return errbuf_set(err, -EINVAL, "tracking.min_length",
			  "must be less than tracking.max_length (%s mm), got %s", hi, lo);
}

/* TCK has no place for per-streamline values (its seeds go to tckgen's
 * separate seeds file, which only the CLI writes); positions and compression
 * name TRX's arrays and zip entries, which the other formats do not have, so
 * giving them elsewhere is a mistake worth reporting rather than ignoring. */
static int check_output(json_t *output, const struct jobspec *js, struct errbuf *err)
{
	static const struct kind_key trx_only[] = {
		{ "positions", OUTPUT_TRX }, { "compression", OUTPUT_TRX },
	};
	const struct kind_key *k;
	char field[FIELD_MAX];

	if (js->save_seed_index && js->output_format == OUTPUT_TCK)
		return errbuf_set(err, -EINVAL, "output.save_seed_index",
				  "needs output.format \"trk\" or \"trx\" (TCK keeps no "
				  "per-streamline data)");
	if (js->save_direction_getter && js->output_format == OUTPUT_TCK)
		return errbuf_set(err, -EINVAL, "output.save_direction_getter",
				  "needs output.format \"trk\" or \"trx\" (TCK keeps no "
				  "per-streamline data)");
	k = foreign_key(output, trx_only, ARRAY_SIZE(trx_only), (int)js->output_format);
	if (!k)
		return 0;
	snprintf(field, sizeof(field), "output.%s", k->key);
	return errbuf_set(err, -EINVAL, field, "needs output.format \"trx\", got \"%s\"",
			  output_format_name(js->output_format));
}

/* The defaults of the rows of members and of the tables below them. */
static void fill_defaults(struct jobspec *js, const struct member *members, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct member *m = &members[i];
		void *slot = (char *)js + m->offset;

		if (m->kind == K_REAL)
			*(double *)slot = m->def;
		else if (m->kind == K_INT)
			*(int *)slot = (int)m->def;
		else if (m->kind == K_U64)
			*(uint64_t *)slot = (uint64_t)m->def;
		else if (m->kind == K_BOOL)
			*(bool *)slot = m->def != 0;
		if (m->sub)
			fill_defaults(js, m->sub, m->n_sub);
	}
}

static void set_defaults(struct jobspec *js)
{
	memset(js, 0, sizeof(*js));
	fill_defaults(js, root_members, ARRAY_SIZE(root_members));
}

static int validate(json_t *root, struct ctx *c)
{
	int rc = walk_object(root, "", root_members, ARRAY_SIZE(root_members), c);

	if (!rc)
		rc = check_inputs(root, c);
	if (!rc)
		rc = check_model(root, c);
	if (!rc)
		rc = check_seeds(json_object_get(root, "seeds"), c->js, c->err);
	if (!rc)
		rc = check_step(json_object_get(root, "tracking"), c->err);
	if (!rc)
		rc = check_stopping(c->js, c->err);
	if (!rc)
		rc = check_pft(c->js, c->err);
	if (!rc)
		rc = check_lengths(c->js, c->err);
	if (!rc)
		rc = check_output(json_object_get(root, "output"), c->js, c->err);
	if (!rc && !c->js->sphere_name && !c->js->sphere_vertices) {
		c->js->sphere_name = strdup(DEFAULT_SPHERE);
		if (!c->js->sphere_name)
			rc = oom(c->err);
	}
	return rc;
}

/* Refuses nesting deeper than MAX_DEPTH before jansson recurses into it.
 * Brackets inside strings do not count. Line and column are counted as
 * jansson counts them (columns in characters), so messages look alike. */
static int check_depth(const char *s, size_t len, struct errbuf *err)
{
	int depth = 0, line = 1, column = 0;
	bool in_string = false, escaped = false;

	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if ((ch & 0xc0) != 0x80)
			column++;
		if (ch == '\n') {
			line++;
			column = 0;
		}
		if (in_string) {
			if (escaped)
				escaped = false;
			else if (ch == '\\')
				escaped = true;
			else if (ch == '"')
				in_string = false;
		} else if (ch == '"') {
			in_string = true;
		} else if ((ch == '[' || ch == '{') && ++depth > MAX_DEPTH) {
			return errbuf_set(err, -EINVAL, "",
					  "nesting deeper than %d levels at line %d, column %d",
					  MAX_DEPTH, line, column);
		} else if (ch == ']' || ch == '}') {
			depth--;
		}
	}
	return 0;
}

static int load_document(const char *json, size_t len, json_t **root, struct errbuf *err)
{
	json_error_t je;
	int rc;

	if (len > JOBSPEC_MAX_BYTES)
		return errbuf_set(err, -EINVAL, "",
				  "job document is %zu bytes; the limit is %u bytes", len,
				  JOBSPEC_MAX_BYTES);
	rc = check_depth(json, len, err);
	if (rc)
		return rc;
	*root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!*root) {
		if (json_error_code(&je) == json_error_out_of_memory)
			return oom(err);
		return errbuf_set(err, -EINVAL, "", "invalid JSON at line %d, column %d: %s",
				  je.line, je.column, je.text);
	}
	if (!json_is_object(*root)) {
		json_decref(*root);
		return errbuf_set(err, -EINVAL, "", "the job document must be a JSON object");
	}
	return 0;
}

/* Deletes the file name at field ("inputs.dwi", "stopping.include") from
 * the document, where it is given. */
static void forget_file_name(json_t *root, const char *field)
{
	const char *dot = strchr(field, '.');
	char object[32];

	if (!dot || (size_t)(dot - field) >= sizeof(object))
		return;
	memcpy(object, field, (size_t)(dot - field));
	object[dot - field] = '\0';
	json_t *parent = json_object_get(root, object);
	if (json_is_object(parent))
		json_object_del(parent, dot + 1);
}

/* Blanks the regions' mask paths in root (a copy of the document). */
static void forget_region_masks(json_t *root)
{
	static const char *const lists[] = { "include", "exclude" };
	json_t *regions = json_object_get(root, "regions");

	for (size_t l = 0; json_is_object(regions) && l < ARRAY_SIZE(lists); l++) {
		json_t *list = json_object_get(regions, lists[l]), *item;
		size_t i;

		json_array_foreach(list, i, item)
			if (json_is_string(item))
				json_array_set_new(list, i, json_string(""));
	}
}

/* FNV-1a 64 of the document, its keys sorted, without seeds.shard,
 * output.path, output.format (the CLI sets it from -o's extension; merge
 * checks the parts' formats itself) and the names of the input files (a
 * path to the CLI, a volume id to the daemon: the same job either way):
 * what every shard of one job document shares and a job of other
 * parameters does not (to tell parts apart, not a secret). */
static int fingerprint(json_t *root, uint64_t *ret, struct errbuf *err)
{
	json_t *copy = json_deep_copy(root), *seeds, *output;
	char *text;

	if (!copy)
		return oom(err);
	seeds = json_object_get(copy, "seeds");
	output = json_object_get(copy, "output");
	if (json_is_object(seeds)) {
		json_object_del(seeds, "shard");
		json_object_del(seeds, "roi");
		json_object_del(seeds, "interface");   /* file names only */
		json_object_del(seeds, "points_file");
	}
	if (json_is_object(output)) {
		json_object_del(output, "path");
		json_object_del(output, "format");
		if (json_object_size(output) == 0)   /* -o's extension made it */
			json_object_del(copy, "output");
	}
	for (size_t i = 0; i < JOBSPEC_INPUT_FILES; i++)
		forget_file_name(copy, jobspec_input_files[i].field);
	forget_region_masks(copy);
	text = json_dumps(copy, JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(copy);
	if (!text)
		return oom(err);
	*ret = fnv1a64(FNV1A64_INIT, text, strlen(text));
	free(text);
	return 0;
}

int jobspec_parse(const char *json, size_t len, const char *base_dir, struct jobspec *ret,
		  struct errbuf *err)
{
	struct jobspec js;
	struct ctx c = { .js = &js, .base_dir = base_dir, .err = err };
	json_t *root = NULL;
	int rc;

	/* Zeroed on failure too, so callers may always jobspec_free(ret). */
	memset(ret, 0, sizeof(*ret));
	rc = load_document(json, len, &root, err);
	if (rc)
		return rc;
	set_defaults(&js);
	rc = validate(root, &c);
	if (!rc)
		rc = fingerprint(root, &js.fingerprint, err);
	json_decref(root);
	if (rc) {
		jobspec_free(&js);
		return rc;
	}
	*ret = js;
	return 0;
}

int jobspec_set_shard(struct jobspec *js, const char *text, struct errbuf *err)
{
	struct shard shard;
	int rc = shard_parse(text, &shard, err);

	if (rc)
		return rc;
	js->shard = shard;
	return check_shard(js, err);
}

/* ---- files ---- */

static int io_error(struct errbuf *err, int errnum, const char *what, const char *path)
{
	char buf[128];

	/* GNU strerror_r (we build with _GNU_SOURCE): thread-safe, returns text. */
	return errbuf_set(err, -errnum, "", "cannot %s %s: %s", what, path,
			  strerror_r(errnum, buf, sizeof(buf)));
}

static int too_large(struct errbuf *err, const char *path)
{
	return errbuf_set(err, -EINVAL, "", "job file %s is larger than the limit of %u bytes",
			  path, JOBSPEC_MAX_BYTES);
}

/* Reads all of f, refusing more than JOBSPEC_MAX_BYTES. The buffer holds one
 * byte beyond the limit so that a larger file is detected by reading it. */
static int read_capped(FILE *f, const char *path, char **out, size_t *len_out,
		       struct errbuf *err)
{
	const size_t limit = (size_t)JOBSPEC_MAX_BYTES + 1;
	struct stat st;
	size_t cap = READ_INITIAL, len = 0, n;
	char *buf, *grown;
	int rc = 0;

	if (fstat(fileno(f), &st))
		return io_error(err, errno, "stat", path);
	if (S_ISREG(st.st_mode)) {
		/* Refuse without reading; size the buffer to see EOF in one go. */
		if (st.st_size > (off_t)JOBSPEC_MAX_BYTES)
			return too_large(err, path);
		cap = (size_t)st.st_size + 1;
	}
	buf = malloc(cap);
	if (!buf)
		return oom(err);
	errno = 0;
	while ((n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len < cap)
			continue;
		if (cap == limit) {
			rc = too_large(err, path);
			break;
		}
		cap = cap > limit / 2 ? limit : 2 * cap;
		grown = realloc(buf, cap);
		if (!grown) {
			rc = oom(err);
			break;
		}
		buf = grown;
	}
	if (!rc && ferror(f))
		rc = io_error(err, errno ? errno : EIO, "read", path);
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len_out = len;
	return 0;
}

/* Directory of a job file: before the last '/', "/" for a file in the root,
 * "." for a bare name. */
static int dir_of(const char *path, char **out, struct errbuf *err)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		*out = strdup(".");
	else
		*out = strndup(path, slash == path ? 1 : (size_t)(slash - path));
	return *out ? 0 : oom(err);
}

int jobspec_read(const char *path, char **text, size_t *len, char **base_dir,
		 struct errbuf *err)
{
	bool from_stdin = strcmp(path, "-") == 0;
	const char *name = from_stdin ? "standard input" : path;
	FILE *f = from_stdin ? stdin : fopen(path, "rbe");
	int rc;

	*text = NULL;
	*base_dir = NULL;
	if (!f)
		return io_error(err, errno, "open", path);
	rc = read_capped(f, name, text, len, err);
	/* Read-only stream: nothing buffered can be lost, so fclose cannot fail
	 * in a way that matters. */
	if (!from_stdin)
		(void)fclose(f);
	if (!rc && !from_stdin)
		rc = dir_of(path, base_dir, err);
	if (rc) {
		free(*text);
		*text = NULL;
	}
	return rc;
}

int jobspec_load_file(const char *path, struct jobspec *ret, struct errbuf *err)
{
	char *buf = NULL, *dir = NULL;
	size_t len = 0;
	int rc;

	memset(ret, 0, sizeof(*ret));
	rc = jobspec_read(path, &buf, &len, &dir, err);
	if (!rc)
		rc = jobspec_parse(buf, len, dir, ret, err);
	free(dir);
	free(buf);
	return rc;
}

void jobspec_free(struct jobspec *js)
{
	if (!js)
		return;
	for (int slot = 0; slot < JOBSPEC_SLOTS; slot++)
		if (js->opened.held & (1u << slot))
			close(js->opened.fd[slot]);
	free(js->odf_path);
	free(js->sh_path);
	free(js->dwi_path);
	free(js->bvals_path);
	free(js->bvecs_path);
	free(js->mask_path);
	free(js->stop_map_path);
	free(js->stop_include_path);
	free(js->stop_exclude_path);
	free(js->stop_wm_path);
	free(js->stop_gm_path);
	free(js->stop_csf_path);
	free(js->stop_5tt_path);
	free(js->seed_roi_path);
	free(js->seed_wm_path);
	free(js->seed_gm_path);
	free(js->seed_5tt_path);
	for (int k = 0; k < js->n_region_masks; k++)
		free(js->region_mask_path[k]);
	free(js->seed_points);
	free(js->seed_points_path);
	free(js->sphere_name);
	free(js->sphere_vertices);
	free(js->output_path);
	memset(js, 0, sizeof(*js));
}
