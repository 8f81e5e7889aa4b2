// SPDX-License-Identifier: MIT
// Trilinear interpolation with DIPY's boundary rules (trilinear_interpolate4d_c):
// voxel centres at integers; a point is outside when any coordinate is < -0.5
// or >= dim - 0.5; at the first and last half voxel both corners are the edge
// voxel. Volumes are [x][y][z] (times channels, fastest).

struct Corners {
	uint voxel[8];   // linear voxel index of each corner
	float weight[8];
};

bool corners_at(vec3 p, ivec3 dim, out Corners c)
{
	if (any(lessThan(p, vec3(-0.5))) || any(greaterThanEqual(p, vec3(dim) - 0.5)))
		return false;
	vec3 f = floor(p);
	vec3 w1 = p - f;
	vec3 w0 = vec3(1.0) - w1;
	ivec3 fi = ivec3(f);
	ivec3 i0 = fi + ivec3(equal(fi, ivec3(-1)));
	ivec3 i1 = fi + ivec3(notEqual(fi, dim - 1));
	for (int k = 0; k < 8; k++) {
		int x = (k & 4) != 0 ? i1.x : i0.x;
		int y = (k & 2) != 0 ? i1.y : i0.y;
		int z = (k & 1) != 0 ? i1.z : i0.z;
		c.voxel[k] = uint((x * dim.y + y) * dim.z + z);
		c.weight[k] = ((k & 4) != 0 ? w1.x : w0.x) * ((k & 2) != 0 ? w1.y : w0.y) *
			      ((k & 1) != 0 ? w1.z : w0.z);
	}
	return true;
}

#if CORNER_LANES
// CPU devices (engine.c's corner_lanes): lavapipe runs every lane's load on
// its own, so a value at a corner, which every lane of the subgroup needs,
// is loaded once: lane q loads corner q (lanes past 7 corner 7) and the
// lanes pass the values around (corner_lanes_sum). SG >= 8.

// The voxel of the corner this lane loads for the subgroup.
uint lane_corner_voxel(Corners c)
{
	uint v = c.voxel[7];
	[[unroll]] for (uint q = 0u; q < 7u; q++)
		v = gl_SubgroupInvocationID == q ? c.voxel[q] : v;
	return v;
}

// The corners' values (this lane's: its corner's) interpolated, summed over
// the corners in order 0..7 as the loops that load every corner in every
// lane sum them, so the value is the same to the bit.
float corner_lanes_sum(Corners c, float lane_value)
{
	float v = 0.0;
	[[unroll]] for (uint q = 0u; q < 8u; q++)
		v += c.weight[q] * subgroupBroadcast(lane_value, q);
	return v;
}
#endif
