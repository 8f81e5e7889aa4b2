/* SPDX-License-Identifier: MIT */
/*
 * kernel_params: the push-constant block shared by the tracking kernels,
 * mirrored from shaders/common.glsl (struct Params). Binding numbers of each
 * kernel are listed in its .comp header and in engine.c's dispatch tables.
 */
#ifndef TRACTD_KERNEL_PARAMS_H
#define TRACTD_KERNEL_PARAMS_H

#include <stdint.h>

struct kernel_params {
	int32_t dim[4];         /* nx, ny, nz, and 2: the loop count of track.glsl's
				 * loop_limit_reached (LOOP_LIMITED devices) */
	float track[4];         /* step_size, cos(max_angle), pmf_threshold, fa_threshold */
	float peak[4];          /* relative_peak_threshold, cos(min_separation_angle),
				 * min_signal (boot), 0 */
	uint32_t rng[4];        /* Philox key (2 words), global index of the chunk's
				 * first seed, 1 when a track dispatch resumes the
				 * suspended streamlines (track.glsl) */
	uint32_t work[4];       /* first item, item count, max_steps, max_attempts (boot) */
	float metric[8];        /* A^T A of the affine's 3x3 part (mm^2 per voxel^2):
				 * 00 01 02 11 12 22, 0, 0 */
	float ptt[4];           /* ptt: max_curvature (1/voxel), probe step length and
				 * probe_radius (voxels), 0 */
};

/* 128 bytes: every Vulkan device's push-constant minimum. */
_Static_assert(sizeof(struct kernel_params) == 128, "must match shaders/common.glsl Params");

#endif
