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
// see find_peaks_above().
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
// yet the neighbour test ran at every vertex and each round of
// select_peaks() and separated_from_peaks() read every vertex's s_cand.
// find_peaks_above() lists instead: s_cand[sg][k] holds the vertex of list
// entry k (as a float, exact below 2^24, as prob_track lists its cone).
// First the vertices at or above the PMF's floor, the only ones that can be
// local maxima (the rest are zero, and no neighbour is below zero); then,
// in place, the local maxima among them; then the kept peaks first, in rank
// order, and the candidates not yet taken. A candidate's value is computed
// again from s_pmf, which stays as zero_below() leaves it. The same peaks,
// in the same order, as zero_below() and find_peaks(). Prob's pass 1 only:
// boot's closest_peak() reads the marks by vertex.

uint listed_vertex(uint k)
{
	return uint(s_cand[gl_SubgroupID][k]);
}

// zero_below(floor_value), listing the vertices left at or above it (or not
// comparable with it: a NaN floor zeroes none) in ascending order; returns
// their number and sets base to the sphere's minimum clipped at zero, from
// which candidates are measured.
uint list_above_floor(float floor_value, out float base)
{
	uint sg = gl_SubgroupID;
	float lane_min = 3.0e38;
	uint listed = 0u;
	for (uint first = 0u; first < NV; first += SG) {
		uint j = first + gl_SubgroupInvocationID;
		bool above = false;
		if (j < NV) {
			float v = s_pmf[sg][j];
			if (v < floor_value) {
				v = 0.0;
				s_pmf[sg][j] = v;
			}
			lane_min = min(lane_min, v);
			above = !(v < floor_value);
		}
		uvec4 ballot = subgroupBallot(above);
		if (above)
			s_cand[sg][listed + subgroupBallotExclusiveBitCount(ballot)] = float(j);
		listed += subgroupBallotBitCount(ballot);
	}
	base = max(subgroupMin(lane_min), 0.0);
	return listed;
}

// Keeps the local maxima among the listed entries, in order; returns the
// largest candidate value (NOT_CANDIDATE if none). A group of entries is read
// before any lane writes, as the writes may land on entries of the group.
float keep_local_maxima(inout uint listed, float base)
{
	uint sg = gl_SubgroupID;
	float lane_top = NOT_CANDIDATE;
	uint kept = 0u;
	for (uint first = 0u; first < listed; first += SG) {
		uint k = first + gl_SubgroupInvocationID;
		uint j = k < listed ? listed_vertex(k) : 0u;
		bool cand = k < listed && is_local_max(j);
		uvec4 ballot = subgroupBallot(cand);
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		if (cand) {
			s_cand[sg][kept + subgroupBallotExclusiveBitCount(ballot)] = float(j);
			lane_top = max(lane_top, s_pmf[sg][j] - base);
		}
		kept += subgroupBallotBitCount(ballot);
	}
	listed = kept;
	return subgroupMax(lane_top);
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
// and either swaps it to entry n, kept, or to the last entry, dropped. One
// lane moves the entries, then all see them.
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

// zero_below(floor_value) and find_peaks() with the peaks listed: the first
// n entries of s_cand hold the peaks' vertices, the largest first.
uint find_peaks_above(float floor_value)
{
	float base;
	uint listed = list_above_floor(floor_value, base);
	subgroupMemoryBarrierShared();
	subgroupBarrier();   // neighbours and entries belong to other lanes
	float top = keep_local_maxima(listed, base);
	subgroupMemoryBarrierShared();
	subgroupBarrier();
	if (top < 0.0)
		return 0;
	return select_listed_peaks(pc.relative_peak_threshold * top, base, listed);
}
#endif

// The number of peaks of s_pmf[this subgroup], which the caller has filled;
// the peaks are marked in s_cand.
uint find_peaks()
{
	subgroupMemoryBarrierShared();
	subgroupBarrier();   // neighbours of a vertex belong to other lanes
	float top = mark_candidates();
	if (top < 0.0)
		return 0;
	return select_peaks(pc.relative_peak_threshold * top);
}
