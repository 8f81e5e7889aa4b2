// SPDX-License-Identifier: MIT
// Shared declarations of the tracking kernels.
//
// Execution model: one subgroup of SG lanes works on one item (a seed in
// prob_init, a streamline in prob_track); a workgroup holds ITEMS subgroups
// that never synchronise with each other, so no workgroup barrier is used.
// Lane l handles sphere vertices j = l, l + SG, l + 2 SG, ... so that the
// lanes read consecutive floats of a voxel's ODF together.
//
// Build-time defines (set by engine.c): SG (subgroup size the pipeline is
// created with), ITEMS (subgroups per workgroup), NV (sphere vertices),
// MAX_PEAKS (bound on separated peaks), SYMMETRIC (1: compare |cos|, the ODF
// is antipodally symmetric).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require

layout(local_size_x = SG * ITEMS) in;

// Mirrored by daemon/kernel_params.h.
layout(push_constant, std430) uniform Params {
	ivec4 dim;    // nx, ny, nz, unused
	vec4 track;   // step_size, cos(max_angle), pmf_threshold, fa_threshold
	vec4 peak;    // relative_peak_threshold, cos(min_separation_angle), min_signal (boot), 0
	uvec4 rng;    // Philox key (x, y), global index of the chunk's first seed, unused
	uvec4 work;   // first item, item count, max_steps, max_attempts (boot)
	vec4 metric0; // A^T A of the affine: 00 01 02 11
	vec4 metric1; // 12 22, unused
	vec4 ptt;     // ptt: max_curvature, probe step length, probe_radius, unused
} pc;

// Length in mm of a step d given in voxels (exact for any affine).
float step_mm(vec3 d)
{
	vec3 g = vec3(pc.metric0.x * d.x + pc.metric0.y * d.y + pc.metric0.z * d.z,
		      pc.metric0.y * d.x + pc.metric0.w * d.y + pc.metric1.x * d.z,
		      pc.metric0.z * d.x + pc.metric1.x * d.y + pc.metric1.y * d.z);
	return sqrt(dot(d, g));
}

// Arrays in registers (values[VERTS_PER_LANE] and the like) are indexed by
// loop counters of loops that unroll: lavapipe gives a private array indexed
// at run time stack space on every use, so a kernel that calls such code at
// each step runs out of it after a few dozen steps and computes garbage.
const uint VERTS_PER_LANE = (NV + SG - 1) / SG;

// Index of the item (seed or streamline) of this subgroup; >= item count
// for the idle subgroups of the last workgroup.
uint item_index()
{
	return pc.work.x + gl_WorkGroupID.x * ITEMS + gl_SubgroupID;
}

float axis_cos(vec3 a, vec3 b)
{
#if SYMMETRIC
	return abs(dot(a, b));
#else
	return dot(a, b);
#endif
}

// The value below which PMF entries are ignored (pmf_threshold of the
// maximum, DIPY's absolute_pmf_threshold), given this lane's maximum.
float pmf_floor(float lane_max)
{
	return pc.track.z * subgroupMax(lane_max);
}
