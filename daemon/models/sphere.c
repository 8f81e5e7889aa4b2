/* SPDX-License-Identifier: MIT */
/*
 * Built-in spheres, spheres from user vertices, and the incremental 3D convex
 * hull that gives the latter their faces.
 *
 * Hull: randomised incremental construction with outside sets (Clarkson-Shor),
 * expected O(n log n); the insertion order is a fixed pseudo-random one, so
 * the result is deterministic. A point is above a face when its height over
 * the face plane exceeds PLANE_EPS times its distance to the nearest face
 * vertex; anything less counts as coplanar, and the tie rule is that a
 * coplanar face is never opened, so cocircular vertices get whichever
 * triangulation the insertion order leads to. The visible region only grows
 * while it stays a disk with every vertex on its rim, so the mesh remains a
 * closed 2-manifold holding every input point even where rounding makes plane
 * tests disagree; a point within PLANE_EPS of every face offered to it
 * (rounding in near-duplicate clusters might do that) waits on the face it is
 * highest above and opens that face. Thanks to the random order the expected
 * cost is O(n log n) whatever the input: about 10-30 ms for 5000 vertices and
 * a few hundred ms at the 65536 limit. The duplicate scan before it can turn
 * quadratic, but only for thousands of vertices on one circle orthogonal to
 * its sweep direction.
 */
#include "models/sphere.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sphere_data.h"

#define SPHERE_MIN_VERTICES 6
#define SPHERE_MAX_VERTICES 65536
/* Two unit vectors closer than this are the same direction. */
#define SAME_DIRECTION_TOL 1e-6
/* The flattest set accepted has a point this far from the plane of three others. */
#define SPAN_TOL 1e-6
/* Relative coplanarity tolerance (see height_above): a few hundred ulps, well
 * above the rounding of the test and well below the slopes that vertices
 * 1e-6 apart on the unit sphere make with each other's faces. */
#define PLANE_EPS 1e-13
/* A direction unrelated to the axes, so structured vertex sets rarely project
 * many points onto the same value. */
static const double sweep_direction[3] = {0.5257311121, 0.6881909602, 0.5};

struct hull_face {
	int v[3];          /* counter-clockwise seen from outside */
	int adj[3];        /* face across edge (v[k], v[(k+1)%3]) */
	double normal[3];  /* unit outward normal; zero for a degenerate triangle */
	int outside;       /* first point of the outside set, -1 when empty */
	int mark;          /* == hull.stamp while in the current visible region */
};

struct horizon_edge {
	int from, to;      /* the edge as the region face listed it */
	int outer;         /* the face beyond it, which stays */
};

struct hull {
	const double *pts;            /* np unit vectors */
	int np;
	struct hull_face *faces;      /* slots, 2*np of them */
	int nslots;                   /* slots in use */
	int *free_slots;              /* slots freed by the insertion under way */
	int nfree;
	int *next_outside;            /* per point: next in the same outside set */
	int *point_face;              /* per point: face holding it, -1 once a vertex */
	int *vertex_mark;             /* per point: == stamp when in a region face */
	int *start_face;              /* per point: new face leaving this rim vertex */
	int *region;                  /* faces of the current visible region */
	int nregion;
	struct horizon_edge *horizon;
	int *displaced;               /* points of removed faces awaiting a new face */
	int stamp;
};

static const double *point(const struct hull *h, int i)
{
	return h->pts + 3 * (size_t)i;
}

static void sub3(const double a[3], const double b[3], double out[3])
{
	out[0] = a[0] - b[0];
	out[1] = a[1] - b[1];
	out[2] = a[2] - b[2];
}

