/* SPDX-License-Identifier: MIT */
/*
 * shaders: the GLSL sources of shaders/, embedded at build time by
 * scripts/embed.c (build/shaders_embed.c). gpu.c compiles them with libshaderc
 * and resolves #include "x.glsl" against this table only.
 */
#ifndef TRACTD_SHADERS_H
#define TRACTD_SHADERS_H

struct shader_source {
	const char *name;   /* file name in shaders/, e.g. "prob_track.comp" */
	const char *text;   /* NUL-terminated GLSL */
};

/* Terminated by an entry with name == NULL. */
extern const struct shader_source shader_sources[];

#endif
