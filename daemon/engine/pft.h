/* SPDX-License-Identifier: MIT */
/*
 * pft: the host side of particle filtering tracking (tracking.pft,
 * shaders/pft.glsl; DIPY's ParticleFilteringTracking): the back and front
 * steps of a retry on the job's grid, their bound, and the words of the
 * per-streamline scratch the track kernel keeps its particles and the
 * current half's points in. Does not log.
 */
#ifndef TRACTD_PFT_H
#define TRACTD_PFT_H

#include <stdint.h>

#include "base/errbuf.h"
#include "job/jobspec.h"

/* Steps of one retry at most: the particle paths are fixed blocks of the
 * scratch, and the step index is a byte of the resampling draws' counter. */
#define PFT_MAX_STEPS 64u

struct pft_plan {
	uint32_t back_steps;    /* ceil(back_mm / step in mm), as DIPY */
	uint32_t front_steps;   /* ceil(front_mm / step in mm) */
	uint32_t line_words;    /* scratch words per streamline (pft.glsl's layout) */
};

/* Plans job's particle filtering for a step of step_mm (DIPY's step_size:
 * the step in voxels times the mean voxel size). A zeroed plan when the job
 * has none. Fails, naming tracking.pft.back_mm, when the retry has no step or
 * more than PFT_MAX_STEPS. */
int pft_plan(const struct jobspec *job, double step_mm, struct pft_plan *ret, struct errbuf *err);

#endif
