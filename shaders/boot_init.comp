// SPDX-License-Identifier: MIT
// Pass 1 of boot tracking: the initial directions of each seed, i.e. the
// peaks (peaks.glsl) of one bootstrap ODF at the seed (boot.glsl), as DIPY
// 1.6's BootDirectionGetter.initial_direction takes them (init.glsl).
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

#define VERTICES_BINDING 0
#include "sphere.glsl"
layout(std430, binding = 1) readonly buffer NbrOffset { int nbr_offset[]; };
layout(std430, binding = 2) readonly buffer Nbr { int nbr[]; };
layout(std430, binding = 3) readonly buffer Matrices { float matrices[]; };

#include "pmf.glsl"
#include "boot.glsl"
#include "peaks.glsl"
#include "init.glsl"

void main()
{
	uint item = item_index();
	if (item >= pc.first_item + pc.item_count)
		return;
	uvec4 counter = uvec4(0, pc.first_seed + item, 0, PHILOX_STREAM_BOOT);
	sample_boot_pmf(seed_point(item), counter);
	store_peaks(item, find_peaks());
}