static double dot3(const double a[3], const double b[3])
{
	return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

static void cross3(const double a[3], const double b[3], double out[3])
{
	out[0] = a[1] * b[2] - a[2] * b[1];
	out[1] = a[2] * b[0] - a[0] * b[2];
	out[2] = a[0] * b[1] - a[1] * b[0];
}

static double distance3(const double a[3], const double b[3])
{
	double d[3];

	sub3(a, b, d);
	return sqrt(dot3(d, d));
}

/* Unit normal of triangle abc (counter-clockwise), or zero when it has no
 * area. The cross product is taken at the vertex opposite the longest edge:
 * for the needle triangles a tiny edge and a far vertex make, the other
 * vertices would cross two nearly parallel long edges and lose the direction
 * to cancellation. */
static void triangle_normal(const double a[3], const double b[3], const double c[3],
			    double out[3])
{
	const double *v[3] = {a, b, c};
	double longest = -1, to_next[3], to_prev[3], len;
	int apex = 0;

	for (int k = 0; k < 3; k++) {
		double opposite[3];

		sub3(v[(k + 2) % 3], v[(k + 1) % 3], opposite);
		if (dot3(opposite, opposite) > longest) {
			longest = dot3(opposite, opposite);
			apex = k;
		}
	}
	sub3(v[(apex + 1) % 3], v[apex], to_next);
	sub3(v[(apex + 2) % 3], v[apex], to_prev);
	cross3(to_next, to_prev, out);
	len = sqrt(dot3(out, out));
	for (int k = 0; k < 3; k++)
		out[k] = len > 0 ? out[k] / len : 0;
}

/* Signed distance of point p above the plane of face f, in units of its
 * distance to the nearest vertex of f. Measuring from the nearest vertex keeps
 * the rounding error of the test proportional to that distance, so one
 * relative tolerance serves faces next to p and faces across the sphere. */
static double height_above(const struct hull *h, const struct hull_face *f, int p)
{
	double d[3], nearest = INFINITY, along = 0;

	for (int k = 0; k < 3; k++) {
		sub3(point(h, p), point(h, f->v[k]), d);
		if (dot3(d, d) < nearest) {
			nearest = dot3(d, d);
			along = dot3(f->normal, d);
		}
	}
	return nearest > 0 ? along / sqrt(nearest) : 0;
}

static void hull_free(struct hull *h)
{
	free(h->faces);
	free(h->free_slots);
	free(h->next_outside);
	free(h->point_face);
	free(h->vertex_mark);
	free(h->start_face);
	free(h->region);
	free(h->horizon);
	free(h->displaced);
	memset(h, 0, sizeof(*h));
}

/* The caller frees h with hull_free, also when this fails. */
static int hull_init(struct hull *h, const double *pts, int np)
{
	size_t nslots = 2 * (size_t)np;

	h->pts = pts;
	h->np = np;
	h->faces = calloc(nslots, sizeof(*h->faces));
	h->free_slots = calloc(nslots, sizeof(*h->free_slots));
	h->next_outside = calloc((size_t)np, sizeof(int));
	h->point_face = calloc((size_t)np, sizeof(int));
	h->vertex_mark = calloc((size_t)np, sizeof(int));
	h->start_face = calloc((size_t)np, sizeof(int));
	h->region = calloc(nslots, sizeof(int));
	h->horizon = calloc(nslots, sizeof(*h->horizon));
	h->displaced = calloc((size_t)np, sizeof(int));
	if (!h->faces || !h->free_slots || !h->next_outside || !h->point_face ||
	    !h->vertex_mark || !h->start_face || !h->region || !h->horizon ||
	    !h->displaced)
		return -ENOMEM;
	for (int i = 0; i < np; i++)
		h->point_face[i] = -1;
	return 0;
}

/* An insertion frees its region and then takes region+2 slots, reusing every
 * freed one, so between insertions all nslots slots hold live faces, and a
 * hull of k points needs 2k-4 < 2*np of them. */
static int new_face(struct hull *h, int a, int b, int c)
{
	int id = h->nfree > 0 ? h->free_slots[--h->nfree] : h->nslots++;
	struct hull_face *f = &h->faces[id];

	f->v[0] = a;
	f->v[1] = b;
	f->v[2] = c;
	f->adj[0] = f->adj[1] = f->adj[2] = -1;
	f->outside = -1;
	f->mark = 0;
	triangle_normal(point(h, a), point(h, b), point(h, c), f->normal);
	return id;
}

static void free_face(struct hull *h, int id)
{
	h->free_slots[h->nfree++] = id;
}

/* Puts point q into the outside set of the first listed face it lies above;
 * failing that (q within PLANE_EPS of them all), of the one it is highest
 * above, so that every point is still inserted. */
static void assign_point(struct hull *h, int q, const int *candidates, int n)
{
	int chosen = candidates[0];
	double best = -INFINITY;

	for (int i = 0; i < n; i++) {
		double height = height_above(h, &h->faces[candidates[i]], q);

		if (height > best) {
			best = height;
			chosen = candidates[i];
		}
		if (height > PLANE_EPS)
			break;
	}
	h->point_face[q] = chosen;
	h->next_outside[q] = h->faces[chosen].outside;
	h->faces[chosen].outside = q;
}

static int farthest_from_point(const struct hull *h, int a)
{
	int best = a;
	double best_d = -1;

	for (int i = 0; i < h->np; i++) {
		double d = distance3(point(h, i), point(h, a));

		if (d > best_d) {
			best_d = d;
			best = i;
		}
	}
	return best;
}

static int farthest_from_line(const struct hull *h, int a, int b)
{
	double ab[3];
	int best = a;
	double best_d = -1;

	sub3(point(h, b), point(h, a), ab);
	for (int i = 0; i < h->np; i++) {
		double ai[3], c[3];

		sub3(point(h, i), point(h, a), ai);
		cross3(ab, ai, c);
		if (dot3(c, c) > best_d) {
			best_d = dot3(c, c);
			best = i;
		}
	}
	return best;
}

/* The point farthest from plane abc; *height gets its signed distance. */
static int farthest_from_plane(const struct hull *h, int a, int b, int c, double *height)
{
	double n[3];
	int best = a;

	triangle_normal(point(h, a), point(h, b), point(h, c), n);
	*height = 0;
	for (int i = 0; i < h->np; i++) {
		double ai[3], d;

		sub3(point(h, i), point(h, a), ai);
		d = dot3(n, ai);
		if (fabs(d) > fabs(*height)) {
			*height = d;
			best = i;
		}
	}
	return best;
}

/* Adjacency of the four faces of the first tetrahedron. */
static void link_tetrahedron(struct hull *h, const int ids[4])
{
	for (int i = 0; i < 4; i++) {
		struct hull_face *f = &h->faces[ids[i]];

		for (int k = 0; k < 3; k++) {
			int from = f->v[k], to = f->v[(k + 1) % 3];

			for (int j = 0; j < 4; j++) {
				const struct hull_face *g = &h->faces[ids[j]];

				for (int m = 0; m < 3; m++)
					if (g->v[m] == to && g->v[(m + 1) % 3] == from)
						f->adj[k] = ids[j];
			}
		}
	}
}

/* Starts from a large tetrahedron picked greedily (point 0, the point farthest
 * from it, the one farthest from their line, the one farthest from that
 * plane) and gives every other point to a face it lies above. Returns 0, or
 * -EINVAL when the points do not span 3D. */
static int start_tetrahedron(struct hull *h)
{
	int a = 0, b, c, d, ids[4];
	double height;

	b = farthest_from_point(h, a);
	c = farthest_from_line(h, a, b);
	d = farthest_from_plane(h, a, b, c, &height);
	if (fabs(height) <= SPAN_TOL)
		return -EINVAL;
	if (height > 0) {
		int swap = b;

		b = c;
		c = swap;
	}
	ids[0] = new_face(h, a, b, c);
	ids[1] = new_face(h, a, d, b);
	ids[2] = new_face(h, b, d, c);
	ids[3] = new_face(h, c, d, a);
	link_tetrahedron(h, ids);
	for (int i = 0; i < h->np; i++)
		if (i != a && i != b && i != c && i != d)
			assign_point(h, i, ids, 4);
	return 0;
}

/* A face may join the region only through exactly one edge and with its third
 * vertex new to the region: that keeps the region a disk with every vertex on
 * its rim, so no hull vertex is ever swallowed. */
static bool keeps_disk(const struct hull *h, const struct hull_face *g)
{
	int shared = -1;

	for (int k = 0; k < 3; k++) {
		if (h->faces[g->adj[k]].mark != h->stamp)
			continue;
		if (shared >= 0)
			return false;
		shared = k;
	}
	return shared >= 0 && h->vertex_mark[g->v[(shared + 2) % 3]] != h->stamp;
}

static void add_to_region(struct hull *h, int id)
{
	struct hull_face *f = &h->faces[id];

	f->mark = h->stamp;
	for (int k = 0; k < 3; k++)
		h->vertex_mark[f->v[k]] = h->stamp;
	h->region[h->nregion++] = id;
}

/* Grows the region of faces that p lies above, breadth-first from seed, which
 * is always included. */
static void grow_region(struct hull *h, int p, int seed)
{
	h->stamp++;
	h->nregion = 0;
	add_to_region(h, seed);
	for (int r = 0; r < h->nregion; r++) {
		const struct hull_face *f = &h->faces[h->region[r]];

		for (int k = 0; k < 3; k++) {
			int gid = f->adj[k];
			const struct hull_face *g = &h->faces[gid];

			if (g->mark != h->stamp && height_above(h, g, p) > PLANE_EPS &&
			    keeps_disk(h, g))
				add_to_region(h, gid);
		}
	}
}

/* Rim edges of the region; a disk of t triangles with all vertices on its rim
 * has t+2 of them. */
static int collect_horizon(struct hull *h)
{
	int n = 0;

	for (int r = 0; r < h->nregion; r++) {
		const struct hull_face *f = &h->faces[h->region[r]];

		for (int k = 0; k < 3; k++) {
			if (h->faces[f->adj[k]].mark == h->stamp)
				continue;
			h->horizon[n].from = f->v[k];
			h->horizon[n].to = f->v[(k + 1) % 3];
			h->horizon[n].outer = f->adj[k];
			n++;
		}
	}
	return n;
}

/* Empties the outside sets of the region into h->displaced. */
static int take_displaced(struct hull *h, int p)
{
	int n = 0;

	for (int r = 0; r < h->nregion; r++) {
		struct hull_face *f = &h->faces[h->region[r]];

		for (int q = f->outside; q >= 0; q = h->next_outside[q])
			if (q != p)
				h->displaced[n++] = q;
		f->outside = -1;
	}
	return n;
}

static void point_outer_at(struct hull *h, int outer, int from, int to, int id)
{
	struct hull_face *g = &h->faces[outer];

	for (int k = 0; k < 3; k++)
		if (g->v[k] == to && g->v[(k + 1) % 3] == from)
			g->adj[k] = id;
}

/* Replaces the region by the cone from its rim to p; the new faces then make
 * up h->region. */
static void build_cone(struct hull *h, int p, int nhorizon)
{
	int *cone = h->region;

	for (int r = 0; r < h->nregion; r++)
		free_face(h, h->region[r]);
	for (int e = 0; e < nhorizon; e++) {
		const struct horizon_edge *he = &h->horizon[e];
		int id = new_face(h, he->from, he->to, p);

		h->faces[id].adj[0] = he->outer;
		point_outer_at(h, he->outer, he->from, he->to, id);
		h->start_face[he->from] = id;
		cone[e] = id;
	}
	h->nregion = nhorizon;
	for (int e = 0; e < nhorizon; e++) {
		struct hull_face *f = &h->faces[cone[e]];
		int next = h->start_face[f->v[1]];

		f->adj[1] = next;
		h->faces[next].adj[2] = cone[e];
	}
}

static void insert_point(struct hull *h, int p, int seed)
{
	int nhorizon, ndisplaced;

	grow_region(h, p, seed);
	nhorizon = collect_horizon(h);
	ndisplaced = take_displaced(h, p);
	h->point_face[p] = -1;
	build_cone(h, p, nhorizon);
	for (int i = 0; i < ndisplaced; i++)
		assign_point(h, h->displaced[i], h->region, nhorizon);
}

/* A fixed pseudo-random order (splitmix64-driven Fisher-Yates), so the hull is
 * the same on every run and structured inputs still get expected-case cost. */
static void shuffled_order(int *order, int n)
{
	uint64_t state = 0x5851F42D4C957F2Dull;

	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) {
		uint64_t z = (state += 0x9E3779B97F4A7C15ull);
		int j, swap;

		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
		z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
		z ^= z >> 31;
		j = (int)(z % (uint64_t)(i + 1));
		swap = order[i];
		order[i] = order[j];
		order[j] = swap;
	}
}

