// SPDX-License-Identifier: MIT
// Pass 2 of prob tracking (track.glsl): at each step a direction is drawn
// from the PMF within max_angle of the current one (DIPY
// ProbabilisticDirectionGetter).
//
// Bindings:
//   0 odf        page table (odf.glsl)
//   1 fa         page table (volume.glsl)   stop map
//   2 vertices   float[3 * NV]
//   3 seeds      float[3 * s]     the chunk's seeds (voxels), from pass 1
//   4 dirs       float[3 * MAX_PEAKS * s]  their initial directions, from pass 1
//   5 line_id    uint[2 * n]      global seed index, direction index at the seed
//   6 points     float[3 * (2 max_steps + 1) * n]   out
//   7 ranges     uint[4 * n]      out: first point slot, number of points, length
//                                 in mm (float bits), why each half stopped
//                                 (track.glsl's STOP_* codes: backward half in
//                                 bits 0-7, forward half in bits 8-15)
//   8 resume     uint[]           suspended streamlines (track.glsl)
//   9 odf_basis  float[NC * NV]   ODF_SH only (odf.glsl)
//   9 odf_max    page table       CONE_LISTS only: per voxel its largest
//                                 ODF value (odf_max.comp)
//  10 cone_lists uint[]           CONE_LISTS only (engine.c's cone lists)
//   9 cone_masks uint[]           CONE_MASKS only (engine.c's cone masks; 10
//                                 with ODF_SH)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"
#include "philox.glsl"

PAGED_TABLE(fa, 1);
#define VERTICES_BINDING 2
#include "sphere.glsl"
layout(std430, binding = 3) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 4) readonly buffer Dirs { float dirs[]; };
layout(std430, binding = 5) readonly buffer LineId { uint line_id[]; };
layout(std430, binding = 6) writeonly buffer Points { float points[]; };
layout(std430, binding = 7) writeonly buffer Ranges { uint ranges[]; };

#define ODF_BINDING 0
#define ODF_BASIS_BINDING 9
#define ODF_MAX_BINDING 9
#define CONE_LISTS_BINDING 10
#define RESUME_BINDING 8
#include "resume.glsl"
#include "odf.glsl"
#include "pmf.glsl"

// A step's PMF is only needed within the cone around dir, where the next
// direction is drawn. cone_pmf() leaves n entries in the subgroup's s_pmf
// row: on GPUs the whole sphere, entry k for vertex k (running_sum leaves out
// those outside the cone); with CONE_LISTS (CPU devices) only the cone's
// vertices, compacted in index order (entry_vertex maps them back).

// Whether vertex j lies outside the cone around dir (DIPY's cos_similarity
// test; SYMMETRIC takes the axis).
bool outside_cone(uint j, vec3 dir)
{
	return axis_cos(vertex(j), dir) < pc.cos_max_angle;
}

// Which of the count (at most 32) entries from k on lie in the cone around
// dir, a bit each, given those that surely do (inside) and those that must
// be tested (near, outside_cone): the tests run here, before running_sum's
// loop, which then holds no vertex loads (a GPU would issue them for every
// entry: the compiler hoists them out of a rarely taken branch).
uint cone_bits(uint k, uint count, vec3 dir, uint inside, uint near)
{
	uint untested = near & ~inside & (count < 32u ? (1u << count) - 1u : ~0u);
	while (untested != 0u) {
		int i = findLSB(untested);
		untested &= untested - 1u;
		if (!outside_cone(k + uint(i), dir))
			inside |= 1u << i;
	}
	return inside;
}

#if CONE_LISTS || CONE_MASKS
// Per subgroup the vertex its streamline's last step drew, so that the next
// step knows which list or masks its dir (that vertex, or its opposite where
// SYMMETRIC makes the cone the same) has; checked against dir before use, as
// a new half or a resumed step starts elsewhere.
shared uint s_dir_vertex[ITEMS];

