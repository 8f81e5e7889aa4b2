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
//   9 ranges     uint[3 * n]      out: first point slot, number of points, length
//                                 in mm (float bits)
//  10 dwi        page table (volume.glsl)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"
#include "philox.glsl"

PAGED_TABLE(fa, 0);
layout(std430, binding = 1) readonly buffer Vertices { float vertices[]; };
layout(std430, binding = 2) readonly buffer NbrOffset { int nbr_offset[]; };
layout(std430, binding = 3) readonly buffer Nbr { int nbr[]; };
layout(std430, binding = 4) readonly buffer Matrices { float matrices[]; };
layout(std430, binding = 5) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 6) readonly buffer Dirs { float dirs[]; };
layout(std430, binding = 7) readonly buffer LineId { uint line_id[]; };
layout(std430, binding = 8) writeonly buffer Points { float points[]; };
layout(std430, binding = 9) writeonly buffer Ranges { uint ranges[]; };

shared float s_pmf[ITEMS][NV];
shared float s_cand[ITEMS][NV];
shared float s_res[ITEMS][HR];

#include "boot.glsl"
#include "peaks.glsl"

// DIPY closest_peak: the peak with the largest |cos| to dir (the first on
// ties), turned to point forward, if within max_angle.
bool closest_peak(vec3 kept[MAX_PEAKS], uint n, inout vec3 dir)
{
	float best = 0.0;
	int best_i = -1;
	for (uint a = 0; a < n; a++) {
		float c = dot(kept[a], dir);
		if (abs(c) > abs(best)) {
			best = c;
			best_i = int(a);
		}
	}
	if (best_i < 0 || abs(best) < pc.track.y)
		return false;
	dir = best > 0.0 ? kept[best_i] : -kept[best_i];
	return true;
}

bool next_direction(vec3 p, inout vec3 dir, uvec4 counter)
{
	for (uint attempt = 0; attempt < pc.work.w; attempt++) {
		vec3 kept[MAX_PEAKS];
		counter.w = PHILOX_STREAM_BOOT | (attempt << 8);
		sample_boot_pmf(p, counter);
		uint n = find_peaks(kept);
		if (n > 0)
			return closest_peak(kept, n, dir);
	}
	return false;
}

void prepare_workgroup()
{
}

#include "track.glsl"