/* Every point but the first four waits in an outside set until its turn. */
static void insert_all(struct hull *h, const int *order)
{
	for (int i = 0; i < h->np; i++) {
		/* NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign): filled */
		int p = order[i];

		if (h->point_face[p] >= 0)
			insert_point(h, p, h->point_face[p]);
	}
}

/* Writes the hull's faces of the np points to *faces_out (3 ints each, 2np-4
 * faces). Returns 0, -EINVAL when the points do not span 3D, -ENOMEM. */
static int convex_hull(const double *pts, int np, int **faces_out, int *nfaces_out)
{
	struct hull h = {0};
	int *order = malloc((size_t)np * sizeof(*order));
	int *faces = malloc(3 * (size_t)(2 * np) * sizeof(*faces));
	int rc = hull_init(&h, pts, np);

	if (!rc && (!order || !faces))
		rc = -ENOMEM;
	if (rc)
		goto out;
	rc = start_tetrahedron(&h);
	if (rc)
		goto out;
	shuffled_order(order, np);
	insert_all(&h, order);
	for (int id = 0; id < h.nslots; id++)
		memcpy(faces + 3 * id, h.faces[id].v, sizeof(h.faces[id].v));
	*faces_out = faces;
	*nfaces_out = h.nslots;
	faces = NULL;
out:
	free(faces);
	free(order);
	hull_free(&h);
	return rc;
}

