// SPDX-License-Identifier: MIT
// Pass 2 of prob tracking (track.glsl): at each step a direction is drawn
// from the PMF within max_angle of the current one (DIPY
// ProbabilisticDirectionGetter).
//
// Bindings:
//   0 odf        page table (odf.glsl)
//   1 fa         page table (volume.glsl)   stop map
//   2 vertices   float[3 * NV]
//   3 seeds      float[3 * s]     the chunk's seeds (voxels), from pass 1
//   4 dirs       float[3 * MAX_PEAKS * s]  their initial directions, from pass 1
//   5 line_id    uint[2 * n]      global seed index, direction index at the seed
//   6 points     float[3 * (2 max_steps + 1) * n]   out
//   7 ranges     uint[4 * n]      out: first point slot, number of points, length
//                                 in mm (float bits), why each half stopped
//                                 (track.glsl's STOP_* codes: backward half in
//                                 bits 0-7, forward half in bits 8-15)
//   8 resume     uint[]           suspended streamlines (track.glsl)
//   9 odf_basis  float[NC * NV]   ODF_SH only (odf.glsl)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"
#include "philox.glsl"

PAGED_TABLE(fa, 1);
#define VERTICES_BINDING 2
#include "sphere.glsl"
layout(std430, binding = 3) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 4) readonly buffer Dirs { float dirs[]; };
layout(std430, binding = 5) readonly buffer LineId { uint line_id[]; };
layout(std430, binding = 6) writeonly buffer Points { float points[]; };
layout(std430, binding = 7) writeonly buffer Ranges { uint ranges[]; };

#define ODF_BINDING 0
#define ODF_BASIS_BINDING 9
#define RESUME_BINDING 8
#include "resume.glsl"
#include "odf.glsl"
#include "pmf.glsl"

// Turns this subgroup's PMF into the running sum of its part within the cone
// around dir (entries below floor_value and outside the cone count as zero),
// SG vertices at a time in index order (SKIP_ZERO_SCANS: a block whose parts
// are all zero keeps running as it is). Returns the total, all lanes alike;
// last_nonzero: the highest vertex with a non-zero part, all lanes alike.
float cone_cdf(vec3 dir, float floor_value, out int last_nonzero)
{
	uint sg = gl_SubgroupID;
	float running = 0.0;
	int lane_last = -1;
	for (uint base = 0; base < NV; base += SG) {
		uint j = base + gl_SubgroupInvocationID;
		float v = 0.0;
		if (j < NV) {
			v = s_pmf[sg][j];
			if (v < floor_value || axis_cos(vertex(j), dir) < pc.cos_max_angle)
				v = 0.0;
		}
		float cdf = running;
#if SKIP_ZERO_SCANS
		// CPU devices (engine.c's skip_zero_scans) run the scan lane by
		// lane; most blocks lie outside the cone or under the floor, and
		// their scan adds exactly zero to running.
		if (subgroupAny(v != 0.0))
#endif
			cdf += subgroupInclusiveAdd(v);
		if (j < NV)
			s_pmf[sg][j] = cdf;
		if (v > 0.0)
			lane_last = int(j);
		running = subgroupBroadcast(cdf, SG - 1);
	}
	last_nonzero = subgroupMax(lane_last);
	return running;
}

// The first vertex whose running sum exceeds x (DIPY's search), or fallback
// when rounding leaves none.
int first_above(float x, int fallback)
{
	uint sg = gl_SubgroupID;
	for (uint base = 0; base < NV; base += SG) {
		uint j = base + gl_SubgroupInvocationID;
		uvec4 hit = subgroupBallot(j < NV && x < s_pmf[sg][min(j, NV - 1)]);
		if (subgroupBallotBitCount(hit) > 0)
			return int(base + subgroupBallotFindLSB(hit));
	}
	return fallback;
}

// Samples a vertex from the PMF restricted to the cone around dir, in vertex
// index order as DIPY (first j with x < cdf[j], x uniform in [0, total)), and
// turns it to point forward. Returns false when the PMF is empty in the cone.
bool next_direction(vec3 p, inout vec3 dir, uvec4 counter)
{
	Corners c;
	if (!corners_at(p, pc.dim, c))
		return false;
	float floor_value = pmf_floor_toward(dir, pmf_from_odf(c));
	int last_nonzero;
	float total = cone_cdf(dir, floor_value, last_nonzero);
	if (total <= 0.0)
		return false;
	counter.w = PHILOX_STREAM_PROB;
	float x = philox_uniform(philox4x32_10(counter, pc.philox_key).x) * total;
	// x < total always holds in exact arithmetic; rounding can break it.
	vec3 v = vertex(first_above(x, last_nonzero));
	dir = dot(v, dir) > 0.0 ? v : -v;
	return true;
}

// The PMF is sampled at the point; the step goes one step_size ahead.
float getter_reach()
{
	return pc.step_size;
}

void prepare_workgroup()
{
}

#include "track.glsl"
