// SPDX-License-Identifier: MIT
// Particle filtering tracking for track.glsl (tracking.pft; DIPY's
// ParticleFilteringTracking, Girard et al. 2014), with stopping act or cmc:
// when a half would end invalidly (in the exclude map, or where the getter
// finds no direction) it backs up PFT_BACK_STEPS points and tracks
// PFT_PARTICLES particles for the back and front steps, each weighted by
// 1 - exclude at every point it reaches, resampled when the weights grow
// uneven; the path of one particle drawn by weight replaces the end of the
// half, which goes on or stops as that particle did. At most PFT_MAX_TRIALS
// retries per half.
//
// PFT_MIN_WM_PVE_BITS (tracking.pft.min_wm_pve_before_stopping, defined only
// when above 0; the float's bits): DIPY's rule that a half may not end validly
// before it has reached that much white matter (pft_early_end).
//
// Every draw is keyed as the walk's (seed, 2 * direction + half): a
// particle's step draws with c0 = PFT_DRAW | trial << 24 | particle << 16 |
// step, which no walk step reaches, so the getter and cmc draw as for any
// step; resampling and the final choice draw from PHILOX_STREAM_PFT. Output
// does not depend on chunking or on where a LOOP_LIMITED device cut a walk:
// a retry cut there runs again whole (track.glsl).
//
// The whole subgroup runs each particle's step (the getter needs it); every
// lane keeps the same bookkeeping and writes the same words, so a lane reads
// its own writes back without a barrier. Particles live in the scratch
// buffer, PFT_LINE_WORDS words per streamline (daemon/engine/pft.c):
//   two sets (the particles, their copy while resampling) of PFT_PARTICLES
//     particles: PFT_STEPS + 1 (point, direction) pairs, a status, a step count;
//   the weights, then their running sums (PFT_PARTICLES each);
//   the current half's point, direction and length so far (mm) at each of
//     its max_steps + 1 points (the walk keeps them: pft_keep).

const uint PFT_STEPS = PFT_BACK_STEPS + PFT_FRONT_STEPS;
const uint PFT_PARTICLE_WORDS = 6u * (PFT_STEPS + 1u) + 2u;
const uint PFT_SET_WORDS = PFT_PARTICLES * PFT_PARTICLE_WORDS;
const uint PFT_WEIGHTS = 2u * PFT_SET_WORDS;
const uint PFT_SUMS = PFT_WEIGHTS + PFT_PARTICLES;
const uint PFT_HALF = PFT_SUMS + PFT_PARTICLES;
const uint PFT_DRAW = 0x80000000u;

layout(std430, binding = PFT_BINDING) buffer PftScratch { uint pft[]; };

uint pft_line(uint item)
{
	return item * PFT_LINE_WORDS;
}

void pft_store(uint at, vec3 v)
{
	pft[at] = floatBitsToUint(v.x);
	pft[at + 1u] = floatBitsToUint(v.y);
	pft[at + 2u] = floatBitsToUint(v.z);
}

vec3 pft_load(uint at)
{
	return uintBitsToFloat(uvec3(pft[at], pft[at + 1u], pft[at + 2u]));
}

float pft_float(uint at)
{
	return uintBitsToFloat(pft[at]);
}

// Where the half's point i is kept.
uint half_at(uint item, uint i)
{
	return pft_line(item) + PFT_HALF + 7u * i;
}

// Keeps the half's point i, the direction that reached it and the
// streamline's length there.
void pft_keep(uint item, uint i, vec3 p, vec3 dir, float length_mm)
{
	uint at = half_at(item, i);
	pft_store(at, p);
	pft_store(at + 3u, dir);
	pft[at + 6u] = floatBitsToUint(length_mm);
}

// The walk stands at the half's point i (kept): i + 1 points, the next
// step is i + 1.
void pft_stand_at(uint item, uint i, inout Walk w)
{
	uint at = half_at(item, i);
	w.p = pft_load(at);
	w.dir = pft_load(at + 3u);
	w.length_mm = pft_float(at + 6u);
	w.step = i + 1u;
}

#ifdef PFT_MIN_WM_PVE_BITS
#define PFT_MIN_WM_PVE uintBitsToFloat(uint(PFT_MIN_WM_PVE_BITS))

// DIPY's white matter partial volume at p: 1 - include - exclude, each
// interpolated as the criterion reads them and 0 outside the image.
float white_matter_at(vec3 p)
{
	vec2 v;
	tissue_at(p, v);
	return 1.0 - v.x - v.y;
}

// DIPY pft_tracker's min_wm_pve_before_stopping, after a step: the half has
// reached the white matter at p (the new point, or the point the getter
// found nothing at) too, and a valid end (include) at p does not end it while
// that most is below the threshold and p has some white matter: the half
// goes on through partial-volume grey matter. Only a step's own end is
// passed, not one a particle filtering retry ends with.
uint pft_early_end(uint stop, vec3 p, inout float max_wm_pve)
{
	float here = white_matter_at(p);
	max_wm_pve = max(max_wm_pve, here);
	return stop == STOP_INCLUDE && max_wm_pve < PFT_MIN_WM_PVE && here > 0.0 ? STILL_TRACKING :
										     stop;
}
#endif