static int compare_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Neighbour lists in CSR form from s->edges; neighbours come out ascending
 * because edges are sorted by (larger, smaller) index. */
static int build_neighbours(struct sphere *s)
{
	s->nbr_offset = calloc((size_t)s->nv + 1, sizeof(int));
	s->nbr = malloc(2 * (size_t)s->n_edges * sizeof(int));
	if (!s->nbr_offset || !s->nbr)
		return -ENOMEM;
	for (int e = 0; e < 2 * s->n_edges; e++)
		s->nbr_offset[s->edges[e] + 1]++;
	for (int v = 0; v < s->nv; v++)
		s->nbr_offset[v + 1] += s->nbr_offset[v];
	/* Fill using the offsets as cursors, then shift them back. */
	for (int e = 0; e < s->n_edges; e++) {
		int a = s->edges[2 * e], b = s->edges[2 * e + 1];

		s->nbr[s->nbr_offset[a]++] = b;
		s->nbr[s->nbr_offset[b]++] = a;
	}
	for (int v = s->nv; v > 0; v--)
		s->nbr_offset[v] = s->nbr_offset[v - 1];
	s->nbr_offset[0] = 0;
	return 0;
}

/* DIPY's unique_edges: each undirected edge once as (smaller, larger), sorted
 * by the larger index, then the smaller (numpy lexsort order). Edges joining a
 * vertex to itself, which folding a hemisphere could produce, are dropped. */
