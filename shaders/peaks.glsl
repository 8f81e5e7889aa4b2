// SPDX-License-Identifier: MIT
// Peaks of a function on the sphere, as DIPY's peak_directions finds them:
// local maxima over the sphere's edges, kept when at least
// relative_peak_threshold of the largest one above max(0, min), taken in
// descending order (lowest index first on ties, as DIPY's stable sort) and
// dropped when closer than min_separation_angle to a peak already kept.
//
// The function is this subgroup's row of s_pmf (pmf.glsl). The peaks are
// left in s_cand, by vertex, rather than in a list: the peak of rank a
// (0 = the largest) is the vertex whose s_cand is peak_mark(a), so no lane
// holds an array that grows with the number of peaks.
//
// With PEAK_LISTS (CPU devices, prob's pass 1) the peaks are listed instead:
// see find_listed_peaks().
//
// The including kernel declares the buffers nbr_offset and nbr (sphere.h's
// CSR neighbour lists) and includes sphere.glsl and pmf.glsl first.

// Per vertex: its value above the base if it is a candidate, NOT_CANDIDATE,
// or a peak's mark.
shared float s_cand[ITEMS][NV];

const float NOT_CANDIDATE = -1.0;

float peak_mark(uint rank)
{
	return -2.0 - float(rank);
}

bool is_peak(float cand)
{
	return cand <= -2.0;
}

uint peak_rank(float mark)
{
	return uint(-2.0 - mark);
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
	for (uint j = gl_SubgroupInvocationID; j < NV; j += SG)
		lane_min = min(lane_min, s_pmf[sg][j]);
	float base = max(subgroupMin(lane_min), 0.0);
	float lane_top = -1.0;
	for (uint j = gl_SubgroupInvocationID; j < NV; j += SG) {
		float cand = is_local_max(j) ? s_pmf[sg][j] - base : NOT_CANDIDATE;
		s_cand[sg][j] = cand;
		lane_top = max(lane_top, cand);
	}
	return subgroupMax(lane_top);
}

// Whether v is more than min_separation_angle from every peak kept so far.
bool separated_from_peaks(vec3 v)
{
	uint sg = gl_SubgroupID;
	bool separated = true;
	for (uint j = gl_SubgroupInvocationID; j < NV; j += SG)
		if (is_peak(s_cand[sg][j]))
			separated = separated &&
				    axis_cos(v, vertex(j)) <= pc.cos_min_separation_angle;
	return subgroupAll(separated);
}

// Takes candidates of at least keep_from in descending order and keeps those
// separated from every kept one; returns how many, all lanes alike. Each
// lane reads and writes only the s_cand entries of its own vertices.
uint select_peaks(float keep_from)
{
	uint sg = gl_SubgroupID;
	uint n = 0;
	while (n < MAX_PEAKS) {
		float best = -1.0;
		uint best_j = 0xffffffffu;
		for (uint j = gl_SubgroupInvocationID; j < NV; j += SG) {
			float cand = s_cand[sg][j];
			if (cand >= keep_from && cand > best) {
				best = cand;
				best_j = j;
			}
		}
		float top = subgroupMax(best);
		if (top < 0.0)
			break;
		uint top_j = subgroupMin(best == top ? best_j : 0xffffffffu);
		bool kept = separated_from_peaks(vertex(top_j));
		if (gl_SubgroupInvocationID == top_j % SG)
			s_cand[sg][top_j] = kept ? peak_mark(n) : NOT_CANDIDATE;
		if (kept)
			n++;
	}
	return n;
}

#if PEAK_LISTS
// CPU devices (engine.c's peak_lists): lavapipe runs each lane's load on its
// own, and a seed has a handful of local maxima among the sphere's vertices,
// yet each round of select_peaks() and separated_from_peaks() reads every
// vertex's s_cand. Here the local maxima are listed instead: s_cand[sg][k]
// holds the vertex of list entry k (as a float, exact below 2^24, as
// prob_track lists its cone), the kept peaks first in rank order, then the
// candidates not yet taken; a candidate's value is computed again from
// s_pmf, which stays as filled. Only vertices above the sphere's minimum
// are tested for a local maximum: one at the minimum has no smaller
// neighbour. The same peaks, in the same order, as the marks by vertex.
// Prob only: boot's closest_peak() reads the marks by vertex.