void set_dir_vertex(uint j)
{
	s_dir_vertex[gl_SubgroupID] = j;
}

// Whether dir stands on vertex i (or its opposite where SYMMETRIC makes
// the cone the same).
bool on_vertex(uint i, vec3 dir)
{
	return vertex(i) == dir || (SYMMETRIC != 0 && vertex(i) == -dir);
}

// The vertex dir stands on, NV where none: a half starts on a peak of pass
// 1, a vertex, and a resumed step on the vertex its last step drew. Lanes
// load the rest of a vertex only where its x matches, so the search costs
// about a load per vertex, where the whole sphere's cone search costs three
// and the ODF at half the sphere's cone.
uint find_dir_vertex(vec3 dir)
{
	for (uint base = 0u; base < NV; base += SG) {
		uint j = min(base + gl_SubgroupInvocationID, NV - 1u);
		float x = vertices[3u * j];
		bool hit = false;
		if (x == dir.x || (SYMMETRIC != 0 && x == -dir.x))
			hit = on_vertex(j, dir);
		uvec4 hits = subgroupBallot(hit);
		if (subgroupBallotBitCount(hits) > 0u)
			return base + subgroupBallotFindLSB(hits);
	}
	return NV;
}

// The vertex dir stands on, NV where none.
uint dir_vertex(vec3 dir)
{
	uint i = s_dir_vertex[gl_SubgroupID];
	if (!(i < NV && on_vertex(i, dir))) {
		i = find_dir_vertex(dir);
		set_dir_vertex(i);
	}
	return i;
}
#endif

#if CONE_LISTS
// The cone's vertices are looked for among the listed neighbours of the
// vertex dir stands on, or where that is not known among all vertices:
// candidate(c, a) for a in [first, end).
struct Candidates {
	uint first, end;
	bool listed;
};

// engine.c's cone lists: NV + 1 offsets into this buffer, then per vertex
// the vertices within about max_angle of it (a margin wider: each is tested
// again here), in index order.
layout(std430, binding = CONE_LISTS_BINDING) readonly buffer ConeLists { uint cone_lists[]; };

// With ODF_MIRRORED only the first half's: a symmetric cone's list holds
// vertex j + NV/2 exactly where it holds j (sphere.c; the sphere's second
// half is its first negated), after the first half's, in the same order.
Candidates cone_candidates(vec3 dir)
{
	uint i = dir_vertex(dir);
	Candidates c = i < NV ? Candidates(cone_lists[i], cone_lists[i + 1u], true)
			      : Candidates(0u, NV, false);
#if ODF_MIRRORED
	c.end = (c.first + c.end) / 2u;
#endif
	return c;
}

// What cone_values() found for the step being drawn, for entry_vertex(): the
// candidates, and the entries before step_aligned, which are candidates
// first, first + 1, ... in order, as every candidate before them lay in the
// cone: their vertices are loaded again (one load for the subgroup, lavapipe
// loading an address every lane shares once) instead of stored at each
// entry (a store per lane) and cone_candidates() is not run again.
Candidates step_candidates;
uint step_aligned;

// sphere.h's SPHERE_CONE_INSIDE: a listed vertex inside the cone in any
// rounding, which needs no test (nor its vertex loaded).
const uint CONE_INSIDE = 1u << 31;

// Candidate a's word: its vertex, with CONE_INSIDE where listed so.
uint candidate_word(Candidates c, uint a)
{
	return c.listed ? cone_lists[a] : a;
}

uint candidate(Candidates c, uint a)
{
	return candidate_word(c, a) & ~CONE_INSIDE;
}

// Candidate a of c (past the end: the last one) and whether it lies in
// the cone.
uint candidate_in_cone(Candidates c, uint a, vec3 dir, out bool inside)
{
	uint word = candidate_word(c, min(a, c.end - 1u));
	uint j = word & ~CONE_INSIDE;
	inside = (word & CONE_INSIDE) != 0u;
	if (!inside)
		inside = !outside_cone(j, dir);
	inside = inside && a < c.end;
	return j;
}

