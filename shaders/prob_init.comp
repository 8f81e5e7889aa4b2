// SPDX-License-Identifier: MIT
// Pass 1 of prob tracking: the initial directions of each seed, i.e. the peaks
// of the PMF at the seed (peaks.glsl).
//
// Bindings:
//   0 odf        page table (pmf.glsl)      ODF or SH coefficients, [x][y][z][channel]
//   1 vertices   float[3 * NV]
//   2 nbr_offset int[NV + 1]                CSR neighbour lists of the sphere
//   3 nbr        int[]
//   4 seeds      float[3 * n]               voxel coordinates
//   5 ndirs      uint[n]                    out: number of initial directions
//   6 dirs       float[3 * MAX_PEAKS * n]   out: the directions
//   7 odf_basis  float[NC * NV]             ODF_SH only (pmf.glsl)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"

layout(std430, binding = 1) readonly buffer Vertices { float vertices[]; };
layout(std430, binding = 2) readonly buffer NbrOffset { int nbr_offset[]; };
layout(std430, binding = 3) readonly buffer Nbr { int nbr[]; };
layout(std430, binding = 4) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 5) writeonly buffer NDirs { uint ndirs[]; };
layout(std430, binding = 6) writeonly buffer Dirs { float dirs[]; };

shared float s_pmf[ITEMS][NV];
shared float s_cand[ITEMS][NV];   // peak value above the floor, or -1

#define ODF_BINDING 0
#define ODF_BASIS_BINDING 7
#include "pmf.glsl"
#include "peaks.glsl"

// Fills s_pmf[this subgroup][0..NV) with the thresholded PMF at p. Returns
// false outside the volume.
bool sample_pmf(vec3 p)
{
	Corners c;
	if (!corners_at(p, pc.dim.xyz, c))
		return false;
	uint sg = gl_SubgroupID;
	float values[VERTS_PER_LANE];
	interpolate_odf(c, values);
	float lane_max = 0.0;
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < NV)
			s_pmf[sg][j] = values[k];
		lane_max = max(lane_max, values[k]);
	}
	float floor_value = pmf_floor(lane_max);
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < NV && s_pmf[sg][j] < floor_value)
			s_pmf[sg][j] = 0.0;
	}
	return true;
}

void main()
{
	uint item = item_index();
	if (item >= pc.work.x + pc.work.y)
		return;
	vec3 p = vec3(seeds[3 * item], seeds[3 * item + 1], seeds[3 * item + 2]);
	uint n = 0;
	vec3 kept[MAX_PEAKS];
	if (sample_pmf(p))
		n = find_peaks(kept);
	if (gl_SubgroupInvocationID == 0) {
		ndirs[item] = n;
		for (uint a = 0; a < n; a++)
			for (uint c = 0; c < 3; c++)
				dirs[(item * MAX_PEAKS + a) * 3 + c] = kept[a][c];
	}
}
