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
//   0 odf        page table (pmf.glsl)
//   1 fa         page table (volume.glsl)   stop map
//   2 vertices   float[3 * NV]
//   3 odf_scale  page table       1 / the voxel's ODF maximum, 0 where not tracked
//   4 lut        uint[]           nearest-vertex table (daemon/ptt.h)
//   5 seeds      float[3 * s]     the chunk's seeds (voxels), from pass 1
//   6 dirs       float[3 * MAX_PEAKS * s]  their initial directions, from pass 1
//   7 line_id    uint[2 * n]      global seed index, direction index at the seed
//   8 points     float[3 * (2 max_steps + 1) * n]   out
//   9 ranges     uint[3 * n]      out: first point slot, number of points, length
//                                 in mm (float bits)
//  10 odf_basis  float[NC * NV]   ODF_SH only (pmf.glsl)
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "interp.glsl"
#include "volume.glsl"
#include "philox.glsl"

PAGED_TABLE(fa, 1);
layout(std430, binding = 2) readonly buffer Vertices { float vertices[]; };
PAGED_TABLE(odf_scale, 3);
layout(std430, binding = 4) readonly buffer Lut { uint lut[]; };
layout(std430, binding = 5) readonly buffer Seeds { float seeds[]; };
layout(std430, binding = 6) readonly buffer Dirs { float dirs[]; };
layout(std430, binding = 7) readonly buffer LineId { uint line_id[]; };
layout(std430, binding = 8) writeonly buffer Points { float points[]; };
layout(std430, binding = 9) writeonly buffer Ranges { uint ranges[]; };

shared vec3 s_vertex[NV];

#define ODF_BINDING 0
#define ODF_BASIS_BINDING 10
#include "pmf.glsl"
#include "ptt.glsl"

// Sub-streams of the candidates' random numbers within one step.
const uint PHASE_SEED = 0u;
const uint PHASE_SEED_REVERSED = 1u;
const uint PHASE_RESUME = 2u;
const uint PHASE_STEP = 3u;

// The walk of the current half (every lane holds the same), and the start of
// the forward half, prepared at the seed before the backward half runs.
Frame g_frame;
vec2 g_k;
float g_first;            // support()'s carried-over first amplitude, < 0: none
bool g_resample;          // the arc is to be sampled before the next step
Frame g_fwd_frame;
vec2 g_fwd_k;
float g_fwd_first;
bool g_fwd_resample;
bool g_started;

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
		g_fwd_first = c0;
		g_first = -1.0;
		g_fwd_frame = f;
		g_fwd_k = k;
		g_fwd_resample = false;
		g_frame = reversed(f);
		g_resample = true;
		return true;
	}
	f.t = -first;
	c0 = -1.0;
	if (select_curve(p, f, k, c0, counter, PHASE_SEED_REVERSED, true)) {
		g_first = c0;
		g_fwd_first = -1.0;
		g_frame = f;
		g_k = k;
		g_resample = false;
		g_fwd_frame = reversed(f);
		g_fwd_resample = true;
		return true;
	}
	return false;
}

bool next_direction(vec3 p, inout vec3 dir, uvec4 counter)
{
	if (counter.x == 1u) {
		// track.glsl runs the backward half (along -first) first.
		if ((counter.z & 1u) == 0u) {
			g_started = start_streamline(p, -dir, counter);
		} else {
			g_frame = g_fwd_frame;
			g_k = g_fwd_k;
			g_resample = g_fwd_resample;
			g_first = g_fwd_first;
		}
		if (!g_started)
			return false;
	}
	if (g_resample && !select_curve(p, g_frame, g_k, g_first, counter, PHASE_RESUME, false))
		return false;
	g_resample = false;
	vec3 disp = ptt_move(g_frame, g_k, pc.track.x);
	if (!select_curve(p + disp, g_frame, g_k, g_first, counter, PHASE_STEP, false))
		return false;
	// track.glsl steps step_size * dir: the chord of the arc.
	dir = disp / pc.track.x;
	return true;
}

void prepare_workgroup()
{
	for (uint j = gl_LocalInvocationIndex; j < NV; j += SG * ITEMS)
		s_vertex[j] = vec3(vertices[3 * j], vertices[3 * j + 1], vertices[3 * j + 2]);
	barrier();
}

#include "track.glsl"
