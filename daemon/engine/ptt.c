/* SPDX-License-Identifier: MIT */
/* ptt: tables and frame maths of the PTT direction getter (see ptt.h). */
#include "engine/ptt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

uint32_t ptt_lut_res(int nv)
{
	/* A face edge spans pi/2 at its centre and vertices lie about
	 * sqrt(4 pi / nv) apart: half that spacing per cell keeps the lists short
	 * (the search radius is the nearest vertex's distance plus a cell). */
	double per_spacing = ceil(sqrt((double)nv * M_PI / 16.0));

	return per_spacing < 2.0 ? 4u : 2u * (uint32_t)per_spacing;
}

uint32_t ptt_lut_cell(uint32_t res, const double d[3])
{
	int a = 0;

	for (int k = 1; k < 3; k++)
		if (fabs(d[k]) > fabs(d[a]))
			a = k;
	double m = fabs(d[a]);
	uint32_t face = 2u * (uint32_t)a + (d[a] < 0.0);
	double u = d[(a + 1) % 3] / m, v = d[(a + 2) % 3] / m;
	uint32_t i = (uint32_t)fmax(0.0, floor((u + 1.0) * res / 2.0));
	uint32_t j = (uint32_t)fmax(0.0, floor((v + 1.0) * res / 2.0));

	i = i < res ? i : res - 1;
	j = j < res ? j : res - 1;
	return (face * res + i) * res + j;
}

static void face_point(uint32_t face, double u, double v, double out[3])
{
	int a = (int)(face / 2);
	double norm;

	out[a] = face & 1 ? -1.0 : 1.0;
	out[(a + 1) % 3] = u;
	out[(a + 2) % 3] = v;
	norm = sqrt(out[0] * out[0] + out[1] * out[1] + out[2] * out[2]);
	for (int k = 0; k < 3; k++)
		out[k] /= norm;
}

static double vertex_cos(const struct sphere *s, int v, const double d[3], bool symmetric)
{
	const float *x = s->vertices + 3 * v;
	double c = x[0] * d[0] + x[1] * d[1] + x[2] * d[2];

	return symmetric ? fabs(c) : c;
}

/* Lists (or, with out == NULL, counts) the vertices that can be nearest to a
 * direction of the cell. A direction d of the cell is within r of its centre
 * c; its nearest vertex is no farther from d than c's nearest vertex (a0 + r
 * away), so it lies within a0 + 2r of c. The margin covers float rounding in
 * the kernel. */
static uint32_t cell_vertices(const struct sphere *s, bool symmetric, uint32_t res,
			      uint32_t cell, uint32_t *out)
{
	const double margin = 1e-3;
	uint32_t face = cell / (res * res), i = cell / res % res, j = cell % res;
	double u0 = -1.0 + 2.0 * i / res, u1 = -1.0 + 2.0 * (i + 1) / res;
	double v0 = -1.0 + 2.0 * j / res, v1 = -1.0 + 2.0 * (j + 1) / res;
	double c[3], corner[3], r = 0.0, best = -2.0, limit;
	uint32_t n = 0;

	face_point(face, (u0 + u1) / 2.0, (v0 + v1) / 2.0, c);
	for (int k = 0; k < 4; k++) {
		face_point(face, k & 1 ? u1 : u0, k & 2 ? v1 : v0, corner);
		r = fmax(r, acos(fmin(1.0, c[0] * corner[0] + c[1] * corner[1] + c[2] * corner[2])));
	}
	for (int v = 0; v < s->nv; v++)
		best = fmax(best, vertex_cos(s, v, c, symmetric));
	limit = cos(fmin(M_PI, acos(fmin(1.0, best)) + 2.0 * r + margin));
	for (int v = 0; v < s->nv; v++)
		if (vertex_cos(s, v, c, symmetric) >= limit) {
			if (out)
				out[n] = (uint32_t)v;
			n++;
		}
	return n;
}

int ptt_lut_build(const struct sphere *s, bool symmetric, struct ptt_lut *ret)
{
	uint32_t res = ptt_lut_res(s->nv);
	uint32_t cells = 6u * res * res;
	uint32_t *offsets = malloc(sizeof(uint32_t) * (cells + 1));
	uint32_t *words;

	if (!offsets)
		return -ENOMEM;
	offsets[0] = 0;
	for (uint32_t c = 0; c < cells; c++)
		offsets[c + 1] = offsets[c] + cell_vertices(s, symmetric, res, c, NULL);
	words = realloc(offsets, sizeof(uint32_t) * ((size_t)cells + 1 + offsets[cells]));
	if (!words) {
		free(offsets);
		return -ENOMEM;
	}
	for (uint32_t c = 0; c < cells; c++)
		cell_vertices(s, symmetric, res, c, words + cells + 1 + words[c]);
	ret->words = words;
	ret->n_words = (size_t)cells + 1 + words[cells];
	ret->res = res;
	return 0;
}

void ptt_lut_free(struct ptt_lut *lut)
{
	free(lut->words);
	lut->words = NULL;
	lut->n_words = 0;
}

void ptt_odf_scale(const struct volume *odf, const struct volume *stop, double threshold,
		   float *scale)
{
	size_t nvox = (size_t)(odf->dim[0] * odf->dim[1] * odf->dim[2]);
	size_t nv = (size_t)odf->dim[3];

	for (size_t v = 0; v < nvox; v++) {
		const float *x = odf->data + v * nv;
		float m = 0.0f;

		for (size_t j = 0; j < nv; j++)
			m = fmaxf(m, x[j]);
		scale[v] = stop->data[v] >= threshold && m > 0.0f ? 1.0f / m : 0.0f;
	}
}

static double dot3(const double a[3], const double b[3])
{
	return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

static void cross3(const double a[3], const double b[3], double out[3])
{
	out[0] = a[1] * b[2] - a[2] * b[1];
	out[1] = a[2] * b[0] - a[0] * b[2];
	out[2] = a[0] * b[1] - a[1] * b[0];
}

void ptt_frame_move(struct ptt_frame *f, double k1, double k2, double s, double disp[3])
{
	double k = sqrt(k1 * k1 + k2 * k2);
	double t[3], n[3], norm;

	if (k < PTT_K_SMALL) {
		for (int i = 0; i < 3; i++)
			disp[i] = s * f->t[i];
		return;
	}
	double sn = sin(k * s), cs = cos(k * s);
	double half = sin(k * s / 2.0);
	/* (1 - cos ks) / k^2 without the cancellation of 1 - cos at small ks. */
	double bend = 2.0 * half * half / (k * k);
	/* Unit curvature vector m = (k1 n + k2 b) / k turns to -sin t + cos m
	 * while the direction across the arc's plane stays: n and b move by
	 * their share of m's change. */
	for (int i = 0; i < 3; i++) {
		double m = (k1 * f->n[i] + k2 * f->b[i]) / k;
		double dm = -sn * f->t[i] + (cs - 1.0) * m;
		disp[i] = sn / k * f->t[i] + bend * k * m;
		t[i] = cs * f->t[i] + sn * m;
		n[i] = f->n[i] + k1 / k * dm;
	}
	norm = sqrt(dot3(t, t));
	for (int i = 0; i < 3; i++)
		t[i] /= norm;
	double along = dot3(n, t);
	for (int i = 0; i < 3; i++)
		n[i] -= along * t[i];
	norm = sqrt(dot3(n, n));
	for (int i = 0; i < 3; i++) {
		f->t[i] = t[i];
		f->n[i] = n[i] / norm;
	}
	cross3(f->t, f->n, f->b);
}
