/* SPDX-License-Identifier: MIT */
/*
 * ptt: the host side of the parallel transport tractography getter
 * (shaders/ptt.glsl, ptt_track.comp; Aydogan & Shi 2021, DIPY's
 * PTTDirectionGetter). Owns the tables the kernel reads, built here at job
 * start from the sphere and the volumes rather than pasted in:
 *   - the nearest-vertex lookup table of a sphere (a cube map whose cells
 *     list every vertex that can be nearest to a direction in them),
 *   - the per-voxel ODF scale (1 / the voxel's ODF maximum, 0 where the stop
 *     map is below the threshold, as GPUStreamlines prepares its PTT ODF),
 * and the C twin of the kernel's frame propagation, which the unit tests hold
 * against closed-form arcs and helices. Does not log.
 */
#ifndef TRACTD_PTT_H
#define TRACTD_PTT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/sphere.h"
#include "formats/volume.h"

/*
 * Lookup table layout (uint32 words), read by shaders/ptt.glsl:
 *   words[0 .. cells]        CSR offsets, cells = 6 res^2, offsets counted
 *                            from words[cells + 1]
 *   words[cells + 1 ..]      vertex indices, ascending within a cell
 * Cell of a direction d: axis a = argmax |d_i| (any on ties), face = 2a + (d_a < 0),
 * u = d_{(a+1)%3} / |d_a|, v = d_{(a+2)%3} / |d_a|, i = min(floor((u + 1) res / 2), res - 1),
 * j likewise from v, cell = (face res + i) res + j. Every cell lists each vertex
 * nearest (largest cos, or |cos| when symmetric) to some direction of the
 * closed cell, so a search over the list finds the exact nearest vertex.
 */
struct ptt_lut {
	uint32_t *words;
	size_t n_words;
	uint32_t res;           /* cells per cube-face edge */
};

/* The cube-face resolution for a sphere of nv vertices: cells a little smaller
 * than the vertex spacing, so that a cell lists a handful of vertices. */
uint32_t ptt_lut_res(int nv);

/* Builds the table of s at resolution ptt_lut_res(s->nv). Returns 0 or -ENOMEM. */
int ptt_lut_build(const struct sphere *s, bool symmetric, struct ptt_lut *ret);

/* The cell of direction d (need not be unit length, not zero). */
uint32_t ptt_lut_cell(uint32_t res, const double d[3]);

void ptt_lut_free(struct ptt_lut *lut);

/* scale[v] = 1 / max over vertices of odf at voxel v where stop[v] >= threshold
 * and that maximum is > 0, else 0. odf is [x][y][z][vertex], clipped at 0. */
void ptt_odf_scale(const struct volume *odf, const struct volume *stop, double threshold,
		   float *scale);

/* A parallel transport frame: tangent, normal, binormal (right-handed). */
struct ptt_frame {
	double t[3], n[3], b[3];
};

/* Below this curvature a step is straight. */
#define PTT_K_SMALL 1e-4

/* Moves frame f by arclength s along the arc of curvatures (k1, k2) in its
 * normal and binormal directions, i.e. the circle of curvature
 * sqrt(k1^2 + k2^2) that leaves along t (constant k1, k2 in a parallel
 * transport frame); writes the displacement to disp. The exact arc, not a
 * Taylor expansion, then re-orthonormalised. shaders/ptt.glsl's ptt_move is
 * the same computation in float. */
void ptt_frame_move(struct ptt_frame *f, double k1, double k2, double s, double disp[3]);

#endif
