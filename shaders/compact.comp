// SPDX-License-Identifier: MIT
// Packs the points of the streamlines to keep into one contiguous buffer, so
// that a single copy brings them to the host. One subgroup per streamline.
//
// Bindings:
//   0 points   float[]        streamline slots written by prob_track
//   1 ranges   uint[4 * n]    first point slot, number of points, length, stop reasons
//                             (track.glsl)
//   2 dest     uint[n]        first destination point, or 0xffffffff to drop
//   3 packed   float[]        out: kept points, 3 floats each
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Points { float points[]; };
layout(std430, binding = 1) readonly buffer Ranges { uint ranges[]; };
layout(std430, binding = 2) readonly buffer Dest { uint dest[]; };
layout(std430, binding = 3) writeonly buffer Packed { float packed[]; };

void main()
{
	uint item = item_index();
	if (item >= pc.first_item + pc.item_count || dest[item] == 0xffffffffu)
		return;
	uint src = 3 * ranges[4 * item];
	uint dst = 3 * dest[item];
	uint n = 3 * ranges[4 * item + 1];
	for (uint i = gl_SubgroupInvocationID; i < n; i += SG)
		packed[dst + i] = points[src + i];
}
