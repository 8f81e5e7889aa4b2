// SPDX-License-Identifier: MIT
// One residual-bootstrap ODF of the DWI at a point (reference §3.2, DIPY
// BootPmfGen + OpdtModel / CsaOdfModel):
//   s = trilinear(DWI, p); d = s over the diffusion-weighted volumes
//   h = H d with H = U U^T; r = (d - h) / sqrt(1 - H_jj), centred
//   d*_j = h_j + r[u_j], u_j uniform over the residuals (with replacement)
//   d*  = max(d*, min_signal) / mean(max(b0s, min_signal))
//   OPDT: c = Q (-ln d* (1.5 + ln d*) d*) - B d*
//   CSA:  c = Q ln(-ln clamp(d*, .001, .999)), c_0 = 0.5 / sqrt(pi)
//   odf = S c on the sphere, then values below pmf_threshold * max are zeroed
//
// Build-time defines (engine.c): T volumes per voxel, of which the first NB0
// are b0s and the next HR diffusion-weighted; NC SH coefficients; MODEL_CSA
// (0: OPDT); DWI_BINDING: the binding of the DWI's page table (volume.glsl).
//
// The including kernel declares the matrices[] buffer (layout below, written
// by resident.c) and s_pmf[ITEMS][NV], s_res[ITEMS][HR] in shared memory, and
// includes common.glsl, interp.glsl, volume.glsl and philox.glsl first.

const uint J_PER_LANE = (HR + SG - 1) / SG;
const uint B0_PER_LANE = (NB0 + SG - 1) / SG;

// matrices[]: U^T (NC x HR), 1/sqrt(1 - H_jj) (HR), Q (NC x HR), B (NC x HR),
// S^T (NC x NV); row-major, so lanes read consecutive floats.
const uint M_UT = 0;
const uint M_LEV = M_UT + NC * HR;
const uint M_Q = M_LEV + HR;
const uint M_B = M_Q + NC * HR;
const uint M_ST = M_B + NC * HR;

PAGED_TABLE(dwi, DWI_BINDING);

// Volume t of the signal interpolated from the corners' values.
float interpolate_volume(Corners c, PageSpot spots[8], uint t)
{
	float v = 0.0;
	for (int q = 0; q < 8; q++)
		v += c.weight[q] * page_f32(spots[q], t);
	return v;
}

// The diffusion-weighted signal at p (this lane's volumes j = lane + k SG)
// and the mean of the b0s floored at min_signal. False outside the volume.
bool interpolate_signal(vec3 p, out float d[J_PER_LANE], out float b0_mean)
{
	Corners c;
	for (uint k = 0; k < J_PER_LANE; k++)
		d[k] = 0.0;
	b0_mean = 1.0;
	if (!corners_at(p, pc.dim.xyz, c))
		return false;
	PageSpot spots[8];
	for (int q = 0; q < 8; q++)
		spots[q] = PAGE_SPOT(dwi, c.voxel[q]);
	float b0_sum = 0.0;
	for (uint k = 0; k < B0_PER_LANE; k++) {
		uint t = gl_SubgroupInvocationID + k * SG;
		if (t < NB0)
			b0_sum += max(interpolate_volume(c, spots, t), pc.peak.z);
	}
	b0_mean = subgroupAdd(b0_sum) / float(NB0);
	for (uint k = 0; k < J_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < HR)
			d[k] = interpolate_volume(c, spots, NB0 + j);
	}
	return true;
}

// coef[m] = sum over j of matrices[row + m HR + j] * x_j, for every m < NC.
void project(uint row, float x[J_PER_LANE], out float coef[NC])
{
	for (uint m = 0; m < NC; m++) {
		float acc = 0.0;
		for (uint k = 0; k < J_PER_LANE; k++) {
			uint j = gl_SubgroupInvocationID + k * SG;
			if (j < HR)
				acc += matrices[row + m * HR + j] * x[k];
		}
		coef[m] = subgroupAdd(acc);
	}
}

