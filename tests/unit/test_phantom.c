/* SPDX-License-Identifier: MIT */
/*
 * phantom: the default phantom is generated once into a temporary directory,
 * loaded back with volume_load and checked against its own bundles.json.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "demo/phantom.h"
#include "models/sphere.h"
#include "tmpdir.h"
#include "formats/volume.h"

#define DEG (M_PI / 180.0)

/* The DWI model as phantom.h documents it. */
#define S0 100.0
#define LAMBDA_PARALLEL 1.7e-3
#define LAMBDA_PERPENDICULAR 0.3e-3
#define ISOTROPIC_DIFFUSIVITY 0.8e-3
#define B0_COUNT 6
#define SHELL_DIRECTIONS 64
#define BVALUE 1000.0
/* Stanford HARDI's scheme, the largest table read back here. */
#define STANFORD_B0S 10
#define STANFORD_DIRECTIONS 150
#define STANFORD_BVALUE 2000.0
#define MAX_VOLUMES (STANFORD_B0S + STANFORD_DIRECTIONS)

/* dwi.bval and dwi.bvec as read back. */
struct gradients {
	int count;
	double bval[MAX_VOLUMES];
	double bvec[3][MAX_VOLUMES];
};

struct fixture {
	char dir[64];
	struct volume odf, fa, roi, labels, dwi, mask;
	struct gradients gradients;
	struct sphere sphere;
	json_t *bundles;
	json_t *job, *job_dwi;
};

static void remove_tree(const char *dir)
{
	assert_int_equal(tmpdir_remove(dir), 0);
}

static void make_temp_dir(char *out, size_t size)
{
	snprintf(out, size, "/tmp/test_phantom.XXXXXX");
	assert_non_null(mkdtemp(out));
}

static void load_file(const char *dir, const char *name, struct volume *v)
{
	char path[PATH_MAX];
	struct errbuf err = { 0 };

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (volume_load(path, name, v, &err) != 0)
		fail_msg("volume_load %s: %s", path, err.message);
}

static json_t *load_json(const char *dir, const char *name)
{
	char path[PATH_MAX];
	json_error_t jerr;
	json_t *doc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	doc = json_load_file(path, 0, &jerr);
	if (!doc)
		fail_msg("%s: %s", path, jerr.text);
	return doc;
}

/* One row of whitespace-separated numbers; returns how many were read. */
static int read_row(FILE *fp, double *values, int max)
{
	char line[8192];
	char *cursor = line, *end;
	int count = 0;

	if (!fgets(line, sizeof(line), fp))
		fail_msg("missing row");
	assert_non_null(strchr(line, '\n'));
	for (double v = strtod(cursor, &end); end != cursor; v = strtod(cursor, &end)) {
		assert_true(count < max);
		values[count++] = v;
		cursor = end;
	}
	while (*cursor == ' ')
		cursor++;
	assert_string_equal(cursor, "\n");
	return count;
}

/* FSL tables: one row of b-values, three rows of directions, same length. */
static void load_gradients(const char *dir, struct gradients *g)
{
	char path[PATH_MAX];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/dwi.bval", dir);
	fp = fopen(path, "r");
	assert_non_null(fp);
	g->count = read_row(fp, g->bval, MAX_VOLUMES);
	assert_int_equal(fgetc(fp), EOF);
	assert_int_equal(fclose(fp), 0);
	snprintf(path, sizeof(path), "%s/dwi.bvec", dir);
	fp = fopen(path, "r");
	assert_non_null(fp);
	for (int a = 0; a < 3; a++)
		assert_int_equal(read_row(fp, g->bvec[a], MAX_VOLUMES), g->count);
	assert_int_equal(fgetc(fp), EOF);
	assert_int_equal(fclose(fp), 0);
}

static int setup_default(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct phantom_params p;
	struct errbuf err = { 0 };

	assert_non_null(f);
	make_temp_dir(f->dir, sizeof(f->dir));
	phantom_default_params(&p);
	if (phantom_generate(&p, f->dir, &err) != 0)
		fail_msg("phantom_generate: %s: %s", err.field, err.message);
	load_file(f->dir, "odf.nii.gz", &f->odf);
	load_file(f->dir, "fa.nii.gz", &f->fa);
	load_file(f->dir, "seed_roi.nii.gz", &f->roi);
	load_file(f->dir, "labels.nii.gz", &f->labels);
	load_file(f->dir, "dwi.nii.gz", &f->dwi);
	load_file(f->dir, "mask.nii.gz", &f->mask);
	load_gradients(f->dir, &f->gradients);
	assert_int_equal(sphere_builtin(p.sphere, &f->sphere, &err), 0);
	f->bundles = load_json(f->dir, "bundles.json");
	f->job = load_json(f->dir, "job.json");
	f->job_dwi = load_json(f->dir, "job_dwi.json");
	*state = f;
	return 0;
}

static int teardown_default(void **state)
{
	struct fixture *f = *state;

	volume_free(&f->odf);
	volume_free(&f->fa);
	volume_free(&f->roi);
	volume_free(&f->labels);
	volume_free(&f->dwi);
	volume_free(&f->mask);
	sphere_free(&f->sphere);
	json_decref(f->bundles);
	json_decref(f->job);
	json_decref(f->job_dwi);
	remove_tree(f->dir);
	free(f);
	return 0;
}

/* ------------------------------------------------------------ bundles.json */

static json_t *bundle_named(const struct fixture *f, const char *name)
{
	size_t i;
	json_t *entry;

	json_array_foreach(f->bundles, i, entry) {
		if (strcmp(json_string_value(json_object_get(entry, "name")), name) == 0)
			return entry;
	}
	fail_msg("bundle %s not in bundles.json", name);
	return NULL;
}

