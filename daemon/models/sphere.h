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
 * Does not log.
 */
#ifndef TRACTD_SPHERE_H
#define TRACTD_SPHERE_H

#include <stdbool.h>

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

/* Frees everything and zeroes *s; accepts zeroed or freed spheres. */
void sphere_free(struct sphere *s);

#endif