// The entries per candidate: with ODF_MIRRORED each candidate's value
// stands for its antipode too.
#if ODF_MIRRORED
const uint CANDIDATE_ENTRIES = 2u;
#else
const uint CANDIDATE_ENTRIES = 1u;
#endif

// Whether the row keeps each entry's vertex behind the entries: where it
// has room for as many as there are candidates.
bool keeps_vertices(Candidates c)
{
	return (CANDIDATE_ENTRIES + 1u) * (c.end - c.first) <= NV;
}

// The vertex of entry k of the candidates' entries in the cone around dir: a
// candidate's before step_aligned, after it kept behind the entries by
// cone_values where the row has room, else found again.
uint candidate_entry_vertex(uint k, vec3 dir)
{
	Candidates c = step_candidates;
	if (k < step_aligned)
		return candidate(c, c.first + k);
	if (keeps_vertices(c))
		return uint(s_pmf[gl_SubgroupID][NV - 1u - k]);
	for (uint at = c.first; at < c.end; at += SG) {
		bool inside;
		candidate_in_cone(c, at + gl_SubgroupInvocationID, dir, inside);
		uvec4 cone = subgroupBallot(inside);
		if (k < subgroupBallotBitCount(cone))
			return candidate(c, at + subgroupBallotFindLSB(subgroupBallot(
				inside && subgroupBallotExclusiveBitCount(cone) == k)));
		k -= subgroupBallotBitCount(cone);
	}
	return NV - 1u;   // not reached for k below the cone's size
}

// The vertex of entry k of the n in the cone around dir; with ODF_MIRRORED
// the second half of the entries are the first's antipodes.
uint entry_vertex(uint k, uint n, vec3 dir)
{
#if ODF_MIRRORED
	if (k >= n / 2u)
		return candidate_entry_vertex(k - n / 2u, dir) + NV / 2u;
#endif
	return candidate_entry_vertex(k, dir);
}

// Every entry lies in the cone.
uint cone_window(uint k, uint count, vec3 dir)
{
	return ~0u;
}

// CPU devices with sampled storage: the ODF is read at the cone's vertices
// only, the cone found among dir's listed neighbours (lavapipe runs every
// lane's load on its own, and a step's loads set its time). The floor,
// pmf_threshold of the PMF's maximum over the whole sphere as in DIPY, is
// settled without reading the rest when no cone value lies between
// pmf_threshold times the cone's maximum (a lower bound of the maximum) and
// pmf_threshold times odf_max interpolated (an upper bound: the PMF sums
// non-negative weights times values, each at most its corner's largest):
// every cone value then falls on the same side of either bound as of the
// true floor. Otherwise the sphere is scanned for its maximum (sphere_max).
PAGED_TABLE(odf_max, ODF_MAX_BINDING);

// Rounding slack on the upper bound: the bound and the PMF may round their
// sums differently (fused or not), by a few ulps.
const float BOUND_SLACK = 1.0001;

// The ODF interpolated at vertex j, summed as pmf_from_odf() sums it.
float pmf_at(Corners c, PageSpot spots[8], uint j)
{
	float v = 0.0;
	[[unroll]] for (int q = 0; q < 8; q++)
		v += c.weight[q] * odf_value(spots[q], j);
	return v;
}

