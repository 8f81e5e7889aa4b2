// SPDX-License-Identifier: MIT
// Pass 2 of prob tracking: one streamline per subgroup, both halves.
// From the seed, each half repeatedly draws a direction from the PMF within
// max_angle of the current one (DIPY ProbabilisticDirectionGetter), steps
// step_size voxels, and stops when the direction getter fails, when the new
// point is outside the image or where FA <= fa_threshold (that point is not
// kept), or after max_steps steps. The backward half (along -first) is stored
// below the seed's slot and the forward half above it, so the streamline is
// contiguous without reversing.
//
// Bindings:
//   0 odf        float[nvox * NV]
//   1 fa         float[nvox]
//   2 vertices   float[3 * NV]
//   3 line_start float[6 * n]     seed xyz, initial direction xyz
//   4 line_id    uint[2 * n]      global seed index, direction index at the seed
//   5 points     float[3 * (2 max_steps + 1) * n]   out
//   6 ranges     uint[3 * n]      out: first point slot, number of points, length
//                                 in mm (float bits)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "philox.glsl"

layout(std430, binding = 0) readonly buffer Odf { float odf[]; };
layout(std430, binding = 1) readonly buffer Fa { float fa[]; };
layout(std430, binding = 2) readonly buffer Vertices { float vertices[]; };
layout(std430, binding = 3) readonly buffer LineStart { float line_start[]; };
layout(std430, binding = 4) readonly buffer LineId { uint line_id[]; };
layout(std430, binding = 5) writeonly buffer Points { float points[]; };
layout(std430, binding = 6) writeonly buffer Ranges { uint ranges[]; };

// Sphere directions for the cone test, loaded once per workgroup.
shared vec3 s_vertex[NV];

#include "pmf.glsl"

// DIPY ThresholdStoppingCriterion: TRACKPOINT only inside and above threshold.
bool still_tracking(vec3 p)
{
	Corners c;
	if (!corners_at(p, pc.dim.xyz, c))
		return false;
	float v = 0.0;
	for (int q = 0; q < 8; q++)
		v += c.weight[q] * fa[c.voxel[q]];
	return v > pc.track.w;
}

// Samples a vertex from the PMF restricted to the cone around dir, in vertex
// index order as DIPY (first j with x < cdf[j], x uniform in [0, total)), and
// turns it to point forward. Returns false when the PMF is empty in the cone.
// Each lane keeps the values of its own vertices in registers.
bool prob_direction(vec3 p, inout vec3 dir, uvec4 counter)
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

// Tracks one half; returns its number of points including the seed and adds
// its length in mm to length_mm.
uint track_half(vec3 p, vec3 dir, uint seed_slot, int sign, uvec4 counter, inout float length_mm)
{
	uint lane = gl_SubgroupInvocationID;
	uint i;
	for (i = 1; i <= pc.work.z; i++) {
		counter.x = i;
		if (!prob_direction(p, dir, counter))
			break;
		p += pc.track.x * dir;
		if (!still_tracking(p))
			break;
		length_mm += step_mm(pc.track.x * dir);
		if (lane < 3)
			points[uint(int(seed_slot) + sign * int(i)) * 3 + lane] = p[lane];
	}
	return i;
}

void main()
{
	for (uint j = gl_LocalInvocationIndex; j < NV; j += SG * ITEMS)
		s_vertex[j] = vec3(vertices[3 * j], vertices[3 * j + 1], vertices[3 * j + 2]);
	barrier();
	uint item = item_index();
	if (item >= pc.work.x + pc.work.y)
		return;
	uint lane = gl_SubgroupInvocationID;
	uint max_steps = pc.work.z;
	vec3 seed = vec3(line_start[6 * item], line_start[6 * item + 1], line_start[6 * item + 2]);
	vec3 first = vec3(line_start[6 * item + 3], line_start[6 * item + 4], line_start[6 * item + 5]);
	uint seed_slot = item * (2 * max_steps + 1) + max_steps;
	uvec4 counter = uvec4(0, line_id[2 * item], 2 * line_id[2 * item + 1], PHILOX_STREAM_PROB);

	if (lane < 3)
		points[seed_slot * 3 + lane] = seed[lane];
	float length_mm = 0.0;
	uint n_back = track_half(seed, -first, seed_slot, -1, counter, length_mm);
	counter.z += 1;
	uint n_fwd = track_half(seed, first, seed_slot, 1, counter, length_mm);
	if (lane == 0) {
		ranges[3 * item] = seed_slot - (n_back - 1);
		ranges[3 * item + 1] = n_back - 1 + n_fwd;
		ranges[3 * item + 2] = floatBitsToUint(length_mm);
	}
}