static void json_vector(const json_t *entry, const char *key, double out[3])
{
	const json_t *array = json_object_get(entry, key);

	assert_true(json_is_array(array));
	assert_int_equal(json_array_size(array), 3);
	for (size_t a = 0; a < 3; a++)
		out[a] = json_number_value(json_array_get(array, a));
}

static void midpoint(const json_t *entry, double out[3])
{
	double start[3], end[3];

	json_vector(entry, "start_voxel", start);
	json_vector(entry, "end_voxel", end);
	for (int a = 0; a < 3; a++)
		out[a] = 0.5 * (start[a] + end[a]);
}

static void nearest_voxel(const double p[3], int64_t out[3])
{
	for (int a = 0; a < 3; a++)
		out[a] = (int64_t)floor(p[a] + 0.5);
}

static float value_at(const struct volume *v, const int64_t voxel[3])
{
	return v->data[volume_index(v, voxel[0], voxel[1], voxel[2])];
}

static const float *odf_at(const struct fixture *f, const int64_t voxel[3])
{
	return f->odf.data + volume_index(&f->odf, voxel[0], voxel[1], voxel[2]) *
		(size_t)f->odf.dim[3];
}

static double axis_angle_deg(const float v[3], const double d[3])
{
	double c = fabs(v[0] * d[0] + v[1] * d[1] + v[2] * d[2]);

	return acos(fmin(1.0, c)) / DEG;
}

static double vertex_axis_angle_deg(const struct sphere *s, int a, int b)
{
	const float *v = s->vertices + 3 * b;
	double d[3] = { v[0], v[1], v[2] };

	return axis_angle_deg(s->vertices + 3 * a, d);
}

static int odf_max_vertex(const struct fixture *f, const int64_t voxel[3])
{
	const float *odf = odf_at(f, voxel);
	int best = 0;

	for (int v = 1; v < f->sphere.nv; v++)
		if (odf[v] > odf[best])
			best = v;
	return best;
}

/* ------------------------------------------------------------ tests */

static void test_files_and_grid(void **state)
{
	const struct fixture *f = *state;

	assert_int_equal(f->odf.dim[0], 48);
	assert_int_equal(f->odf.dim[1], 48);
	assert_int_equal(f->odf.dim[2], 24);
	assert_int_equal(f->odf.dim[3], f->sphere.nv);
	assert_int_equal(f->fa.dim[3], 1);
	assert_true(volume_same_grid(&f->odf, &f->fa));
	assert_true(volume_same_grid(&f->odf, &f->roi));
	assert_true(volume_same_grid(&f->odf, &f->labels));
	/* 1 mm RAS, centred: voxel (23.5, 23.5, 11.5) is the origin. */
	for (int a = 0; a < 3; a++) {
		assert_float_equal(f->fa.affine[a][a], 1.0, 1e-6);
		assert_float_equal(f->fa.affine[a][3], -0.5 * (double)(f->fa.dim[a] - 1), 1e-6);
	}
	assert_int_equal(json_array_size(f->bundles), 8);
}

static void test_odf_nonnegative_and_zero_outside(void **state)
{
	const struct fixture *f = *state;
	size_t nv = (size_t)f->odf.dim[3], inside = 0;

	for (size_t i = 0; i < volume_voxels(&f->fa); i++) {
		const float *odf = f->odf.data + i * nv;
		float max = 0.0f;

		for (size_t v = 0; v < nv; v++) {
			assert_true(odf[v] >= 0.0f);
			max = fmaxf(max, odf[v]);
		}
		if (f->fa.data[i] > 0.0f) {
			assert_true(max > 0.5f);
			inside++;
		} else {
			assert_true(max == 0.0f);
		}
	}
	assert_true(inside > 3000);
}

static void test_straight_peak_along_axis(void **state)
{
	const struct fixture *f = *state;
	const json_t *straight = bundle_named(f, "straight");
	double centre[3], axis[3];
	int64_t voxel[3];

	midpoint(straight, centre);
	nearest_voxel(centre, voxel);
	json_vector(straight, "start_direction", axis);
	assert_true(axis_angle_deg(f->sphere.vertices + 3 * odf_max_vertex(f, voxel), axis) < 10.0);
	assert_true(value_at(&f->fa, voxel) > 0.7f);
}

/* Half way along the arc the ODF peak is the circle's tangent there. */
static void test_arc_peak_along_tangent(void **state)
{
	const struct fixture *f = *state;
	const json_t *arc = bundle_named(f, "arc");
	double start[3], centre[3], start_dir[3], point[3], tangent[3];
	double radius = json_number_value(json_object_get(arc, "curvature_radius_voxels"));
	double length = json_number_value(json_object_get(arc, "length_voxels"));
	double start_angle, mid_angle;
	int64_t voxel[3];

	json_vector(arc, "start_voxel", start);
	json_vector(arc, "centre_voxel", centre);
	json_vector(arc, "start_direction", start_dir);
	start_angle = atan2(start[1] - centre[1], start[0] - centre[0]);
	/* Counterclockwise about +z: the start direction is the tangent there. */
	assert_float_equal(start_dir[0], -sin(start_angle), 1e-6);
	assert_float_equal(start_dir[1], cos(start_angle), 1e-6);
	mid_angle = start_angle + 0.5 * length / radius;
	point[0] = centre[0] + radius * cos(mid_angle);
	point[1] = centre[1] + radius * sin(mid_angle);
	point[2] = centre[2];
	tangent[0] = -sin(mid_angle);
	tangent[1] = cos(mid_angle);
	tangent[2] = 0.0;
	nearest_voxel(point, voxel);
	assert_true(axis_angle_deg(f->sphere.vertices + 3 * odf_max_vertex(f, voxel), tangent) < 10.0);
}

