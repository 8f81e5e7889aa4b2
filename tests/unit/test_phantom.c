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
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phantom.h"
#include "sphere.h"
#include "volume.h"

#define DEG (M_PI / 180.0)

struct fixture {
	char dir[64];
	struct volume odf, fa, roi, labels;
	struct sphere sphere;
	json_t *bundles;
	json_t *job;
};

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

static void remove_tree(const char *dir)
{
	assert_int_equal(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
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
	assert_int_equal(sphere_builtin(p.sphere, &f->sphere, &err), 0);
	f->bundles = load_json(f->dir, "bundles.json");
	f->job = load_json(f->dir, "job.json");
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
	sphere_free(&f->sphere);
	json_decref(f->bundles);
	json_decref(f->job);
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
	};
	const struct CMUnitTest standalone[] = {
		cmocka_unit_test(test_uncompressed_tiled),
		cmocka_unit_test(test_bad_params),
	};
	int failed = cmocka_run_group_tests_name("phantom (default)", generated, setup_default,
						 teardown_default);

	return failed + cmocka_run_group_tests_name("phantom (other)", standalone, NULL, NULL);
}
