// SPDX-License-Identifier: MIT
// Pass 2 of tracking, common to the direction getters: one streamline per
// subgroup, both halves. From the seed, each half asks the getter for a
// direction, steps step_size voxels, and stops when the getter fails, when
// the new point is outside the image or where the stop map <= fa_threshold
// (or where stopping act or cmc ends it in the include or exclude map; that
// point is not kept, as DIPY), or after max_steps steps. The backward half
// (along -first) is stored below the seed's slot and the forward half above
// it, so the streamline is contiguous without reversing. With PFT
// (tracking.pft), a half about to end invalidly is retried by pft.glsl.
//
// Devices that end loops after a fixed number of iterations (LOOP_LIMITED,
// lavapipe: see loop_limit_reached) may stop a streamline in mid-walk: it is
// suspended before the step whose loops were cut, its walk saved in the
// resume buffer, and the host dispatches the kernel again (pc.resuming = 1)
// until no streamline is suspended. A resumed step draws the same random
// numbers, so the output is the same as in one pass. A step that one whole
// dispatch cannot finish stalls the line, and the host fails the job.
//
// The including kernel declares the buffers seeds, dirs, line_id, points and
// ranges, the stop map's page table fa (volume.glsl's PAGED_TABLE), includes
// resume.glsl, and defines
//   bool next_direction(vec3 p, inout vec3 dir, uvec4 counter)
//   void prepare_workgroup()   (runs once per workgroup before tracking)
//   float getter_reach()       (voxels ahead of the point the getter looks at)
//   getter_mark(), getter_rewind(), getter_save(uint at), getter_load(uint at)
//                              (the getter's own state across steps: a copy
//                              kept before each step, and its GETTER_WORDS
//                              words in the resume buffer; LOOP_LIMITED only)
//                              when GETTER_WORDS > 0; a getter without state
//                              gets the empty ones below.
// counter = (step, global seed index, 2 * direction index + half, 0).
//
// ranges holds 4 uints per streamline: its first point slot, its number of
// points, its length in mm (float bits), and why each half stopped: the
// backward half's STOP_* code in bits 0-7, the forward half's in bits 8-15,
// and with REGIONS bit 16 (INCLUDE_MISSING) when it missed an include region.
//
// REGIONS (regions.include/exclude, tckgen's): the kernel binds the job's
// spheres at REGIONS_BINDING. Each point a half keeps, and the seed, marks
// the include regions it is in (a bit each in the walk's visited); a point
// after the seed inside an exclude region ends the half (STOP_EXCLUDE_REGION)
// and the line is rejected: the other half is not tracked (as tckgen, which
// does not test its seed against exclude regions either).

// Why a half stopped, in proto/stop_reasons.def's order (the host counts
// them; the .def's last, unknown, is the host's): the stop map at the new
// point <= fa_threshold; the new point, or the point the getter found
// nothing at, outside the image; the getter found no direction (for prob
// and boot within max_angle); max_steps taken; stopping act and cmc: the
// new point ends in the include map (a valid end) or the exclude map.
const uint STOP_MAP = 0u;
const uint STOP_OUTSIDE = 1u;
const uint STOP_NO_DIRECTION = 2u;
const uint STOP_MAX_STEPS = 3u;
const uint STOP_INCLUDE = 4u;
const uint STOP_EXCLUDE = 5u;
const uint STOP_EXCLUDE_REGION = 6u;
const uint INCLUDE_MISSING = 1u << 16;
const uint STILL_TRACKING = 0xffu;

bool in_image(vec3 p)
{
	Corners unused;
	return corners_at(p, pc.dim, unused);
}

const uint LINE_SUSPENDED = 1u;
const uint LINE_DONE = 2u;

#if GETTER_WORDS == 0
// The getter draws afresh at each step (prob, boot): nothing to keep.
void getter_mark() {}
void getter_rewind() {}
void getter_save(uint at) {}
void getter_load(uint at) {}
#endif

// Where a streamline stands between two steps; WALK_WORDS words in the
// resume buffer (save_walk).
struct Walk {
	vec3 p, dir;
	uint half_index;  // 0: backward, 1: forward
	uint step;        // the next step, from 1
	uint n_back;      // points of the backward half, the seed included
	float length_mm;
	uint back_reason; // why the backward half stopped (STOP_*), once it has
	uint visited;     // REGIONS: a bit per include region a point was in
	uint pft_trials;  // particle filtering's retries of this half (pft.glsl)
	float max_wm_pve; // PFT_MIN_WM_PVE_BITS: the most white matter the half reached
};

