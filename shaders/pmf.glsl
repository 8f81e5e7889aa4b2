// SPDX-License-Identifier: MIT
// The PMF at a point: the ODF interpolated trilinearly; values below
// pmf_threshold * max count as zero, as in DIPY's PmfGen-based direction
// getters. The ODF is a paged volume (volume.glsl) bound at ODF_BINDING,
// stored as ODF_STORAGE says:
//   ODF_FLOAT32, ODF_FLOAT16: its values on the sphere's vertices, clipped at
//     zero before upload;
//   ODF_SH: its NC SH coefficients, with the sampling matrix odf_basis[]
//     (NC x NV, row-major) at ODF_BASIS_BINDING. The coefficients are
//     interpolated and then sampled, as DIPY's SHCoeffPmfGen does; negative
//     values fall under the PMF threshold.
// The including kernel includes common.glsl, interp.glsl and volume.glsl.
// Kernels read the ODF only through interpolate_odf() and odf_vertex().

#extension GL_EXT_control_flow_attributes : require

#define ODF_FLOAT32 0
#define ODF_FLOAT16 1
#define ODF_SH 2

PAGED_TABLE(odf, ODF_BINDING);
#if ODF_STORAGE == ODF_SH
layout(std430, binding = ODF_BASIS_BINDING) readonly buffer OdfBasis { float odf_basis[]; };
#endif

float odf_value(PageSpot s, uint channel)
{
#if ODF_STORAGE == ODF_FLOAT16
	return page_f16(s, channel);
#else
	return page_f32(s, channel);
#endif
}

#if ODF_STORAGE == ODF_SH
// Coefficient by coefficient: interpolated (every lane loads the same
// addresses, which the hardware serves once), then added to this lane's
// vertices, so no lane holds all coefficients at once. Lanes past NV
// compute a copy of the last vertex and drop it at the end.
void interpolate_odf(Corners c, out float values[VERTS_PER_LANE])
{
	PageSpot spots[8];
	for (int q = 0; q < 8; q++)
		spots[q] = PAGE_SPOT(odf, c.voxel[q]);
	for (uint k = 0; k < VERTS_PER_LANE; k++)
		values[k] = 0.0;
	[[dont_unroll]] for (uint m = 0; m < NC; m++) {
		float coef = 0.0;
		for (int q = 0; q < 8; q++)
			coef += c.weight[q] * odf_value(spots[q], m);
		[[unroll]] for (uint k = 0; k < VERTS_PER_LANE; k++) {
			uint j = min(gl_SubgroupInvocationID + k * SG, NV - 1);
			values[k] += odf_basis[m * NV + j] * coef;
		}
	}
	for (uint k = 0; k < VERTS_PER_LANE; k++)
		values[k] = gl_SubgroupInvocationID + k * SG < NV ? values[k] : 0.0;
}
#else
// Interpolates this lane's vertices (gl_SubgroupInvocationID + k SG) into
// values[k], 0 past NV. Corners form the outer loop so that the loads of one
// corner are independent and in flight together; per vertex the sum still
// runs over corners 0..7 in order. Lanes past NV read a valid index and add
// zero, so every store is unconditional.
void interpolate_odf(Corners c, out float values[VERTS_PER_LANE])
{
	for (uint k = 0; k < VERTS_PER_LANE; k++)
		values[k] = 0.0;
	for (int q = 0; q < 8; q++) {
		PageSpot s = PAGE_SPOT(odf, c.voxel[q]);
		float w = c.weight[q];
		for (uint k = 0; k < VERTS_PER_LANE; k++) {
			uint j = gl_SubgroupInvocationID + k * SG;
			values[k] += j < NV ? w * odf_value(s, min(j, NV - 1)) : 0.0;
		}
	}
}
#endif

// One vertex's value interpolated at the corners c (DIPY get_pmf_value_c once
// the vertex is chosen); the weights may carry a per-voxel factor. Sampled
// storages only: ptt, its one user, refuses SH storage (engine.c).
#if ODF_STORAGE != ODF_SH
float odf_vertex(Corners c, uint vertex)
{
	float v = 0.0;
	for (int q = 0; q < 8; q++)
		v += c.weight[q] * odf_value(PAGE_SPOT(odf, c.voxel[q]), vertex);
	return v;
}
#endif
