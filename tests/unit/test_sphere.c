/* SPDX-License-Identifier: MIT */
/*
 * sphere: built-in figures and edges against DIPY 1.6, the convex hull
 * against DIPY's edge sets (built-ins, hemispheres, a mixed set), degenerate
 * vertex sets, and rejection of bad input. Expected numbers come from
 * dipy.data.get_sphere(name).edges and HemiSphere.from_sphere(...).edges.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/sphere.h"

struct dipy_edges {
	const char *name;
	int nv, n_edges;
	int first[4][2], last[3][2];      /* DIPY's edges[:4] and edges[-3:] */
	int hemi_nv, hemi_edges;
	int hemi_first[4][2], hemi_last[3][2];
};

static const struct dipy_edges dipy[] = {
	{"repulsion724", 724, 2166, {{0, 2}, {1, 3}, {2, 4}, {0, 5}},
	 {{702, 723}, {706, 723}, {719, 723}},
	 362, 1083, {{0, 1}, {0, 2}, {1, 2}, {0, 3}}, {{340, 361}, {344, 361}, {357, 361}}},
	{"repulsion100", 100, 294, {{0, 1}, {0, 2}, {1, 2}, {0, 3}},
	 {{78, 99}, {86, 99}, {94, 99}},
	 50, 147, {{0, 1}, {0, 2}, {1, 2}, {0, 3}}, {{40, 49}, {44, 49}, {45, 49}}},
	{"symmetric362", 362, 1080, {{0, 1}, {0, 2}, {1, 2}, {0, 3}},
	 {{326, 361}, {340, 361}, {350, 361}},
	 181, 540, {{0, 1}, {0, 2}, {1, 2}, {0, 3}}, {{162, 180}, {169, 180}, {173, 180}}},
};

#define N_DIPY ((int)(sizeof(dipy) / sizeof(dipy[0])))

/* Neighbour lists must be the edges seen from each end, ascending. */
static void assert_neighbours_match_edges(const struct sphere *s)
{
	assert_int_equal(s->nbr_offset[0], 0);
	assert_int_equal(s->nbr_offset[s->nv], 2 * s->n_edges);
	for (int v = 0; v < s->nv; v++) {
		assert_true(s->nbr_offset[v + 1] - s->nbr_offset[v] >= 3);
		for (int i = s->nbr_offset[v] + 1; i < s->nbr_offset[v + 1]; i++)
			assert_true(s->nbr[i - 1] < s->nbr[i]);
	}
	for (int e = 0; e < s->n_edges; e++) {
		int a = s->edges[2 * e], b = s->edges[2 * e + 1], found = 0;

		assert_true(a < b);
		for (int i = s->nbr_offset[a]; i < s->nbr_offset[a + 1]; i++)
			found += s->nbr[i] == b;
		for (int i = s->nbr_offset[b]; i < s->nbr_offset[b + 1]; i++)
			found += s->nbr[i] == a;
		assert_int_equal(found, 2);
	}
}

/* DIPY's order: sorted by the larger index, then the smaller. */
static void assert_dipy_edge_order(const struct sphere *s)
{
	for (int e = 1; e < s->n_edges; e++) {
		const int *prev = &s->edges[2 * (e - 1)], *cur = &s->edges[2 * e];

		assert_true(prev[1] < cur[1] || (prev[1] == cur[1] && prev[0] < cur[0]));
	}
}

static void assert_edge_ends(const struct sphere *s, const int first[4][2],
			     const int last[3][2])
{
	for (int i = 0; i < 4; i++) {
		assert_int_equal(s->edges[2 * i], first[i][0]);
		assert_int_equal(s->edges[2 * i + 1], first[i][1]);
	}
	for (int i = 0; i < 3; i++) {
		int e = s->n_edges - 3 + i;

		assert_int_equal(s->edges[2 * e], last[i][0]);
		assert_int_equal(s->edges[2 * e + 1], last[i][1]);
	}
}

