/* SPDX-License-Identifier: MIT */
/*
 * ptt: the nearest-vertex table lists the true nearest vertex of any
 * direction (against a brute-force search, on the built-in spheres, with
 * and without |cos|, on cell edges and corners too); the ODF scale; the
 * frame propagation against closed-form curves: a circular arc (points exact,
 * curvature from the points within 1 %) and a helix traced by turning
 * (k1, k2) at the torsion's rate (curvature and torsion recovered within 1 %).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/philox.h"
#include "engine/ptt.h"
#include "models/sphere.h"

static const char *const sphere_names[] = { "repulsion724", "repulsion100", "symmetric362" };

static int brute_nearest(const struct sphere *s, const double d[3], bool symmetric, double *best)
{
	int arg = -1;

	*best = -2.0;
	for (int v = 0; v < s->nv; v++) {
		const float *x = s->vertices + 3 * v;
		double c = x[0] * d[0] + x[1] * d[1] + x[2] * d[2];

		if (symmetric)
			c = fabs(c);
		if (c > *best) {
			*best = c;
			arg = v;
		}
	}
	return arg;
}

/* The best cos over the cell's list equals the brute-force best. */
static void assert_cell_has_nearest(const struct sphere *s, const struct ptt_lut *lut,
				    bool symmetric, const double d[3])
{
	uint32_t cells = 6u * lut->res * lut->res;
	uint32_t cell = ptt_lut_cell(lut->res, d);
	const uint32_t *list = lut->words + cells + 1;
	double want, got = -2.0;

	brute_nearest(s, d, symmetric, &want);
	assert_true(cell < cells);
	for (uint32_t k = lut->words[cell]; k < lut->words[cell + 1]; k++) {
		const float *x = s->vertices + 3 * list[k];
		double c = x[0] * d[0] + x[1] * d[1] + x[2] * d[2];

		if (k > lut->words[cell])
			assert_true(list[k - 1] < list[k]);
		got = fmax(got, symmetric ? fabs(c) : c);
	}
	assert_true(got >= want - 1e-12);
}

static void random_direction(uint32_t i, double d[3])
{
	const uint32_t key[2] = { 7, 11 };
	uint32_t counter[4] = { i, 0, 0, 99 }, out[4];

	philox4x32_10(counter, key, out);
	double z = 2.0 * philox_uniform_float(out[0]) - 1.0;
	double phi = 2.0 * M_PI * philox_uniform_float(out[1]);
	double r = sqrt(fmax(0.0, 1.0 - z * z));

	d[0] = r * cos(phi);
	d[1] = r * sin(phi);
	d[2] = z;
}

static void test_lut_lists_nearest_vertex(void **state)
{
	(void)state;
	for (size_t n = 0; n < sizeof(sphere_names) / sizeof(sphere_names[0]); n++) {
		struct sphere s;
		struct errbuf err;

		assert_int_equal(sphere_builtin(sphere_names[n], &s, &err), 0);
		for (int symmetric = 0; symmetric < 2; symmetric++) {
			struct ptt_lut lut;
			uint32_t res;

			assert_int_equal(ptt_lut_build(&s, symmetric, &lut), 0);
			res = lut.res;
			assert_int_equal(lut.n_words, 6u * res * res + 1 + lut.words[6u * res * res]);
			for (uint32_t i = 0; i < 20000; i++) {
				double d[3];

				random_direction(i, d);
				assert_cell_has_nearest(&s, &lut, symmetric, d);
			}
			/* Cell corners and edges on every face, where rounding could pick
			 * either neighbouring cell. */
			for (int face = 0; face < 6; face++)
				for (uint32_t i = 0; i <= res; i++)
					for (uint32_t j = 0; j <= 2 * res; j++) {
						double d[3];
						int a = face / 2;

						d[a] = face & 1 ? -1.0 : 1.0;
						d[(a + 1) % 3] = -1.0 + 2.0 * i / res;
						d[(a + 2) % 3] = -1.0 + 1.0 * j / res;
						double norm = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
						for (int k = 0; k < 3; k++)
							d[k] /= norm;
						assert_cell_has_nearest(&s, &lut, symmetric, d);
					}
			ptt_lut_free(&lut);
			assert_null(lut.words);
		}
		sphere_free(&s);
	}
}

