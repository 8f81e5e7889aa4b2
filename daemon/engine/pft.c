/* SPDX-License-Identifier: MIT */
/* pft: see pft.h. */
#include "engine/pft.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* pft.glsl's scratch of a streamline: two sets (the particles and their copy
 * for resampling) of particles, each PFT_PATH_POINTS (point, direction) pairs
 * and a status and a step count; the weights and their running sums; then
 * the current half's (point, direction, length so far) at each of its
 * max_steps + 1 points. */
static uint32_t line_words(uint32_t particles, uint32_t steps, uint32_t max_steps)
{
	uint32_t particle = 6u * (steps + 1u) + 2u;

	return 2u * particles * particle + 2u * particles + 7u * (max_steps + 1u);
}

int pft_plan(const struct jobspec *job, double step_mm, struct pft_plan *ret, struct errbuf *err)
{
	double back = ceil(job->pft_back_mm / step_mm), front = ceil(job->pft_front_mm / step_mm);

	memset(ret, 0, sizeof(*ret));
	if (!job->pft)
		return 0;
	if (back + front < 1 || back + front > PFT_MAX_STEPS)
		return errbuf_set(err, -EINVAL, "tracking.pft.back_mm",
				  "back_mm + front_mm must make 1 to %u steps of %g mm, got %g "
				  "+ %g steps", PFT_MAX_STEPS, step_mm, back, front);
	ret->back_steps = (uint32_t)back;
	ret->front_steps = (uint32_t)front;
	ret->line_words = line_words((uint32_t)job->pft_particles, ret->back_steps +
				     ret->front_steps, (uint32_t)job->max_steps);
	return 0;
}