static void assert_same_edges(const struct sphere *a, const struct sphere *b)
{
	assert_int_equal(a->n_edges, b->n_edges);
	assert_memory_equal(a->edges, b->edges, 2 * (size_t)a->n_edges * sizeof(int));
}

static double *vertices_as_double(const struct sphere *s)
{
	double *xyz = malloc(3 * (size_t)s->nv * sizeof(*xyz));

	assert_non_null(xyz);
	for (int i = 0; i < 3 * s->nv; i++)
		xyz[i] = s->vertices[i];
	return xyz;
}

static void test_builtins_match_dipy(void **state)
{
	(void)state;
	for (int i = 0; i < N_DIPY; i++) {
		struct sphere s = {0};
		struct errbuf err = {0};

		assert_int_equal(sphere_builtin(dipy[i].name, &s, &err), 0);
		assert_int_equal(s.nv, dipy[i].nv);
		assert_int_equal(s.n_edges, dipy[i].n_edges);
		assert_true(s.antipodal);
		for (int v = 0; v < s.nv; v++) {
			const float *p = &s.vertices[3 * v];

			assert_true(fabs(sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]) - 1) < 1e-6);
		}
		assert_dipy_edge_order(&s);
		assert_edge_ends(&s, dipy[i].first, dipy[i].last);
		assert_neighbours_match_edges(&s);
		sphere_free(&s);
	}
}

static void test_builtin_names_listed(void **state)
{
	int n = 0;

	(void)state;
	while (sphere_builtin_names[n])
		n++;
	assert_int_equal(n, N_DIPY);
	for (int i = 0; i < N_DIPY; i++)
		assert_string_equal(sphere_builtin_names[i], dipy[i].name);
}

static void test_builtin_unknown(void **state)
{
	struct sphere s = {0};
	struct errbuf err = {0};

	(void)state;
	assert_int_equal(sphere_builtin("repulsion725", &s, &err), -ENOENT);
	assert_non_null(strstr(err.message, "repulsion725"));
	for (int i = 0; i < N_DIPY; i++)
		assert_non_null(strstr(err.message, dipy[i].name));
	assert_null(s.vertices);
}

/* The real test of the hull: DIPY's faces of its own spheres are their
 * convex hulls, so the hull of the vertices must give the same edges. */
static void test_hull_of_builtins_gives_dipy_edges(void **state)
{
	(void)state;
	for (int i = 0; i < N_DIPY; i++) {
		struct sphere builtin = {0}, hull = {0};
		struct errbuf err = {0};
		double *xyz;

		assert_int_equal(sphere_builtin(dipy[i].name, &builtin, NULL), 0);
		xyz = vertices_as_double(&builtin);
		assert_int_equal(sphere_from_vertices(xyz, builtin.nv, "v", &hull, &err), 0);
		assert_true(hull.antipodal);
		assert_same_edges(&hull, &builtin);
		assert_neighbours_match_edges(&hull);
		free(xyz);
		sphere_free(&hull);
		sphere_free(&builtin);
	}
}

/* DIPY's HemiSphere.from_sphere: keep the first vertex of each antipodal
 * pair, flipped to z >= 0; *map gets each full-sphere vertex's hemisphere
 * index. */
static double *hemisphere_of(const struct sphere *full, int **map, int *nh)
{
	double *xyz = malloc(3 * (size_t)full->nv * sizeof(*xyz));
	int *m = malloc((size_t)full->nv * sizeof(*m));

	assert_non_null(xyz);
	assert_non_null(m);
	*nh = 0;
	for (int i = 0; i < full->nv; i++) {
		const float *v = &full->vertices[3 * i];

		m[i] = -1;
		for (int j = 0; j < i && m[i] < 0; j++) {
			const float *w = &full->vertices[3 * j];

			if (fabsf(v[0] + w[0]) + fabsf(v[1] + w[1]) + fabsf(v[2] + w[2]) < 1e-5f)
				m[i] = m[j];
		}
		if (m[i] >= 0)
			continue;
		m[i] = *nh;
		for (int k = 0; k < 3; k++)
			xyz[3 * *nh + k] = v[2] < 0 ? -v[k] : v[k];
		(*nh)++;
	}
	*map = m;
	return xyz;
}

