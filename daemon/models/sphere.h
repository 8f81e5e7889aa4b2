/* SPDX-License-Identifier: MIT */
/*
 * sphere: the discrete sphere an ODF is sampled on, and its vertex adjacency.
 *
 * Owns vertex coordinates and the neighbour lists that peak finding uses
 * (DIPY's `sphere.edges`, stored as CSR adjacency). Built-in spheres are DIPY's
 * repulsion724, repulsion100 and symmetric362 (vertex and face figures taken
 * from DIPY's data files, see sphere_data.c). A sphere given as vertices gets
 * its faces from the convex hull, as DIPY's Sphere(xyz=...) does; a set of
 * vertices with no antipodal pairs is treated as DIPY's HemiSphere (hull of
 * the vertices and their antipodes, folded back onto the given indices).
 * Also lists each vertex's neighbours within an angle (sphere_cone_lists).
 * Does not log.
 */
#ifndef TRACTD_SPHERE_H
#define TRACTD_SPHERE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "models/sphere_data.h"   /* sphere_builtin_names */

struct sphere {
	int nv;             /* number of vertices */
	float *vertices;    /* 3*nv, unit vectors */
	int n_edges;        /* undirected edges, each listed once */
	int *edges;         /* 2*n_edges vertex indices, DIPY edge order for built-ins */
	int *nbr_offset;    /* nv+1: neighbours of v are nbr[nbr_offset[v] .. nbr_offset[v+1]) */
	int *nbr;           /* 2*n_edges */
	bool antipodal;     /* every vertex has its antipode in the set (full sphere) */
};

/* Fills *ret with the named built-in sphere. Returns 0, -ENOENT for an unknown
 * name (message lists the known ones), -ENOMEM. */
int sphere_builtin(const char *name, struct sphere *ret, struct errbuf *err);

/* Builds a sphere from nv vertices (xyz interleaved; normalised here).
 * Rejects nv < 6 or > 65536, zero or non-finite vectors, duplicate vertices
 * (closer than 1e-6 after normalisation), and sets that do not span 3D.
 * field names the input in errors. Returns 0, -EINVAL, -ENOMEM. */
int sphere_from_vertices(const double *xyz, int nv, const char *field,
			 struct sphere *ret, struct errbuf *err);

/* Whether the sphere's second half is its first negated, to the bit:
 * vertex j + nv/2 the antipode of vertex j (DIPY's repulsion spheres; in
 * symmetric362 some pairs differ in their last bits), so that a kernel can
 * find a vertex's antipode without a table. */
bool sphere_mirrored(const struct sphere *s);

/* How far below cos_max the cone lists reach: their user tests each listed
 * vertex again in its own arithmetic, where a vertex on the cone's edge may
 * round in. */
#define SPHERE_CONE_MARGIN 1e-4

/* Marks a listed vertex whose cosine is at least cos_max plus
 * SPHERE_CONE_MARGIN: inside the cone in any float arithmetic, so that its
 * user need not test it again (on CPU devices each test loads the vertex). */
#define SPHERE_CONE_INSIDE (1u << 31)

/* The vertices near each vertex, for a search within a cone: per vertex i,
 * every j (i included) whose cosine with i (its absolute value when axial)
 * is at least cos_max less SPHERE_CONE_MARGIN, in index order, those at
 * least cos_max plus the margin or'ed with SPHERE_CONE_INSIDE. One array of
 * *n_words words: nv + 1 offsets into the array itself (i's list runs from
 * word [i] to word [i + 1]), then the lists. Takes nv^2 dot products.
 * Returns 0, -ENOMEM, -E2BIG past 2^32 words. */
int sphere_cone_lists(const struct sphere *s, double cos_max, bool axial, uint32_t **ret,
		      size_t *n_words);

/* The words of one mask of sphere_cone_masks: a bit per vertex. */
size_t sphere_cone_mask_words(int nv);

/* The same neighbours as bit masks, for a test of any vertex: per vertex i,
 * sphere_cone_mask_words(nv) words with bit j % 32 of word j / 32 set where
 * j is listed near i (sphere_cone_lists), then as many with it set where j
 * would be marked SPHERE_CONE_INSIDE. *n_words words in all. Takes nv^2 dot
 * products. Returns 0 or -ENOMEM. */
int sphere_cone_masks(const struct sphere *s, double cos_max, bool axial, uint32_t **ret,
		      size_t *n_words);

/* Frees everything and zeroes *s; accepts zeroed or freed spheres. */
void sphere_free(struct sphere *s);

#endif