/* Vertices at least as large as all their neighbours and above half the
 * maximum, one per axis (antipodal duplicates dropped). */
static int odf_peak_axes(const struct sphere *s, const float *odf, int out[], int max_out)
{
	float max = 0.0f;
	int n = 0;

	for (int v = 0; v < s->nv; v++)
		max = fmaxf(max, odf[v]);
	for (int v = 0; v < s->nv; v++) {
		bool is_peak = odf[v] >= 0.5f * max;
		bool duplicate = false;

		for (int e = s->nbr_offset[v]; e < s->nbr_offset[v + 1] && is_peak; e++)
			is_peak = odf[v] >= odf[s->nbr[e]];
		for (int i = 0; i < n && is_peak && !duplicate; i++)
			duplicate = vertex_axis_angle_deg(s, v, out[i]) < 20.0;
		if (is_peak && !duplicate && n < max_out)
			out[n++] = v;
	}
	return n;
}

/* At the centre of a crossing pair the ODF has one local maximum per bundle,
 * each along its bundle, the two separated by the crossing angle. */
static void check_crossing(const struct fixture *f, const char *name_a, const char *name_b,
			   double angle_deg)
{
	const json_t *a = bundle_named(f, name_a);
	const json_t *b = bundle_named(f, name_b);
	double centre_a[3], centre_b[3], dir_a[3], dir_b[3];
	int64_t voxel[3];
	int peaks[4];

	midpoint(a, centre_a);
	midpoint(b, centre_b);
	for (int i = 0; i < 3; i++)
		assert_float_equal(centre_a[i], centre_b[i], 0.5);
	json_vector(a, "start_direction", dir_a);
	json_vector(b, "start_direction", dir_b);
	nearest_voxel(centre_a, voxel);
	assert_int_equal(odf_peak_axes(&f->sphere, odf_at(f, voxel), peaks, 4), 2);
	for (int i = 0; i < 2; i++) {
		const float *v = f->sphere.vertices + 3 * peaks[i];

		assert_true(fmin(axis_angle_deg(v, dir_a), axis_angle_deg(v, dir_b)) < 10.0);
	}
	assert_true(fabs(vertex_axis_angle_deg(&f->sphere, peaks[0], peaks[1]) - angle_deg) < 10.0);
}

static void test_crossings_two_maxima(void **state)
{
	const struct fixture *f = *state;

	check_crossing(f, "cross90_a", "cross90_b", 90.0);
	check_crossing(f, "cross45_a", "cross45_b", 45.0);
}

static void test_fa_ranges(void **state)
{
	const struct fixture *f = *state;
	const json_t *straight = bundle_named(f, "straight");
	double start[3], axis[3], length, radius;
	double centre[3];
	int64_t voxel[3];
	size_t single = 0;

	json_vector(straight, "start_voxel", start);
	json_vector(straight, "start_direction", axis);
	length = json_number_value(json_object_get(straight, "length_voxels"));
	radius = json_number_value(json_object_get(straight, "tube_radius_voxels"));
	for (voxel[0] = 0; voxel[0] < f->fa.dim[0]; voxel[0]++)
		for (voxel[1] = 0; voxel[1] < f->fa.dim[1]; voxel[1]++)
			for (voxel[2] = 0; voxel[2] < f->fa.dim[2]; voxel[2]++) {
				double rel[3], t, dist2 = 0.0;
				float fa = value_at(&f->fa, voxel);

				assert_true(fa >= 0.0f && fa <= 1.0f);
				assert_true(fa == 0.0f || fa > 0.15f);
				for (int a = 0; a < 3; a++)
					rel[a] = (double)voxel[a] - start[a];
				t = rel[0] * axis[0] + rel[1] * axis[1] + rel[2] * axis[2];
				for (int a = 0; a < 3; a++)
					dist2 += (rel[a] - t * axis[a]) * (rel[a] - t * axis[a]);
				if (t > 0.0 && t < length && dist2 < (radius - 0.5) * (radius - 0.5)) {
					assert_true(fa > 0.5f);
					single++;
				}
			}
	assert_true(single > 500);

	/* Equal-weight 90-degree crossing: eigenvalues (1.0, 1.0, 0.3)e-3, FA 0.484. */
	midpoint(bundle_named(f, "cross90_a"), centre);
	nearest_voxel(centre, voxel);
	assert_float_equal(value_at(&f->fa, voxel), 0.484, 0.01);
}

static void test_roi_matches_fa(void **state)
{
	const struct fixture *f = *state;

	for (size_t i = 0; i < volume_voxels(&f->fa); i++)
		assert_true(f->roi.data[i] == (f->fa.data[i] > 0.0f ? 1.0f : 0.0f));
}

/* Both end zones exist, contain the tube's end voxel and reach one voxel
 * past the end cap (where a tracker's last point lands, FA already 0). */
static void check_end_zone(const struct fixture *f, const double end[3], const double outward[3],
			   float label)
{
	double beyond[3];
	int64_t voxel[3];

	nearest_voxel(end, voxel);
	assert_true(value_at(&f->labels, voxel) == label);
	for (int a = 0; a < 3; a++)
		beyond[a] = end[a] + 1.0 * outward[a];
	nearest_voxel(beyond, voxel);
	assert_true(value_at(&f->labels, voxel) == label);
	for (int a = 0; a < 3; a++)
		beyond[a] = end[a] + 1.5 * outward[a];
	nearest_voxel(beyond, voxel);
	assert_true(value_at(&f->fa, voxel) == 0.0f);
}

