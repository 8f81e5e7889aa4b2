// SPDX-License-Identifier: MIT
// Philox4x32-10, bit-identical to daemon/base/philox.c (counter layout in philox.h).

const uint PHILOX_STREAM_PROB = 3u;
const uint PHILOX_STREAM_BOOT = 5u;
const uint PHILOX_STREAM_PTT = 6u;
const uint PHILOX_STREAM_CMC = 7u;
const uint PHILOX_STREAM_PFT = 8u;

uvec4 philox4x32_10(uvec4 c, uvec2 k)
{
	for (int round = 0; round < 10; round++) {
		uint hi0, lo0, hi1, lo1;
		umulExtended(0xD2511F53u, c.x, hi0, lo0);
		umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
		c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
		k += uvec2(0x9E3779B9u, 0xBB67AE85u);
	}
	return c;
}

// Uniform in [0, 1) from the top 24 bits, as philox_uniform_float().
float philox_uniform(uint x)
{
	return float(x >> 8) * (1.0 / 16777216.0);
}
