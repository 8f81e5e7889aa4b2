// SPDX-License-Identifier: MIT
// Peaks of a function on the sphere, as DIPY's peak_directions finds them:
// local maxima over the sphere's edges, kept when at least
// relative_peak_threshold of the largest one above max(0, min), taken in
// descending order (lowest index first on ties, as DIPY's stable sort) and
// dropped when closer than min_separation_angle to a peak already kept.
//
// The including kernel declares the buffers vertices, nbr_offset and nbr
// (sphere.h's CSR neighbour lists) and the shared arrays
// s_pmf[ITEMS][NV] (the function) and s_cand[ITEMS][NV] (scratch).

vec3 vertex(uint j)
{
	return vec3(vertices[3 * j], vertices[3 * j + 1], vertices[3 * j + 2]);
}

// DIPY _compare_neighbors: a vertex is a maximum when no neighbour is larger
// and at least one is smaller.
bool is_local_max(uint j)
{
	uint sg = gl_SubgroupID;
	float v = s_pmf[sg][j];
	bool smaller_seen = false;
	for (int e = nbr_offset[j]; e < nbr_offset[j + 1]; e++) {
		float w = s_pmf[sg][nbr[e]];
		if (w > v)
			return false;
		smaller_seen = smaller_seen || w < v;
	}
	return smaller_seen;
}

// Marks the local maxima in s_cand and returns the largest candidate value.
float mark_candidates()
{
	uint sg = gl_SubgroupID;
	float lane_min = 3.0e38;
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < NV)
			lane_min = min(lane_min, s_pmf[sg][j]);
	}
	float base = max(subgroupMin(lane_min), 0.0);
	float lane_top = -1.0;
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < NV) {
			float cand = is_local_max(j) ? s_pmf[sg][j] - base : -1.0;
			s_cand[sg][j] = cand;
			lane_top = max(lane_top, cand);
		}
	}
	return subgroupMax(lane_top);
}

// Takes candidates of at least keep_from in descending order and keeps those
// separated from every kept one; returns how many, all lanes alike.
uint select_peaks(float keep_from, out vec3 kept[MAX_PEAKS])
{
	uint sg = gl_SubgroupID;
	uint n = 0;
	while (n < MAX_PEAKS) {
		float best = -1.0;
		uint best_j = 0xffffffffu;
		for (uint k = 0; k < VERTS_PER_LANE; k++) {
			uint j = gl_SubgroupInvocationID + k * SG;
			if (j < NV && s_cand[sg][j] >= keep_from && s_cand[sg][j] > best) {
				best = s_cand[sg][j];
				best_j = j;
			}
		}
		float top = subgroupMax(best);
		if (top < 0.0)
			break;
		uint top_j = subgroupMin(best == top ? best_j : 0xffffffffu);
		if (gl_SubgroupInvocationID == top_j % SG)
			s_cand[sg][top_j] = -1.0;
		vec3 v = vertex(top_j);
		bool separated = true;
		for (uint a = 0; a < n; a++)
			separated = separated && axis_cos(v, kept[a]) <= pc.peak.y;
		if (separated)
			kept[n++] = v;
	}
	return n;
}

// The peaks of s_pmf[this subgroup], which the caller has filled.
uint find_peaks(out vec3 kept[MAX_PEAKS])
{
	subgroupMemoryBarrierShared();
	subgroupBarrier();   // neighbours of a vertex belong to other lanes
	float top = mark_candidates();
	subgroupMemoryBarrierShared();
	subgroupBarrier();
	if (top < 0.0)
		return 0;
	return select_peaks(pc.peak.x * top, kept);
}