// The PMF at the cone's vertices into the row, in index order, and where
// keeps_vertices the vertex of each entry from step_aligned on behind them
// (as a float, exact below 2^24): the two never meet, as an entry's index
// stays below the candidates' count (with ODF_MIRRORED the antipodes'
// entries after them too: keeps_vertices). step_aligned: the first entry of
// the first group of candidates with one outside the cone. Returns how many
// entries; lane_max: this lane's largest value, lane_below: its largest
// below high (-1 where none).
uint cone_values(Corners c, PageSpot spots[8], vec3 dir, float high, out float lane_max,
		 out float lane_below)
{
	uint sg = gl_SubgroupID;
	Candidates cand = cone_candidates(dir);
	step_candidates = cand;
	bool keep = keeps_vertices(cand);
	uint n = 0u;
	lane_max = 0.0;
	lane_below = -1.0;
	step_aligned = NV;
	for (uint at = cand.first; at < cand.end; at += SG) {
		bool inside;
		uint j = candidate_in_cone(cand, at + gl_SubgroupInvocationID, dir, inside);
		uvec4 cone = subgroupBallot(inside);
		if (step_aligned == NV && subgroupBallotBitCount(cone) < min(SG, cand.end - at))
			step_aligned = n;
		if (inside) {
			uint k = n + subgroupBallotExclusiveBitCount(cone);
			float v = pmf_at(c, spots, j);
			s_pmf[sg][k] = v;
			if (keep && k >= step_aligned)
				s_pmf[sg][NV - 1u - k] = float(j);
			lane_max = max(lane_max, v);
			if (v < high)
				lane_below = max(lane_below, v);
		}
		n += subgroupBallotBitCount(cone);
	}
	subgroupMemoryBarrierShared();
	subgroupBarrier();
#if ODF_MIRRORED
	// The antipodes' entries, in the same order after the first half's.
	for (uint k = gl_SubgroupInvocationID; k < n; k += SG)
		s_pmf[sg][n + k] = s_pmf[sg][k];
	n *= 2u;
	subgroupMemoryBarrierShared();
	subgroupBarrier();
#endif
	return n;
}

#if ODF_PAIR_LOADS
const uint SPHERE_WORDS = READ_WORDS;
#else
const uint SPHERE_WORDS = READ_VERTICES;
#endif

// The largest PMF value of a word of vertices (with ODF_PAIR_LOADS as
// pmf_from_odf() reads them, else one vertex).
float word_max(Corners c, PageSpot spots[8], uint word)
{
#if ODF_PAIR_LOADS
	vec4 v = pmf_word(c, spots, word);
	return max(max(v.x, v.y), max(v.z, v.w));
#else
	return pmf_at(c, spots, word);
#endif
}

// The largest PMF value on the whole sphere, all lanes alike, or a smaller
// one, at least cone_max, once pmf_threshold times it exceeds undecided (the
// largest cone value between the bounds): that floor leaves every cone value
// on the side the whole sphere's floor does (those between the bounds below
// both, the rest outside the bounds), and the scan stops early.
float sphere_max(Corners c, PageSpot spots[8], float cone_max, float undecided)
{
	float lane_max = cone_max;
	for (uint base = 0u; base < SPHERE_WORDS; base += SG) {
		uint word = base + gl_SubgroupInvocationID;
		if (word < SPHERE_WORDS)
			lane_max = max(lane_max, word_max(c, spots, word));
		if (subgroupAny(pc.pmf_threshold * lane_max > undecided))
			break;
	}
	return subgroupMax(lane_max);
}