/* A handful of vertices per cell: the kernel searches each list per lookup. */
static void test_lut_lists_are_short(void **state)
{
	struct sphere s;
	struct errbuf err;
	struct ptt_lut lut;

	(void)state;
	assert_int_equal(sphere_builtin("repulsion724", &s, &err), 0);
	assert_int_equal(ptt_lut_build(&s, true, &lut), 0);
	uint32_t cells = 6u * lut.res * lut.res;
	assert_true((double)lut.words[cells] / cells < 16.0);
	ptt_lut_free(&lut);
	sphere_free(&s);
}

static void test_odf_scale(void **state)
{
	float odf_data[3 * 2] = { 0.5f, 2.0f, 0.0f, 0.0f, 4.0f, 1.0f };
	float stop_data[3] = { 0.2f, 0.3f, 0.05f };
	struct volume odf = { .dim = { 3, 1, 1, 2 }, .data = odf_data };
	struct volume stop = { .dim = { 3, 1, 1, 1 }, .data = stop_data };
	float scale[3];

	(void)state;
	ptt_odf_scale(&odf, &stop, 0.1, scale);
	assert_float_equal(scale[0], 0.5f, 0.0f);
	assert_float_equal(scale[1], 0.0f, 0.0f);   /* all zero */
	assert_float_equal(scale[2], 0.0f, 0.0f);   /* below the stop threshold */
	ptt_odf_scale(&odf, &stop, 0.05, scale);
	assert_float_equal(scale[2], 0.25f, 0.0f);  /* at the threshold: kept */
}

static double norm3(const double a[3])
{
	return sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
}

static struct ptt_frame tilted_frame(void)
{
	/* An orthonormal frame off the axes, so that no component is special. */
	struct ptt_frame f = { .t = { 2, 1, 2 }, .n = { 1, -2, 0 } };
	double tn = norm3(f.t), nn = norm3(f.n);

	for (int i = 0; i < 3; i++) {
		f.t[i] /= tn;
		f.n[i] /= nn;
	}
	double along = f.t[0] * f.n[0] + f.t[1] * f.n[1] + f.t[2] * f.n[2];
	for (int i = 0; i < 3; i++)
		f.n[i] -= along * f.t[i];
	nn = norm3(f.n);
	for (int i = 0; i < 3; i++)
		f.n[i] /= nn;
	f.b[0] = f.t[1] * f.n[2] - f.t[2] * f.n[1];
	f.b[1] = f.t[2] * f.n[0] - f.t[0] * f.n[2];
	f.b[2] = f.t[0] * f.n[1] - f.t[1] * f.n[0];
	return f;
}

static void assert_orthonormal(const struct ptt_frame *f)
{
	const double *v[3] = { f->t, f->n, f->b };

	for (int a = 0; a < 3; a++)
		for (int b = 0; b < 3; b++) {
			double d = v[a][0] * v[b][0] + v[a][1] * v[b][1] + v[a][2] * v[b][2];
			assert_true(fabs(d - (a == b)) < 1e-12);
		}
}

/* Curvature of the circle through three points (1 / circumradius). */
static double three_point_curvature(const double p[3], const double q[3], const double r[3])
{
	double a[3], b[3], c[3], x[3];

	for (int i = 0; i < 3; i++) {
		a[i] = q[i] - p[i];
		b[i] = r[i] - q[i];
		c[i] = r[i] - p[i];
	}
	x[0] = a[1] * b[2] - a[2] * b[1];
	x[1] = a[2] * b[0] - a[0] * b[2];
	x[2] = a[0] * b[1] - a[1] * b[0];
	return 2.0 * norm3(x) / (norm3(a) * norm3(b) * norm3(c));
}