// Particle p of set (0: the particles, 1: their copy).
uint particle_at(uint item, uint set, uint p)
{
	return pft_line(item) + set * PFT_SET_WORDS + p * PFT_PARTICLE_WORDS;
}

const uint PARTICLE_STATUS = 6u * (PFT_STEPS + 1u);
const uint PARTICLE_STEPS = PARTICLE_STATUS + 1u;

void copy_particle(uint from, uint to, uint pairs)
{
	for (uint k = 0u; k < 6u * pairs; k++)
		pft[to + k] = pft[from + k];
	pft[to + PARTICLE_STATUS] = pft[from + PARTICLE_STATUS];
	pft[to + PARTICLE_STEPS] = pft[from + PARTICLE_STEPS];
}

// The first particle whose running sum of weights exceeds x (DIPY's
// where_to_insert), or the last one when rounding leaves none.
uint particle_above(uint item, float x)
{
	uint sums = pft_line(item) + PFT_SUMS;
	for (uint p = 0u; p < PFT_PARTICLES; p++)
		if (x < pft_float(sums + p))
			return p;
	return PFT_PARTICLES - 1u;
}

// Running sums of the weights; returns the total.
float sum_weights(uint item)
{
	uint line = pft_line(item);
	float total = 0.0;
	for (uint p = 0u; p < PFT_PARTICLES; p++) {
		total += pft_float(line + PFT_WEIGHTS + p);
		pft[line + PFT_SUMS + p] = floatBitsToUint(total);
	}
	return total;
}

float pft_uniform(uvec4 counter, uint trial, uint step, uint particle)
{
	counter.x = trial << 24 | step << 16 | particle;
	counter.w = PHILOX_STREAM_PFT;
	return philox_uniform(philox4x32_10(counter, pc.philox_key).x);
}

// Steps particle p from its pair s (a live particle), as DIPY's _pft: no
// direction kills it; otherwise its weight shrinks by the exclude map at the
// new point, and it stops there only where the criterion ends it validly,
// leaves the image, or its weight is gone.
void step_particle(uint item, uint p, uint s, uint trial, uvec4 counter)
{
	uint at = particle_at(item, 0u, p);
	uint weight_at = pft_line(item) + PFT_WEIGHTS + p;
	vec3 q = pft_load(at + 6u * s);
	vec3 dir = pft_load(at + 6u * s + 3u);
	counter.x = PFT_DRAW | trial << 24 | p << 16 | s;
	if (!next_direction(q, dir, counter)) {
		pft[at + PARTICLE_STATUS] = STOP_NO_DIRECTION;
		pft[weight_at] = floatBitsToUint(0.0);
		return;
	}
	q += pc.step_size * dir;
	pft_store(at + 6u * (s + 1u), q);
	pft_store(at + 6u * (s + 1u) + 3u, dir);
	uint status = stop_reason_at(q, counter);
	vec2 tissue;
	float weight = pft_float(weight_at) * (1.0 - (tissue_at(q, tissue) ? tissue.y : 0.0));
	if (weight < 1e-16)
		weight = 0.0;
	if (status == STOP_EXCLUDE && weight > 0.0)
		status = STILL_TRACKING;
	pft[at + PARTICLE_STATUS] = status;
	pft[at + PARTICLE_STEPS] = s + 1u;
	pft[weight_at] = floatBitsToUint(weight);
}

// After the particles' step s: normalises the weights and, when fewer than
// a tenth of the particles carry them (1 / sum of squares), draws them anew
// by weight, their first s + 2 pairs copied, all weights equal again.
void resample(uint item, uint s, uint trial, uvec4 counter)
{
	uint weights = pft_line(item) + PFT_WEIGHTS;
	float total = 0.0;
	for (uint p = 0u; p < PFT_PARTICLES; p++)
		total += pft_float(weights + p);
	if (total <= 0.0)
		return;
	float squares = 0.0;
	for (uint p = 0u; p < PFT_PARTICLES; p++) {
		float w = pft_float(weights + p) / total;
		pft[weights + p] = floatBitsToUint(w);
		squares += w * w;
	}
	if (1.0 / squares >= float(PFT_PARTICLES) / 10.0)
		return;
	for (uint p = 0u; p < PFT_PARTICLES; p++)
		copy_particle(particle_at(item, 0u, p), particle_at(item, 1u, p), s + 2u);
	float sum = sum_weights(item);
	for (uint p = 0u; p < PFT_PARTICLES; p++) {
		uint from = particle_above(item, pft_uniform(counter, trial, s, p) * sum);
		copy_particle(particle_at(item, 1u, from), particle_at(item, 0u, p), s + 2u);
	}
	for (uint p = 0u; p < PFT_PARTICLES; p++)
		pft[weights + p] = floatBitsToUint(1.0 / float(PFT_PARTICLES));
}