float cone_pmf(Corners c, vec3 dir, out uint n)
{
	PageSpot spots[8];
	float bound = 0.0;
#if CORNER_LANES
	uint lane_voxel = lane_corner_voxel(c);
	PageSpot lane_spot = PAGE_SPOT(odf, lane_voxel);
	[[unroll]] for (uint q = 0u; q < 8u; q++)
		spots[q] = PageSpot(subgroupBroadcast(lane_spot.page, q),
				    subgroupBroadcast(lane_spot.base, q));
	bound = corner_lanes_sum(c, page_f32(PAGE_SPOT(odf_max, lane_voxel), 0u));
#else
	[[unroll]] for (int q = 0; q < 8; q++) {
		spots[q] = PAGE_SPOT(odf, c.voxel[q]);
		bound += c.weight[q] * page_f32(PAGE_SPOT(odf_max, c.voxel[q]), 0u);
	}
#endif
	float high = pc.pmf_threshold * (bound * BOUND_SLACK);
	float lane_max, lane_below;
	n = cone_values(c, spots, dir, high, lane_max, lane_below);
	float cone_max = subgroupMax(lane_max);
	float low = pc.pmf_threshold * cone_max;
	// A value lies between the bounds exactly when the largest below high
	// is at least low.
	float undecided = subgroupMax(lane_below);
	if (undecided < low)
		return low;
	return pc.pmf_threshold * sphere_max(c, spots, cone_max, undecided);
}
#else
// GPUs: the PMF on the whole sphere, which also gives the floor, read a
// block of consecutive vertices per load as they coalesce them.
#if CONE_MASKS
// engine.c's cone masks: per vertex i, MASK_WORDS words with bit j % 32 of
// word j / 32 set where vertex j lies near i's cone (the cone lists' margin
// wider), then MASK_WORDS with it set where j lies inside in any rounding:
// only the vertices near the edge are tested (a vertex's load and a dot
// product each, otherwise taken for every vertex the floor keeps), and a
// lane reads the bits of its next 32 entries in two words.
#if ODF_STORAGE == ODF_SH
#define CONE_MASKS_BINDING 10
#else
#define CONE_MASKS_BINDING 9
#endif
layout(std430, binding = CONE_MASKS_BINDING) readonly buffer ConeMasks { uint cone_masks[]; };
const uint MASK_WORDS = (NV + 31u) / 32u;

// The vertex the step's dir stands on, NV where none.
uint step_vertex;

void find_step_vertex(vec3 dir)
{
	step_vertex = dir_vertex(dir);
}

// Bits k to k + 31 of the step vertex's mask that starts at word at.
uint mask_bits(uint at, uint k)
{
	uint word = k / 32u, shift = k % 32u;
	uint low = cone_masks[at + word] >> shift;
	if (shift == 0u)
		return low;
	return low | cone_masks[at + min(word + 1u, MASK_WORDS - 1u)] << (32u - shift);
}

// Where dir stands on no vertex, every entry is tested.
uint cone_window(uint k, uint count, vec3 dir)
{
	if (step_vertex == NV)
		return cone_bits(k, count, dir, 0u, ~0u);
	uint at = 2u * MASK_WORDS * step_vertex;
	return cone_bits(k, count, dir, mask_bits(at + MASK_WORDS, k), mask_bits(at, k));
}
#else
void find_step_vertex(vec3 dir)
{
}

// Every entry is tested.
uint cone_window(uint k, uint count, vec3 dir)
{
	return cone_bits(k, count, dir, 0u, ~0u);
}

void set_dir_vertex(uint j)
{
}
#endif

float cone_pmf(Corners c, vec3 dir, out uint n)
{
	n = NV;
	find_step_vertex(dir);
	return pmf_floor_toward(dir, pmf_from_odf(c));
}

uint entry_vertex(uint k, uint n, vec3 dir)
{
	return k;
}
#endif

// The running sum is taken in runs: lane l sums the run of run_length(n)
// consecutive entries from l * run_length(n) on by itself, and one scan of
// the lanes' totals gives each run the sum of those ahead of it. A step's
// chain of dependent operations is then a run's additions and one scan,
// where a scan per SG entries chained 23 scans on a GPU's 724 vertices; an
// odd run length keeps the lanes' shared-memory reads in distinct banks.
uint run_length(uint n)
{
	return ((n + SG - 1u) / SG) | 1u;
}

// The entries [first, end) of lane's run among n.
uvec2 lane_run(uint lane, uint n)
{
	uint first = min(lane * run_length(n), n);
	return uvec2(first, min(first + run_length(n), n));
}