static int edges_from_faces(const int *faces, int nf, struct sphere *s)
{
	uint64_t *keys = malloc(3 * (size_t)nf * sizeof(*keys));
	size_t nkeys = 0, nunique = 0;
	int rc = -ENOMEM;

	if (!keys)
		return -ENOMEM;
	for (int f = 0; f < nf; f++) {
		for (int k = 0; k < 3; k++) {
			int a = faces[3 * f + k], b = faces[3 * f + (k + 1) % 3];
			int lo = a < b ? a : b, hi = a < b ? b : a;

			if (lo != hi)
				keys[nkeys++] = (uint64_t)hi * (uint64_t)s->nv + (uint64_t)lo;
		}
	}
	qsort(keys, nkeys, sizeof(*keys), compare_u64);
	for (size_t i = 0; i < nkeys; i++)
		if (i == 0 || keys[i] != keys[i - 1])
			keys[nunique++] = keys[i];
	s->edges = malloc(2 * nunique * sizeof(int));
	if (!s->edges)
		goto out;
	s->n_edges = (int)nunique;
	for (size_t i = 0; i < nunique; i++) {
		s->edges[2 * i] = (int)(keys[i] % (uint64_t)s->nv);
		s->edges[2 * i + 1] = (int)(keys[i] / (uint64_t)s->nv);
	}
	rc = build_neighbours(s);
out:
	free(keys);
	return rc;
}

/* Directions given and their antipodes, sorted along sweep_direction; entry
 * i < n is +v_i, entry i >= n is -v_(i-n). */
struct signed_direction {
	double along;
	int entry;
};

static int compare_signed_direction(const void *a, const void *b)
{
	const struct signed_direction *x = a, *y = b;

	if (x->along != y->along)
		return x->along < y->along ? -1 : 1;
	return (x->entry > y->entry) - (x->entry < y->entry);
}

struct pair_scan {
	int dup_a, dup_b;     /* a duplicate pair (dup_b the larger index), -1 when none */
	int n_with_antipode;  /* vertices whose antipode is in the set */
};

static void signed_point(const double *unit, int n, int entry, double out[3])
{
	double sign = entry < n ? 1 : -1;
	int i = entry < n ? entry : entry - n;

	for (int k = 0; k < 3; k++)
		/* NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult): filled */
		out[k] = sign * unit[3 * i + k];
}