#if REGIONS
// The job's regions (engine.c's upload_regions): their counts, then per
// region 4 words: a sphere's centre in voxels and radius in mm (the metric
// measures in mm whatever the affine), or a radius of -1 for a mask; then,
// with masks, a word per voxel ([x][y][z], as struct volume): bit i where
// include region i's mask is non-zero, bit 16 + j for exclude region j.
layout(std430, binding = REGIONS_BINDING) readonly buffer Regions { uint region_words[]; };

// Region i (excludes after includes), whose mask bit is bit: as tckgen, a
// mask holds p where its nearest voxel (voxel centres at integers) is set.
bool in_region(vec3 p, uint i, uint bit)
{
	uint at = 4u + 4u * i;
	float radius = uintBitsToFloat(region_words[at + 3u]);
	if (radius >= 0.0) {
		vec3 centre = vec3(uintBitsToFloat(region_words[at]),
				   uintBitsToFloat(region_words[at + 1u]),
				   uintBitsToFloat(region_words[at + 2u]));
		return step_mm(p - centre) <= radius;
	}
	ivec3 v = ivec3(floor(p + 0.5));
	if (any(lessThan(v, ivec3(0))) || any(greaterThanEqual(v, pc.dim)))
		return false;
	uint n = region_words[0] + region_words[1];
	uint voxel = uint((v.x * pc.dim.y + v.y) * pc.dim.z + v.z);
	return (region_words[4u + 4u * n + voxel] & bit) != 0u;
}

// The include regions p is in, a bit each.
uint include_bits(vec3 p)
{
	uint bits = 0u;
	for (uint i = 0u; i < region_words[0]; i++)
		if (in_region(p, i, 1u << i))
			bits |= 1u << i;
	return bits;
}

bool in_exclude_region(vec3 p)
{
	for (uint j = 0u; j < region_words[1]; j++)
		if (in_region(p, region_words[0] + j, 1u << (16u + j)))
			return true;
	return false;
}
#else
uint include_bits(vec3 p)
{
	return 0u;
}
#endif

// STOPPING (engine.c): the criterion, as enum jobspec_stopping.
#define STOPPING_ACT 1
#define STOPPING_CMC 2

#if STOPPING != 0
// The include (channel 0) and exclude (channel 1) maps that the stop map's
// binding holds for act and cmc, interpolated at p; false outside the image.
bool tissue_at(vec3 p, out vec2 v)
{
	Corners c;
	v = vec2(0.0);
	if (!corners_at(p, pc.dim, c))
		return false;
	for (int q = 0; q < 8; q++) {
		PageSpot s = PAGE_SPOT(fa, c.voxel[q]);
		v += c.weight[q] * vec2(page_f32(s, 0), page_f32(s, 1));
	}
	return true;
}
#endif

#if STOPPING == STOPPING_ACT
// DIPY ActStoppingCriterion: ENDPOINT where include > 0.5, else INVALIDPOINT
// where exclude > 0.5, TRACKPOINT otherwise.
uint stop_reason_at(vec3 p, uvec4 counter)
{
	vec2 v;
	if (!tissue_at(p, v))
		return STOP_OUTSIDE;
	return v.x > 0.5 ? STOP_INCLUDE : v.y > 0.5 ? STOP_EXCLUDE : STILL_TRACKING;
}
#elif STOPPING == STOPPING_CMC
// DIPY CmcStoppingCriterion: go on with probability (1 - include - exclude,
// clamped at 0, over its sum with them) ^ (step_size / mean voxel size),
// which is the step in voxels; else end in include with probability include
// / (include + exclude), in exclude otherwise. Its two uniforms come from the
// step's own Philox block (counter: step, seed, direction and half), so a
// resumed or re-chunked walk draws them again alike.
uint stop_reason_at(vec3 p, uvec4 counter)
{
	vec2 v;
	if (!tissue_at(p, v))
		return STOP_OUTSIDE;
	float tissue = v.x + v.y;
	if (tissue <= 0.0)
		return STILL_TRACKING;
	float rest = max(0.0, 1.0 - tissue);
	counter.w = PHILOX_STREAM_CMC;
	uvec4 u = philox4x32_10(counter, pc.philox_key);
	if (philox_uniform(u.x) < pow(rest / (rest + tissue), pc.step_size))
		return STILL_TRACKING;
	return philox_uniform(u.y) < v.x / tissue ? STOP_INCLUDE : STOP_EXCLUDE;
}
#else
// DIPY ThresholdStoppingCriterion: TRACKPOINT only inside and above
// threshold; otherwise why not.
uint stop_reason_at(vec3 p, uvec4 counter)
{
	Corners c;
	if (!corners_at(p, pc.dim, c))
		return STOP_OUTSIDE;
#if CORNER_LANES
	float v = corner_lanes_sum(c, page_f32(PAGE_SPOT(fa, lane_corner_voxel(c)), 0));
#else
	float v = 0.0;
	for (int q = 0; q < 8; q++)
		v += c.weight[q] * page_f32(PAGE_SPOT(fa, c.voxel[q]), 0);
#endif
	return v > pc.fa_threshold ? STILL_TRACKING : STOP_MAP;
}
#endif