// Which residual diffusion-weighted volume j takes: uniform over [0, HR).
// Draw j is word j % 4 of Philox block j / 4, so the sample does not depend
// on the subgroup size.
uint residual_index(uvec4 counter, uint j)
{
	counter.w += (j >> 2) << 16;
	uint word = philox4x32_10(counter, pc.rng.xy)[j & 3u];
	uint hi, lo;
	umulExtended(word, uint(HR), hi, lo);
	return hi;
}

// Replaces d by one bootstrap sample of it, normalised by b0_mean.
void resample(inout float d[J_PER_LANE], float b0_mean, uvec4 counter)
{
	uint sg = gl_SubgroupID;
	float t[NC];
	project(M_UT, d, t);
	float fit[J_PER_LANE];
	float r_sum = 0.0;
	for (uint k = 0; k < J_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		float h = 0.0;
		if (j < HR) {
			for (uint m = 0; m < NC; m++)
				h += matrices[M_UT + m * HR + j] * t[m];
			float r = (d[k] - h) * matrices[M_LEV + j];
			s_res[sg][j] = r;
			r_sum += r;
		}
		fit[k] = h;
	}
	float r_mean = subgroupAdd(r_sum) / float(HR);
	subgroupMemoryBarrierShared();
	subgroupBarrier();
	for (uint k = 0; k < J_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < HR) {
			float drawn = fit[k] + s_res[sg][residual_index(counter, j)] - r_mean;
			d[k] = max(drawn, pc.peak.z) / b0_mean;
		}
	}
	subgroupBarrier();   // s_res is rewritten by the next sample
}

// The model's SH coefficients of the normalised signal d.
void fit_model(float d[J_PER_LANE], out float coef[NC])
{
	float q[J_PER_LANE];
	for (uint k = 0; k < J_PER_LANE; k++) {
#if MODEL_CSA
		float x = clamp(d[k], 0.001, 0.999);
		q[k] = log(-log(x));
#else
		float l = -log(d[k]);
		q[k] = l * (1.5 - l) * d[k];
#endif
	}
	project(M_Q, q, coef);
#if MODEL_CSA
	coef[0] = 0.28209479177387814;   // 0.5 / sqrt(pi)
#else
	float cb[NC];
	project(M_B, d, cb);
	for (uint m = 0; m < NC; m++)
		coef[m] -= cb[m];
#endif
}

// Fills s_pmf[this subgroup] with a bootstrap ODF at p, thresholded at
// pmf_threshold of its maximum (zero outside the volume). counter names the
// sample's random draws (block index added in its top 16 bits).
void sample_boot_pmf(vec3 p, uvec4 counter)
{
	uint sg = gl_SubgroupID;
	float d[J_PER_LANE];
	float b0_mean;
	float values[VERTS_PER_LANE];
	bool inside = interpolate_signal(p, d, b0_mean);
	for (uint k = 0; k < VERTS_PER_LANE; k++)
		values[k] = 0.0;
	if (inside) {
		float coef[NC];
		resample(d, b0_mean, counter);
		fit_model(d, coef);
		for (uint k = 0; k < VERTS_PER_LANE; k++) {
			uint v = min(gl_SubgroupInvocationID + k * SG, NV - 1);
			for (uint m = 0; m < NC; m++)
				values[k] += matrices[M_ST + m * NV + v] * coef[m];
		}
	}
	float lane_max = 0.0;
	for (uint k = 0; k < VERTS_PER_LANE; k++)
		lane_max = max(lane_max, values[k]);
	float floor_value = pmf_floor(lane_max);
	for (uint k = 0; k < VERTS_PER_LANE; k++) {
		uint j = gl_SubgroupInvocationID + k * SG;
		if (j < NV)
			s_pmf[sg][j] = values[k] < floor_value ? 0.0 : values[k];
	}
}