static int compare_edge(const void *a, const void *b)
{
	const int *x = a, *y = b;

	if (x[1] != y[1])
		return x[1] - y[1];
	return x[0] - y[0];
}

/* DIPY folds the full sphere's edges through the vertex map. */
static int fold_edges(const struct sphere *full, const int *map, int *out)
{
	int n = 0, kept = 0;

	for (int e = 0; e < full->n_edges; e++) {
		int a = map[full->edges[2 * e]], b = map[full->edges[2 * e + 1]];

		out[2 * n] = a < b ? a : b;
		out[2 * n + 1] = a < b ? b : a;
		n++;
	}
	qsort(out, (size_t)n, 2 * sizeof(int), compare_edge);
	for (int e = 0; e < n; e++)
		if (e == 0 || compare_edge(&out[2 * e], &out[2 * (e - 1)]) != 0) {
			out[2 * kept] = out[2 * e];
			out[2 * kept + 1] = out[2 * e + 1];
			kept++;
		}
	return kept;
}

static void test_hemispheres_match_dipy(void **state)
{
	(void)state;
	for (int i = 0; i < N_DIPY; i++) {
		struct sphere full = {0}, hemi = {0};
		int *map, nh, *expected, n_expected;
		double *xyz;

		assert_int_equal(sphere_builtin(dipy[i].name, &full, NULL), 0);
		xyz = hemisphere_of(&full, &map, &nh);
		assert_int_equal(nh, dipy[i].hemi_nv);
		expected = malloc(2 * (size_t)full.n_edges * sizeof(*expected));
		assert_non_null(expected);
		n_expected = fold_edges(&full, map, expected);
		assert_int_equal(n_expected, dipy[i].hemi_edges);

		assert_int_equal(sphere_from_vertices(xyz, nh, "v", &hemi, NULL), 0);
		assert_false(hemi.antipodal);
		assert_int_equal(hemi.n_edges, dipy[i].hemi_edges);
		assert_memory_equal(hemi.edges, expected, 2 * (size_t)n_expected * sizeof(int));
		assert_edge_ends(&hemi, dipy[i].hemi_first, dipy[i].hemi_last);
		assert_neighbours_match_edges(&hemi);
		free(expected);
		free(map);
		free(xyz);
		sphere_free(&hemi);
		sphere_free(&full);
	}
}

/* One antipodal pair but not all: a plain hull, as DIPY's Sphere(xyz=...). */
static void test_mixed_set_matches_dipy(void **state)
{
	static const double xyz[] = {
		1, 0, 0, -1, 0, 0, 0.2, 0.9, 0.1, 0.1, -0.3, 0.95,
		-0.4, 0.5, -0.6, 0.6, 0.6, 0.5, -0.3, -0.8, 0.2, 0.5, -0.4, -0.7,
	};
	static const int expected[18][2] = {
		{0, 2}, {1, 2}, {0, 3}, {1, 3}, {2, 3}, {1, 4}, {2, 4}, {0, 5}, {2, 5},
		{3, 5}, {0, 6}, {1, 6}, {3, 6}, {0, 7}, {1, 7}, {2, 7}, {4, 7}, {6, 7},
	};
	struct sphere s = {0};

	(void)state;
	assert_int_equal(sphere_from_vertices(xyz, 8, "v", &s, NULL), 0);
	assert_false(s.antipodal);
	assert_int_equal(s.n_edges, 18);
	assert_memory_equal(s.edges, expected, sizeof(expected));
	for (int v = 0; v < 8; v++) {
		const double *in = &xyz[3 * v];
		double len = sqrt(in[0] * in[0] + in[1] * in[1] + in[2] * in[2]);

		for (int k = 0; k < 3; k++)
			assert_true(fabs(s.vertices[3 * v + k] - in[k] / len) < 1e-7);
	}
	sphere_free(&s);
}

