// SPDX-License-Identifier: MIT
// The sphere's vertices, float[3 * NV] at binding VERTICES_BINDING (defined by
// the including kernel).

layout(std430, binding = VERTICES_BINDING) readonly buffer Vertices { float vertices[]; };

vec3 vertex(uint j)
{
	return vec3(vertices[3 * j], vertices[3 * j + 1], vertices[3 * j + 2]);
}
