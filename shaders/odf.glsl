// SPDX-License-Identifier: MIT
// The fibre ODF, a paged volume (volume.glsl) bound at ODF_BINDING and
// stored as ODF_STORAGE says:
//   ODF_FLOAT32, ODF_FLOAT16: its values on the sphere's vertices, clipped at
//     zero before upload;
//   ODF_SH: its NC SH coefficients, with the sampling matrix odf_basis[]
//     (NC x NV, row-major) at ODF_BASIS_BINDING; negative sampled values fall
//     under the PMF threshold.
// The including kernel defines ODF_BINDING (and ODF_BASIS_BINDING) and
// includes common.glsl, interp.glsl and volume.glsl first. Kernels read the
// ODF through odf_vertex() (one vertex) or pmf.glsl's pmf_from_odf() (the
// whole sphere).

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
