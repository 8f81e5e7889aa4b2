// SPDX-License-Identifier: MIT
// Parallel transport tractography (Aydogan & Shi 2021; DIPY's
// PTTDirectionGetter; reference §3.3). A streamline is a chain of arcs: at
// each step the current arc of curvatures (k1, k2) in the parallel transport
// frame (t, n, b) is followed for step_size, then the next arc is chosen by
// rejection sampling among candidates drawn uniformly in the disc
// |k| <= max_curvature, by their data support: the mean ODF amplitude at
// probe_quality points along a probe that follows the candidate arc for
// probe_length from the current point (probe_count parallel lines
// probe_radius from it). As in DIPY, the first of those amplitudes is not
// sampled anew at each step but carried over: the amplitude at the far end of
// the probe that was taken (the amplitude at the point itself only where a
// curve starts). Sampling it at the point instead loses about 10 points of
// valid connections on the phantom against DIPY and prob. An amplitude is the ODF of the sphere vertex nearest to the probe's
// tangent, interpolated trilinearly with each voxel scaled by odf_scale
// (1 / its maximum, 0 where the stop map is below the threshold), and counts
// as zero at or below pmf_threshold.
//
// Build-time defines (engine.c): PROBE_QUALITY, PROBE_COUNT,
// REJECTION_SAMPLES (candidates estimating the support's maximum),
// REJECTION_TRIES, LUT_RES (daemon/engine/ptt.h's table). Push constants: pc.max_curvature,
// pc.probe_step (between probe points) and pc.probe_radius.
//
// The including kernel declares the page table odf_scale, lut[] and the
// shared s_vertex[NV], and includes common.glsl, interp.glsl, volume.glsl,
// philox.glsl and odf.glsl first.

struct Frame {
	vec3 t, n, b;
};

const float K_SMALL = 1e-4;
const float TWO_PI = 6.28318530718;
const uint LUT_CELLS = 6u * LUT_RES * LUT_RES;

// Moves f by arclength s along the arc of curvatures k and returns the
// displacement; the float twin of daemon/engine/ptt.c's ptt_frame_move (unit-tested
// there against arcs and helices).
vec3 ptt_move(inout Frame f, vec2 k, float s)
{
	float kk = length(k);
	if (kk < K_SMALL)
		return s * f.t;
	float sn = sin(kk * s), cs = cos(kk * s), hs = sin(0.5 * kk * s);
	float bend = 2.0 * hs * hs / (kk * kk);
	vec3 m = (k.x * f.n + k.y * f.b) / kk;
	vec3 dm = -sn * f.t + (cs - 1.0) * m;
	vec3 disp = sn / kk * f.t + bend * kk * m;
	vec3 t = normalize(cs * f.t + sn * m);
	vec3 n = f.n + k.x / kk * dm;
	f.t = t;
	f.n = normalize(n - dot(n, t) * t);
	f.b = cross(t, f.n);
	return disp;
}

// daemon/engine/ptt.h's cell of direction d. Components are picked by selection,
// not indexed at run time (common.glsl: lavapipe's stack).
uint lut_cell(vec3 d)
{
	vec3 a = abs(d);
	uint axis = a.x >= a.y && a.x >= a.z ? 0u : (a.y >= a.z ? 1u : 2u);
	// (d_axis, d_(axis+1)%3, d_(axis+2)%3)
	vec3 r = axis == 0u ? d : (axis == 1u ? d.yzx : d.zxy);
	uint face = 2u * axis + (r.x < 0.0 ? 1u : 0u);
	vec2 uv = r.yz / abs(r.x);
	uvec2 ij = uvec2(clamp(floor((uv + 1.0) * 0.5 * float(LUT_RES)), 0.0, float(LUT_RES - 1u)));
	return (face * LUT_RES + ij.x) * LUT_RES + ij.y;
}

// The vertex nearest to d (largest cos, |cos| for symmetric ODFs; the lowest
// index on ties), searched among its cell's list.
uint nearest_vertex(vec3 d)
{
	uint cell = lut_cell(d);
	uint best_v = 0u;
	float best = -2.0;
	for (uint k = lut[cell]; k < lut[cell + 1u]; k++) {
		uint v = lut[LUT_CELLS + 1u + k];
		float c = axis_cos(s_vertex[v], d);
		if (c > best) {
			best = c;
			best_v = v;
		}
	}
	return best_v;
}

// toward: the tangent where the probe starts. With ANGULAR_WEIGHT the
// amplitude is multiplied by angular_factor(toward, t) (common.glsl) before
// the comparison with pmf_threshold: ptt's counterpart of weighting the PMF,
// as its probe reads the vertex along its tangent, not a PMF draw.
float amplitude(vec3 p, vec3 t, vec3 toward)
{
	Corners c;
	if (!corners_at(p, pc.dim, c))
		return 0.0;
	for (int q = 0; q < 8; q++)
		c.weight[q] *= page_f32(PAGE_SPOT(odf_scale, c.voxel[q]), 0);
	float v = odf_vertex(c, nearest_vertex(t));
#if ANGULAR_WEIGHT
	v *= angular_factor(toward, t);
#endif
	return v > pc.pmf_threshold ? v : 0.0;
}

