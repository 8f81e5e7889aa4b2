// SPDX-License-Identifier: MIT
// Writes a chunk of a float32 ODF as its file stores it (volume after volume,
// x fastest) into its pages (daemon/engine/odf_transpose.h): each voxel's
// values together, clipped at zero, with the host's symmetry check
// (fit.c's odf_block) and the non-finite values volume_slabs_read refuses
// flagged. Values move as their bits, so that no compiler turns the clip into
// a max() that changes NaN or -0, and the pages hold the host path's bytes;
// float16 pages (HALF_PAGES) take each value rounded as formats/half.c's
// half_from_float rounds it, on the bits too (packHalf2x16 may round
// otherwise).
//
// A workgroup takes 32 voxels of the chunk: checks each (8 threads a voxel),
// then moves 32 x 32 tiles of voxels x channels through shared memory, read
// along the chunk's voxels and written along a voxel's channels.
//
// With pages of half a mirrored sphere (odf_transpose.h) the chunk holds the
// first half's volumes, and the pages' channels (odf_layout.y, a multiple of 4)
// may pass them: the rest of a voxel's channels are written as 0.
//
// Bindings:
//   0 chunk   uint[channels * voxels]  value bits, channel after channel
//   1 odf     page table (volume.glsl) of the pages written
//   2 pairs   uvec2[n_pairs]           antipodal channel pairs (fit.c)
//   3 flags   uint[4]                  out: [0] an asymmetric voxel, [1] a non-finite value,
//                                      [2] a voxel whose largest value is under 2^-90,
//                                      [3] an antipodal pair of unequal values
//
// Defines: ODF_SYMMETRY_TOLERANCE (a double literal, fit.h's); HALF_PAGES
// (1: the pages hold float16 values, two a word, the first in the low half;
// the channel count is even, so a voxel starts on a word).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "volume.glsl"

#define TILE 32u
#define ROWS 8u
// 2^-90 as float bits: a voxel whose largest value is under it may compare
// otherwise than on the host where the GPU flushes subnormal floats (its
// values near the tolerance are then no more than 2^24 subnormal steps
// apart); the host decides for such an ODF (odf_transpose.c).
#define TINY_TOP 0x12800000u

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer Chunk { uint chunk[]; };
PAGED_TABLE(odf, 1);
layout(std430, binding = 2) readonly buffer Pairs { uvec2 pairs[]; };
layout(std430, binding = 3) buffer Flags { uint flags[]; };

layout(buffer_reference, std430, buffer_reference_align = 4) writeonly buffer PageOut { uint v[]; };

layout(push_constant) uniform Params {
	uint first;      // the chunk's first voxel in the file's order (x fastest, then y, z)
	uint voxels;     // of the chunk
	uint nx, ny, nz;
	uint channels;   // volumes in the chunk
	uint n_pairs;
} pc;

shared uint tile[TILE][TILE + 1];
shared uint tops[ROWS][TILE];
shared float gaps[ROWS][TILE];

// v < 0 ? 0 : v: negative numbers (-inf too) become +0; -0 and NaN stay.
uint clipped(uint bits)
{
	return bits > 0x80000000u && bits <= 0xff800000u ? 0u : bits;
}

bool finite_bits(uint bits)
{
	return (bits & 0x7f800000u) != 0x7f800000u;
}

float value(uint channel, uint voxel)
{
	return uintBitsToFloat(clipped(chunk[channel * pc.voxels + voxel]));
}

// A value's bits after clipping, -0 as 0: equal exactly where the values
// are equal as fit.c compares them (on the bits: a GPU may flush subnormal
// floats).
uint equal_bits(uint channel, uint voxel)
{
	uint bits = clipped(chunk[channel * pc.voxels + voxel]);
	return bits == 0x80000000u ? 0u : bits;
}

// This thread's share of its voxel's check: the largest clipped value (as
// bits: non-negative floats order as their bits; NaN and -0 left out, as
// odf_block's compares leave them) and the largest antipodal gap.
void check_share(uint voxel, uint row, out uint top, out float gap)
{
	bool finite = true;

	top = 0u;
	gap = 0.0;
	for (uint j = row; j < pc.channels; j += ROWS) {
		uint bits = chunk[j * pc.voxels + voxel];
		uint c = clipped(bits);
		finite = finite && finite_bits(bits);
		top = c <= 0x7f800000u ? max(top, c) : top;
	}
	bool mirrored = true;
	for (uint p = row; p < pc.n_pairs; p += ROWS) {
		float d = abs(value(pairs[p].x, voxel) - value(pairs[p].y, voxel));
		gap = d > gap ? d : gap;
		mirrored = mirrored && equal_bits(pairs[p].x, voxel) == equal_bits(pairs[p].y, voxel);
	}
	if (!finite)
		atomicOr(flags[1], 1u);
	if (!mirrored)
		atomicOr(flags[3], 1u);
}

