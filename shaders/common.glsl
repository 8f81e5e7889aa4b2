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
// is antipodally symmetric), ANGULAR_WEIGHT (1: tracking.angular_weight > 0,
// angular_factor below; 0 leaves today's kernels).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = SG * ITEMS) in;

// Mirrored by daemon/engine/kernel_params.h, which checks every offset.
layout(push_constant, std430) uniform Params {
	ivec3 dim;                      // nx, ny, nz
	int loop_count;                 // of loop_limit_reached (track.glsl)
	float step_size;                // voxels
	float cos_max_angle;
	float pmf_threshold;
	float fa_threshold;
	float relative_peak_threshold;
	float cos_min_separation_angle;
	float min_signal;               // boot
	float unused0;
	uvec2 philox_key;
	uint first_seed;                // global index of the chunk's first seed
	uint resuming;                  // 1: resume the suspended streamlines (track.glsl)
	uint first_item;
	uint item_count;
	uint max_steps;
	uint max_attempts;              // boot
	float metric[6];                // A^T A of the affine: 00 01 02 11 12 22
	float unused1[2];
	float max_curvature;            // ptt: 1/voxel
	float probe_step;               // ptt: voxels between probe points
	float probe_radius;             // ptt: voxels
	float angular_weight;           // ANGULAR_WEIGHT 1 only (pmf.glsl, ptt.glsl)
} pc;

// Length in mm of a step d given in voxels (exact for any affine).
float step_mm(vec3 d)
{
	vec3 g = vec3(pc.metric[0] * d.x + pc.metric[1] * d.y + pc.metric[2] * d.z,
		      pc.metric[1] * d.x + pc.metric[3] * d.y + pc.metric[4] * d.z,
		      pc.metric[2] * d.x + pc.metric[4] * d.y + pc.metric[5] * d.z);
	return sqrt(dot(d, g));
}

// Per-lane storage does not grow with the sphere or the number of volumes:
// functions on the sphere live in shared memory, one row per subgroup
// (pmf.glsl), and lanes walk them SG entries at a time; the only private
// arrays are fixed blocks of 8 (a voxel's corners). lavapipe, which runs
// each subgroup as one CPU thread, gives a private array indexed at run time
// memory of its own and ends every loop of an invocation past 65535
// iterations in all: track.glsl resumes the streamlines it cuts that way.

// Index of the item (seed or streamline) of this subgroup; >= item count
// for the idle subgroups of the last workgroup.
uint item_index()
{
	return pc.first_item + gl_WorkGroupID.x * ITEMS + gl_SubgroupID;
}

float axis_cos(vec3 a, vec3 b)
{
#if SYMMETRIC
	return abs(dot(a, b));
#else
	return dot(a, b);
#endif
}

#if ANGULAR_WEIGHT
// tracking.angular_weight w (GPUStreamlines' boot.metal): the factor
// (1 - w) + w |cos(dir, v)| by which a sphere value at direction v is
// multiplied, seen from the current direction dir, before the PMF
// thresholds: 1 straight ahead, 1 - w across.
float angular_factor(vec3 dir, vec3 v)
{
	float w = pc.angular_weight;
	return (1.0 - w) + w * abs(dot(dir, v));
}
#endif
