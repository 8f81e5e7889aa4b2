// SPDX-License-Identifier: MIT
// Pass 2 of prob tracking (track.glsl): at each step a direction is drawn
// from the PMF within max_angle of the current one (DIPY
// ProbabilisticDirectionGetter).
//
// Bindings:
//   0 odf        page table (pmf.glsl)
//   1 fa         page table (volume.glsl)   stop map
//   2 vertices   float[3 * NV]
//   3 seeds      float[3 * s]     the chunk's seeds (voxels), from pass 1
//   4 dirs       float[3 * MAX_PEAKS * s]  their initial directions, from pass 1
//   5 line_id    uint[2 * n]      global seed index, direction index at the seed
//   6 points     float[3 * (2 max_steps + 1) * n]   out
//   7 ranges     uint[3 * n]      out: first point slot, number of points, length
//                                 in mm (float bits)
//   8 odf_basis  float[NC * NV]   ODF_SH only (pmf.glsl)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"
#include "philox.glsl"

PAGED_TABLE(fa, 1);
layout(std430, binding = 2) readonly buffer Vertices { float vertices[]; };
layout(std430, binding = 3) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 4) readonly buffer Dirs { float dirs[]; };
layout(std430, binding = 5) readonly buffer LineId { uint line_id[]; };
layout(std430, binding = 6) writeonly buffer Points { float points[]; };
layout(std430, binding = 7) writeonly buffer Ranges { uint ranges[]; };

// Sphere directions for the cone test, loaded once per workgroup.
shared vec3 s_vertex[NV];

#define ODF_BINDING 0
#define ODF_BASIS_BINDING 8
#include "pmf.glsl"

// Samples a vertex from the PMF restricted to the cone around dir, in vertex
// index order as DIPY (first j with x < cdf[j], x uniform in [0, total)), and
// turns it to point forward. Returns false when the PMF is empty in the cone.
// Each lane keeps the values of its own vertices in registers.
bool next_direction(vec3 p, inout vec3 dir, uvec4 counter)
{
	Corners c;
	if (!corners_at(p, pc.dim.xyz, c))
		return false;
	float cdf[VERTS_PER_LANE];
	interpolate_odf(c, cdf);
	float lane_max = 0.0;
	for (uint k = 0; k < VERTS_PER_LANE; k++)
		lane_max = max(lane_max, cdf[k]);
	float floor_value = pmf_floor(lane_max);
	float running = 0.0;
	int last_nonzero = -1;
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		float v = cdf[k];
		if (j >= NV || v < floor_value || axis_cos(s_vertex[j], dir) < pc.track.y)
			v = 0.0;
		cdf[k] = running + subgroupInclusiveAdd(v);
		if (v > 0.0)
			last_nonzero = int(j);
		running = subgroupBroadcast(cdf[k], SG - 1);
	}
	if (running <= 0.0)
		return false;
	counter.w = PHILOX_STREAM_PROB;
	float x = philox_uniform(philox4x32_10(counter, pc.rng.xy).x) * running;
	// x < running always holds in exact arithmetic; rounding can break it.
	int chosen = subgroupMax(last_nonzero);
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uvec4 hit = subgroupBallot(gl_SubgroupInvocationID + k * SG < NV && x < cdf[k]);
		if (subgroupBallotBitCount(hit) > 0) {
			chosen = int(k * SG + subgroupBallotFindLSB(hit));
			break;
		}
	}
	vec3 v = s_vertex[chosen];
	dir = dot(v, dir) > 0.0 ? v : -v;
	return true;
}

void prepare_workgroup()
{
	for (uint j = gl_LocalInvocationIndex; j < NV; j += SG * ITEMS)
		s_vertex[j] = vec3(vertices[3 * j], vertices[3 * j + 1], vertices[3 * j + 2]);
	barrier();
}

#include "track.glsl"
