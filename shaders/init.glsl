// SPDX-License-Identifier: MIT
// What the pass-1 kernels (prob_init, boot_init) share: each seed's initial
// directions are the peaks (peaks.glsl) of a PMF at the seed.
//
// Bindings 4 to 6 (see the kernels' headers):
//   4 seeds      float[3 * n]               voxel coordinates
//   5 ndirs      uint[n]                    out: number of initial directions
//   6 dirs       float[3 * MAX_PEAKS * n]   out: the directions, largest peak first
// The including kernel includes sphere.glsl, pmf.glsl and peaks.glsl first.

layout(std430, binding = 4) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 5) writeonly buffer NDirs { uint ndirs[]; };
layout(std430, binding = 6) writeonly buffer Dirs { float dirs[]; };

vec3 seed_point(uint item)
{
	return vec3(seeds[3 * item], seeds[3 * item + 1], seeds[3 * item + 2]);
}

#if PEAK_LISTS
// Stores the n peaks that find_peaks_above() listed (peaks.glsl), in the slots of
// their ranks, the list's order.
void store_peaks(uint item, uint n)
{
	if (gl_SubgroupInvocationID == 0)
		ndirs[item] = n;
	for (uint rank = gl_SubgroupInvocationID; rank < n; rank += SG) {
		uint slot = 3 * (item * MAX_PEAKS + rank);
		vec3 v = vertex(listed_vertex(rank));
		dirs[slot] = v.x;
		dirs[slot + 1] = v.y;
		dirs[slot + 2] = v.z;
	}
}
#else
// Stores the n peaks that find_peaks() marked, each by the lane that owns
// its vertex, in the slot of its rank.
void store_peaks(uint item, uint n)
{
	uint sg = gl_SubgroupID;
	if (gl_SubgroupInvocationID == 0)
		ndirs[item] = n;
	for (uint j = gl_SubgroupInvocationID; j < NV && n > 0; j += SG) {
		float cand = s_cand[sg][j];
		if (is_peak(cand)) {
			uint slot = 3 * (item * MAX_PEAKS + peak_rank(cand));
			vec3 v = vertex(j);
			dirs[slot] = v.x;
			dirs[slot + 1] = v.y;
			dirs[slot + 2] = v.z;
		}
	}
}
#endif
