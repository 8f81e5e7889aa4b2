// SPDX-License-Identifier: MIT
// Pass 2 of ptt tracking (track.glsl, ptt.glsl). Pass 1 is prob_init.comp:
// the initial directions are the PMF's peaks at the seed.
//
// One curve runs through the seed: its frame and first arc are sampled there
// along +first (else along -first), the half along that direction follows
// them, and the other half starts from the reversed frame (-t, -n, b) with an
// arc sampled anew, so the streamline is smooth through the seed. At each
// step the current arc is followed for step_size and the next one sampled at
// the new point; when none is found that point is not kept (DIPY).
//
// Bindings:
//   0 odf        page table (odf.glsl)
//   1 fa         page table (volume.glsl)   stop map
//   2 vertices   float[3 * NV]
//   3 odf_scale  page table       1 / the voxel's ODF maximum, 0 where not tracked
//   4 lut        uint[]           nearest-vertex table (daemon/engine/ptt.h)
//   5 seeds      float[3 * s]     the chunk's seeds (voxels), from pass 1
//   6 dirs       float[3 * MAX_PEAKS * s]  their initial directions, from pass 1
//   7 line_id    uint[2 * n]      global seed index, direction index at the seed
//   8 points     float[3 * (2 max_steps + 1) * n]   out
//   9 ranges     uint[4 * n]      out: first point slot, number of points, length
//                                 in mm (float bits), why each half stopped
//                                 (track.glsl's STOP_* codes: backward half in
//                                 bits 0-7, forward half in bits 8-15)
//  10 resume     uint[]           suspended streamlines (track.glsl)
//  11 odf_basis  float[NC * NV]   ODF_SH only (odf.glsl)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"
#include "philox.glsl"

PAGED_TABLE(fa, 1);
#define VERTICES_BINDING 2
#include "sphere.glsl"
PAGED_TABLE(odf_scale, 3);
layout(std430, binding = 4) readonly buffer Lut { uint lut[]; };
layout(std430, binding = 5) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 6) readonly buffer Dirs { float dirs[]; };
layout(std430, binding = 7) readonly buffer LineId { uint line_id[]; };
layout(std430, binding = 8) writeonly buffer Points { float points[]; };
layout(std430, binding = 9) writeonly buffer Ranges { uint ranges[]; };

shared vec3 s_vertex[NV];

#define ODF_BINDING 0
#define ODF_BASIS_BINDING 11
#include "odf.glsl"
#define RESUME_BINDING 10
#include "resume.glsl"
#include "ptt.glsl"

// Sub-streams of the candidates' random numbers within one step.
const uint PHASE_SEED = 0u;
const uint PHASE_SEED_REVERSED = 1u;
const uint PHASE_RESUME = 2u;
const uint PHASE_STEP = 3u;

// The arc a half follows, every lane alike.
struct Arc {
	Frame frame;
	vec2 k;
	float first;      // support()'s carried-over first amplitude, < 0: none
	bool resample;    // the arc is to be sampled before the next step
};

// The current half's arc, and the start of the forward half, prepared at the
// seed before the backward half runs; g_mark: their copy before the step
// (track.glsl's getter_mark).
Arc g_arc;
Arc g_fwd;
bool g_started;
Arc g_mark_arc;
Arc g_mark_fwd;
bool g_mark_started;

Frame reversed(Frame f)
{
	f.t = -f.t;
	f.n = -f.n;
	return f;
}

bool start_streamline(vec3 p, vec3 first, uvec4 counter)
{
	Frame f;
	vec2 k;
	counter.x = 0u;
	f.t = first;
	float c0 = -1.0;
	if (select_curve(p, f, k, c0, counter, PHASE_SEED, true)) {
		g_fwd = Arc(f, k, c0, false);
		g_arc = Arc(reversed(f), k, -1.0, true);
		return true;
	}
	f.t = -first;
	c0 = -1.0;
	if (select_curve(p, f, k, c0, counter, PHASE_SEED_REVERSED, true)) {
		g_arc = Arc(f, k, c0, false);
		g_fwd = Arc(reversed(f), k, -1.0, true);
		return true;
	}
	return false;
}

bool next_direction(vec3 p, inout vec3 dir, uvec4 counter)
{
	if (counter.x == 1u) {
		// track.glsl runs the backward half (along -first) first.
		if ((counter.z & 1u) == 0u)
			g_started = start_streamline(p, -dir, counter);
		else
			g_arc = g_fwd;
		if (!g_started)
			return false;
	}
	if (g_arc.resample &&
	    !select_curve(p, g_arc.frame, g_arc.k, g_arc.first, counter, PHASE_RESUME, false))
		return false;
	g_arc.resample = false;
	vec3 disp = ptt_move(g_arc.frame, g_arc.k, pc.step_size);
	if (!select_curve(p + disp, g_arc.frame, g_arc.k, g_arc.first, counter, PHASE_STEP, false))
		return false;
	// track.glsl steps step_size * dir: the chord of the arc.
	dir = disp / pc.step_size;
	return true;
}

// The arc is followed one step, then probed probe_length further.
float getter_reach()
{
	return pc.step_size + pc.probe_step * float(PROBE_QUALITY - 1);
}

void prepare_workgroup()
{
	for (uint j = gl_LocalInvocationIndex; j < NV; j += SG * ITEMS)
		s_vertex[j] = vertex(j);
	barrier();
}

void getter_mark()
{
	g_mark_arc = g_arc;
	g_mark_fwd = g_fwd;
	g_mark_started = g_started;
}

void getter_rewind()
{
	g_arc = g_mark_arc;
	g_fwd = g_mark_fwd;
	g_started = g_mark_started;
}

// The getter's state in the resume buffer, GETTER_WORDS = 2 ARC_WORDS + 1
// words (defines from the host): the two arcs and g_started.
void save_arc(uint at, Arc a)
{
	save_vec3(at, a.frame.t);
	save_vec3(at + 3u, a.frame.n);
	save_vec3(at + 6u, a.frame.b);
	resume[at + 9u] = floatBitsToUint(a.k.x);
	resume[at + 10u] = floatBitsToUint(a.k.y);
	resume[at + 11u] = floatBitsToUint(a.first);
	resume[at + 12u] = a.resample ? 1u : 0u;
}

Arc load_arc(uint at)
{
	Frame f = Frame(load_vec3(at), load_vec3(at + 3u), load_vec3(at + 6u));
	vec2 k = uintBitsToFloat(uvec2(resume[at + 9u], resume[at + 10u]));
	return Arc(f, k, uintBitsToFloat(resume[at + 11u]), resume[at + 12u] != 0u);
}

void getter_save(uint at)
{
	save_arc(at, g_arc);
	save_arc(at + ARC_WORDS, g_fwd);
	resume[at + 2u * ARC_WORDS] = g_started ? 1u : 0u;
}

void getter_load(uint at)
{
	g_arc = load_arc(at);
	g_fwd = load_arc(at + ARC_WORDS);
	g_started = resume[at + 2u * ARC_WORDS] != 0u;
}

#include "track.glsl"