static void test_labels_end_zones(void **state)
{
	const struct fixture *f = *state;
	size_t n_bundles = json_array_size(f->bundles);
	size_t b;
	json_t *entry;

	for (size_t i = 0; i < volume_voxels(&f->labels); i++) {
		float label = f->labels.data[i];

		assert_true(label >= 0.0f && label <= (float)(2 * n_bundles));
		assert_true(label == floorf(label));
	}
	json_array_foreach(f->bundles, b, entry) {
		const json_t *labels = json_object_get(entry, "labels");
		double start[3], end[3], start_dir[3], end_dir[3];
		size_t count[2] = { 0, 0 };

		assert_int_equal(json_integer_value(json_array_get(labels, 0)), 2 * b + 1);
		assert_int_equal(json_integer_value(json_array_get(labels, 1)), 2 * b + 2);
		for (size_t i = 0; i < volume_voxels(&f->labels); i++)
			for (int e = 0; e < 2; e++)
				count[e] += f->labels.data[i] == (float)(2 * b + 1 + e);
		assert_true(count[0] > 20 && count[1] > 20);

		json_vector(entry, "start_voxel", start);
		json_vector(entry, "end_voxel", end);
		json_vector(entry, "start_direction", start_dir);
		json_vector(entry, "end_direction", end_dir);
		for (int a = 0; a < 3; a++)
			start_dir[a] = -start_dir[a];
		check_end_zone(f, start, start_dir, (float)(2 * b + 1));
		check_end_zone(f, end, end_dir, (float)(2 * b + 2));
	}
}

static const char *json_path_string(const json_t *doc, const char *section, const char *key)
{
	return json_string_value(json_object_get(json_object_get(doc, section), key));
}

