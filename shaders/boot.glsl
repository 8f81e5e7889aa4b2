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
// The signal, the residuals and the coefficients live in shared memory, a row
// per subgroup like s_pmf; lane l owns the volumes j = l, l + SG, ... The
// including kernel declares the matrices[] buffer (layout below, written by
// resident.c) and includes common.glsl, interp.glsl, volume.glsl,
// philox.glsl and pmf.glsl first.

// matrices[]: U^T (NC x HR), 1/sqrt(1 - H_jj) (HR), Q (NC x HR), B (NC x HR),
// S^T (NC x NV); row-major, so lanes read consecutive floats.
const uint M_UT = 0;
const uint M_LEV = M_UT + NC * HR;
const uint M_Q = M_LEV + HR;
const uint M_B = M_Q + NC * HR;
const uint M_ST = M_B + NC * HR;

PAGED_TABLE(dwi, DWI_BINDING);

shared float s_signal[ITEMS][HR];  // d, then the fit h, then the sample d*
shared float s_res[ITEMS][HR];     // residuals, then the model's transform of d*
shared float s_coef[ITEMS][NC];    // U^T d, then the model's coefficients

void sync_subgroup()
{
	subgroupMemoryBarrierShared();
	subgroupBarrier();
}

// Volume t of the signal interpolated from the corners' values.
float interpolate_volume(Corners c, PageSpot spots[8], uint t)
{
	float v = 0.0;
	[[unroll]] for (int q = 0; q < 8; q++)
		v += c.weight[q] * page_f32(spots[q], t);
	return v;
}

// Fills s_signal with the diffusion-weighted signal at p and returns the
// mean of the b0s floored at min_signal; false outside the volume.
bool interpolate_signal(vec3 p, out float b0_mean)
{
	uint sg = gl_SubgroupID;
	Corners c;
	b0_mean = 1.0;
	if (!corners_at(p, pc.dim, c))
		return false;
	PageSpot spots[8];
	[[unroll]] for (int q = 0; q < 8; q++)
		spots[q] = PAGE_SPOT(dwi, c.voxel[q]);
	float b0_sum = 0.0;
	for (uint t = gl_SubgroupInvocationID; t < NB0; t += SG)
		b0_sum += max(interpolate_volume(c, spots, t), pc.min_signal);
	b0_mean = subgroupAdd(b0_sum) / float(NB0);
	for (uint j = gl_SubgroupInvocationID; j < HR; j += SG)
		s_signal[sg][j] = interpolate_volume(c, spots, NB0 + j);
	return true;
}

// The sum over j of matrices[row + j] * x_j, all lanes alike; x is s_res
// (residuals true) or s_signal.
float row_dot(uint row, bool residuals)
{
	uint sg = gl_SubgroupID;
	float acc = 0.0;
	for (uint j = gl_SubgroupInvocationID; j < HR; j += SG)
		acc += matrices[row + j] * (residuals ? s_res[sg][j] : s_signal[sg][j]);
	return subgroupAdd(acc);
}

// Which residual diffusion-weighted volume j takes: uniform over [0, HR).
// Draw j is word j % 4 of Philox block j / 4, so the sample does not depend
// on the subgroup size.
uint residual_index(uvec4 counter, uint j)
{
	counter.w += (j >> 2) << 16;
	uvec4 block = philox4x32_10(counter, pc.philox_key);
	uvec2 pair = (j & 2u) != 0u ? block.zw : block.xy;
	uint word = (j & 1u) != 0u ? pair.y : pair.x;
	uint hi, lo;
	umulExtended(word, uint(HR), hi, lo);
	return hi;
}

// Replaces s_signal by one bootstrap sample of it, normalised by b0_mean.
void resample(float b0_mean, uvec4 counter)
{
	uint sg = gl_SubgroupID;
	for (uint m = 0; m < NC; m++) {
		float t = row_dot(M_UT + m * HR, false);
		if (gl_SubgroupInvocationID == 0)
			s_coef[sg][m] = t;
	}
	sync_subgroup();
	float r_sum = 0.0;
	for (uint j = gl_SubgroupInvocationID; j < HR; j += SG) {
		float h = 0.0;
		for (uint m = 0; m < NC; m++)
			h += matrices[M_UT + m * HR + j] * s_coef[sg][m];
		float r = (s_signal[sg][j] - h) * matrices[M_LEV + j];
		s_res[sg][j] = r;
		s_signal[sg][j] = h;
		r_sum += r;
	}
	float r_mean = subgroupAdd(r_sum) / float(HR);
	sync_subgroup();
	for (uint j = gl_SubgroupInvocationID; j < HR; j += SG) {
		float drawn = s_signal[sg][j] + s_res[sg][residual_index(counter, j)] - r_mean;
		s_signal[sg][j] = max(drawn, pc.min_signal) / b0_mean;
	}
	subgroupBarrier();   // s_res is rewritten by fit_model
}

// Fills s_coef with the model's SH coefficients of the sample in s_signal.
void fit_model()
{
	uint sg = gl_SubgroupID;
	for (uint j = gl_SubgroupInvocationID; j < HR; j += SG) {
		float d = s_signal[sg][j];
#if MODEL_CSA
		s_res[sg][j] = log(-log(clamp(d, 0.001, 0.999)));
#else
		float l = -log(d);
		s_res[sg][j] = l * (1.5 - l) * d;
#endif
	}
	for (uint m = 0; m < NC; m++) {
#if MODEL_CSA
		float coef = m == 0 ? 0.28209479177387814 : row_dot(M_Q + m * HR, true); // 0.5 / sqrt(pi)
#else
		float coef = row_dot(M_Q + m * HR, true) - row_dot(M_B + m * HR, false);
#endif
		if (gl_SubgroupInvocationID == 0)
			s_coef[sg][m] = coef;
	}
	sync_subgroup();
}

// Fills s_pmf[this subgroup] with a bootstrap ODF at p (zero outside the
// volume) and returns this lane's maximum of it. counter names the sample's
// random draws (block index added in its top 16 bits).
float boot_odf(vec3 p, uvec4 counter)
{
	uint sg = gl_SubgroupID;
	float b0_mean;
	bool inside = interpolate_signal(p, b0_mean);
	if (inside) {
		resample(b0_mean, counter);
		fit_model();
	}
	float lane_max = 0.0;
	for (uint j = gl_SubgroupInvocationID; j < NV; j += SG) {
		float v = 0.0;
		if (inside)
			for (uint m = 0; m < NC; m++)
				v += matrices[M_ST + m * NV + j] * s_coef[sg][m];
		s_pmf[sg][j] = v;
		lane_max = max(lane_max, v);
	}
	subgroupBarrier();   // s_coef is rewritten by the next sample
	return lane_max;
}

// boot_odf() thresholded at pmf_threshold of its maximum.
void sample_boot_pmf(vec3 p, uvec4 counter)
{
	zero_below(pmf_floor(boot_odf(p, counter)));
}
