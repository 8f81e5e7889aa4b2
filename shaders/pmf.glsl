// SPDX-License-Identifier: MIT
// The PMF at a point: the ODF interpolated trilinearly (odf[] is clipped at
// zero before upload), with values below pmf_threshold * max set to zero, as
// DIPY's PmfGen-based direction getters do. The including kernel declares the
// odf[] and vertices[] buffers and `shared float s_pmf[ITEMS][NV]`.

vec3 vertex(uint j)
{
	return vec3(vertices[3 * j], vertices[3 * j + 1], vertices[3 * j + 2]);
}

// Fills s_pmf[this subgroup][0..NV). Returns false outside the volume.
bool sample_pmf(vec3 p)
{
	Corners c;
	if (!corners_at(p, pc.dim.xyz, c))
		return false;
	uint sg = gl_SubgroupID;
	float lane_max = 0.0;
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < NV) {
			float v = 0.0;
			for (int q = 0; q < 8; q++)
				v += c.weight[q] * odf[c.voxel[q] * NV + j];
			s_pmf[sg][j] = v;
			lane_max = max(lane_max, v);
		}
	}
	float floor_value = pc.track.z * subgroupMax(lane_max);
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < NV && s_pmf[sg][j] < floor_value)
			s_pmf[sg][j] = 0.0;
	}
	return true;
}