static void record_close_pair(int n, int e1, int e2, struct pair_scan *scan, char *has_antipode)
{
	int i = e1 % n, j = e2 % n;
	int lo = i < j ? i : j, hi = i < j ? j : i;

	if ((e1 < n) != (e2 < n)) {
		has_antipode[i] = has_antipode[j] = 1;
		return;
	}
	if (scan->dup_b < 0 || hi < scan->dup_b || (hi == scan->dup_b && lo < scan->dup_a)) {
		scan->dup_a = lo;
		scan->dup_b = hi;
	}
}

/* Finds duplicate directions and antipodal pairs by sweeping the 2n signed
 * directions along one axis: near-coincident points have near-equal
 * projections, so only short runs are compared. */
static int scan_pairs(const double *unit, int n, struct pair_scan *scan)
{
	struct signed_direction *sorted = malloc(2 * (size_t)n * sizeof(*sorted));
	char *has_antipode = calloc((size_t)n, 1);
	int rc = -ENOMEM;

	if (!sorted || !has_antipode)
		goto out;
	for (int e = 0; e < 2 * n; e++) {
		double p[3];

		signed_point(unit, n, e, p);
		sorted[e].along = dot3(p, sweep_direction);
		sorted[e].entry = e;
	}
	qsort(sorted, 2 * (size_t)n, sizeof(*sorted), compare_signed_direction);
	scan->dup_a = scan->dup_b = -1;
	for (int a = 0; a < 2 * n; a++) {
		double pa[3];

		signed_point(unit, n, sorted[a].entry, pa);
		for (int b = a + 1; b < 2 * n &&
		     sorted[b].along - sorted[a].along < SAME_DIRECTION_TOL; b++) {
			double pb[3];

			signed_point(unit, n, sorted[b].entry, pb);
			if (distance3(pa, pb) < SAME_DIRECTION_TOL)
				record_close_pair(n, sorted[a].entry, sorted[b].entry, scan,
						  has_antipode);
		}
	}
	scan->n_with_antipode = 0;
	for (int i = 0; i < n; i++)
		scan->n_with_antipode += has_antipode[i];
	rc = 0;
out:
	free(sorted);
	free(has_antipode);
	return rc;
}

static void set_vertices_from(struct sphere *s, const double *unit)
{
	for (int i = 0; i < 3 * s->nv; i++)
		s->vertices[i] = (float)unit[i];
}

/* Unit vector of v into out; scaling by the largest component first keeps
 * finite vectors near the double range from overflowing. Returns 0, or
 * -EDOM for a non-finite vector and -ERANGE for a zero one. */
static int normalise(const double v[3], double out[3])
{
	double largest = 0, len;

	for (int k = 0; k < 3; k++) {
		if (!isfinite(v[k]))
			return -EDOM;
		largest = fmax(largest, fabs(v[k]));
	}
	if (largest == 0)
		return -ERANGE;
	for (int k = 0; k < 3; k++)
		out[k] = v[k] / largest;
	len = sqrt(dot3(out, out));
	for (int k = 0; k < 3; k++)
		out[k] /= len;
	return 0;
}

/* The points whose hull is taken: the vertices, or for a hemisphere the
 * vertices followed by their antipodes. */
static void hull_points(const double *unit, int nv, bool hemisphere, double *out)
{
	memcpy(out, unit, 3 * (size_t)nv * sizeof(*out));
	if (!hemisphere)
		return;
	for (int i = 0; i < 3 * nv; i++)
		out[3 * (size_t)nv + i] = -unit[i];
}

/* Triangulates the vertex set and derives edges and neighbours. */
static int triangulate(const double *unit, bool hemisphere, const char *field,
		       struct sphere *s, struct errbuf *err)
{
	int np = hemisphere ? 2 * s->nv : s->nv;
	double *pts = malloc(3 * (size_t)np * sizeof(*pts));
	int *faces = NULL, nf = 0, rc = -ENOMEM;

	if (!pts)
		goto out;
	hull_points(unit, s->nv, hemisphere, pts);
	rc = convex_hull(pts, np, &faces, &nf);
	if (rc == -EINVAL)
		errbuf_set(err, rc, field, "vertices do not span 3D (all within %g of a plane)",
			   SPAN_TOL);
	if (rc)
		goto out;
	/* Antipodes fold back onto the vertices they mirror (DIPY's HemiSphere
	 * takes faces % n); full spheres are unchanged. */
	for (int i = 0; i < 3 * nf; i++)
		/* NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign): filled */
		faces[i] %= s->nv;
	rc = edges_from_faces(faces, nf, s);
out:
	free(faces);
	free(pts);
	return rc;
}