static void assert_file_exists(const char *dir, const char *name)
{
	char path[PATH_MAX];

	assert_non_null(name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(access(path, R_OK), 0);
}

static void test_job_json(void **state)
{
	const struct fixture *f = *state;
	const json_t *seeds = json_object_get(f->job, "seeds");

	assert_string_equal(json_path_string(f->job, "inputs", "odf"), "odf.nii.gz");
	assert_string_equal(json_path_string(f->job, "inputs", "stop_map"), "fa.nii.gz");
	assert_string_equal(json_path_string(f->job, "seeds", "roi"), "seed_roi.nii.gz");
	assert_string_equal(json_string_value(json_object_get(f->job, "direction_getter")), "prob");
	assert_int_equal(json_integer_value(json_object_get(seeds, "count")), 2000);
	assert_int_equal(json_integer_value(json_object_get(seeds, "rng_seed")), 0);
	assert_string_equal(json_path_string(f->job, "tracking", "sphere"), "symmetric362");
	assert_string_equal(json_path_string(f->job, "output", "format"), "trk");
	assert_string_equal(json_path_string(f->job, "output", "path"), "tracks.trk");
	assert_file_exists(f->dir, json_path_string(f->job, "inputs", "odf"));
	assert_file_exists(f->dir, json_path_string(f->job, "inputs", "stop_map"));
	assert_file_exists(f->dir, json_path_string(f->job, "seeds", "roi"));
	assert_file_exists(f->dir, "labels.nii.gz");
}

/* ------------------------------------------------------------ DWI */

/* Noise-free signal of equal-fraction fibre tensors (none: isotropic tissue). */
static double analytic_signal(const double dirs[][3], int count, const struct gradients *g, int v)
{
	double sum = 0.0;

	if (count == 0)
		return S0 * exp(-g->bval[v] * ISOTROPIC_DIFFUSIVITY);
	for (int i = 0; i < count; i++) {
		double c = g->bvec[0][v] * dirs[i][0] + g->bvec[1][v] * dirs[i][1] +
			   g->bvec[2][v] * dirs[i][2];

		sum += exp(-g->bval[v] * (LAMBDA_PERPENDICULAR +
					  (LAMBDA_PARALLEL - LAMBDA_PERPENDICULAR) * c * c));
	}
	return S0 * sum / count;
}

static const float *dwi_at(const struct volume *dwi, const int64_t voxel[3])
{
	return dwi->data + volume_index(dwi, voxel[0], voxel[1], voxel[2]) * (size_t)dwi->dim[3];
}

/* b0s first in the count, then the shells (the second at twice the first's
 * b-value); directions unit (0 for b0s). */
static void check_gradients(const struct gradients *g, int b0s, int directions, double bvalue,
			    int shells)
{
	int b0 = 0, per_shell[2] = { 0, 0 };

	assert_int_equal(g->count, b0s + shells * directions);
	for (int v = 0; v < g->count; v++) {
		double norm2 = g->bvec[0][v] * g->bvec[0][v] + g->bvec[1][v] * g->bvec[1][v] +
			       g->bvec[2][v] * g->bvec[2][v];

		if (g->bval[v] == 0.0) {
			b0++;
			assert_true(norm2 == 0.0);
			continue;
		}
		assert_float_equal(norm2, 1.0, 1e-12);
		assert_true(g->bval[v] == bvalue || g->bval[v] == 2.0 * bvalue);
		per_shell[g->bval[v] == 2.0 * bvalue]++;
	}
	assert_int_equal(b0, b0s);
	assert_int_equal(per_shell[0], directions);
	assert_int_equal(per_shell[1], shells == 2 ? directions : 0);
	/* The series starts with a b0 (the others are interleaved). */
	assert_true(g->bval[0] == 0.0);
}

/* No two weighted volumes share an axis (within a degree). */
static void check_distinct_axes(const struct gradients *g)
{
	for (int v = 0; v < g->count; v++)
		for (int w = 0; w < g->count; w++) {
			double c = g->bvec[0][v] * g->bvec[0][w] + g->bvec[1][v] * g->bvec[1][w] +
				   g->bvec[2][v] * g->bvec[2][w];

			if (v != w && g->bval[v] > 0.0 && g->bval[w] > 0.0)
				assert_true(fabs(c) < cos(1.0 * DEG));
		}
}

static void test_dwi_files_and_grid(void **state)
{
	const struct fixture *f = *state;

	check_gradients(&f->gradients, B0_COUNT, SHELL_DIRECTIONS, BVALUE, 1);
	assert_int_equal(f->dwi.dim[3], f->gradients.count);
	assert_int_equal(f->mask.dim[3], 1);
	assert_true(volume_same_grid(&f->odf, &f->dwi));
	assert_true(volume_same_grid(&f->odf, &f->mask));
	for (size_t i = 0; i < volume_voxels(&f->dwi) * (size_t)f->dwi.dim[3]; i++)
		assert_true(f->dwi.data[i] > 0.0f);
}

static void test_mask_border(void **state)
{
	const struct fixture *f = *state;
	int64_t voxel[3];
	size_t inside = 0;

	for (voxel[0] = 0; voxel[0] < f->mask.dim[0]; voxel[0]++)
		for (voxel[1] = 0; voxel[1] < f->mask.dim[1]; voxel[1]++)
			for (voxel[2] = 0; voxel[2] < f->mask.dim[2]; voxel[2]++) {
				bool border = false;
				float m = value_at(&f->mask, voxel);

				for (int a = 0; a < 3; a++)
					border |= voxel[a] == 0 || voxel[a] == f->mask.dim[a] - 1;
				assert_true(m == (border ? 0.0f : 1.0f));
				inside += m == 1.0f;
			}
	assert_int_equal(inside, 46 * 46 * 22);
}

/* At the default SNR 30 the noise has sigma S0 / 30 = 3.33: in the isotropic
 * tissue the residuals about the analytic signal (>= 45, where Rician noise is
 * all but Gaussian) have that spread (measured 3.331) and the small positive
 * Rician bias, about sigma^2 / 2S: 0.06 at b=0, 0.12 at b=1000 (measured 0.119). */
static void test_dwi_noise_level(void **state)
{
	const struct fixture *f = *state;
	double sum = 0.0, sum2 = 0.0, n = 0.0, mean, sd;
	int64_t voxel[3];

	for (voxel[0] = 0; voxel[0] < f->fa.dim[0]; voxel[0]++)
		for (voxel[1] = 0; voxel[1] < f->fa.dim[1]; voxel[1]++)
			for (voxel[2] = 0; voxel[2] < f->fa.dim[2]; voxel[2]++) {
				const float *samples = dwi_at(&f->dwi, voxel);

				if (value_at(&f->fa, voxel) != 0.0f)
					continue;
				for (int v = 0; v < f->gradients.count; v++) {
					double r = samples[v] - analytic_signal(NULL, 0, &f->gradients, v);

					sum += r;
					sum2 += r * r;
					n += 1.0;
				}
			}
	mean = sum / n;
	sd = sqrt(sum2 / n - mean * mean);
	assert_true(n > 1e6);
	assert_float_equal(sd, S0 / 30.0, 0.03 * S0 / 30.0);
	assert_true(mean > 0.05 && mean < 0.2);
}

static void test_dwi_job_json(void **state)
{
	const struct fixture *f = *state;
	const json_t *model = json_object_get(f->job_dwi, "model");
	json_t *inputs = json_object_get(f->job_dwi, "inputs");
	const char *key;
	json_t *value;

	assert_string_equal(json_path_string(f->job_dwi, "inputs", "dwi"), "dwi.nii.gz");
	assert_string_equal(json_path_string(f->job_dwi, "inputs", "bvals"), "dwi.bval");
	assert_string_equal(json_path_string(f->job_dwi, "inputs", "bvecs"), "dwi.bvec");
	assert_string_equal(json_path_string(f->job_dwi, "inputs", "mask"), "mask.nii.gz");
	assert_int_equal(json_object_size(inputs), 4);
	json_object_foreach(inputs, key, value)
		assert_file_exists(f->dir, json_string_value(value));
	assert_string_equal(json_string_value(json_object_get(model, "name")), "csd");
	assert_int_equal(json_integer_value(json_object_get(model, "sh_order")), 8);
	/* Everything but the inputs, the model and the output path is job.json's. */
	assert_true(json_equal(json_object_get(f->job_dwi, "seeds"), json_object_get(f->job, "seeds")));
	assert_true(json_equal(json_object_get(f->job_dwi, "tracking"),
			       json_object_get(f->job, "tracking")));
	assert_true(json_equal(json_object_get(f->job_dwi, "direction_getter"),
			       json_object_get(f->job, "direction_getter")));
	assert_string_equal(json_path_string(f->job_dwi, "output", "format"), "trk");
	assert_string_equal(json_path_string(f->job_dwi, "output", "path"), "tracks_dwi.trk");
	assert_int_equal(json_object_size(f->job_dwi), json_object_size(f->job) + 1);
}

static void test_ptt_job_json(void **state)
{
	const struct fixture *f = *state;
	json_t *job = load_json(f->dir, "job_ptt.json");

	/* job.json's inputs and seeds; the getter, a smaller max_angle, its own output. */
	assert_string_equal(json_string_value(json_object_get(job, "direction_getter")), "ptt");
	assert_true(json_equal(json_object_get(job, "inputs"), json_object_get(f->job, "inputs")));
	assert_true(json_equal(json_object_get(job, "seeds"), json_object_get(f->job, "seeds")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(job, "tracking"),
							    "max_angle")), 20);
	assert_string_equal(json_path_string(job, "output", "path"), "tracks_ptt.trk");
	json_decref(job);
}