void check(uint first, uint lane, uint row)
{
	uint voxel = first + lane, top = 0u;
	float gap = 0.0;

	if (voxel < pc.voxels)
		check_share(voxel, row, top, gap);
	tops[row][lane] = top;
	gaps[row][lane] = gap;
	barrier();
	if (row != 0u || voxel >= pc.voxels)
		return;
	for (uint r = 1u; r < ROWS; r++) {
		top = max(top, tops[r][lane]);
		gap = gaps[r][lane] > gap ? gaps[r][lane] : gap;
	}
	// In double, as fit.c compares a float gap with 1e-3 * top.
	if (double(gap) > ODF_SYMMETRY_TOLERANCE * double(uintBitsToFloat(top)))
		atomicOr(flags[0], 1u);
	if (top != 0u && top < TINY_TOP)
		atomicOr(flags[2], 1u);
}

#if HALF_PAGES
// v >> shift rounded to the nearest, ties to even (half.c's).
uint shift_round_even(uint v, uint shift)
{
	return (v + ((1u << (shift - 1u)) - 1u) + ((v >> shift) & 1u)) >> shift;
}

// half_from_float of the float with these bits: NaN kept quiet with its top
// payload bits, overflow to infinity, normal and subnormal halves rounded to
// the nearest even, the rest to zero; the sign kept.
uint half_bits(uint bits)
{
	uint sign = (bits >> 16u) & 0x8000u, a = bits & 0x7fffffffu;

	if (a > 0x7f800000u)
		return sign | 0x7e00u | ((a >> 13u) & 0x3ffu);
	if (a >= 0x477ff000u)   // 65520: ties to even give infinity from here
		return sign | 0x7c00u;
	if (a >= 0x38800000u)   // 2^-14, the smallest normal half
		return sign | shift_round_even(a - 0x38000000u, 13u);
	if (a <= 0x33000000u)   // 2^-25: zero, the even neighbour of the tie
		return sign;
	return sign | shift_round_even((a & 0x7fffffu) | 0x800000u, 126u - (a >> 23u));
}
#endif

// The pages' voxel ([x][y][z]) of the chunk's voxel i.
uint page_voxel(uint i)
{
	uint f = pc.first + i;
	uint x = f % pc.nx, y = f / pc.nx % pc.ny, z = f / (pc.nx * pc.ny);

	return (x * pc.ny + y) * pc.nz + z;
}

void transpose(uint first, uint lane, uint row)
{
	for (uint c0 = 0u; c0 < odf_layout.y; c0 += TILE) {
		barrier();   // the last tile's writes are done
		for (uint k = row; k < TILE; k += ROWS) {
			uint channel = c0 + k, voxel = first + lane;
			if (voxel < pc.voxels && channel < odf_layout.y)
				tile[k][lane] = channel < pc.channels
						? clipped(chunk[channel * pc.voxels + voxel]) : 0u;
		}
		barrier();
		for (uint k = row; k < TILE; k += ROWS) {
			uint channel = c0 + lane, voxel = first + k;
			if (voxel >= pc.voxels || channel >= odf_layout.y)
				continue;
			PageSpot s = PAGE_SPOT(odf, page_voxel(voxel));
#if HALF_PAGES
			// Even lanes write a word of two channels (the tile's
			// width and the channel count are even).
			if (lane % 2u == 0u)
				PageOut(s.page).v[(s.base + channel) / 2u] =
					half_bits(tile[lane][k]) | half_bits(tile[lane + 1u][k]) << 16u;
#else
			PageOut(s.page).v[s.base + channel] = tile[lane][k];
#endif
		}
	}
}

void main()
{
	uint first = gl_WorkGroupID.x * TILE;
	uint lane = gl_LocalInvocationID.x % TILE, row = gl_LocalInvocationID.x / TILE;

	check(first, lane, row);
	transpose(first, lane, row);
}
