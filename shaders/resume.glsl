// SPDX-License-Identifier: MIT
// The resume buffer of the track kernels (binding RESUME_BINDING, defined by
// the including kernel): where track.glsl keeps the streamlines it suspends
// on LOOP_LIMITED devices. Word 0 counts the streamlines suspended by this
// dispatch (the host zeroes it), and its top bit (RESUME_STALLED) says that
// one of them was resumed and suspended again at the same step; then each
// streamline has RESUME_WORDS words:
// its status, its walk (track.glsl's Walk, WALK_WORDS) and its getter's state
// (GETTER_WORDS, 0 for a getter without one). The word counts are defines
// from the host (daemon/engine/kernel_params.h), which sizes the buffer.

const uint RESUME_WORDS = 1u + WALK_WORDS + GETTER_WORDS;
// Mirrored by daemon/engine/kernel_params.h. A batch has fewer than 2^31
// streamlines (each has RESUME_WORDS words in one binding), so the count
// never reaches it.
const uint RESUME_STALLED = 1u << 31;

layout(std430, binding = RESUME_BINDING) buffer Resume {
	uint suspended;
	uint resume[];
};

void save_vec3(uint at, vec3 v)
{
	resume[at] = floatBitsToUint(v.x);
	resume[at + 1u] = floatBitsToUint(v.y);
	resume[at + 2u] = floatBitsToUint(v.z);
}

vec3 load_vec3(uint at)
{
	return uintBitsToFloat(uvec3(resume[at], resume[at + 1u], resume[at + 2u]));
}