#if PFT
#include "pft.glsl"
#endif

#if LOOP_LIMITED
// llvmpipe (lavapipe) counts the loop iterations of an invocation, every
// loop together, and past 65535 ends each loop after its current iteration
// (LP_MAX_TGSI_LOOP_ITERATIONS, its guard against endless loops): a step
// then computes garbage. A loop of pc.loop_count = 2 iterations, a count the
// compiler cannot see, runs fewer once that happened, or is about to.
bool loop_limit_reached()
{
	uint trips = 0u;
	for (uint i = 0u; i < uint(pc.loop_count); i++)
		trips++;
	return trips < uint(pc.loop_count);
}

void save_walk(uint at, Walk w)
{
	save_vec3(at, w.p);
	save_vec3(at + 3u, w.dir);
	resume[at + 6u] = w.half_index;
	resume[at + 7u] = w.step;
	resume[at + 8u] = w.n_back;
	resume[at + 9u] = floatBitsToUint(w.length_mm);
	resume[at + 10u] = w.back_reason;
	resume[at + 11u] = w.visited;
	resume[at + 12u] = w.pft_trials;
	resume[at + 13u] = floatBitsToUint(w.max_wm_pve);
}

Walk load_walk(uint at)
{
	Walk w;
	w.p = load_vec3(at);
	w.dir = load_vec3(at + 3u);
	w.half_index = resume[at + 6u];
	w.step = resume[at + 7u];
	w.n_back = resume[at + 8u];
	w.length_mm = uintBitsToFloat(resume[at + 9u]);
	w.back_reason = resume[at + 10u];
	w.visited = resume[at + 11u];
	w.pft_trials = resume[at + 12u];
	w.max_wm_pve = uintBitsToFloat(resume[at + 13u]);
	return w;
}

// Whether a walk suspended at w made no progress since it was resumed at
// from: the same half, step and retry. A resumed step runs as it ran before
// (the same draws, each dispatch counting its loops afresh), so it would be
// cut there again on every pass (a PFT retry that needs more iterations than
// one dispatch runs): the host fails the job instead (engine.c).
bool stalled(Walk w, Walk from)
{
	return pc.resuming != 0u && w.half_index == from.half_index && w.step == from.step &&
	       w.pft_trials == from.pft_trials;
}

void suspend(uint item, Walk w, Walk from)
{
	if (gl_SubgroupInvocationID == 0u) {
		uint at = item * RESUME_WORDS;
		resume[at] = LINE_SUSPENDED;
		save_walk(at + 1u, w);
		getter_save(at + 1u + WALK_WORDS);
		atomicAdd(suspended, 1u);
		if (stalled(w, from))
			atomicOr(suspended, RESUME_STALLED);
	}
}
#endif

// Walks the current half from w.step on; false when it was suspended (w then
// holds the step to run again). At the end w.step is the half's number of
// points, the seed included, and reason why it stopped.
bool track_half(inout Walk w, uint seed_slot, uvec4 counter, out uint reason)
{
	int sign = w.half_index == 0u ? -1 : 1;
	bool stopped = false;
	reason = STOP_MAX_STEPS;
	for (; w.step <= pc.max_steps; w.step++) {
		counter.x = w.step;
#if LOOP_LIMITED
		getter_mark();
#endif
		vec3 dir = w.dir;
		bool found = next_direction(w.p, dir, counter);
		vec3 p = w.p + pc.step_size * dir;
		// A getter that looked past the image's edge (ptt's probe reads
		// nothing there) stopped because the image ended.
		uint stop = !found ? (in_image(w.p + getter_reach() * w.dir) ? STOP_NO_DIRECTION :
									    STOP_OUTSIDE) :
				     stop_reason_at(p, counter);
		// Before the loop limit's check: these loops count too.
		uint visits = 0u;
#if REGIONS
		if (stop == STILL_TRACKING && in_exclude_region(p))
			stop = STOP_EXCLUDE_REGION;
		else if (stop == STILL_TRACKING)
			visits = include_bits(p);
#endif
#ifdef PFT_MIN_WM_PVE_BITS
		float max_wm_pve = w.max_wm_pve;
		stop = pft_early_end(stop, found ? p : w.p, max_wm_pve);
#endif
#if LOOP_LIMITED
		if (loop_limit_reached()) {
			getter_rewind();
			return false;
		}
#endif
#if PFT
		if (stop != STILL_TRACKING && pft_applies(stop, w)) {
			Walk retried = w;
#ifdef PFT_MIN_WM_PVE_BITS
			retried.max_wm_pve = max_wm_pve;   // the point that failed counts too
#endif
			stop = pft_retry(retried, item_index(), seed_slot, counter, stop, p, dir);
#if LOOP_LIMITED
			// A retry cut short runs again whole when resumed; cut
			// again there, the line has stalled (see stalled).
			if (loop_limit_reached()) {
				getter_rewind();
				return false;
			}
#endif
			w = retried;
			if (stop == STILL_TRACKING) {
				w.step--;   // the loop's own increment takes it to the next step
				continue;
			}
		}
#endif
		if (stop != STILL_TRACKING) {
			reason = stop;
			stopped = true;
			break;
		}
		w.visited |= visits;
#ifdef PFT_MIN_WM_PVE_BITS
		w.max_wm_pve = max_wm_pve;
#endif
		w.length_mm += step_mm(pc.step_size * dir);
		if (gl_SubgroupInvocationID < 3)
			points[uint(int(seed_slot) + sign * int(w.step)) * 3 + gl_SubgroupInvocationID] =
				p[gl_SubgroupInvocationID];
		w.p = p;
		w.dir = dir;
#if PFT
		pft_keep(item_index(), w.step, p, dir, w.length_mm);
#endif
	}
#if LOOP_LIMITED
	// This loop's own back edge can reach the limit after a step that
	// passed the check: it then ends before max_steps without a stop, and
	// w already stands at the next step.
	if (!stopped && w.step <= pc.max_steps)
		return false;
#endif
	return true;
}

