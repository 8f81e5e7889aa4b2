// SPDX-License-Identifier: MIT
// Reads paged volumes (daemon/engine/paged_volume.h): a volume's voxels are split
// into pages of whole voxels, each its own allocation reached through its
// device address, so no binding or allocation limit bounds the volume. A
// kernel binds a volume's table, declared with PAGED_TABLE, and locates a
// voxel's values with page_spot() once per voxel before reading channels.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer PageF32 { float v[]; };
// float16 values, two per word, the first in the low half.
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer PageF16 { uint v[]; };

// Declares binding B as the table of volume NAME: NAME_layout.x voxels per
// page, NAME_layout.y channels, then the page addresses NAME_pages[].
#define PAGED_TABLE(NAME, B) \
	layout(std430, binding = B) readonly buffer NAME##Table { \
		uvec4 NAME##_layout; \
		uvec2 NAME##_pages[]; \
	}

// A voxel's page and the index of its first value there.
struct PageSpot {
	uvec2 page;
	uint base;
};

#define PAGE_SPOT(NAME, voxel) \
	PageSpot(NAME##_pages[(voxel) / NAME##_layout.x], \
		 ((voxel) % NAME##_layout.x) * NAME##_layout.y)

float page_f32(PageSpot s, uint channel)
{
	return PageF32(s.page).v[s.base + channel];
}

float page_f16(PageSpot s, uint channel)
{
	uint i = s.base + channel;
	vec2 pair = unpackHalf2x16(PageF16(s.page).v[i >> 1]);
	return (i & 1u) != 0u ? pair.y : pair.x;
}
