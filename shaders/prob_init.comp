// SPDX-License-Identifier: MIT
// Pass 1 of prob tracking: the initial directions of each seed, i.e. the peaks
// of the PMF at the seed (DIPY peak_directions: local maxima over the sphere's
// edges, relative threshold above max(0, min), sorted by value, greedy removal
// of peaks closer than min_separation_angle).
//
// Bindings:
//   0 odf        float[nvox * NV]           ODF, clipped at 0, [x][y][z][vertex]
//   1 vertices   float[3 * NV]
//   2 nbr_offset int[NV + 1]                CSR neighbour lists of the sphere
//   3 nbr        int[]
//   4 seeds      float[3 * n]               voxel coordinates
//   5 ndirs      uint[n]                    out: number of initial directions
//   6 dirs       float[3 * MAX_PEAKS * n]   out: the directions
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"

layout(std430, binding = 0) readonly buffer Odf { float odf[]; };
layout(std430, binding = 1) readonly buffer Vertices { float vertices[]; };
layout(std430, binding = 2) readonly buffer NbrOffset { int nbr_offset[]; };
layout(std430, binding = 3) readonly buffer Nbr { int nbr[]; };
layout(std430, binding = 4) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 5) writeonly buffer NDirs { uint ndirs[]; };
layout(std430, binding = 6) writeonly buffer Dirs { float dirs[]; };

shared float s_pmf[ITEMS][NV];
shared float s_cand[ITEMS][NV];   // peak value above the floor, or -1

#include "pmf.glsl"

vec3 vertex(uint j)
{
	return vec3(vertices[3 * j], vertices[3 * j + 1], vertices[3 * j + 2]);
}

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

// DIPY _compare_neighbors: a vertex is a maximum when no neighbour is larger
// and at least one is smaller.
bool is_local_max(uint j)
{
	uint sg = gl_SubgroupID;
	float v = s_pmf[sg][j];
	bool smaller_seen = false;
	for (int e = nbr_offset[j]; e < nbr_offset[j + 1]; e++) {
		float w = s_pmf[sg][nbr[e]];
		if (w > v)
			return false;
		smaller_seen = smaller_seen || w < v;
	}
	return smaller_seen;
}

// Marks the local maxima in s_cand and returns the largest candidate value.
float mark_candidates()
{
	uint sg = gl_SubgroupID;
	float lane_min = 3.0e38;
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < NV)
			lane_min = min(lane_min, s_pmf[sg][j]);
	}
	float base = max(subgroupMin(lane_min), 0.0);
	float lane_top = -1.0;
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < NV) {
			float cand = is_local_max(j) ? s_pmf[sg][j] - base : -1.0;
			s_cand[sg][j] = cand;
			lane_top = max(lane_top, cand);
		}
	}
	return subgroupMax(lane_top);
}

// Takes candidates in descending order (lowest index first on ties, as DIPY's
// stable sort) and keeps those separated from every kept one.
uint select_peaks(uint item, float keep_from)
{
	uint sg = gl_SubgroupID;
	vec3 kept[MAX_PEAKS];
	uint n = 0;
	while (n < MAX_PEAKS) {
		float best = -1.0;
		uint best_j = 0xffffffffu;
		for (uint k = 0; k < VERTS_PER_LANE; k++) {
			uint j = gl_SubgroupInvocationID + k * SG;
			if (j < NV && s_cand[sg][j] >= keep_from && s_cand[sg][j] > best) {
				best = s_cand[sg][j];
				best_j = j;
			}
		}
		float top = subgroupMax(best);
		if (top < 0.0)
			break;
		uint top_j = subgroupMin(best == top ? best_j : 0xffffffffu);
		if (gl_SubgroupInvocationID == top_j % SG)
			s_cand[sg][top_j] = -1.0;
		vec3 v = vertex(top_j);
		bool separated = true;
		for (uint a = 0; a < n; a++)
			separated = separated && axis_cos(v, kept[a]) <= pc.peak.y;
		if (separated)
			kept[n++] = v;
	}
	if (gl_SubgroupInvocationID == 0)
		for (uint a = 0; a < n; a++)
			for (uint c = 0; c < 3; c++)
				dirs[(item * MAX_PEAKS + a) * 3 + c] = kept[a][c];
	return n;
}

void main()
{
	uint item = item_index();
	if (item >= pc.work.x + pc.work.y)
		return;
	vec3 p = vec3(seeds[3 * item], seeds[3 * item + 1], seeds[3 * item + 2]);
	uint n = 0;
	if (sample_pmf(p)) {
		subgroupMemoryBarrierShared();
		subgroupBarrier();   // neighbours of a vertex belong to other lanes
		float top = mark_candidates();
		if (top >= 0.0)
			n = select_peaks(item, pc.peak.x * top);
	}
	if (gl_SubgroupInvocationID == 0)
		ndirs[item] = n;
}