static void test_arc_matches_circle(void **state)
{
	const double k1 = 0.7, k2 = -0.4, s = 0.05;
	const double k = sqrt(k1 * k1 + k2 * k2);
	struct ptt_frame f = tilted_frame(), f0 = f;
	double p[200][3] = { { 0 } }, m[3];

	(void)state;
	for (int i = 0; i < 3; i++)
		m[i] = (k1 * f0.n[i] + k2 * f0.b[i]) / k;
	for (int step = 1; step < 200; step++) {
		double disp[3], arclength = step * s;

		ptt_frame_move(&f, k1, k2, s, disp);
		assert_orthonormal(&f);
		for (int i = 0; i < 3; i++) {
			p[step][i] = p[step - 1][i] + disp[i];
			double want = sin(k * arclength) / k * f0.t[i] +
				      (1.0 - cos(k * arclength)) / k * m[i];
			assert_true(fabs(p[step][i] - want) < 1e-9);
			/* The tangent turns in the arc's plane. */
			double t_want = cos(k * arclength) * f0.t[i] + sin(k * arclength) * m[i];
			assert_true(fabs(f.t[i] - t_want) < 1e-9);
		}
	}
	for (int step = 1; step + 1 < 200; step += 17) {
		double got = three_point_curvature(p[step - 1], p[step], p[step + 1]);
		assert_true(fabs(got - k) / k < 0.01);
	}
}

/* Below PTT_K_SMALL the step is straight and the frame unchanged. */
static void test_straight_below_k_small(void **state)
{
	struct ptt_frame f = tilted_frame(), f0 = f;
	double disp[3];

	(void)state;
	ptt_frame_move(&f, 0.5 * PTT_K_SMALL, -0.5 * PTT_K_SMALL, 0.5, disp);
	for (int i = 0; i < 3; i++) {
		assert_true(fabs(disp[i] - 0.5 * f0.t[i]) < 1e-15);
		assert_true(f.t[i] == f0.t[i] && f.n[i] == f0.n[i] && f.b[i] == f0.b[i]);
	}
}

/* A helix of curvature kappa and torsion tau: in a parallel transport frame
 * its curvature vector turns at rate tau, (k1, k2) = kappa (cos, sin)(tau s).
 * The points are stepped with (k1, k2) held over each short step (taken at
 * its middle) and kappa and tau recovered by finite differences. */
static void test_helix_curvature_and_torsion(void **state)
{
	const double kappa = 0.8, tau = 0.45, h = 0.002, spacing = 0.05;
	const int per = (int)lround(spacing / h), n = 400;
	struct ptt_frame f = tilted_frame();
	double (*p)[3] = calloc((size_t)n, sizeof(*p));

	(void)state;
	assert_non_null(p);
	for (int i = 1; i < n; i++) {
		for (int i3 = 0; i3 < 3; i3++)
			p[i][i3] = p[i - 1][i3];
		for (int sub = 0; sub < per; sub++) {
			double s = ((i - 1) * per + sub + 0.5) * h, disp[3];

			ptt_frame_move(&f, kappa * cos(tau * s), kappa * sin(tau * s), h, disp);
			for (int i3 = 0; i3 < 3; i3++)
				p[i][i3] += disp[i3];
		}
	}
	for (int i = 2; i + 2 < n; i += 37) {
		double d1[3], d2[3], d3[3], x[3];

		for (int a = 0; a < 3; a++) {
			d1[a] = (p[i + 1][a] - p[i - 1][a]) / (2 * spacing);
			d2[a] = (p[i + 1][a] - 2 * p[i][a] + p[i - 1][a]) / (spacing * spacing);
			d3[a] = (p[i + 2][a] - 2 * p[i + 1][a] + 2 * p[i - 1][a] - p[i - 2][a]) /
				(2 * spacing * spacing * spacing);
		}
		x[0] = d1[1] * d2[2] - d1[2] * d2[1];
		x[1] = d1[2] * d2[0] - d1[0] * d2[2];
		x[2] = d1[0] * d2[1] - d1[1] * d2[0];
		double got_kappa = norm3(x) / pow(norm3(d1), 3);
		double got_tau = (x[0] * d3[0] + x[1] * d3[1] + x[2] * d3[2]) / (norm3(x) * norm3(x));
		assert_true(fabs(got_kappa - kappa) / kappa < 0.01);
		assert_true(fabs(got_tau - tau) / tau < 0.01);
	}
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lut_lists_nearest_vertex),
		cmocka_unit_test(test_lut_lists_are_short),
		cmocka_unit_test(test_odf_scale),
		cmocka_unit_test(test_arc_matches_circle),
		cmocka_unit_test(test_straight_below_k_small),
		cmocka_unit_test(test_helix_curvature_and_torsion),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
