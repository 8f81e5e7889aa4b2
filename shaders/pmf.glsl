// SPDX-License-Identifier: MIT
// The PMF at a point: the ODF interpolated trilinearly (odf[] is clipped at
// zero before upload); values below pmf_threshold * max count as zero, as in
// DIPY's PmfGen-based direction getters. The including kernel declares the
// odf[] buffer.

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
		uint base = c.voxel[q] * NV;
		float w = c.weight[q];
		for (uint k = 0; k < VERTS_PER_LANE; k++) {
			uint j = gl_SubgroupInvocationID + k * SG;
			values[k] += j < NV ? w * odf[base + min(j, NV - 1)] : 0.0;
		}
	}
}