static int check_vertices(const double *xyz, int nv, const char *field, double *unit,
			  struct pair_scan *scan, struct errbuf *err)
{
	char where[sizeof(err->field)];
	int rc;

	for (int i = 0; i < nv; i++) {
		rc = normalise(xyz + 3 * (size_t)i, unit + 3 * (size_t)i);
		if (rc) {
			snprintf(where, sizeof(where), "%s[%d]", field, i);
			return errbuf_set(err, -EINVAL, where, "vertex %s",
					  rc == -EDOM ? "is not finite" : "has zero length");
		}
	}
	rc = scan_pairs(unit, nv, scan);
	if (rc)
		return rc;
	if (scan->dup_b >= 0) {
		snprintf(where, sizeof(where), "%s[%d]", field, scan->dup_b);
		return errbuf_set(err, -EINVAL, where,
				  "vertex duplicates vertex %d (directions within %g)",
				  scan->dup_a, SAME_DIRECTION_TOL);
	}
	return 0;
}

int sphere_from_vertices(const double *xyz, int nv, const char *field,
			 struct sphere *ret, struct errbuf *err)
{
	struct sphere s = {0};
	struct pair_scan scan;
	double *unit = NULL;
	int rc;

	if (nv < SPHERE_MIN_VERTICES || nv > SPHERE_MAX_VERTICES)
		return errbuf_set(err, -EINVAL, field, "need %d to %d vertices, got %d",
				  SPHERE_MIN_VERTICES, SPHERE_MAX_VERTICES, nv);
	s.nv = nv;
	unit = malloc(3 * (size_t)nv * sizeof(*unit));
	s.vertices = malloc(3 * (size_t)nv * sizeof(*s.vertices));
	if (!unit || !s.vertices) {
		rc = -ENOMEM;
		goto out;
	}
	rc = check_vertices(xyz, nv, field, unit, &scan, err);
	if (rc)
		goto out;
	rc = triangulate(unit, scan.n_with_antipode == 0, field, &s, err);
	if (rc)
		goto out;
	set_vertices_from(&s, unit);
	s.antipodal = scan.n_with_antipode == nv;
	*ret = s;
	s = (struct sphere){0};
out:
	sphere_free(&s);
	free(unit);
	return rc;
}

static const struct sphere_figure *find_figure(const char *name)
{
	for (int i = 0; i < sphere_figure_count; i++)
		if (strcmp(sphere_figures[i].name, name) == 0)
			return &sphere_figures[i];
	return NULL;
}

static int unknown_sphere(const char *name, struct errbuf *err)
{
	char known[256] = "";
	size_t used = 0;

	for (int i = 0; sphere_builtin_names[i]; i++) {
		int n = snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "",
				 sphere_builtin_names[i]);

		if (n < 0 || (size_t)n >= sizeof(known) - used)
			break;
		used += (size_t)n;
	}
	return errbuf_set(err, -ENOENT, NULL, "unknown sphere \"%s\" (known: %s)", name, known);
}

/* Built-ins are antipodal by construction, but the flag is computed the same
 * way as for user vertices so the two can never disagree. */
static int builtin_antipodal(const struct sphere *s, bool *antipodal)
{
	double *unit = malloc(3 * (size_t)s->nv * sizeof(*unit));
	struct pair_scan scan;
	int rc = -ENOMEM;

	if (!unit)
		return rc;
	for (int i = 0; i < 3 * s->nv; i++)
		unit[i] = s->vertices[i];
	rc = scan_pairs(unit, s->nv, &scan);
	if (rc == 0)
		*antipodal = scan.n_with_antipode == s->nv;
	free(unit);
	return rc;
}

int sphere_builtin(const char *name, struct sphere *ret, struct errbuf *err)
{
	const struct sphere_figure *fig = name ? find_figure(name) : NULL;
	struct sphere s = {0};
	int rc;

	if (!fig)
		return unknown_sphere(name ? name : "(null)", err);
	s.nv = fig->nv;
	s.vertices = malloc(3 * (size_t)fig->nv * sizeof(*s.vertices));
	if (!s.vertices) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(s.vertices, fig->vertices, 3 * (size_t)fig->nv * sizeof(*s.vertices));
	rc = edges_from_faces(&fig->faces[0][0], fig->nf, &s);
	if (rc)
		goto out;
	rc = builtin_antipodal(&s, &s.antipodal);
	if (rc)
		goto out;
	*ret = s;
	s = (struct sphere){0};
out:
	sphere_free(&s);
	return rc;
}