// Lists the local maxima in s_cand in ascending vertex order; returns the
// largest candidate value (NOT_CANDIDATE if none) and sets listed to their
// number and base to the value candidates are measured from.
float list_candidates(out uint listed, out float base)
{
	uint sg = gl_SubgroupID;
	float lane_min = 3.0e38;
	for (uint j = gl_SubgroupInvocationID; j < NV; j += SG)
		lane_min = min(lane_min, s_pmf[sg][j]);
	float sphere_min = subgroupMin(lane_min);
	base = max(sphere_min, 0.0);
	float lane_top = NOT_CANDIDATE;
	listed = 0u;
	for (uint first = 0u; first < NV; first += SG) {
		uint j = first + gl_SubgroupInvocationID;
		bool cand = j < NV && s_pmf[sg][j] > sphere_min && is_local_max(j);
		uvec4 ballot = subgroupBallot(cand);
		if (cand) {
			s_cand[sg][listed + subgroupBallotExclusiveBitCount(ballot)] = float(j);
			lane_top = max(lane_top, s_pmf[sg][j] - base);
		}
		listed += subgroupBallotBitCount(ballot);
	}
	return subgroupMax(lane_top);
}

uint listed_vertex(uint k)
{
	return uint(s_cand[gl_SubgroupID][k]);
}

// separated_from_peaks() over the n kept peaks at the list's start.
bool separated_from_listed_peaks(vec3 v, uint n)
{
	bool separated = true;
	for (uint k = gl_SubgroupInvocationID; k < n; k += SG)
		separated = separated && axis_cos(v, vertex(listed_vertex(k))) <=
						 pc.cos_min_separation_angle;
	return subgroupAll(separated);
}

// select_peaks() over the list: each round takes the largest candidate of
// at least keep_from (the lowest vertex on ties) out of entries [n, listed)
// and either swaps it to entry n, kept, or replaces it with the last
// candidate, dropped. One lane moves the entries, then all see them.
uint select_listed_peaks(float keep_from, float base, uint listed)
{
	uint sg = gl_SubgroupID;
	uint n = 0;
	while (n < MAX_PEAKS) {
		float best = -1.0;
		uint best_j = 0xffffffffu;
		uint best_k = 0u;
		for (uint k = n + gl_SubgroupInvocationID; k < listed; k += SG) {
			uint j = listed_vertex(k);
			float cand = s_pmf[sg][j] - base;
			if (cand >= keep_from && (cand > best || (cand == best && j < best_j))) {
				best = cand;
				best_j = j;
				best_k = k;
			}
		}
		float top = subgroupMax(best);
		if (top < 0.0)
			break;
		uint top_j = subgroupMin(best == top ? best_j : 0xffffffffu);
		uint top_k = subgroupMin(best_j == top_j ? best_k : 0xffffffffu);
		bool kept = separated_from_listed_peaks(vertex(top_j), n);
		if (subgroupElect()) {
			uint moved = kept ? n : listed - 1u;
			s_cand[sg][top_k] = s_cand[sg][moved];
			s_cand[sg][moved] = float(top_j);
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		if (kept)
			n++;
		else
			listed--;
	}
	return n;
}

// find_peaks() with the peaks listed: the first n entries of s_cand hold
// the peaks' vertices, the largest first.
uint find_listed_peaks()
{
	uint listed;
	float base;
	float top = list_candidates(listed, base);
	subgroupMemoryBarrierShared();
	subgroupBarrier();   // entries of the list belong to other lanes
	if (top < 0.0)
		return 0;
	return select_listed_peaks(pc.relative_peak_threshold * top, base, listed);
}
#endif

// The number of peaks of s_pmf[this subgroup], which the caller has filled;
// the peaks are marked in s_cand (listed with PEAK_LISTS).
uint find_peaks()
{
	subgroupMemoryBarrierShared();
	subgroupBarrier();   // neighbours of a vertex belong to other lanes
#if PEAK_LISTS
	return find_listed_peaks();
#else
	float top = mark_candidates();
	if (top < 0.0)
		return 0;
	return select_peaks(pc.relative_peak_threshold * top);
#endif
}
