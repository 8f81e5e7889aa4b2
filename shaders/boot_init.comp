// SPDX-License-Identifier: MIT
// Pass 1 of boot tracking: the initial directions of each seed, i.e. the
// peaks (peaks.glsl) of one bootstrap ODF at the seed (boot.glsl), as DIPY
// 1.6's BootDirectionGetter.initial_direction takes them.
//
// Bindings:
//   0 vertices   float[3 * NV]
//   1 nbr_offset int[NV + 1]                CSR neighbour lists of the sphere
//   2 nbr        int[]
//   3 matrices   float[]                    boot.glsl's layout
//   4 seeds      float[3 * n]               voxel coordinates
//   5 ndirs      uint[n]                    out: number of initial directions
//   6 dirs       float[3 * MAX_PEAKS * n]   out: the directions
//   7 dwi        page table (volume.glsl)   float[x][y][z][T]
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"
#include "philox.glsl"

layout(std430, binding = 0) readonly buffer Vertices { float vertices[]; };
layout(std430, binding = 1) readonly buffer NbrOffset { int nbr_offset[]; };
layout(std430, binding = 2) readonly buffer Nbr { int nbr[]; };
layout(std430, binding = 3) readonly buffer Matrices { float matrices[]; };
layout(std430, binding = 4) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 5) writeonly buffer NDirs { uint ndirs[]; };
layout(std430, binding = 6) writeonly buffer Dirs { float dirs[]; };

shared float s_pmf[ITEMS][NV];
shared float s_cand[ITEMS][NV];   // peak value above the floor, or -1
shared float s_res[ITEMS][HR];    // the residuals being resampled

#include "boot.glsl"
#include "peaks.glsl"

void main()
{
	uint item = item_index();
	if (item >= pc.work.x + pc.work.y)
		return;
	vec3 p = vec3(seeds[3 * item], seeds[3 * item + 1], seeds[3 * item + 2]);
	uvec4 counter = uvec4(0, pc.rng.z + item, 0, PHILOX_STREAM_BOOT);
	vec3 kept[MAX_PEAKS];
	sample_boot_pmf(p, counter);
	uint n = find_peaks(kept);
	if (gl_SubgroupInvocationID == 0) {
		ndirs[item] = n;
		for (uint a = 0; a < n; a++)
			for (uint c = 0; c < 3; c++)
				dirs[(item * MAX_PEAKS + a) * 3 + c] = kept[a][c];
	}
}