static void read_whole_file(const char *dir, const char *name, char **data, long *size)
{
	char path[PATH_MAX];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "rb");
	assert_non_null(fp);
	assert_int_equal(fseek(fp, 0, SEEK_END), 0);
	*size = ftell(fp);
	assert_true(*size > 0);
	assert_int_equal(fseek(fp, 0, SEEK_SET), 0);
	*data = malloc((size_t)*size);
	assert_non_null(*data);
	assert_int_equal(fread(*data, 1, (size_t)*size, fp), (size_t)*size);
	assert_int_equal(fclose(fp), 0);
}

static void assert_same_bytes(const char *dir_a, const char *dir_b, const char *name)
{
	char *a, *b;
	long size_a, size_b;

	read_whole_file(dir_a, name, &a, &size_a);
	read_whole_file(dir_b, name, &b, &size_b);
	assert_int_equal(size_a, size_b);
	assert_memory_equal(a, b, (size_t)size_a);
	free(a);
	free(b);
}

/* A second run with the same parameters writes the same bytes, noise included. */
static void test_dwi_deterministic(void **state)
{
	const struct fixture *f = *state;
	static const char *const names[] = { "dwi.nii.gz", "dwi.bval", "dwi.bvec", "mask.nii.gz",
					     "job_dwi.json" };
	struct phantom_params p;
	struct errbuf err = { 0 };
	char dir[64];

	make_temp_dir(dir, sizeof(dir));
	phantom_default_params(&p);
	if (phantom_generate(&p, dir, &err) != 0)
		fail_msg("phantom_generate: %s: %s", err.field, err.message);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		assert_same_bytes(f->dir, dir, names[i]);
	remove_tree(dir);
}

static void check_signal(const struct volume *dwi, const struct gradients *g,
			 const int64_t voxel[3], const double dirs[][3], int count)
{
	const float *samples = dwi_at(dwi, voxel);

	for (int v = 0; v < g->count; v++)
		assert_float_equal(samples[v], analytic_signal(dirs, count, g, v), 1e-6 * S0);
}

/* Noise-free, two shells, uncompressed: at a single-bundle voxel, a 90-degree
 * crossing and in the isotropic tissue the series is the analytic signal. */
static void test_dwi_noise_free_two_shells(void **state)
{
	struct phantom_params p;
	struct errbuf err = { 0 };
	struct fixture f = { 0 };
	struct gradients *g = &f.gradients;
	double straight[1][3], crossing[2][3], centre[3];
	int64_t voxel[3];
	json_t *job_dwi;

	(void)state;
	make_temp_dir(f.dir, sizeof(f.dir));
	phantom_default_params(&p);
	p.snr = 0.0;
	p.shells = 2;
	p.compress = 0;
	if (phantom_generate(&p, f.dir, &err) != 0)
		fail_msg("phantom_generate: %s: %s", err.field, err.message);
	load_file(f.dir, "dwi.nii", &f.dwi);
	load_gradients(f.dir, g);
	f.bundles = load_json(f.dir, "bundles.json");
	check_gradients(g, B0_COUNT, SHELL_DIRECTIONS, BVALUE, 2);
	assert_int_equal(f.dwi.dim[3], g->count);
	/* The second shell's directions are the first's turned, not repeated. */
	check_distinct_axes(g);

	midpoint(bundle_named(&f, "straight"), centre);
	nearest_voxel(centre, voxel);
	json_vector(bundle_named(&f, "straight"), "start_direction", straight[0]);
	check_signal(&f.dwi, g, voxel, straight, 1);

	midpoint(bundle_named(&f, "cross90_a"), centre);
	nearest_voxel(centre, voxel);
	json_vector(bundle_named(&f, "cross90_a"), "start_direction", crossing[0]);
	json_vector(bundle_named(&f, "cross90_b"), "start_direction", crossing[1]);
	check_signal(&f.dwi, g, voxel, crossing, 2);

	voxel[0] = voxel[1] = voxel[2] = 0;
	check_signal(&f.dwi, g, voxel, NULL, 0);
	voxel[0] = 47;
	voxel[1] = 24;
	voxel[2] = 12;
	check_signal(&f.dwi, g, voxel, NULL, 0);

	job_dwi = load_json(f.dir, "job_dwi.json");
	assert_string_equal(json_path_string(job_dwi, "inputs", "dwi"), "dwi.nii");
	assert_string_equal(json_path_string(job_dwi, "inputs", "mask"), "mask.nii");
	assert_file_exists(f.dir, "mask.nii");
	json_decref(job_dwi);
	json_decref(f.bundles);
	volume_free(&f.dwi);
	remove_tree(f.dir);
}

/* A noise-free phantom of the smallest grid with the given scheme, its
 * series and tables read back into f. */
static void generate_scheme(struct fixture *f, int b0s, int directions, double bvalue, int shells)
{
	struct phantom_params p;
	struct errbuf err = { 0 };

	make_temp_dir(f->dir, sizeof(f->dir));
	phantom_default_params(&p);
	p.dim[0] = p.dim[1] = p.dim[2] = 16;
	p.snr = 0.0;
	p.compress = 0;
	p.b0_count = b0s;
	p.directions = directions;
	p.bvalue = bvalue;
	p.shells = shells;
	if (phantom_generate(&p, f->dir, &err) != 0)
		fail_msg("phantom_generate: %s: %s", err.field, err.message);
	load_file(f->dir, "dwi.nii", &f->dwi);
	load_gradients(f->dir, &f->gradients);
	assert_int_equal(f->dwi.dim[3], f->gradients.count);
}