/* A deterministic spread of directions (no generator shared with the code
 * under test). */
static void pseudo_random_directions(double *xyz, int n, uint64_t seed)
{
	uint64_t x = seed;

	for (int i = 0; i < 3 * n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		xyz[i] = (double)(x >> 11) / 9007199254740992.0 - 0.5;
	}
}

/* Builds the sphere, checks what holds for every vertex set, and returns the
 * number of edges. */
static int checked_edge_count(const double *xyz, int nv, bool antipodal)
{
	struct sphere s = {0};
	struct errbuf err = {0};
	int n_edges;

	assert_int_equal(sphere_from_vertices(xyz, nv, "v", &s, &err), 0);
	assert_int_equal(s.antipodal, antipodal);
	assert_dipy_edge_order(&s);
	assert_neighbours_match_edges(&s);
	n_edges = s.n_edges;
	sphere_free(&s);
	return n_edges;
}

static void assert_closed_triangulation(const double *xyz, int nv, int expected_edges,
					bool antipodal)
{
	assert_int_equal(checked_edge_count(xyz, nv, antipodal), expected_edges);
}

/* Appends the antipodes of the first n points. */
static void add_antipodes(double *xyz, int n)
{
	for (int i = 0; i < 3 * n; i++)
		xyz[3 * n + i] = -xyz[i];
}

/* Euler: a closed triangulation of n points has 3n-6 edges; a hemisphere's
 * 2n-point hull folds onto 3(n-1). */
static void test_random_sets_are_closed(void **state)
{
	enum { N = 2500 };
	double *xyz = malloc(6 * (size_t)N * sizeof(*xyz));

	(void)state;
	assert_non_null(xyz);
	pseudo_random_directions(xyz, N, 7);
	assert_closed_triangulation(xyz, N, 3 * (N - 1), false);
	add_antipodes(xyz, N);
	assert_closed_triangulation(xyz, 2 * N, 3 * 2 * N - 6, true);
	/* One antipodal pair makes it a plain hull of the N+1 points. */
	assert_closed_triangulation(xyz + 3 * N - 3, N + 1, 3 * (N + 1) - 6, false);
	free(xyz);
}

/* Spiral points and their antipodes at the size limit: must finish (the time
 * is reported by hand, not asserted) and close up. */
static void test_largest_set(void **state)
{
	enum { N = 65536, HALF = N / 2 };
	double *xyz = malloc(3 * (size_t)N * sizeof(*xyz));
	const double golden_turn = M_PI * (3 - sqrt(5));

	(void)state;
	assert_non_null(xyz);
	for (int i = 0; i < HALF; i++) {
		double z = 1 - (2 * i + 1) / (double)HALF, r = sqrt(1 - z * z);

		xyz[3 * i] = r * cos(golden_turn * i);
		xyz[3 * i + 1] = r * sin(golden_turn * i);
		xyz[3 * i + 2] = z;
	}
	add_antipodes(xyz, HALF);
	assert_closed_triangulation(xyz, N, 3 * N - 6, true);
	free(xyz);
}

/* Rings of equal latitude and aligned longitude: every quad is cocircular,
 * the worst case for ties. */
static int latitude_rings(double *xyz, int rings, int per_ring, bool poles)
{
	int n = 0;

	for (int r = 1; r <= rings; r++) {
		double theta = M_PI * r / (rings + 1);

		for (int j = 0; j < per_ring; j++, n++) {
			double phi = 2 * M_PI * j / per_ring;

			xyz[3 * n] = sin(theta) * cos(phi);
			xyz[3 * n + 1] = sin(theta) * sin(phi);
			xyz[3 * n + 2] = cos(theta);
		}
	}
	for (int k = 0; poles && k < 2; k++, n++) {
		xyz[3 * n] = 0;
		xyz[3 * n + 1] = 0;
		xyz[3 * n + 2] = k ? -1 : 1;
	}
	return n;
}

