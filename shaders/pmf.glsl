// SPDX-License-Identifier: MIT
// The PMF of each subgroup's item: a function on the sphere in shared memory,
// s_pmf[subgroup][vertex]. Lane l owns vertices l, l + SG, l + 2 SG, ...:
// only it writes them, so a lane reads its own entries back without a
// barrier, and other lanes' entries after subgroupBarrier(). Values below
// pmf_threshold of the maximum count as zero, as in DIPY's PmfGen-based
// direction getters.
//
// Kernels that read the ODF (odf.glsl, included first) fill the PMF with
// pmf_from_odf(): the ODF interpolated trilinearly, or for SH storage its
// coefficients interpolated and then sampled, as DIPY's SHCoeffPmfGen does.

shared float s_pmf[ITEMS][NV];

// The value below which PMF entries are ignored (pmf_threshold of the
// maximum, DIPY's absolute_pmf_threshold), given this lane's maximum.
float pmf_floor(float lane_max)
{
	return pc.pmf_threshold * subgroupMax(lane_max);
}

// pmf_floor() at a tracking step from direction dir, given this lane's
// maximum of the PMF as filled: with ANGULAR_WEIGHT the entries are first
// multiplied by angular_factor (common.glsl), so the thresholds (this floor,
// boot's relative peak threshold) see the weighted PMF, as in boot.metal.
// The including kernel includes sphere.glsl first.
float pmf_floor_toward(vec3 dir, float lane_max)
{
#if ANGULAR_WEIGHT
	uint sg = gl_SubgroupID;
	lane_max = 0.0;
	for (uint j = gl_SubgroupInvocationID; j < NV; j += SG) {
		float v = s_pmf[sg][j] * angular_factor(dir, vertex(j));
		s_pmf[sg][j] = v;
		lane_max = max(lane_max, v);
	}
#endif
	return pmf_floor(lane_max);
}

// Zeroes this lane's entries below floor_value.
void zero_below(float floor_value)
{
	uint sg = gl_SubgroupID;
	for (uint j = gl_SubgroupInvocationID; j < NV; j += SG)
		if (s_pmf[sg][j] < floor_value)
			s_pmf[sg][j] = 0.0;
}

#ifdef ODF_BINDING
// ODF_MIRRORED (engine.c's odf_mirrored): every voxel's value at vertex
// j + NV/2, the antipode of vertex j, equals its value at j to the bit, so
// the first half of the sphere is read and its PMF copied to the second: the
// same PMF from half the loads.
#if ODF_MIRRORED
const uint READ_VERTICES = NV / 2u;
#else
const uint READ_VERTICES = NV;
#endif

// Stores the PMF at vertex j < READ_VERTICES, and at its antipode.
void store_pmf(uint sg, uint j, float v)
{
	s_pmf[sg][j] = v;
#if ODF_MIRRORED
	s_pmf[sg][j + NV / 2u] = v;
#endif
}

#if ODF_STORAGE == ODF_SH
shared float s_odf_coef[ITEMS][NC];

// Coefficients SG at a time (one per lane, each interpolated over the
// corners in order), then each vertex sums them in coefficient order.
float pmf_from_odf(Corners c)
{
	uint sg = gl_SubgroupID;
	for (uint m = gl_SubgroupInvocationID; m < NC; m += SG) {
		float coef = 0.0;
		[[unroll]] for (int q = 0; q < 8; q++)
			coef += c.weight[q] * odf_value(PAGE_SPOT(odf, c.voxel[q]), m);
		s_odf_coef[sg][m] = coef;
	}
	subgroupMemoryBarrierShared();
	subgroupBarrier();
	float lane_max = 0.0;
	for (uint j = gl_SubgroupInvocationID; j < NV; j += SG) {
		float v = 0.0;
		for (uint m = 0; m < NC; m++)
			v += odf_basis[m * NV + j] * s_odf_coef[sg][m];
		s_pmf[sg][j] = v;
		lane_max = max(lane_max, v);
	}
	subgroupBarrier();   // s_odf_coef is rewritten at the next point
	return lane_max;
}
#else
// A lane interpolates a block of PMF_BLOCK of its vertices at a time (a
// fixed block of registers walked over the sphere): the 8 * PMF_BLOCK loads
// are independent and in flight together. Per vertex the corners are summed
// in order 0..7. Lanes past NV read a valid vertex and store nothing.
const uint PMF_BLOCK = 4u;

