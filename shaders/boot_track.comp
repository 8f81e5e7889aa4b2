// SPDX-License-Identifier: MIT
// Pass 2 of boot tracking (track.glsl). At each step up to max_attempts
// bootstrap ODFs (boot.glsl) are drawn until one has peaks (peaks.glsl); the
// peak closest to the current direction is taken if it lies within
// max_angle, else the streamline stops there (DIPY's BootDirectionGetter,
// not GPUStreamlines' retry on a cone miss: reference §3.2).
//
// Bindings:
//   0 fa         page table (volume.glsl)   stop map
//   1 vertices   float[3 * NV]
//   2 nbr_offset int[NV + 1]
//   3 nbr        int[]
//   4 matrices   float[]          boot.glsl's layout
//   5 seeds      float[3 * s]     the chunk's seeds (voxels), from pass 1
//   6 dirs       float[3 * MAX_PEAKS * s]  their initial directions, from pass 1
//   7 line_id    uint[2 * n]      global seed index, direction index at the seed
//   8 points     float[3 * (2 max_steps + 1) * n]   out
//   9 ranges     uint[4 * n]      out: first point slot, number of points, length
//                                 in mm (float bits), why each half stopped
//                                 (track.glsl's STOP_* codes: backward half in
//                                 bits 0-7, forward half in bits 8-15)
//  10 resume     uint[]           suspended streamlines (track.glsl)
//  11 dwi        page table (volume.glsl)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"
#include "philox.glsl"

PAGED_TABLE(fa, 0);
#define VERTICES_BINDING 1
#include "sphere.glsl"
layout(std430, binding = 2) readonly buffer NbrOffset { int nbr_offset[]; };
layout(std430, binding = 3) readonly buffer Nbr { int nbr[]; };
layout(std430, binding = 4) readonly buffer Matrices { float matrices[]; };
layout(std430, binding = 5) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 6) readonly buffer Dirs { float dirs[]; };
layout(std430, binding = 7) readonly buffer LineId { uint line_id[]; };
layout(std430, binding = 8) writeonly buffer Points { float points[]; };
layout(std430, binding = 9) writeonly buffer Ranges { uint ranges[]; };

#define RESUME_BINDING 10
#include "resume.glsl"
#include "pmf.glsl"
#include "boot.glsl"
#include "peaks.glsl"

// DIPY closest_peak: the peak with the largest |cos| to dir (the lowest rank
// on ties), turned to point forward, if within max_angle. Each lane looks at
// the peaks among its own vertices (peaks.glsl's marks).
bool closest_peak(inout vec3 dir)
{
	uint sg = gl_SubgroupID;
	float best = 0.0;
	uint best_rank = 0xffffffffu;
	uint best_j = 0u;
	for (uint j = gl_SubgroupInvocationID; j < NV; j += SG) {
		float cand = s_cand[sg][j];
		if (!is_peak(cand))
			continue;
		float c = abs(dot(vertex(j), dir));
		uint rank = peak_rank(cand);
		if (c > best || (c == best && c > 0.0 && rank < best_rank)) {
			best = c;
			best_rank = rank;
			best_j = j;
		}
	}
	float top = subgroupMax(best);
	if (top == 0.0 || top < pc.cos_max_angle)
		return false;
	uint first_rank = subgroupMin(best == top ? best_rank : 0xffffffffu);
	vec3 v = vertex(subgroupMin(best_rank == first_rank ? best_j : 0xffffffffu));
	dir = dot(v, dir) > 0.0 ? v : -v;
	return true;
}

bool next_direction(vec3 p, inout vec3 dir, uvec4 counter)
{
	for (uint attempt = 0; attempt < pc.max_attempts; attempt++) {
		counter.w = PHILOX_STREAM_BOOT | (attempt << 8);
		// sample_boot_pmf() weighted toward dir before its threshold
		zero_below(pmf_floor_toward(dir, boot_odf(p, counter)));
		if (find_peaks() > 0)
			return closest_peak(dir);
	}
	return false;
}

// The bootstrap ODF is sampled at the point; the step goes one step_size ahead.
float getter_reach()
{
	return pc.step_size;
}

void prepare_workgroup()
{
}

#include "track.glsl"