// One retry from the half's point start for steps steps; returns the chosen
// particle (drawn by weight, the first when none has any).
uint run_particles(uint item, uint start, uint steps, uint trial, uvec4 counter)
{
	uint from = half_at(item, start);
	for (uint p = 0u; p < PFT_PARTICLES; p++) {
		uint at = particle_at(item, 0u, p);
		pft_store(at, pft_load(from));
		pft_store(at + 3u, pft_load(from + 3u));
		pft[at + PARTICLE_STATUS] = STILL_TRACKING;
		pft[at + PARTICLE_STEPS] = 0u;
		pft[pft_line(item) + PFT_WEIGHTS + p] = floatBitsToUint(1.0 / float(PFT_PARTICLES));
	}
	for (uint s = 0u; s < steps; s++) {
		for (uint p = 0u; p < PFT_PARTICLES; p++)
			if (pft[particle_at(item, 0u, p) + PARTICLE_STATUS] == STILL_TRACKING)
				step_particle(item, p, s, trial, counter);
		resample(item, s, trial, counter);
	}
	float total = sum_weights(item);
	return total > 0.0 ? particle_above(item, pft_uniform(counter, trial, 0xffu, 0u) * total) :
			     0u;
}

// Whether the half, stopped with stop at w.step, gets a retry: it ended
// invalidly, has a point after the seed to back up to, room ahead and
// trials left (DIPY's i > 1 and i < the streamline's length, i its points
// with the invalid one stored).
uint points_at_stop(uint stop, Walk w)
{
	return stop == STOP_EXCLUDE ? w.step + 1u : w.step;
}

bool pft_applies(uint stop, Walk w)
{
	uint kept = points_at_stop(stop, w);
	return (stop == STOP_EXCLUDE || stop == STOP_NO_DIRECTION) && w.pft_trials < PFT_MAX_TRIALS &&
	       kept > 1u && kept <= pc.max_steps;
}

// Writes the half's point i to the streamline.
void pft_put(uint seed_slot, int sign, uint i, vec3 p)
{
	if (gl_SubgroupInvocationID < 3)
		points[uint(int(seed_slot) + sign * int(i)) * 3 + gl_SubgroupInvocationID] =
			p[gl_SubgroupInvocationID];
}

// Retries the half that stopped with stop at w.step (pft_applies), the
// step having gone along dir to p: the chosen particle's path replaces the
// half's points after the back-up point, its last point dropped as DIPY does
// (the walk goes on from the one before, or stops there with the particle's
// status). Returns that status; w stands where the half goes on, or with
// w.step its number of points.
uint pft_retry(inout Walk w, uint item, uint seed_slot, uvec4 counter, uint stop, vec3 p,
	       vec3 dir)
{
	int sign = w.half_index == 0u ? -1 : 1;
	uint kept = points_at_stop(stop, w);
	// DIPY keeps the invalid point, and backs up one step onto it.
	if (stop == STOP_EXCLUDE) {
		pft_keep(item, w.step, p, dir, w.length_mm + step_mm(pc.step_size * dir));
		pft_put(seed_slot, sign, w.step, p);
	}
	uint back = min(kept - 1u, PFT_BACK_STEPS);
	// DIPY: min(its length - kept - back - 1, front), at least 0; its
	// length is max_steps + 1 points.
	uint front = uint(clamp(int(pc.max_steps) - int(kept + back), 0, int(PFT_FRONT_STEPS)));
	uint start = kept - back;
	uint chosen = run_particles(item, start, back + front, w.pft_trials, counter);
	uint at = particle_at(item, 0u, chosen);
	uint reached = pft[at + PARTICLE_STEPS];
	float length_mm = pft_float(half_at(item, start) + 6u);
#ifdef PFT_MIN_WM_PVE_BITS
	// DIPY then takes the most white matter over the half's points, the
	// seed's (which no step counted) and the particle's among them.
	w.max_wm_pve = max(w.max_wm_pve, white_matter_at(pft_load(half_at(item, 0u))));
#endif
	for (uint s = 1u; s < reached; s++) {
		vec3 q = pft_load(at + 6u * s);
		vec3 d = pft_load(at + 6u * s + 3u);
		length_mm += step_mm(pc.step_size * d);
		pft_keep(item, start + s, q, d, length_mm);
		pft_put(seed_slot, sign, start + s, q);
#ifdef PFT_MIN_WM_PVE_BITS
		w.max_wm_pve = max(w.max_wm_pve, white_matter_at(q));
#endif
	}
	w.pft_trials++;
	// reached 0: the chosen particle found no direction at the back-up
	// point, and the half ends before it, as DIPY's.
	pft_stand_at(item, start + reached - 1u, w);
	return pft[at + PARTICLE_STATUS];
}