/* Stanford HARDI's scheme: 10 b0s and 150 directions at b=2000, 160 volumes,
 * one b0 before every 15 weighted volumes; the signal follows the b-value. */
static void test_dwi_stanford_scheme(void **state)
{
	struct fixture f = { 0 };
	const struct gradients *g = &f.gradients;
	int64_t corner[3] = { 0, 0, 0 };

	(void)state;
	generate_scheme(&f, STANFORD_B0S, STANFORD_DIRECTIONS, STANFORD_BVALUE, 1);
	assert_int_equal(g->count, 160);
	check_gradients(g, STANFORD_B0S, STANFORD_DIRECTIONS, STANFORD_BVALUE, 1);
	for (int v = 0; v < g->count; v++)
		assert_true((g->bval[v] == 0.0) == (v % 16 == 0));
	check_distinct_axes(g);
	check_signal(&f.dwi, g, corner, NULL, 0);
	volume_free(&f.dwi);
	remove_tree(f.dir);
}

/* Two shells of a small scheme: the second at twice the b-value, with the
 * first's directions turned; b0s still spread through both shells. */
static void test_dwi_custom_two_shells(void **state)
{
	struct fixture f = { 0 };
	const struct gradients *g = &f.gradients;
	int64_t corner[3] = { 0, 0, 0 };

	(void)state;
	generate_scheme(&f, 3, 6, 700.0, 2);
	check_gradients(g, 3, 6, 700.0, 2);
	/* b0 j before weighted volume j * 12 / 3: at 0, 5 and 10. */
	for (int v = 0; v < g->count; v++)
		assert_true((g->bval[v] == 0.0) == (v == 0 || v == 5 || v == 10));
	check_distinct_axes(g);
	check_signal(&f.dwi, g, corner, NULL, 0);
	volume_free(&f.dwi);
	remove_tree(f.dir);
}

/* The largest scheme accepted: 100 b0s, two shells of 1000 directions at
 * b=20000 and 40000 (its tables are longer than load_gradients reads). */
static void test_dwi_largest_scheme(void **state)
{
	struct phantom_params p;
	struct errbuf err = { 0 };
	struct volume dwi = { 0 };
	char dir[64];

	(void)state;
	make_temp_dir(dir, sizeof(dir));
	phantom_default_params(&p);
	p.dim[0] = p.dim[1] = p.dim[2] = 16;
	p.snr = 0.0;
	p.compress = 0;
	p.b0_count = 100;
	p.directions = 1000;
	p.bvalue = 20000.0;
	p.shells = 2;
	if (phantom_generate(&p, dir, &err) != 0)
		fail_msg("phantom_generate: %s: %s", err.field, err.message);
	load_file(dir, "dwi.nii", &dwi);
	assert_int_equal(dwi.dim[3], 2100);
	volume_free(&dwi);
	remove_tree(dir);
}

/* Uncompressed output into a directory that does not exist yet, on a grid
 * large enough for two tiles along x. */
static void test_uncompressed_tiled(void **state)
{
	struct phantom_params p;
	struct errbuf err = { 0 };
	char dir[64], outdir[128];
	struct volume labels = { 0 };
	json_t *job, *bundles;

	(void)state;
	make_temp_dir(dir, sizeof(dir));
	snprintf(outdir, sizeof(outdir), "%s/new/sub", dir);
	phantom_default_params(&p);
	p.dim[0] = 80;
	p.sphere = "repulsion100";
	p.seed_count = 7;
	p.compress = 0;
	p.write_dwi = 0;
	if (phantom_generate(&p, outdir, &err) != 0)
		fail_msg("phantom_generate: %s: %s", err.field, err.message);
	job = load_json(outdir, "job.json");
	assert_string_equal(json_path_string(job, "inputs", "odf"), "odf.nii");
	assert_string_equal(json_path_string(job, "inputs", "stop_map"), "fa.nii");
	assert_string_equal(json_path_string(job, "seeds", "roi"), "seed_roi.nii");
	assert_string_equal(json_path_string(job, "tracking", "sphere"), "repulsion100");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(job, "seeds"), "count")), 7);
	assert_file_exists(outdir, "odf.nii");
	assert_file_exists(outdir, "fa.nii");
	assert_file_exists(outdir, "seed_roi.nii");
	/* Without the DWI, none of its files. */
	for (size_t i = 0; i < 5; i++) {
		static const char *const dwi_files[] = { "dwi.nii", "dwi.bval", "dwi.bvec",
							 "mask.nii", "job_dwi.json" };
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/%s", outdir, dwi_files[i]);
		assert_int_equal(access(path, F_OK), -1);
	}

	bundles = load_json(outdir, "bundles.json");
	assert_int_equal(json_array_size(bundles), 16);
	assert_string_equal(json_string_value(json_object_get(json_array_get(bundles, 9), "name")),
			    "arc_t1");
	load_file(outdir, "labels.nii", &labels);
	for (float label = 1.0f; label <= 32.0f; label += 1.0f) {
		size_t count = 0;

		for (size_t i = 0; i < volume_voxels(&labels); i++)
			count += labels.data[i] == label;
		assert_true(count > 10);
	}
	volume_free(&labels);
	json_decref(job);
	json_decref(bundles);
	remove_tree(dir);
}