#if ODF_PAIR_LOADS || ODF_VEC4_LOADS
// A lane reads one word of WORD_VERTICES consecutive vertices' values per
// load, word_at() below, and interpolates those vertices together. Lane l
// takes the words l, l + SG, ...: it writes entries other lanes own, hence
// the subgroup barrier at the end. Each vertex sums its corners in the same
// order as the one-value path: on lavapipe the PMF is the same to the bit
// (NVIDIA's compiler fuses the two paths' sums differently: the last bit).
#if ODF_PAIR_LOADS
// CPU devices (engine.c's odf_pair_loads): lavapipe turns every load of a
// lane into a scalar load of its own, so each lane reads one 64-bit word:
// two float32 values, or four float16 ones (the first in the low half).
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer PagePairs {
	uint64_t v[];
};

#if ODF_STORAGE == ODF_FLOAT16
const uint WORD_VERTICES = 4u;

vec4 word_values(uint64_t word)
{
	uvec2 halves = unpackUint2x32(word);
	return vec4(unpackHalf2x16(halves.x), unpackHalf2x16(halves.y));
}
#else
const uint WORD_VERTICES = 2u;

vec4 word_values(uint64_t word)
{
	return vec4(uintBitsToFloat(unpackUint2x32(word)), 0.0, 0.0);
}
#endif

vec4 word_at(PageSpot s, uint word)
{
	return word_values(PagePairs(s.page).v[s.base / WORD_VERTICES + word]);
}
#else
// GPUs (engine.c's odf_vec4_loads): four vertices' values per load, a
// 16-byte word of float32 ones or an 8-byte word of float16 ones (the first
// in the low half), a quarter of the load instructions of a step; a
// subgroup still reads consecutive words, which coalesce.
const uint WORD_VERTICES = 4u;

#if ODF_STORAGE == ODF_FLOAT16
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer PageHalves4 {
	uvec2 v[];
};

vec4 word_at(PageSpot s, uint word)
{
	uvec2 halves = PageHalves4(s.page).v[s.base / WORD_VERTICES + word];
	return vec4(unpackHalf2x16(halves.x), unpackHalf2x16(halves.y));
}
#else
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer PageVec4 {
	vec4 v[];
};

vec4 word_at(PageSpot s, uint word)
{
	return PageVec4(s.page).v[s.base / WORD_VERTICES + word];
}
#endif
#endif

// The words that hold the vertices read (with ODF_MIRRORED the last may
// hold a few of the second half's too, read and left).
const uint READ_WORDS = (READ_VERTICES + WORD_VERTICES - 1u) / WORD_VERTICES;

// The PMF at the WORD_VERTICES vertices of word (the rest of the vec4 0).
vec4 pmf_word(Corners c, PageSpot spots[8], uint word)
{
	vec4 v = vec4(0.0);
	[[unroll]] for (int q = 0; q < 8; q++)
		v += c.weight[q] * word_at(spots[q], word);
	return v;
}

float pmf_from_odf(Corners c)
{
	uint sg = gl_SubgroupID;
	PageSpot spots[8];
	[[unroll]] for (int q = 0; q < 8; q++)
		spots[q] = PAGE_SPOT(odf, c.voxel[q]);
	float lane_max = 0.0;
	for (uint word = gl_SubgroupInvocationID; word < READ_WORDS; word += SG) {
		vec4 v = pmf_word(c, spots, word);
		[[unroll]] for (uint k = 0u; k < WORD_VERTICES; k++) {
			uint j = WORD_VERTICES * word + k;
			if (j < READ_VERTICES) {
				store_pmf(sg, j, v[k]);
				lane_max = max(lane_max, v[k]);
			}
		}
	}
	subgroupMemoryBarrierShared();
	subgroupBarrier();
	return lane_max;
}
#else
float pmf_from_odf(Corners c)
{
	uint sg = gl_SubgroupID;
	PageSpot spots[8];
	[[unroll]] for (int q = 0; q < 8; q++)
		spots[q] = PAGE_SPOT(odf, c.voxel[q]);
	float lane_max = 0.0;
	for (uint base = gl_SubgroupInvocationID; base < READ_VERTICES; base += PMF_BLOCK * SG) {
		float v[PMF_BLOCK];
		[[unroll]] for (uint b = 0u; b < PMF_BLOCK; b++)
			v[b] = 0.0;
		[[unroll]] for (int q = 0; q < 8; q++)
			[[unroll]] for (uint b = 0u; b < PMF_BLOCK; b++)
				v[b] += c.weight[q] * odf_value(spots[q], min(base + b * SG,
									      READ_VERTICES - 1u));
		[[unroll]] for (uint b = 0u; b < PMF_BLOCK; b++) {
			uint j = base + b * SG;
			if (j < READ_VERTICES) {
				store_pmf(sg, j, v[b]);
				lane_max = max(lane_max, v[b]);
			}
		}
	}
#if ODF_MIRRORED
	// The antipodes' entries are other lanes'.
	subgroupMemoryBarrierShared();
	subgroupBarrier();
#endif
	return lane_max;
}
#endif
#endif
#endif