static void test_cocircular_sets(void **state)
{
	static const double cube[] = {
		-1, -1, -1, -1, -1, 1, -1, 1, -1, -1, 1, 1,
		1, -1, -1, 1, -1, 1, 1, 1, -1, 1, 1, 1,
	};
	double xyz[3 * 402];
	struct sphere once = {0}, again = {0};
	int n;

	(void)state;
	assert_closed_triangulation(cube, 8, 18, true);
	n = latitude_rings(xyz, 20, 20, true);
	assert_closed_triangulation(xyz, n, 3 * n - 6, true);
	/* No poles: the top and bottom rings are flat 20-gons. */
	n = latitude_rings(xyz, 9, 20, false);
	assert_closed_triangulation(xyz, n, 3 * n - 6, true);
	/* Upper rings only: a hemisphere whose doubled hull has two flat 20-gons
	 * and cocircular quads. A polygon and its antipodal copy may be
	 * triangulated differently, and folding keeps the diagonals of both
	 * (DIPY 1.6 gives 352 edges here by the same folding of Qhull's faces):
	 * beyond the generic 3(n-1), at most 17 more from the caps and one per
	 * folded pair of quads (4 pairs of ring gaps plus half the equator gap). */
	n = latitude_rings(xyz, 10, 20, false) / 2;
	assert_in_range(checked_edge_count(xyz, n, false), 3 * (n - 1), 3 * (n - 1) + 17 + 90);
	/* Ties are broken the same way every time. */
	n = latitude_rings(xyz, 20, 20, true);
	assert_int_equal(sphere_from_vertices(xyz, n, "v", &once, NULL), 0);
	assert_int_equal(sphere_from_vertices(xyz, n, "v", &again, NULL), 0);
	assert_same_edges(&once, &again);
	sphere_free(&once);
	sphere_free(&again);
}

/* Clusters of 2x3 points on a tangent grid of spacing 1.2e-6, just over the
 * duplicate tolerance and cocircular in squares. */
static void test_near_duplicate_clusters(void **state)
{
	enum { CLUSTERS = 40, PER = 6 };
	double centres[3 * CLUSTERS], xyz[2 * 3 * CLUSTERS * PER];

	(void)state;
	pseudo_random_directions(centres, CLUSTERS, 11);
	for (int c = 0; c < CLUSTERS; c++) {
		const double *n = &centres[3 * c];
		double len = sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
		double u[3] = {-n[1] / len, n[0] / len, 0}, w[3], ulen;

		ulen = sqrt(u[0] * u[0] + u[1] * u[1]);
		u[0] /= ulen;
		u[1] /= ulen;
		w[0] = n[1] / len * u[2] - n[2] / len * u[1];
		w[1] = n[2] / len * u[0] - n[0] / len * u[2];
		w[2] = n[0] / len * u[1] - n[1] / len * u[0];
		for (int i = 0; i < PER; i++)
			for (int k = 0; k < 3; k++)
				xyz[3 * (c * PER + i) + k] = n[k] / len +
					1.2e-6 * ((i % 3) * u[k] + (i / 3) * w[k]);
	}
	/* As a hemisphere the cocircular squares add diagonals (see above). */
	assert_true(checked_edge_count(xyz, CLUSTERS * PER, false) >= 3 * (CLUSTERS * PER - 1));
	add_antipodes(xyz, CLUSTERS * PER);
	assert_closed_triangulation(xyz, 2 * CLUSTERS * PER, 3 * 2 * CLUSTERS * PER - 6, true);
}