static void expect_rejected(const struct phantom_params *p, const char *outdir, int code,
			    const char *field)
{
	struct errbuf err = { 0 };

	assert_int_equal(phantom_generate(p, outdir, &err), code);
	assert_string_equal(err.field, field);
	assert_true(err.message[0] != '\0');
}

static void test_bad_params(void **state)
{
	struct phantom_params p;
	char dir[64], blocker[128], below_file[160];
	FILE *fp;

	(void)state;
	make_temp_dir(dir, sizeof(dir));

	phantom_default_params(&p);
	p.dim[1] = 15;
	expect_rejected(&p, dir, -EINVAL, "phantom.dim");
	phantom_default_params(&p);
	p.dim[2] = 2049;
	expect_rejected(&p, dir, -EINVAL, "phantom.dim");
	phantom_default_params(&p);
	p.voxel_mm = 0.0;
	expect_rejected(&p, dir, -EINVAL, "phantom.voxel_mm");
	p.voxel_mm = -1.0;
	expect_rejected(&p, dir, -EINVAL, "phantom.voxel_mm");
	p.voxel_mm = NAN;
	expect_rejected(&p, dir, -EINVAL, "phantom.voxel_mm");
	phantom_default_params(&p);
	p.seed_count = 0;
	expect_rejected(&p, dir, -EINVAL, "phantom.seed_count");
	phantom_default_params(&p);
	p.sphere = NULL;
	expect_rejected(&p, dir, -EINVAL, "phantom.sphere");
	phantom_default_params(&p);
	p.snr = -1.0;
	expect_rejected(&p, dir, -EINVAL, "phantom.snr");
	p.snr = NAN;
	expect_rejected(&p, dir, -EINVAL, "phantom.snr");
	phantom_default_params(&p);
	p.shells = 0;
	expect_rejected(&p, dir, -EINVAL, "phantom.shells");
	p.shells = 3;
	expect_rejected(&p, dir, -EINVAL, "phantom.shells");
	phantom_default_params(&p);
	p.b0_count = 0;
	expect_rejected(&p, dir, -EINVAL, "phantom.b0s");
	p.b0_count = 101;
	expect_rejected(&p, dir, -EINVAL, "phantom.b0s");
	phantom_default_params(&p);
	p.directions = 5;
	expect_rejected(&p, dir, -EINVAL, "phantom.directions");
	p.directions = 1001;
	expect_rejected(&p, dir, -EINVAL, "phantom.directions");
	phantom_default_params(&p);
	p.bvalue = 50.0;
	expect_rejected(&p, dir, -EINVAL, "phantom.bvalue");
	p.bvalue = 20000.5;
	expect_rejected(&p, dir, -EINVAL, "phantom.bvalue");
	p.bvalue = NAN;
	expect_rejected(&p, dir, -EINVAL, "phantom.bvalue");
	p.bvalue = INFINITY;
	expect_rejected(&p, dir, -EINVAL, "phantom.bvalue");
	phantom_default_params(&p);
	expect_rejected(&p, NULL, -EINVAL, "phantom.outdir");

	/* Unknown sphere: sphere_builtin's code and message, our field. */
	p.sphere = "no_such_sphere";
	expect_rejected(&p, dir, -ENOENT, "phantom.sphere");

	/* A regular file where a directory should be: the message names the path. */
	phantom_default_params(&p);
	snprintf(blocker, sizeof(blocker), "%s/blocker", dir);
	fp = fopen(blocker, "w");
	assert_non_null(fp);
	assert_int_equal(fclose(fp), 0);
	expect_rejected(&p, blocker, -ENOTDIR, "phantom.outdir");
	snprintf(below_file, sizeof(below_file), "%s/sub", blocker);
	{
		struct errbuf err = { 0 };

		assert_int_equal(phantom_generate(&p, below_file, &err), -ENOTDIR);
		assert_string_equal(err.field, "phantom.outdir");
		assert_non_null(strstr(err.message, blocker));
	}
	remove_tree(dir);
}

int main(void)
{
	const struct CMUnitTest generated[] = {
		cmocka_unit_test(test_files_and_grid),
		cmocka_unit_test(test_odf_nonnegative_and_zero_outside),
		cmocka_unit_test(test_straight_peak_along_axis),
		cmocka_unit_test(test_arc_peak_along_tangent),
		cmocka_unit_test(test_crossings_two_maxima),
		cmocka_unit_test(test_fa_ranges),
		cmocka_unit_test(test_roi_matches_fa),
		cmocka_unit_test(test_labels_end_zones),
		cmocka_unit_test(test_job_json),
		cmocka_unit_test(test_dwi_files_and_grid),
		cmocka_unit_test(test_mask_border),
		cmocka_unit_test(test_dwi_noise_level),
		cmocka_unit_test(test_dwi_job_json),
		cmocka_unit_test(test_ptt_job_json),
		cmocka_unit_test(test_dwi_deterministic),
	};
	const struct CMUnitTest standalone[] = {
		cmocka_unit_test(test_dwi_noise_free_two_shells),
		cmocka_unit_test(test_dwi_stanford_scheme),
		cmocka_unit_test(test_dwi_custom_two_shells),
		cmocka_unit_test(test_dwi_largest_scheme),
		cmocka_unit_test(test_uncompressed_tiled),
		cmocka_unit_test(test_bad_params),
	};
	int failed = cmocka_run_group_tests_name("phantom (default)", generated, setup_default,
						 teardown_default);

	return failed + cmocka_run_group_tests_name("phantom (other)", standalone, NULL, NULL);
}
