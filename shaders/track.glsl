// SPDX-License-Identifier: MIT
// Pass 2 of tracking, common to the direction getters: one streamline per
// subgroup, both halves. From the seed, each half asks the getter for a
// direction, steps step_size voxels, and stops when the getter fails, when
// the new point is outside the image or where the stop map <= fa_threshold
// (that point is not kept), or after max_steps steps. The backward half
// (along -first) is stored below the seed's slot and the forward half above
// it, so the streamline is contiguous without reversing.
//
// The including kernel declares the buffers seeds, dirs, line_id, points and
// ranges, the stop map's page table fa (volume.glsl's PAGED_TABLE), and
// defines
//   bool next_direction(vec3 p, inout vec3 dir, uvec4 counter)
//   void prepare_workgroup()   (runs once per workgroup before tracking)
// counter = (step, global seed index, 2 * direction index + half, 0).
//
// ranges holds 4 uints per streamline: its first point slot, its number of
// points, its length in mm (float bits), and why each half stopped: the
// backward half's STOP_* code in bits 0-7, the forward half's in bits 8-15.

// Why a half stopped, in proto/stop_reasons.def's order (the host counts
// them; the .def's last, unknown, is the host's): the stop map at the new
// point <= fa_threshold; the new point, or the point the getter found
// nothing at, outside the image; the getter found no direction (for prob
// and boot within max_angle); max_steps taken.
const uint STOP_MAP = 0u;
const uint STOP_OUTSIDE = 1u;
const uint STOP_NO_DIRECTION = 2u;
const uint STOP_MAX_STEPS = 3u;
const uint STILL_TRACKING = 0xffu;

bool in_image(vec3 p)
{
	Corners unused;
	return corners_at(p, pc.dim.xyz, unused);
}

// DIPY ThresholdStoppingCriterion: TRACKPOINT only inside and above
// threshold; otherwise why not.
uint stop_reason_at(vec3 p)
{
	Corners c;
	if (!corners_at(p, pc.dim.xyz, c))
		return STOP_OUTSIDE;
	float v = 0.0;
	for (int q = 0; q < 8; q++)
		v += c.weight[q] * page_f32(PAGE_SPOT(fa, c.voxel[q]), 0);
	return v > pc.track.w ? STILL_TRACKING : STOP_MAP;
}

// Tracks one half; returns its number of points including the seed, adds
// its length in mm to length_mm and sets reason to why it stopped.
uint track_half(vec3 p, vec3 dir, uint seed_slot, int sign, uvec4 counter, inout float length_mm,
		out uint reason)
{
	uint lane = gl_SubgroupInvocationID;
	uint i;
	reason = STOP_MAX_STEPS;
	for (i = 1; i <= pc.work.z; i++) {
		counter.x = i;
		if (!next_direction(p, dir, counter)) {
			// A getter finds nothing outside the image: that is where it stopped.
			reason = in_image(p) ? STOP_NO_DIRECTION : STOP_OUTSIDE;
			break;
		}
		p += pc.track.x * dir;
		uint stop = stop_reason_at(p);
		if (stop != STILL_TRACKING) {
			reason = stop;
			break;
		}
		length_mm += step_mm(pc.track.x * dir);
		if (lane < 3)
			points[uint(int(seed_slot) + sign * int(i)) * 3 + lane] = p[lane];
	}
	return i;
}

void main()
{
	prepare_workgroup();
	uint item = item_index();
	if (item >= pc.work.x + pc.work.y)
		return;
	uint lane = gl_SubgroupInvocationID;
	uint max_steps = pc.work.z;
	// A line is (seed, direction index): both are where pass 1 left them,
	// indexed within the chunk, whose first seed is pc.rng.z.
	uint s = line_id[2 * item] - pc.rng.z;
	uint d = s * MAX_PEAKS + line_id[2 * item + 1];
	vec3 seed = vec3(seeds[3 * s], seeds[3 * s + 1], seeds[3 * s + 2]);
	vec3 first = vec3(dirs[3 * d], dirs[3 * d + 1], dirs[3 * d + 2]);
	uint seed_slot = item * (2 * max_steps + 1) + max_steps;
	uvec4 counter = uvec4(0, line_id[2 * item], 2 * line_id[2 * item + 1], 0);

	if (lane < 3)
		points[seed_slot * 3 + lane] = seed[lane];
	float length_mm = 0.0;
	uint back_reason, fwd_reason;
	uint n_back = track_half(seed, -first, seed_slot, -1, counter, length_mm, back_reason);
	counter.z += 1;
	uint n_fwd = track_half(seed, first, seed_slot, 1, counter, length_mm, fwd_reason);
	if (lane == 0) {
		ranges[4 * item] = seed_slot - (n_back - 1);
		ranges[4 * item + 1] = n_back - 1 + n_fwd;
		ranges[4 * item + 2] = floatBitsToUint(length_mm);
		ranges[4 * item + 3] = back_reason | fwd_reason << 8;
	}
}