// Turns each of the n entries into the running sum, within its run, of the
// entries' parts within the cone around dir (entries below floor_value or
// outside the cone count as zero). Returns the total, all lanes alike;
// before: the sum of the runs ahead of this lane's, so that entry k of it
// stands for before + s_pmf[k]; last_nonzero: the highest entry with a
// non-zero part.
float running_sum(uint n, vec3 dir, float floor_value, out float before, out int last_nonzero)
{
	uint sg = gl_SubgroupID;
	uvec2 run = lane_run(gl_SubgroupInvocationID, n);
	float sum = 0.0;
	int lane_last = -1;
	// Entries another lane wrote (a lane's run is not its vertices).
	subgroupMemoryBarrierShared();
	subgroupBarrier();
	uint in_cone;
	for (uint k = run.x; k < run.y; k++) {
		uint i = (k - run.x) % 32u;
		if (i == 0u)
			in_cone = cone_window(k, run.y - k, dir);
		float v = s_pmf[sg][k];
		if (v < floor_value || (in_cone >> i & 1u) == 0u)
			v = 0.0;
		sum += v;
		s_pmf[sg][k] = sum;
		if (v > 0.0)
			lane_last = int(k);
	}
	before = subgroupExclusiveAdd(sum);
	last_nonzero = subgroupMax(lane_last);
	subgroupMemoryBarrierShared();
	subgroupBarrier();
	return subgroupBroadcast(before + sum, SG - 1);
}

// The first of the n entries whose running sum exceeds x (DIPY's search),
// or fallback when rounding leaves none: the first run whose last sum
// exceeds x holds it; its entries are then searched SG at a time.
uint first_above(float x, uint n, float before, uint fallback)
{
	uint sg = gl_SubgroupID;
	uvec2 run = lane_run(gl_SubgroupInvocationID, n);
	uvec4 runs = subgroupBallot(run.x < run.y && x < before + s_pmf[sg][max(run.y, 1u) - 1u]);
	if (subgroupBallotBitCount(runs) == 0u)
		return fallback;
	uint owner = subgroupBallotFindLSB(runs);
	// The owner's before, exactly: the others add zero to its maximum.
	float owner_before = subgroupMax(gl_SubgroupInvocationID == owner ? before : 0.0);
	uvec2 owned = lane_run(owner, n);
	for (uint base = owned.x; base < owned.y; base += SG) {
		uint k = base + gl_SubgroupInvocationID;
		uvec4 hit = subgroupBallot(k < owned.y &&
					   x < owner_before + s_pmf[sg][min(k, owned.y - 1u)]);
		if (subgroupBallotBitCount(hit) > 0u)
			return base + subgroupBallotFindLSB(hit);
	}
	return fallback;   // not reached: the run's last sum exceeds x
}

// Samples a vertex from the PMF restricted to the cone around dir, in vertex
// index order as DIPY (first j with x < cdf[j], x uniform in [0, total)), and
// turns it to point forward. Returns false when the PMF is empty in the cone.
bool next_direction(vec3 p, inout vec3 dir, uvec4 counter)
{
	Corners c;
	if (!corners_at(p, pc.dim, c))
		return false;
	uint n;
	float floor_value = cone_pmf(c, dir, n);
	float before;
	int last_nonzero;
	float total = running_sum(n, dir, floor_value, before, last_nonzero);
	if (total <= 0.0)
		return false;
	counter.w = PHILOX_STREAM_PROB;
	float x = philox_uniform(philox4x32_10(counter, pc.philox_key).x) * total;
	// x < total always holds in exact arithmetic; rounding can break it.
	uint j = entry_vertex(first_above(x, n, before, uint(last_nonzero)), n, dir);
	vec3 v = vertex(j);
	dir = dot(v, dir) > 0.0 ? v : -v;
	set_dir_vertex(j);
	return true;
}

// The PMF is sampled at the point; the step goes one step_size ahead.
float getter_reach()
{
	return pc.step_size;
}

void prepare_workgroup()
{
}

#include "track.glsl"
