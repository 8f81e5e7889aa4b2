// SPDX-License-Identifier: MIT
// Pass 1 of prob tracking: the initial directions of each seed, i.e. the peaks
// of the PMF at the seed (init.glsl).
//
// Bindings:
//   0 odf        page table (odf.glsl)      ODF or SH coefficients, [x][y][z][channel]
//   1 vertices   float[3 * NV]
//   2 nbr_offset int[NV + 1]                CSR neighbour lists of the sphere
//   3 nbr        int[]
//   4 seeds      float[3 * n]               voxel coordinates
//   5 ndirs      uint[n]                    out: number of initial directions
//   6 dirs       float[3 * MAX_PEAKS * n]   out: the directions
//   7 odf_basis  float[NC * NV]             ODF_SH only (odf.glsl)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"

#define VERTICES_BINDING 1
#include "sphere.glsl"
layout(std430, binding = 2) readonly buffer NbrOffset { int nbr_offset[]; };
layout(std430, binding = 3) readonly buffer Nbr { int nbr[]; };

#define ODF_BINDING 0
#define ODF_BASIS_BINDING 7
#include "odf.glsl"
#include "pmf.glsl"
#include "peaks.glsl"
#include "init.glsl"

void main()
{
	uint item = item_index();
	if (item >= pc.first_item + pc.item_count)
		return;
	Corners c;
	uint n = 0;
	if (corners_at(seed_point(item), pc.dim, c)) {
#if PEAK_LISTS
		n = find_peaks_above(pmf_floor(pmf_from_odf(c)));
#else
		zero_below(pmf_floor(pmf_from_odf(c)));
		n = find_peaks();
#endif
	}
	store_peaks(item, n);
}