static void test_antipodes_within_tolerance(void **state)
{
	double xyz[3 * 12];

	(void)state;
	pseudo_random_directions(xyz, 6, 3);
	for (int i = 0; i < 18; i++)
		xyz[18 + i] = -xyz[i] * (1 + 1e-9);
	xyz[18] += 1e-9;
	assert_closed_triangulation(xyz, 12, 30, true);
}

static void expect_rejected(const double *xyz, int nv, const char *field, const char *needle)
{
	struct sphere s = {0};
	struct errbuf err = {0};

	assert_int_equal(sphere_from_vertices(xyz, nv, "tracking.sphere", &s, &err), -EINVAL);
	assert_string_equal(err.field, field);
	assert_non_null(strstr(err.message, needle));
	assert_null(s.vertices);
	assert_null(s.edges);
}

static void test_rejects_bad_vertices(void **state)
{
	double xyz[3 * 8];

	(void)state;
	pseudo_random_directions(xyz, 8, 5);
	expect_rejected(xyz, 5, "tracking.sphere", "got 5");
	expect_rejected(xyz, 65537, "tracking.sphere", "got 65537");
	expect_rejected(xyz, -1, "tracking.sphere", "got -1");

	xyz[9] = xyz[10] = xyz[11] = 0;
	expect_rejected(xyz, 8, "tracking.sphere[3]", "zero length");
	xyz[10] = NAN;
	expect_rejected(xyz, 8, "tracking.sphere[3]", "not finite");
	xyz[10] = -INFINITY;
	expect_rejected(xyz, 8, "tracking.sphere[3]", "not finite");

	pseudo_random_directions(xyz, 8, 5);
	for (int k = 0; k < 3; k++)
		xyz[15 + k] = 2.5 * xyz[3 + k];   /* same direction as vertex 1 */
	expect_rejected(xyz, 8, "tracking.sphere[5]", "vertex 1");
	pseudo_random_directions(xyz, 8, 5);
	for (int k = 0; k < 3; k++)
		xyz[21 + k] = xyz[k];
	xyz[21] += 1e-8;
	expect_rejected(xyz, 8, "tracking.sphere[7]", "vertex 0");
}

/* Lengths are irrelevant, even at the ends of the double range. */
static void test_accepts_extreme_lengths(void **state)
{
	double xyz[3 * 12];
	struct sphere s = {0};

	(void)state;
	pseudo_random_directions(xyz, 6, 9);
	add_antipodes(xyz, 6);
	for (int k = 0; k < 3; k++) {
		xyz[k] *= 1e308;
		xyz[3 + k] *= 1e-310;
	}
	assert_int_equal(sphere_from_vertices(xyz, 12, "v", &s, NULL), 0);
	assert_true(s.antipodal);
	assert_int_equal(s.n_edges, 30);
	sphere_free(&s);
}

static void test_rejects_flat_sets(void **state)
{
	double circle[3 * 12];

	(void)state;
	/* A whole great circle (antipodal pairs) and a half one (a hemisphere
	 * whose doubled set is the same circle). */
	for (int i = 0; i < 12; i++) {
		circle[3 * i] = cos(2 * M_PI * i / 12);
		circle[3 * i + 1] = sin(2 * M_PI * i / 12);
		circle[3 * i + 2] = 1e-9 * (i % 3);
	}
	expect_rejected(circle, 12, "tracking.sphere", "span 3D");
	expect_rejected(circle, 6, "tracking.sphere", "span 3D");
}

static void test_free_accepts_zeroed_and_freed(void **state)
{
	struct sphere s = {0};

	(void)state;
	sphere_free(&s);
	assert_int_equal(sphere_builtin("repulsion100", &s, NULL), 0);
	sphere_free(&s);
	assert_null(s.vertices);
	assert_int_equal(s.nv, 0);
	sphere_free(&s);
}

/* Each list holds exactly the vertices within the angle (and those within
 * the margin below it), in index order, for the axis and for the direction,
 * those a margin inside marked. */