// The amplitudes of the probe's lines at one point along it; with one line
// the probe is the curve itself (DIPY ignores the radius then).
float ring_amplitude(vec3 p, Frame f, vec3 toward)
{
	float sum = 0.0;
	for (int c = 0; c < PROBE_COUNT; c++) {
		float angle = TWO_PI * float(c) / float(PROBE_COUNT);
		vec3 off = PROBE_COUNT > 1 ? pc.probe_radius * (cos(angle) * f.n + sin(angle) * f.b) :
					     vec3(0.0);
		sum += amplitude(p + off, f.t, toward);
	}
	return sum;
}

// first: the carried-over first amplitude (weighted, with ANGULAR_WEIGHT,
// toward the tangent where its own probe started), or < 0 to sample it at p.
// last: the amplitude at the probe's end.
float support(vec3 p, Frame f, vec2 k, float first, out float last)
{
	vec3 toward = f.t;
	float sum = first < 0.0 ? ring_amplitude(p, f, toward) : first;
	for (int q = 1; q < PROBE_QUALITY; q++) {
		p += ptt_move(f, k, pc.probe_step);
		last = ring_amplitude(p, f, toward);
		sum += last;
	}
	return sum / float(PROBE_QUALITY * PROBE_COUNT);
}

// Candidate cand's random numbers: (k radius, k angle, acceptance, normal
// angle at the seed), keyed by the candidate's index, not the lane, so that
// the result does not depend on the subgroup size.
uvec4 candidate_bits(uvec4 counter, uint phase, uint cand)
{
	counter.w = PHILOX_STREAM_PTT | (cand << 8) | (phase << 24);
	return philox4x32_10(counter, pc.philox_key);
}

vec2 candidate_k(uvec4 bits)
{
	float r = pc.max_curvature * sqrt(philox_uniform(bits.x));
	float angle = TWO_PI * philox_uniform(bits.y);
	return r * vec2(cos(angle), sin(angle));
}

// A frame along t with its normal at a random angle around it (DIPY's
// random_perpendicular_vector).
Frame seed_frame(vec3 t, uint bits)
{
	vec3 a = abs(t);
	vec3 axis = a.x <= a.y && a.x <= a.z ? vec3(1.0, 0.0, 0.0) :
		    (a.y <= a.z ? vec3(0.0, 1.0, 0.0) : vec3(0.0, 0.0, 1.0));
	vec3 e1 = normalize(cross(t, axis));
	vec3 e2 = cross(t, e1);
	float angle = TWO_PI * philox_uniform(bits);
	Frame f;
	f.t = t;
	f.n = cos(angle) * e1 + sin(angle) * e2;
	f.b = cross(t, f.n);
	return f;
}

// DIPY's rejection sampling: the largest support of REJECTION_SAMPLES
// candidates, doubled, bounds the density; candidates are then tried in
// index order, SG at a time, and the first whose support exceeds a uniform
// fraction of the bound is taken. at_seed: each candidate also draws the
// frame's normal around f.t. first: the support's first amplitude (see
// support()), replaced by the taken probe's last. Returns false when no
// candidate is taken.
bool select_curve(vec3 p, inout Frame f, inout vec2 k, inout float first, uvec4 counter, uint phase, bool at_seed)
{
	float last = 0.0;
	uint lane = gl_SubgroupInvocationID;
	float best = 0.0;
	for (uint base = 0u; base < REJECTION_SAMPLES; base += SG) {
		float s = 0.0;
		if (base + lane < REJECTION_SAMPLES) {
			uvec4 bits = candidate_bits(counter, phase, base + lane);
			s = support(p, at_seed ? seed_frame(f.t, bits.w) : f, candidate_k(bits), first, last);
		}
		best = max(best, subgroupMax(s));
	}
	float bound = 2.0 * best;
	if (bound <= 0.0)
		return false;
	for (uint base = 0u; base < REJECTION_TRIES; base += SG) {
		bool taken = false;
		last = 0.0;
		if (base + lane < REJECTION_TRIES) {
			uvec4 bits = candidate_bits(counter, phase, REJECTION_SAMPLES + base + lane);
			Frame g = at_seed ? seed_frame(f.t, bits.w) : f;
			taken = philox_uniform(bits.z) * bound < support(p, g, candidate_k(bits), first, last);
		}
		uvec4 hit = subgroupBallot(taken);
		if (subgroupBallotBitCount(hit) > 0u) {
			uint w = subgroupBallotFindLSB(hit);
			first = subgroupMax(lane == w ? last : -1.0);
			uvec4 bits = candidate_bits(counter, phase, REJECTION_SAMPLES + base + w);
			if (at_seed)
				f = seed_frame(f.t, bits.w);
			k = candidate_k(bits);
			return true;
		}
	}
	return false;
}