/* The cosine of vertices i and j (its absolute value when axial). */
static double cone_cos(const struct sphere *s, int i, int j, bool axial)
{
	const float *a = &s->vertices[3 * i], *b = &s->vertices[3 * j];
	double c = (double)a[0] * b[0] + (double)a[1] * b[1] + (double)a[2] * b[2];

	return axial ? fabs(c) : c;
}

/* Whether vertex j lies within the cone of vertex i, with the margin. */
static bool in_cone_list(const struct sphere *s, int i, int j, double cos_max, bool axial)
{
	return cone_cos(s, i, j, axial) >= cos_max - SPHERE_CONE_MARGIN;
}

/* Whether vertex j lies within the cone of vertex i in any rounding. */
static bool surely_in_cone(const struct sphere *s, int i, int j, double cos_max, bool axial)
{
	return cone_cos(s, i, j, axial) >= cos_max + SPHERE_CONE_MARGIN;
}

/* j's word in i's list: SPHERE_CONE_INSIDE where no rounding takes j out. */
static uint32_t cone_list_word(const struct sphere *s, int i, int j, double cos_max, bool axial)
{
	return (uint32_t)j | (surely_in_cone(s, i, j, cos_max, axial) ? SPHERE_CONE_INSIDE : 0u);
}

bool sphere_mirrored(const struct sphere *s)
{
	int half = s->nv / 2;

	if (s->nv % 2 != 0)
		return false;
	for (int j = 0; j < half; j++)
		for (int c = 0; c < 3; c++)
			if (s->vertices[3 * (j + half) + c] != -s->vertices[3 * j + c])
				return false;
	return true;
}

int sphere_cone_lists(const struct sphere *s, double cos_max, bool axial, uint32_t **ret,
		      size_t *n_words)
{
	size_t words = (size_t)s->nv + 1;
	uint32_t *lists;

	*ret = NULL;
	*n_words = 0;
	for (int i = 0; i < s->nv; i++)
		for (int j = 0; j < s->nv; j++)
			words += in_cone_list(s, i, j, cos_max, axial);
	if (words > UINT32_MAX)
		return -E2BIG;
	lists = malloc(sizeof(*lists) * words);
	if (!lists)
		return -ENOMEM;
	words = (size_t)s->nv + 1;
	for (int i = 0; i < s->nv; i++) {
		lists[i] = (uint32_t)words;
		for (int j = 0; j < s->nv; j++)
			if (in_cone_list(s, i, j, cos_max, axial))
				lists[words++] = cone_list_word(s, i, j, cos_max, axial);
	}
	lists[s->nv] = (uint32_t)words;
	*ret = lists;
	*n_words = words;
	return 0;
}

size_t sphere_cone_mask_words(int nv)
{
	return ((size_t)nv + 31) / 32;
}

int sphere_cone_masks(const struct sphere *s, double cos_max, bool axial, uint32_t **ret,
		      size_t *n_words)
{
	size_t words = sphere_cone_mask_words(s->nv);
	uint32_t *masks = calloc(2 * words * (size_t)s->nv, sizeof(*masks));

	*ret = NULL;
	*n_words = 0;
	if (!masks)
		return -ENOMEM;
	for (int i = 0; i < s->nv; i++) {
		uint32_t *near = masks + 2 * words * (size_t)i, *inside = near + words;
		for (int j = 0; j < s->nv; j++) {
			uint32_t bit = 1u << (j % 32);
			if (in_cone_list(s, i, j, cos_max, axial))
				near[j / 32] |= bit;
			if (surely_in_cone(s, i, j, cos_max, axial))
				inside[j / 32] |= bit;
		}
	}
	*ret = masks;
	*n_words = 2 * words * (size_t)s->nv;
	return 0;
}

void sphere_free(struct sphere *s)
{
	free(s->vertices);
	free(s->edges);
	free(s->nbr_offset);
	free(s->nbr);
	memset(s, 0, sizeof(*s));
}