static void test_cone_lists(void **state)
{
	struct sphere s;
	const double cos_max = cos(30 * M_PI / 180);

	(void)state;
	assert_int_equal(sphere_builtin("repulsion724", &s, NULL), 0);
	for (int axial = 0; axial < 2; axial++) {
		uint32_t *lists;
		size_t n_words, listed = 0, inside = 0;
		assert_int_equal(sphere_cone_lists(&s, cos_max, axial, &lists, &n_words), 0);
		assert_int_equal(lists[0], s.nv + 1);
		assert_int_equal(lists[s.nv], n_words);
		for (int i = 0; i < s.nv; i++) {
			uint32_t at = lists[i];
			for (int j = 0; j < s.nv; j++) {
				const float *a = &s.vertices[3 * i], *b = &s.vertices[3 * j];
				double c = (double)a[0] * b[0] + (double)a[1] * b[1] +
					   (double)a[2] * b[2];
				double near = axial ? fabs(c) : c;
				if (near >= cos_max - SPHERE_CONE_MARGIN) {
					uint32_t surely = near >= cos_max + SPHERE_CONE_MARGIN ?
								  SPHERE_CONE_INSIDE : 0u;
					assert_true(at < lists[i + 1]);
					assert_int_equal(lists[at++], (uint32_t)j | surely);
					inside += surely != 0;
				}
			}
			assert_int_equal(at, lists[i + 1]);
			listed += lists[i + 1] - lists[i];
		}
		/* A 30-degree cap holds 6.7 % of the sphere, the axis twice that. */
		double share = (double)listed / ((double)s.nv * s.nv);
		assert_true(share > (axial ? 0.12 : 0.06));
		assert_true(share < (axial ? 0.15 : 0.075));
		/* Only vertices on the cone's edge are left to test. */
		assert_true(inside > listed * 9 / 10);
		free(lists);
	}
	sphere_free(&s);
}

/* The masks set the bits of the lists: near where listed, inside where
 * marked SPHERE_CONE_INSIDE, and no bit past the last vertex. */
static void test_cone_masks_match_lists(void **state)
{
	struct sphere s;
	const double cos_max = cos(30 * M_PI / 180);

	(void)state;
	assert_int_equal(sphere_builtin("repulsion724", &s, NULL), 0);
	const size_t words = sphere_cone_mask_words(s.nv);
	assert_int_equal(words, 23);
	for (int axial = 0; axial < 2; axial++) {
		uint32_t *lists, *masks;
		size_t n_list_words, n_mask_words;
		assert_int_equal(sphere_cone_lists(&s, cos_max, axial, &lists, &n_list_words), 0);
		assert_int_equal(sphere_cone_masks(&s, cos_max, axial, &masks, &n_mask_words), 0);
		assert_int_equal(n_mask_words, 2 * words * s.nv);
		for (int i = 0; i < s.nv; i++) {
			const uint32_t *near = masks + 2 * words * i, *inside = near + words;
			uint32_t want_near[23] = {0}, want_inside[23] = {0};
			for (uint32_t at = lists[i]; at < lists[i + 1]; at++) {
				uint32_t j = lists[at] & ~SPHERE_CONE_INSIDE;
				want_near[j / 32] |= 1u << (j % 32);
				if (lists[at] & SPHERE_CONE_INSIDE)
					want_inside[j / 32] |= 1u << (j % 32);
			}
			assert_memory_equal(near, want_near, sizeof(want_near));
			assert_memory_equal(inside, want_inside, sizeof(want_inside));
		}
		free(lists);
		free(masks);
	}
	sphere_free(&s);
}

/* DIPY's repulsion spheres list their second half as the first negated
 * (sphere.h's sphere_mirrored); in symmetric362 17 of the pairs differ in
 * their last bits. The same vertices in another order, and a hemisphere,
 * are not mirrored. */
static bool mirrored_builtin(const char *name)
{
	return strcmp(name, "symmetric362") != 0;
}