void main()
{
	prepare_workgroup();
	uint item = item_index();
	if (item >= pc.first_item + pc.item_count)
		return;
	uint lane = gl_SubgroupInvocationID;
	uint max_steps = pc.max_steps;
	// A line is (seed, direction index): both are where pass 1 left them,
	// indexed within the chunk, whose first seed is pc.first_seed.
	uint s = line_id[2 * item] - pc.first_seed;
	uint d = s * MAX_PEAKS + line_id[2 * item + 1];
	vec3 seed = vec3(seeds[3 * s], seeds[3 * s + 1], seeds[3 * s + 2]);
	vec3 first = vec3(dirs[3 * d], dirs[3 * d + 1], dirs[3 * d + 2]);
	uint seed_slot = item * (2 * max_steps + 1) + max_steps;
	uvec4 counter = uvec4(0, line_id[2 * item], 2 * line_id[2 * item + 1], 0);

	Walk w;
#if LOOP_LIMITED
	if (pc.resuming != 0u) {
		uint at = item * RESUME_WORDS;
		if (resume[at] == LINE_DONE)
			return;
		w = load_walk(at + 1u);
		getter_load(at + 1u + WALK_WORDS);
	} else
#endif
	{
		w = Walk(seed, -first, 0u, 1u, 0u, 0.0, STOP_MAX_STEPS, include_bits(seed), 0u, 0.0);
		if (lane < 3)
			points[seed_slot * 3 + lane] = seed[lane];
#if PFT
		pft_keep(item, 0u, seed, w.dir, 0.0);
#endif
	}
#if LOOP_LIMITED
	Walk resumed_at = w;
#endif
	uint reason;
	if (w.half_index == 0u) {
		if (!track_half(w, seed_slot, counter, reason)) {
#if LOOP_LIMITED
			suspend(item, w, resumed_at);
#endif
			return;
		}
		w = Walk(seed, first, 1u, 1u, w.step, w.length_mm, reason, w.visited, 0u, 0.0);
#if PFT
		pft_keep(item, 0u, seed, w.dir, w.length_mm);
#endif
	}
	counter.z += 1;
	// A line rejected by an exclude region is not tracked on.
	if (w.back_reason == STOP_EXCLUDE_REGION)
		reason = STOP_EXCLUDE_REGION;
	else if (!track_half(w, seed_slot, counter, reason)) {
#if LOOP_LIMITED
		suspend(item, w, resumed_at);
#endif
		return;
	}
	if (lane == 0) {
		ranges[4 * item] = seed_slot - (w.n_back - 1);
		ranges[4 * item + 1] = w.n_back - 1 + w.step;
		ranges[4 * item + 2] = floatBitsToUint(w.length_mm);
		uint missing = 0u;
#if REGIONS
		if (w.visited != (1u << region_words[0]) - 1u)
			missing = INCLUDE_MISSING;
#endif
		ranges[4 * item + 3] = w.back_reason | reason << 8 | missing;
#if LOOP_LIMITED
		resume[item * RESUME_WORDS] = LINE_DONE;
#endif
	}
}
