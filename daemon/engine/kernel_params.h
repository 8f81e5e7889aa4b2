/* SPDX-License-Identifier: MIT */
/*
 * kernel_params: what the host and the tracking kernels share: the
 * push-constant block, mirrored from shaders/common.glsl (struct Params) and
 * checked here field by field, and the word counts of the track kernels'
 * resume buffer, which reach the shaders as defines (engine.c). Binding
 * numbers of each kernel are listed in its .comp header and in engine.c's
 * dispatch tables.
 */
#ifndef TRACTD_KERNEL_PARAMS_H
#define TRACTD_KERNEL_PARAMS_H

#include <stddef.h>
#include <stdint.h>

/* The std430 push-constant layout: a vec3/ivec3 is 16-byte aligned, and a
 * scalar may fill its fourth word. */
struct kernel_params {
	int32_t dim[3];                  /* nx, ny, nz */
	int32_t loop_count;              /* 2: the loop of track.glsl's
					  * loop_limit_reached (LOOP_LIMITED devices) */
	float step_size;                 /* voxels */
	float cos_max_angle;
	float pmf_threshold;
	float fa_threshold;
	float relative_peak_threshold;
	float cos_min_separation_angle;
	float min_signal;                /* boot */
	float unused0;
	uint32_t philox_key[2];
	uint32_t first_seed;             /* global index of the chunk's first seed */
	uint32_t resuming;               /* 1 when a track dispatch resumes the
					  * suspended streamlines (track.glsl) */
	uint32_t first_item;
	uint32_t item_count;
	uint32_t max_steps;
	uint32_t max_attempts;           /* boot */
	float metric[6];                 /* A^T A of the affine's 3x3 part (mm^2 per
					  * voxel^2): 00 01 02 11 12 22 */
	float unused1[2];
	float max_curvature;             /* ptt: 1/voxel */
	float probe_step;                /* ptt: voxels between probe points */
	float probe_radius;              /* ptt: voxels */
	float angular_weight;            /* tracking.angular_weight; read only where
					  * the kernels are built with ANGULAR_WEIGHT 1 */
};

#define KERNEL_PARAM_AT(field, offset)                                       \
	_Static_assert(offsetof(struct kernel_params, field) == (offset),    \
		       #field " must be at byte " #offset ", as in shaders/common.glsl")

KERNEL_PARAM_AT(dim, 0);
KERNEL_PARAM_AT(loop_count, 12);
KERNEL_PARAM_AT(step_size, 16);
KERNEL_PARAM_AT(cos_max_angle, 20);
KERNEL_PARAM_AT(pmf_threshold, 24);
KERNEL_PARAM_AT(fa_threshold, 28);
KERNEL_PARAM_AT(relative_peak_threshold, 32);
KERNEL_PARAM_AT(cos_min_separation_angle, 36);
KERNEL_PARAM_AT(min_signal, 40);
KERNEL_PARAM_AT(unused0, 44);
KERNEL_PARAM_AT(philox_key, 48);
KERNEL_PARAM_AT(first_seed, 56);
KERNEL_PARAM_AT(resuming, 60);
KERNEL_PARAM_AT(first_item, 64);
KERNEL_PARAM_AT(item_count, 68);
KERNEL_PARAM_AT(max_steps, 72);
KERNEL_PARAM_AT(max_attempts, 76);
KERNEL_PARAM_AT(metric, 80);
KERNEL_PARAM_AT(unused1, 104);
KERNEL_PARAM_AT(max_curvature, 112);
KERNEL_PARAM_AT(probe_step, 116);
KERNEL_PARAM_AT(probe_radius, 120);
KERNEL_PARAM_AT(angular_weight, 124);

/* 128 bytes: every Vulkan device's push-constant minimum. */
_Static_assert(sizeof(struct kernel_params) == 128, "must match shaders/common.glsl Params");

/* The resume buffer of the track kernels (shaders/resume.glsl): per
 * streamline a status word, its walk (track.glsl's Walk: p, dir, half_index,
 * step, n_back, length_mm, back_reason, visited, pft_trials, max_wm_pve) and its getter's
 * state across steps (GETTER_WORDS: none for prob and boot, which draw afresh at each step; for
 * ptt two arcs, ptt_track.comp's Arc: frame t, n, b, k, first, resample, and
 * whether the streamline started). */
#define RESUME_WALK_WORDS 14u
/* The top bit of the resume buffer's count of suspended streamlines: one
 * was resumed and suspended again at the same step, which the device cuts
 * every time (resume.glsl's RESUME_STALLED). */
#define RESUME_STALLED (1u << 31)
#define PTT_ARC_WORDS 13u
#define PTT_GETTER_WORDS (2u * PTT_ARC_WORDS + 1u)

#endif