static void test_builtins_are_mirrored(void **state)
{
	(void)state;
	for (int i = 0; i < N_DIPY; i++) {
		struct sphere full = {0}, paired = {0}, hemi = {0};
		int *map, nh, half;
		double *xyz;

		assert_int_equal(sphere_builtin(dipy[i].name, &full, NULL), 0);
		assert_int_equal(sphere_mirrored(&full), mirrored_builtin(dipy[i].name));
		/* Each vertex followed by its antipode: the same set, not mirrored. */
		half = full.nv / 2;
		xyz = malloc(3 * sizeof(*xyz) * (size_t)full.nv);
		assert_non_null(xyz);
		for (int j = 0; j < half; j++)
			for (int c = 0; c < 3; c++) {
				xyz[6 * j + c] = full.vertices[3 * j + c];
				xyz[6 * j + 3 + c] = full.vertices[3 * (j + half) + c];
			}
		assert_int_equal(sphere_from_vertices(xyz, full.nv, "v", &paired, NULL), 0);
		assert_true(paired.antipodal);
		assert_false(sphere_mirrored(&paired));
		free(xyz);
		xyz = hemisphere_of(&full, &map, &nh);
		assert_int_equal(sphere_from_vertices(xyz, nh, "v", &hemi, NULL), 0);
		assert_false(sphere_mirrored(&hemi));
		free(map);
		free(xyz);
		sphere_free(&hemi);
		sphere_free(&paired);
		sphere_free(&full);
	}
}

/* On a mirrored sphere an axial cone's list holds j + nv/2 exactly where it
 * holds j < nv/2, after all of them, in the same order and with the same
 * inside mark: prob_track.comp (ODF_MIRRORED) reads the first half only. */
static void test_axial_cone_lists_are_mirrored(void **state)
{
	const double cos_max = cos(30 * M_PI / 180);

	(void)state;
	for (int i = 0; i < N_DIPY; i++) {
		struct sphere s;
		uint32_t *lists;
		size_t n_words;
		uint32_t half;

		if (!mirrored_builtin(dipy[i].name))
			continue;
		assert_int_equal(sphere_builtin(dipy[i].name, &s, NULL), 0);
		half = (uint32_t)s.nv / 2;
		assert_int_equal(sphere_cone_lists(&s, cos_max, true, &lists, &n_words), 0);
		for (int v = 0; v < s.nv; v++) {
			uint32_t first = lists[v], n = lists[v + 1] - first;
			assert_int_equal(n % 2, 0);
			for (uint32_t k = 0; k < n / 2; k++) {
				uint32_t a = lists[first + k], b = lists[first + n / 2 + k];
				assert_true((a & ~SPHERE_CONE_INSIDE) < half);
				assert_int_equal(b, a + half);
			}
		}
		free(lists);
		sphere_free(&s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_builtins_match_dipy),
		cmocka_unit_test(test_builtin_names_listed),
		cmocka_unit_test(test_builtin_unknown),
		cmocka_unit_test(test_hull_of_builtins_gives_dipy_edges),
		cmocka_unit_test(test_hemispheres_match_dipy),
		cmocka_unit_test(test_mixed_set_matches_dipy),
		cmocka_unit_test(test_random_sets_are_closed),
		cmocka_unit_test(test_largest_set),
		cmocka_unit_test(test_cocircular_sets),
		cmocka_unit_test(test_near_duplicate_clusters),
		cmocka_unit_test(test_antipodes_within_tolerance),
		cmocka_unit_test(test_rejects_bad_vertices),
		cmocka_unit_test(test_accepts_extreme_lengths),
		cmocka_unit_test(test_rejects_flat_sets),
		cmocka_unit_test(test_free_accepts_zeroed_and_freed),
		cmocka_unit_test(test_cone_lists),
		cmocka_unit_test(test_cone_masks_match_lists),
		cmocka_unit_test(test_builtins_are_mirrored),
		cmocka_unit_test(test_axial_cone_lists_are_mirrored),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
