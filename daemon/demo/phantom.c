/* SPDX-License-Identifier: MIT */
/*
 * The phantom is drawn in a 48x48x24 "design box" (units: voxels of the
 * default grid). Larger grids are split into tiles, each holding a copy of the
 * design scaled isotropically to fit; smaller grids get one scaled-down copy.
 * Every voxel is mapped back into its tile's design box, where the bundle
 * tubes and end zones are tested analytically, so nothing is rasterised and
 * no per-voxel memory beyond the output volumes is needed.
 */
#include "demo/phantom.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "job/jobspec.h"
#include "base/philox.h"
#include "models/sphere.h"
#include "formats/volume.h"

#define PHANTOM_DIM_MIN 16
#define PHANTOM_DIM_MAX 2048

#define DEG (M_PI / 180.0)

/* Design layout: two layers of bundles (z = 6.5 and 17.5), far enough apart
 * that tubes and end zones of different layers never touch. */
#define LOW_LAYER_Z 6.5
#define HIGH_LAYER_Z 17.5
static const double design_box[3] = { 48.0, 48.0, 24.0 };

/* The volumes of a 5TT image (MRtrix3's order: cortical GM, sub-cortical GM,
 * WM, CSF, pathological tissue). */
#define PHANTOM_TISSUES 5

/* A tile is never shrunk below this fraction of the design box unless the
 * whole grid is smaller: keeps tube radii >= 2.8 voxels when tiling. */
#define MIN_TILE_SCALE 0.8

/* Tube radius in design units (voxels at the default size). */
#define TUBE_RADIUS 3.5

/* Voxel centres of the default grid fall exactly on some tube surfaces
 * (e.g. 3.5 from an axis at an integer coordinate); a small tolerance puts
 * those ties inside whatever the floating-point rounding, so symmetric
 * bundles stay symmetric on every compiler and platform. */
#define TIE_TOLERANCE 1e-9
#define TUBE_RADIUS2 (TUBE_RADIUS * TUBE_RADIUS + TIE_TOLERANCE)

/* End zones are sized in voxels of the actual grid: DIPY-style trackers stop
 * at the first point with FA <= threshold, up to ~1.4 voxels past the last
 * voxel of the tube, so a zone reaches 2 voxels beyond the tube's end cap
 * (and 1 voxel wider than the tube) to contain those endpoints. */
#define END_ZONE_HALF_LENGTH_VOX 2.0
#define END_ZONE_EXTRA_RADIUS_VOX 1.0

/* ODF lobe exp(-kappa * sin^2(angle)): kappa 10 gives a half width at half
 * maximum of 15.3 degrees, sharp enough for two peaks at a 45-degree crossing
 * on symmetric362. The isotropic floor stays below the default pmf threshold
 * (0.05 of the maximum, even in crossings where lobes have weight 1/2), so it
 * never offers directions of its own. */
#define LOBE_KAPPA 10.0
#define ISOTROPIC_FLOOR 0.02

/* Single-fibre tensor eigenvalues (mm^2/s) of the multi-tensor model behind
 * the FA map and the DWI series. */
#define LAMBDA_PARALLEL 1.7e-3
#define LAMBDA_PERPENDICULAR 0.3e-3

/* DWI series. Outside the bundles the tissue is isotropic, so the series has
 * no empty background and a DTI fit there gives FA 0; inside them there is no
 * isotropic compartment, so a DTI fit of a single-bundle voxel recovers the
 * FA map exactly (noise aside). */
#define DWI_S0 100.0
#define ISOTROPIC_DIFFUSIVITY 0.8e-3
#define DWI_MAX_SHELLS 2
#define DWI_BVAL_NAME "dwi.bval"
#define DWI_BVEC_NAME "dwi.bvec"

/* Acquisition limits. Six directions are the fewest a tensor fit takes; the
 * upper bounds are far past any real protocol and keep the series small
 * enough to allocate. DIPY and tractd read b-values up to 50 as b0s, so a
 * weighted shell has to lie above that. */
#define DWI_B0S_MIN 1
#define DWI_B0S_MAX 100
#define DWI_DIRECTIONS_MIN 6
#define DWI_DIRECTIONS_MAX 1000
#define DWI_BVALUE_MIN 50.0
#define DWI_BVALUE_MAX 20000.0

/* The noise is a pure function of this key and (voxel, volume): the same
 * phantom parameters always give the same bytes. */
#define PHANTOM_NOISE_SEED UINT64_C(0x7068616e746f6d)

/* Azimuth step of the golden spiral: pi (3 - sqrt 5). */
#define GOLDEN_ANGLE (M_PI * (3.0 - 2.2360679774997896964))

/* job_ptt.json's max_angle, degrees. */
#define PTT_JOB_MAX_ANGLE 20
/* The job_dwi.json model: CSD of this order fitted to the DWI. */
#define DWI_MODEL "csd"
#define DWI_MODEL_SH_ORDER 8

enum curve_shape { CURVE_LINE, CURVE_ARC };

/* One bundle of the design: a planar centre curve at height centre[2]. */
struct bundle_design {
	const char *name;
	const char *kind;             /* the configuration it belongs to */
	enum curve_shape shape;
	double centre[3];             /* line: its midpoint; arc: the circle's centre */
	double heading_deg;           /* line: direction in the xy plane, from +x */
	double half_length;           /* line */
	double arc_radius;            /* arc */
	double arc_from_deg;          /* arc: runs counterclockwise (about +z) */
	double arc_to_deg;            /*      from arc_from_deg to arc_to_deg */
};

static const struct bundle_design designs[] = {
	{ .name = "straight", .kind = "straight", .shape = CURVE_LINE,
	  .centre = { 24.0, 5.0, HIGH_LAYER_Z }, .heading_deg = 0.0, .half_length = 20.0 },
	/* Half circle: 0.5 voxel steps turn by under 3 degrees. */
	{ .name = "arc", .kind = "arc", .shape = CURVE_ARC,
	  .centre = { 10.0, 29.0, HIGH_LAYER_Z }, .arc_radius = 10.0,
	  .arc_from_deg = -90.0, .arc_to_deg = 90.0 },
	{ .name = "cross90_a", .kind = "crossing90", .shape = CURVE_LINE,
	  .centre = { 15.0, 24.0, LOW_LAYER_Z }, .heading_deg = 0.0, .half_length = 11.0 },
	{ .name = "cross90_b", .kind = "crossing90", .shape = CURVE_LINE,
	  .centre = { 15.0, 24.0, LOW_LAYER_Z }, .heading_deg = 90.0, .half_length = 11.0 },
	{ .name = "cross45_a", .kind = "crossing45", .shape = CURVE_LINE,
	  .centre = { 36.0, 24.0, LOW_LAYER_Z }, .heading_deg = 67.5, .half_length = 13.0 },
	{ .name = "cross45_b", .kind = "crossing45", .shape = CURVE_LINE,
	  .centre = { 36.0, 24.0, LOW_LAYER_Z }, .heading_deg = 112.5, .half_length = 13.0 },
	/* Two circles touching externally at (34, 28): the arcs meet tangentially
	 * there (sharing voxels with nearly parallel directions) and diverge. */
	{ .name = "kissing_a", .kind = "kissing", .shape = CURVE_ARC,
	  .centre = { 22.0, 28.0, HIGH_LAYER_Z }, .arc_radius = 12.0,
	  .arc_from_deg = -60.0, .arc_to_deg = 60.0 },
	{ .name = "kissing_b", .kind = "kissing", .shape = CURVE_ARC,
	  .centre = { 46.0, 28.0, HIGH_LAYER_Z }, .arc_radius = 12.0,
	  .arc_from_deg = 120.0, .arc_to_deg = 240.0 },
};

#define DESIGN_BUNDLES ((int)(sizeof(designs) / sizeof(designs[0])))

/* A design bundle resolved into what the per-voxel tests need. */
struct curve {
	enum curve_shape shape;
	double origin[3];        /* line: first end; arc: circle centre */
	double axis[3];          /* line: unit direction, first -> last end */
	double length;           /* design units */
	double arc_radius;
	double arc_from;         /* radians */
	double arc_span;         /* radians, > 0 */
	double end_point[2][3];  /* first and last end */
	double end_travel[2][3]; /* unit tangent there, in the direction first -> last */
};

struct layout {
	struct curve curves[DESIGN_BUNDLES];
	int64_t tiles[3];          /* tiles per axis */
	double tile_size[3];       /* voxels */
	double scale;              /* voxels per design unit */
	double margin[3];          /* voxels between a tile's low edge and its design box */
	double zone_half_length;   /* design units */
	double zone_radius;        /* design units */
};

/* The fibre directions at one voxel, at most one per design bundle. */
struct fibres {
	int count;
	double dir[DESIGN_BUNDLES][3];
};

/* The DWI acquisition, in FSL's layout: bvec holds one row per axis. */
struct gradient_table {
	int count;
	double *bval;                      /* count values, s/mm^2 */
	double *bvec[3];                   /* count values each; unit, 0 for the b0 volumes */
};

struct dwi_series {
	struct gradient_table gradients;
	uint32_t noise_key[2];
	double noise_sigma;                /* 0: noise-free */
};

/* dwi and mask stay unallocated (data NULL) when the DWI is not written. */
struct phantom_volumes {
	struct volume odf, fa, roi, labels, include, exclude, wm, five_tt, dwi, mask;
};

void phantom_default_params(struct phantom_params *p)
{
	p->dim[0] = 48;
	p->dim[1] = 48;
	p->dim[2] = 24;
	p->voxel_mm = 1.0;
	p->sphere = "symmetric362";
	p->seed_count = 2000;
	p->compress = 1;
	p->snr = 30.0;
	p->shells = 1;
	p->b0_count = 6;
	p->directions = 64;
	p->bvalue = 1000.0;
	p->write_dwi = 1;
}

static double dot3(const double a[3], const double b[3])
{
	return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

static void planar_unit(double angle, double out[3])
{
	out[0] = cos(angle);
	out[1] = sin(angle);
	out[2] = 0.0;
}

/* Counterclockwise tangent of a circle about +z at the given angle. */
static void arc_tangent(double angle, double out[3])
{
	planar_unit(angle + M_PI / 2.0, out);
}

static void resolve_line(const struct bundle_design *d, struct curve *c)
{
	planar_unit(d->heading_deg * DEG, c->axis);
	c->length = 2.0 * d->half_length;
	for (int a = 0; a < 3; a++) {
		c->origin[a] = d->centre[a] - d->half_length * c->axis[a];
		c->end_point[0][a] = c->origin[a];
		c->end_point[1][a] = d->centre[a] + d->half_length * c->axis[a];
		c->end_travel[0][a] = c->axis[a];
		c->end_travel[1][a] = c->axis[a];
	}
}

static void resolve_arc(const struct bundle_design *d, struct curve *c)
{
	double angle[2] = { d->arc_from_deg * DEG, d->arc_to_deg * DEG };

	memcpy(c->origin, d->centre, sizeof(c->origin));
	c->arc_radius = d->arc_radius;
	c->arc_from = angle[0];
	c->arc_span = angle[1] - angle[0];
	c->length = c->arc_span * d->arc_radius;
	for (int end = 0; end < 2; end++) {
		double radial[3];

		planar_unit(angle[end], radial);
		for (int a = 0; a < 3; a++)
			c->end_point[end][a] = d->centre[a] + d->arc_radius * radial[a];
		arc_tangent(angle[end], c->end_travel[end]);
	}
}

/* Line membership with flat end caps: q projects onto the segment and lies
 * within the tube radius of it. */
static bool line_fibre(const struct curve *c, const double q[3], double dir[3])
{
	double rel[3] = { q[0] - c->origin[0], q[1] - c->origin[1], q[2] - c->origin[2] };
	double t = dot3(rel, c->axis);
	double dist2 = dot3(rel, rel) - t * t;

	if (t < -TIE_TOLERANCE || t > c->length + TIE_TOLERANCE || dist2 > TUBE_RADIUS2)
		return false;
	memcpy(dir, c->axis, 3 * sizeof(double));
	return true;
}

/* Arc membership: within the tube radius of the circle, and the closest
 * circle point (same polar angle) lies on the arc, which gives flat end caps
 * in the radial planes through the ends. */
static bool arc_fibre(const struct curve *c, const double q[3], double dir[3])
{
	double dx = q[0] - c->origin[0], dy = q[1] - c->origin[1], dz = q[2] - c->origin[2];
	double rho = hypot(dx, dy);
	double angle, past_start;

	if ((rho - c->arc_radius) * (rho - c->arc_radius) + dz * dz > TUBE_RADIUS2)
		return false;
	angle = atan2(dy, dx);
	past_start = remainder(angle - c->arc_from, 2.0 * M_PI);
	if (past_start < -TIE_TOLERANCE)
		past_start += 2.0 * M_PI;
	if (past_start > c->arc_span + TIE_TOLERANCE)
		return false;
	arc_tangent(angle, dir);
	return true;
}

static bool curve_fibre(const struct curve *c, const double q[3], double dir[3])
{
	return c->shape == CURVE_LINE ? line_fibre(c, q, dir) : arc_fibre(c, q, dir);
}

static void resolve_curves(struct curve curves[DESIGN_BUNDLES])
{
	for (int b = 0; b < DESIGN_BUNDLES; b++) {
		curves[b].shape = designs[b].shape;
		if (designs[b].shape == CURVE_LINE)
			resolve_line(&designs[b], &curves[b]);
		else
			resolve_arc(&designs[b], &curves[b]);
	}
}

/* Tiles per axis: as many as fit without shrinking below MIN_TILE_SCALE of
 * the design box; the design is then scaled by the tightest axis so that
 * circles stay circles. */
static void plan_layout(const int64_t dim[3], struct layout *l)
{
	l->scale = INFINITY;
	for (int a = 0; a < 3; a++) {
		int64_t tiles = (int64_t)floor((double)dim[a] / (design_box[a] * MIN_TILE_SCALE));

		l->tiles[a] = tiles > 1 ? tiles : 1;
		l->tile_size[a] = (double)dim[a] / (double)l->tiles[a];
		l->scale = fmin(l->scale, l->tile_size[a] / design_box[a]);
	}
	for (int a = 0; a < 3; a++)
		l->margin[a] = 0.5 * (l->tile_size[a] - l->scale * design_box[a]);
	l->zone_half_length = END_ZONE_HALF_LENGTH_VOX / l->scale;
	l->zone_radius = TUBE_RADIUS + END_ZONE_EXTRA_RADIUS_VOX / l->scale;
	resolve_curves(l->curves);
}

static int64_t tile_count(const struct layout *l)
{
	return l->tiles[0] * l->tiles[1] * l->tiles[2];
}

/* Tile index and design coordinates of voxel (i,j,k). Tiles are measured
 * from the low face of voxel 0, where voxel i's centre is at i + 0.5. */
static int64_t voxel_to_design(const struct layout *l, const int64_t voxel[3], double q[3])
{
	int64_t tile[3];

	for (int a = 0; a < 3; a++) {
		double centre = (double)voxel[a] + 0.5;
		int64_t t = (int64_t)floor(centre / l->tile_size[a]);

		tile[a] = t < l->tiles[a] ? t : l->tiles[a] - 1;
		q[a] = (centre - (double)tile[a] * l->tile_size[a] - l->margin[a]) / l->scale;
	}
	return (tile[0] * l->tiles[1] + tile[1]) * l->tiles[2] + tile[2];
}

/* Inverse of voxel_to_design for the bundle geometry written to bundles.json. */
static void design_to_voxel(const struct layout *l, int64_t tile, const double q[3], double out[3])
{
	int64_t tile_xyz[3] = {
		tile / (l->tiles[1] * l->tiles[2]),
		tile / l->tiles[2] % l->tiles[1],
		tile % l->tiles[2],
	};

	for (int a = 0; a < 3; a++)
		out[a] = (double)tile_xyz[a] * l->tile_size[a] + l->margin[a] + l->scale * q[a] - 0.5;
}

static void collect_fibres(const struct layout *l, const double q[3], struct fibres *f)
{
	f->count = 0;
	for (int b = 0; b < DESIGN_BUNDLES; b++)
		if (curve_fibre(&l->curves[b], q, f->dir[f->count]))
			f->count++;
}

/* End zone: a cylinder along the end tangent, centred on the end point,
 * half inside the tube and half beyond its cap. */
static bool in_end_zone(const struct layout *l, const double end[3], const double tangent[3],
			const double q[3])
{
	double rel[3] = { q[0] - end[0], q[1] - end[1], q[2] - end[2] };
	double along = dot3(rel, tangent);
	double radial2 = dot3(rel, rel) - along * along;

	return fabs(along) <= l->zone_half_length + TIE_TOLERANCE &&
	       radial2 <= l->zone_radius * l->zone_radius + TIE_TOLERANCE;
}

/* Label 2b+1 / 2b+2 (b = global bundle index) of the first end zone that
 * contains q, or 0. Zones of different bundles do not meet at scales >= 0.8;
 * on tiny grids the first bundle in table order wins. */
static int64_t end_zone_label(const struct layout *l, int64_t tile, const double q[3])
{
	for (int b = 0; b < DESIGN_BUNDLES; b++) {
		const struct curve *c = &l->curves[b];

		for (int end = 0; end < 2; end++)
			if (in_end_zone(l, c->end_point[end], c->end_travel[end], q))
				return 2 * (tile * DESIGN_BUNDLES + b) + end + 1;
	}
	return 0;
}

/* The share of each fibre in a voxel: equal, in the ODF, the FA map and the
 * DWI series alike, so the three describe the same tissue. */
static double fibre_fraction(const struct fibres *f)
{
	return 1.0 / f->count;
}

/* FA of the equal-weight mean of the fibres' tensors, in closed form:
 * FA = sqrt(3/2) |D - tr(D)/3 I| / |D| (Frobenius norms). */
static double multi_tensor_fa(const struct fibres *f)
{
	double weight = (LAMBDA_PARALLEL - LAMBDA_PERPENDICULAR) * fibre_fraction(f);
	double tensor[3][3];
	double mean_eigenvalue, deviatoric2 = 0.0, total2 = 0.0;

	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 3; c++) {
			tensor[r][c] = r == c ? LAMBDA_PERPENDICULAR : 0.0;
			for (int i = 0; i < f->count; i++)
				tensor[r][c] += weight * f->dir[i][r] * f->dir[i][c];
		}
	mean_eigenvalue = (tensor[0][0] + tensor[1][1] + tensor[2][2]) / 3.0;
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 3; c++) {
			double deviation = tensor[r][c] - (r == c ? mean_eigenvalue : 0.0);

			deviatoric2 += deviation * deviation;
			total2 += tensor[r][c] * tensor[r][c];
		}
	return sqrt(1.5 * deviatoric2 / total2);
}

/* Sum of equal-weight axially symmetric lobes plus the isotropic floor. */
static void write_odf(const struct fibres *f, const struct sphere *s, float *odf)
{
	double weight = fibre_fraction(f);

	for (int v = 0; v < s->nv; v++) {
		const float *vertex = s->vertices + 3 * v;
		double value = ISOTROPIC_FLOOR;

		for (int i = 0; i < f->count; i++) {
			double c = vertex[0] * f->dir[i][0] + vertex[1] * f->dir[i][1] +
				   vertex[2] * f->dir[i][2];

			value += weight * exp(-LOBE_KAPPA * (1.0 - c * c));
		}
		odf[v] = (float)value;
	}
}

/* Golden-spiral point i of n on the upper hemisphere: equal-area steps in z
 * (0 < z < 1) while the azimuth advances by the golden angle, which spreads
 * any number of points evenly; azimuth_offset turns the whole set about z. */
static void hemisphere_direction(int i, int n, double azimuth_offset, double out[3])
{
	double z = 1.0 - ((double)i + 0.5) / (double)n;
	double radial = sqrt(1.0 - z * z);
	double azimuth = (double)i * GOLDEN_ANGLE + azimuth_offset;

	out[0] = radial * cos(azimuth);
	out[1] = radial * sin(azimuth);
	out[2] = z;
}

static void free_gradients(struct gradient_table *t)
{
	free(t->bval);
	for (int a = 0; a < 3; a++)
		free(t->bvec[a]);
	memset(t, 0, sizeof(*t));
}

static int alloc_gradients(int count, struct gradient_table *t, struct errbuf *err)
{
	t->count = count;
	t->bval = malloc(sizeof(double) * (size_t)count);
	for (int a = 0; a < 3; a++)
		t->bvec[a] = malloc(sizeof(double) * (size_t)count);
	if (!t->bval || !t->bvec[0] || !t->bvec[1] || !t->bvec[2]) {
		free_gradients(t);
		return errbuf_set(err, -ENOMEM, "phantom", "out of memory");
	}
	return 0;
}

/* The b0 volumes are spread evenly through the weighted ones (b0 j comes
 * before weighted volume j * weighted / b0_count, so the series starts with
 * one, and with more b0s than weighted volumes they come in runs), as
 * scanners interleave them to follow drift; shells follow each other, shell
 * s at (s + 1) * bvalue. Every shell has the same directions, each turned by
 * half a golden angle about z from the one before, so no direction repeats. */
static int plan_gradients(const struct phantom_params *p, struct gradient_table *t,
			  struct errbuf *err)
{
	int weighted = p->shells * p->directions, next_weighted = 0, next_b0 = 0;
	int rc = alloc_gradients(p->b0_count + weighted, t, err);

	if (rc)
		return rc;
	for (int v = 0; v < t->count; v++) {
		double direction[3] = { 0.0, 0.0, 0.0 };

		if (next_b0 < p->b0_count && next_weighted >= next_b0 * weighted / p->b0_count) {
			t->bval[v] = 0.0;
			next_b0++;
		} else {
			int shell = next_weighted / p->directions;

			t->bval[v] = (shell + 1) * p->bvalue;
			hemisphere_direction(next_weighted % p->directions, p->directions,
					     0.5 * GOLDEN_ANGLE * shell, direction);
			next_weighted++;
		}
		for (int a = 0; a < 3; a++)
			t->bvec[a][v] = direction[a];
	}
	return 0;
}

static int plan_dwi(const struct phantom_params *p, struct dwi_series *dwi, struct errbuf *err)
{
	philox_key_from_seed(PHANTOM_NOISE_SEED, dwi->noise_key);
	dwi->noise_sigma = p->snr > 0.0 && isfinite(p->snr) ? DWI_S0 / p->snr : 0.0;
	return plan_gradients(p, &dwi->gradients, err);
}

/* Noise-free signal along gradient g: the fibres' cylindrically symmetric
 * tensors in equal fractions, or the isotropic tissue where no fibre passes. */
static double clean_signal(const struct fibres *f, double bval, const double g[3])
{
	double sum = 0.0;

	if (f->count == 0)
		return DWI_S0 * exp(-bval * ISOTROPIC_DIFFUSIVITY);
	for (int i = 0; i < f->count; i++) {
		double c = dot3(g, f->dir[i]);

		sum += exp(-bval * (LAMBDA_PERPENDICULAR +
				    (LAMBDA_PARALLEL - LAMBDA_PERPENDICULAR) * c * c));
	}
	return DWI_S0 * fibre_fraction(f) * sum;
}

/* (x + 0.5) / 2^32: uniform on the open interval (0, 1), so log() is finite. */
static double open_unit_interval(uint32_t x)
{
	return ((double)x + 0.5) * 0x1p-32;
}

/* Two independent standard normal deviates for one sample (Box-Muller),
 * from the Philox block of (volume, voxel): independent of loop order. */
static void gaussian_pair(const struct dwi_series *dwi, size_t voxel, int volume, double out[2])
{
	uint64_t item = (uint64_t)voxel;
	uint32_t counter[4] = { (uint32_t)volume, (uint32_t)item, (uint32_t)(item >> 32),
				PHILOX_STREAM_PHANTOM_NOISE };
	uint32_t bits[4];
	double radius, angle;

	philox4x32_10(counter, dwi->noise_key, bits);
	radius = sqrt(-2.0 * log(open_unit_interval(bits[0])));
	angle = 2.0 * M_PI * open_unit_interval(bits[1]);
	out[0] = radius * cos(angle);
	out[1] = radius * sin(angle);
}

/* Magnitude of the clean signal plus complex Gaussian noise: Rician. */
static void write_dwi(const struct fibres *f, const struct dwi_series *dwi, size_t voxel,
		      float *samples)
{
	const struct gradient_table *t = &dwi->gradients;

	for (int v = 0; v < t->count; v++) {
		double g[3] = { t->bvec[0][v], t->bvec[1][v], t->bvec[2][v] };
		double signal = clean_signal(f, t->bval[v], g);

		if (dwi->noise_sigma > 0.0) {
			double noise[2];

			gaussian_pair(dwi, voxel, v, noise);
			signal = hypot(signal + dwi->noise_sigma * noise[0],
				       dwi->noise_sigma * noise[1]);
		}
		samples[v] = (float)signal;
	}
}

/* The mask excludes a one-voxel border, so that it masks something. */
static bool inside_border(const struct volume *v, const int64_t voxel[3])
{
	for (int a = 0; a < 3; a++)
		if (voxel[a] == 0 || voxel[a] == v->dim[a] - 1)
			return false;
	return true;
}

/* MRtrix3's 5TT of the same tissues: the end zones cortical grey matter,
 * the bundles white matter, the rest CSF; no sub-cortical grey matter or
 * pathological tissue. */
static void write_five_tt(struct phantom_volumes *out, size_t index)
{
	float *tt = out->five_tt.data + index * PHANTOM_TISSUES;

	tt[0] = out->include.data[index];   /* cortical GM */
	tt[2] = out->wm.data[index];
	tt[3] = out->exclude.data[index];   /* CSF */
}

/* Voxels outside every bundle keep the zeros volume_alloc gave them in the
 * ODF, FA and ROI (their label may still be set: end zones reach past the
 * tube caps); the DWI has a signal everywhere. */
static void fill_voxel(const struct layout *l, const struct sphere *s,
		       const struct dwi_series *dwi, struct phantom_volumes *out,
		       const int64_t voxel[3])
{
	size_t index = volume_index(&out->fa, voxel[0], voxel[1], voxel[2]);
	struct fibres f;
	double q[3];
	int64_t tile = voxel_to_design(l, voxel, q);

	out->labels.data[index] = (float)end_zone_label(l, tile, q);
	collect_fibres(l, q, &f);
	/* The tissues: grey matter at the bundles' ends (ACT's include map),
	 * the rest outside the bundles CSF (its exclude map), white matter
	 * the bundles between. */
	out->include.data[index] = out->labels.data[index] > 0.0f ? 1.0f : 0.0f;
	out->exclude.data[index] = f.count == 0 && out->labels.data[index] == 0.0f ? 1.0f : 0.0f;
	out->wm.data[index] = 1.0f - out->include.data[index] - out->exclude.data[index];
	write_five_tt(out, index);
	if (out->dwi.data) {
		write_dwi(&f, dwi, index, out->dwi.data + index * (size_t)out->dwi.dim[3]);
		out->mask.data[index] = inside_border(&out->mask, voxel) ? 1.0f : 0.0f;
	}
	if (f.count == 0)
		return;
	out->fa.data[index] = (float)multi_tensor_fa(&f);
	out->roi.data[index] = 1.0f;
	write_odf(&f, s, out->odf.data + index * (size_t)s->nv);
}

static void fill_volumes(const struct layout *l, const struct sphere *s,
			 const struct dwi_series *dwi, struct phantom_volumes *out)
{
	int64_t voxel[3];

	for (voxel[0] = 0; voxel[0] < out->fa.dim[0]; voxel[0]++)
		for (voxel[1] = 0; voxel[1] < out->fa.dim[1]; voxel[1]++)
			for (voxel[2] = 0; voxel[2] < out->fa.dim[2]; voxel[2]++)
				fill_voxel(l, s, dwi, out, voxel);
}

static void free_volumes(struct phantom_volumes *v)
{
	volume_free(&v->odf);
	volume_free(&v->fa);
	volume_free(&v->roi);
	volume_free(&v->labels);
	volume_free(&v->include);
	volume_free(&v->exclude);
	volume_free(&v->wm);
	volume_free(&v->five_tt);
	volume_free(&v->dwi);
	volume_free(&v->mask);
}

/* Identity rotation (RAS), isotropic voxel_mm, the grid's centre at 0 mm. */
static void centre_affine(struct volume *v, double voxel_mm)
{
	for (int a = 0; a < 3; a++)
		v->affine[a][3] = -0.5 * voxel_mm * (double)(v->dim[a] - 1);
}

static int alloc_volume(struct volume *v, const int64_t dim[3], int64_t nt, double voxel_mm,
			struct errbuf *err)
{
	int64_t shape[4] = { dim[0], dim[1], dim[2], nt };
	int rc = volume_alloc(v, shape, voxel_mm);

	if (rc)
		return errbuf_set(err, rc, "phantom.dim",
				  "cannot allocate a %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64
				  " volume: %s", dim[0], dim[1], dim[2], nt, strerror(-rc));
	centre_affine(v, voxel_mm);
	return 0;
}

static int alloc_volumes(const struct phantom_params *p, int nv, const struct dwi_series *dwi,
			 struct phantom_volumes *v, struct errbuf *err)
{
	int rc = alloc_volume(&v->odf, p->dim, nv, p->voxel_mm, err);

	if (!rc)
		rc = alloc_volume(&v->fa, p->dim, 1, p->voxel_mm, err);
	if (!rc)
		rc = alloc_volume(&v->roi, p->dim, 1, p->voxel_mm, err);
	if (!rc)
		rc = alloc_volume(&v->labels, p->dim, 1, p->voxel_mm, err);
	if (!rc)
		rc = alloc_volume(&v->include, p->dim, 1, p->voxel_mm, err);
	if (!rc)
		rc = alloc_volume(&v->exclude, p->dim, 1, p->voxel_mm, err);
	if (!rc)
		rc = alloc_volume(&v->wm, p->dim, 1, p->voxel_mm, err);
	if (!rc)
		rc = alloc_volume(&v->five_tt, p->dim, PHANTOM_TISSUES, p->voxel_mm, err);
	if (!rc && p->write_dwi)
		rc = alloc_volume(&v->dwi, p->dim, dwi->gradients.count, p->voxel_mm, err);
	if (!rc && p->write_dwi)
		rc = alloc_volume(&v->mask, p->dim, 1, p->voxel_mm, err);
	return rc;
}

static int check_params(const struct phantom_params *p, const char *outdir, struct errbuf *err)
{
	for (int a = 0; a < 3; a++)
		if (p->dim[a] < PHANTOM_DIM_MIN || p->dim[a] > PHANTOM_DIM_MAX)
			return errbuf_set(err, -EINVAL, "phantom.dim",
					  "axis %d must be in [%d, %d] voxels, got %" PRId64, a,
					  PHANTOM_DIM_MIN, PHANTOM_DIM_MAX, p->dim[a]);
	if (!(p->voxel_mm > 0.0) || !isfinite(p->voxel_mm))
		return errbuf_set(err, -EINVAL, "phantom.voxel_mm",
				  "must be a positive finite size in mm, got %g", p->voxel_mm);
	if (!p->sphere)
		return errbuf_set(err, -EINVAL, "phantom.sphere", "a built-in sphere name is required");
	if (p->seed_count == 0 || p->seed_count > JOBSPEC_MAX_SEEDS)
		return errbuf_set(err, -EINVAL, "phantom.seed_count",
				  "must be in [1, %llu], got %" PRIu64, JOBSPEC_MAX_SEEDS,
				  p->seed_count);
	/* Negated so that NaN fails too; infinity is a valid noise-free SNR. */
	if (!(p->snr >= 0.0))
		return errbuf_set(err, -EINVAL, "phantom.snr",
				  "must be >= 0 (0 or inf: noise-free), got %g", p->snr);
	if (p->shells < 1 || p->shells > DWI_MAX_SHELLS)
		return errbuf_set(err, -EINVAL, "phantom.shells", "must be 1 or %d, got %d",
				  DWI_MAX_SHELLS, p->shells);
	if (p->b0_count < DWI_B0S_MIN || p->b0_count > DWI_B0S_MAX)
		return errbuf_set(err, -EINVAL, "phantom.b0s", "must be in [%d, %d], got %d",
				  DWI_B0S_MIN, DWI_B0S_MAX, p->b0_count);
	if (p->directions < DWI_DIRECTIONS_MIN || p->directions > DWI_DIRECTIONS_MAX)
		return errbuf_set(err, -EINVAL, "phantom.directions",
				  "must be in [%d, %d] per shell, got %d", DWI_DIRECTIONS_MIN,
				  DWI_DIRECTIONS_MAX, p->directions);
	/* Negated so that NaN fails too. */
	if (!(p->bvalue > DWI_BVALUE_MIN && p->bvalue <= DWI_BVALUE_MAX))
		return errbuf_set(err, -EINVAL, "phantom.bvalue",
				  "must be in (%g, %g] s/mm^2 (b-values up to %g are b0s), got %g",
				  DWI_BVALUE_MIN, DWI_BVALUE_MAX, DWI_BVALUE_MIN, p->bvalue);
	if (!outdir || !*outdir)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -EINVAL, "phantom.outdir",
				       "an output directory is required");
	return 0;
}

static int make_one_directory(const char *path, struct errbuf *err)
{
	struct stat st;
	int e;

	if (mkdir(path, 0777) == 0)
		return 0;
	e = errno;
	if (e != EEXIST)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -e, "phantom.outdir",
				       "cannot create directory %s: %s", path, strerror(e));
	if (stat(path, &st) != 0) {
		e = errno;
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -e, "phantom.outdir",
				       "cannot stat %s: %s", path, strerror(e));
	}
	if (!S_ISDIR(st.st_mode))
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -ENOTDIR, "phantom.outdir",
				       "%s exists and is not a directory", path);
	return 0;
}

/* mkdir -p: every missing component of path is created. */
static int make_directories(const char *path, struct errbuf *err)
{
	char partial[PATH_MAX];
	size_t len = strlen(path);

	if (len >= sizeof(partial))
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -ENAMETOOLONG, "phantom.outdir",
				       "path is too long: %s", path);
	memcpy(partial, path, len + 1);
	for (char *slash = strchr(partial + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		int rc;

		*slash = '\0';
		rc = make_one_directory(partial, err);
		*slash = '/';
		if (rc)
			return rc;
	}
	return make_one_directory(partial, err);
}

/* File names (relative to outdir) as they appear in job.json. */
struct phantom_names {
	char odf[32], fa[32], roi[32], labels[32], include[32], exclude[32], wm[32], gm[32],
		csf[32], five_tt[32], dwi[32], mask[32];
};

static void make_names(int compress, struct phantom_names *n)
{
	const char *ext = compress ? ".nii.gz" : ".nii";

	snprintf(n->odf, sizeof(n->odf), "odf%s", ext);
	snprintf(n->fa, sizeof(n->fa), "fa%s", ext);
	snprintf(n->roi, sizeof(n->roi), "seed_roi%s", ext);
	snprintf(n->labels, sizeof(n->labels), "labels%s", ext);
	snprintf(n->include, sizeof(n->include), "include%s", ext);
	snprintf(n->exclude, sizeof(n->exclude), "exclude%s", ext);
	snprintf(n->wm, sizeof(n->wm), "wm%s", ext);
	snprintf(n->gm, sizeof(n->gm), "gm%s", ext);
	snprintf(n->csf, sizeof(n->csf), "csf%s", ext);
	snprintf(n->five_tt, sizeof(n->five_tt), "5tt%s", ext);
	snprintf(n->dwi, sizeof(n->dwi), "dwi%s", ext);
	snprintf(n->mask, sizeof(n->mask), "mask%s", ext);
}

static int join_path(const char *dir, const char *name, char *out, size_t size,
		     struct errbuf *err)
{
	int n = snprintf(out, size, "%s/%s", dir, name);

	if (n < 0 || (size_t)n >= size)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -ENAMETOOLONG, "phantom.outdir",
				       "path is too long: %s/%s", dir, name);
	return 0;
}

static int save_volume(const char *outdir, const char *name, const struct volume *v,
		       struct errbuf *err)
{
	char path[PATH_MAX];
	int rc = join_path(outdir, name, path, sizeof(path), err);

	if (rc)
		return rc;
	rc = volume_save(path, v, err);
	/* The volume's writer names no field: its file is the phantom's output. */
	if (rc) {
		errbuf_prefix_field(err, "phantom.outdir");
		errbuf_reclassify(err, ERR_KIND_OUTPUT);
	}
	return rc;
}

static int save_volumes(const char *outdir, const struct phantom_names *n,
			const struct phantom_volumes *v, struct errbuf *err)
{
	int rc = save_volume(outdir, n->odf, &v->odf, err);

	if (!rc)
		rc = save_volume(outdir, n->fa, &v->fa, err);
	if (!rc)
		rc = save_volume(outdir, n->roi, &v->roi, err);
	if (!rc)
		rc = save_volume(outdir, n->labels, &v->labels, err);
	if (!rc)
		rc = save_volume(outdir, n->include, &v->include, err);
	if (!rc)
		rc = save_volume(outdir, n->exclude, &v->exclude, err);
	/* The partial volumes of the same tissues, for stopping cmc. */
	if (!rc)
		rc = save_volume(outdir, n->wm, &v->wm, err);
	if (!rc)
		rc = save_volume(outdir, n->gm, &v->include, err);
	if (!rc)
		rc = save_volume(outdir, n->csf, &v->exclude, err);
	if (!rc)
		rc = save_volume(outdir, n->five_tt, &v->five_tt, err);
	if (!rc && v->dwi.data)
		rc = save_volume(outdir, n->dwi, &v->dwi, err);
	if (!rc && v->mask.data)
		rc = save_volume(outdir, n->mask, &v->mask, err);
	return rc;
}

static int save_json(const char *outdir, const char *name, const json_t *doc,
		     struct errbuf *err)
{
	char path[PATH_MAX];
	int rc = join_path(outdir, name, path, sizeof(path), err);

	if (rc)
		return rc;
	if (json_dump_file(doc, path, JSON_INDENT(2)) != 0)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -EIO, "phantom.outdir",
				       "cannot write %s", path);
	return 0;
}

static json_t *vector_json(const double v[3])
{
	return json_pack("[f,f,f]", v[0], v[1], v[2]);
}

/* Design-space point to voxel coordinates, as a JSON array. */
static json_t *point_json(const struct layout *l, int64_t tile, const double q[3])
{
	double voxel[3];

	design_to_voxel(l, tile, q, voxel);
	return vector_json(voxel);
}

/* Arcs add their circle to the common fields. */
static int add_arc_geometry(json_t *entry, const struct layout *l, int64_t tile,
			    const struct curve *c)
{
	if (json_object_set_new(entry, "centre_voxel", point_json(l, tile, c->origin)) != 0)
		return -1;
	return json_object_set_new(entry, "curvature_radius_voxels",
				   json_real(c->arc_radius * l->scale));
}

static json_t *bundle_json(const struct layout *l, int64_t tile, int b)
{
	const struct curve *c = &l->curves[b];
	int64_t first_label = 2 * (tile * DESIGN_BUNDLES + b) + 1;
	char name[64];
	json_t *entry;

	if (tile_count(l) > 1)
		snprintf(name, sizeof(name), "%s_t%" PRId64, designs[b].name, tile);
	else
		snprintf(name, sizeof(name), "%s", designs[b].name);
	entry = json_pack("{s:s, s:[I,I], s:s, s:s, s:I, s:f, s:f, s:o, s:o, s:o, s:o}",
			  "name", name, "labels", (json_int_t)first_label,
			  (json_int_t)(first_label + 1), "kind", designs[b].kind,
			  "curve", c->shape == CURVE_LINE ? "line" : "arc", "tile", (json_int_t)tile,
			  "tube_radius_voxels", TUBE_RADIUS * l->scale,
			  "length_voxels", c->length * l->scale,
			  "start_voxel", point_json(l, tile, c->end_point[0]),
			  "end_voxel", point_json(l, tile, c->end_point[1]),
			  "start_direction", vector_json(c->end_travel[0]),
			  "end_direction", vector_json(c->end_travel[1]));
	if (entry && c->shape == CURVE_ARC && add_arc_geometry(entry, l, tile, c) != 0) {
		json_decref(entry);
		return NULL;
	}
	return entry;
}

/* The ground truth: one entry per bundle, in label order. */
static int write_bundles(const char *outdir, const struct layout *l, struct errbuf *err)
{
	json_t *list = json_array();
	int rc = 0;

	if (!list)
		return errbuf_set(err, -ENOMEM, "phantom", "out of memory");
	for (int64_t tile = 0; tile < tile_count(l) && !rc; tile++)
		for (int b = 0; b < DESIGN_BUNDLES && !rc; b++)
			if (json_array_append_new(list, bundle_json(l, tile, b)) != 0)
				rc = errbuf_set(err, -ENOMEM, "phantom", "out of memory");
	if (!rc)
		rc = save_json(outdir, "bundles.json", list, err);
	json_decref(list);
	return rc;
}

/* The tracking both jobs share, on the given inputs (a reference stolen,
 * also on failure). NULL when out of memory. */
static json_t *tracking_job(json_t *inputs, const struct phantom_params *p,
			    const struct phantom_names *n, const char *output_path)
{
	return json_pack("{s:o, s:s, s:{s:s, s:I, s:i}, s:{s:s}, s:{s:s, s:s}}",
			 "inputs", inputs,
			 "direction_getter", "prob",
			 "seeds", "roi", n->roi, "count", (json_int_t)p->seed_count,
			 "rng_seed", 0,
			 "tracking", "sphere", p->sphere,
			 "output", "format", "trk", "path", output_path);
}

/* Writes job (a reference stolen; NULL means out of memory) as outdir/name. */
static int save_job(const char *outdir, const char *name, json_t *job, struct errbuf *err)
{
	int rc;

	if (!job)
		return errbuf_set(err, -ENOMEM, "phantom", "out of memory");
	rc = save_json(outdir, name, job, err);
	json_decref(job);
	return rc;
}

static int write_job(const char *outdir, const struct phantom_params *p,
		     const struct phantom_names *n, struct errbuf *err)
{
	json_t *inputs = json_pack("{s:s, s:s}", "odf", n->odf, "stop_map", n->fa);

	return save_job(outdir, "job.json", tracking_job(inputs, p, n, "tracks.trk"), err);
}

/* job.json's tracking stopped by ACT on include and exclude, keeping only
 * the streamlines whose both ends are valid (DIPY's return_all=False). */
static int write_act_job(const char *outdir, const struct phantom_params *p,
			 const struct phantom_names *n, struct errbuf *err)
{
	json_t *inputs = json_pack("{s:s, s:s}", "odf", n->odf, "stop_map", n->fa);
	json_t *job = tracking_job(inputs, p, n, "tracks_act.trk");

	if (job && (json_object_set_new(job, "stopping",
					json_pack("{s:s, s:s, s:s}", "criterion", "act", "include",
						  n->include, "exclude", n->exclude)) != 0 ||
		    json_object_set_new(json_object_get(job, "tracking"), "return_all",
					json_false()) != 0)) {
		json_decref(job);
		job = NULL;
	}
	return save_job(outdir, "job_act.json", job, err);
}

/* job_act.json with the 5TT image in place of include and exclude (the
 * same maps: tractd's output is the same), and seeded on its WM/GM
 * interface (job_interface.json). */
static int write_5tt_jobs(const char *outdir, const struct phantom_params *p,
			  const struct phantom_names *n, struct errbuf *err)
{
	json_t *inputs = json_pack("{s:s, s:s}", "odf", n->odf, "stop_map", n->fa);
	json_t *job = tracking_job(inputs, p, n, "tracks_act_5tt.trk"), *interface;
	int rc;

	if (job && (json_object_set_new(job, "stopping", json_pack("{s:s, s:s}", "criterion",
								     "act", "five_tt", n->five_tt)) != 0 ||
		    json_object_set_new(json_object_get(job, "tracking"), "return_all",
					json_false()) != 0)) {
		json_decref(job);
		job = NULL;
	}
	interface = job ? json_deep_copy(job) : NULL;
	rc = save_job(outdir, "job_act_5tt.json", job, err);
	if (interface && (json_object_set_new(interface, "seeds",
					      json_pack("{s:{s:s}, s:I, s:i}", "interface", "five_tt",
							n->five_tt, "count", (json_int_t)p->seed_count,
							"rng_seed", 0)) != 0 ||
			  json_object_set_new(json_object_get(interface, "output"), "path",
					      json_string("tracks_interface.trk")) != 0)) {
		json_decref(interface);
		interface = NULL;
	}
	if (!rc)
		return save_job(outdir, "job_interface.json", interface, err);
	json_decref(interface);
	return rc;
}

/* The same tracking from the raw DWI: the daemon fits DTI for the FA stop map
 * and the model for the ODF. Its own output path, so that running both jobs
 * in the phantom's directory keeps both tractograms. */
static int write_dwi_job(const char *outdir, const struct phantom_params *p,
			 const struct phantom_names *n, struct errbuf *err)
{
	json_t *inputs = json_pack("{s:s, s:s, s:s, s:s}", "dwi", n->dwi, "bvals", DWI_BVAL_NAME,
				   "bvecs", DWI_BVEC_NAME, "mask", n->mask);
	json_t *job = tracking_job(inputs, p, n, "tracks_dwi.trk");

	if (job && json_object_set_new(job, "model", json_pack("{s:s, s:i}", "name", DWI_MODEL,
							       "sh_order", DWI_MODEL_SH_ORDER)) != 0) {
		json_decref(job);
		job = NULL;
	}
	return save_job(outdir, "job_dwi.json", job, err);
}

/* The bootstrap getter on the raw DWI, with GPUStreamlines' default model
 * (OPDT, order 4) and DIPY's pmf threshold. */
static int write_boot_job(const char *outdir, const struct phantom_params *p,
			  const struct phantom_names *n, struct errbuf *err)
{
	json_t *inputs = json_pack("{s:s, s:s, s:s, s:s}", "dwi", n->dwi, "bvals", DWI_BVAL_NAME,
				   "bvecs", DWI_BVEC_NAME, "mask", n->mask);
	json_t *job = tracking_job(inputs, p, n, "tracks_boot.trk");

	if (job && (json_object_set_new(job, "direction_getter", json_string("boot")) != 0 ||
		    json_object_set_new(job, "model", json_pack("{s:s, s:i}", "name", "opdt",
								"sh_order", 4)) != 0 ||
		    json_object_set_new(json_object_get(job, "tracking"), "pmf_threshold",
					json_real(0.1)) != 0)) {
		json_decref(job);
		job = NULL;
	}
	return save_job(outdir, "job_boot.json", job, err);
}

/* The PTT getter on the ODF, at the max_angle where it follows this phantom's
 * bundles (at 60 degrees its arcs may curl within half a voxel). */
static int write_ptt_job(const char *outdir, const struct phantom_params *p,
			 const struct phantom_names *n, struct errbuf *err)
{
	json_t *inputs = json_pack("{s:s, s:s}", "odf", n->odf, "stop_map", n->fa);
	json_t *job = tracking_job(inputs, p, n, "tracks_ptt.trk");

	if (job && (json_object_set_new(job, "direction_getter", json_string("ptt")) != 0 ||
		    json_object_set_new(json_object_get(job, "tracking"), "max_angle",
					json_integer(PTT_JOB_MAX_ANGLE)) != 0)) {
		json_decref(job);
		job = NULL;
	}
	return save_job(outdir, "job_ptt.json", job, err);
}

/* One row of space-separated values; %.17g round-trips every double. */
static int write_row(FILE *fp, const double *values, int count)
{
	for (int i = 0; i < count; i++)
		if (fprintf(fp, i ? " %.17g" : "%.17g", values[i]) < 0)
			return -EIO;
	return fputc('\n', fp) == EOF ? -EIO : 0;
}

static int write_rows(const char *outdir, const char *name, const double *const rows[],
		      int row_count, int count, struct errbuf *err)
{
	char path[PATH_MAX];
	FILE *fp;
	int rc = join_path(outdir, name, path, sizeof(path), err);

	if (rc)
		return rc;
	fp = fopen(path, "w");
	if (!fp) {
		int e = errno;

		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -e, "phantom.outdir",
				       "cannot create %s: %s", path, strerror(e));
	}
	for (int r = 0; r < row_count && !rc; r++)
		rc = write_row(fp, rows[r], count);
	if (fclose(fp) != 0 && !rc)
		rc = -EIO;
	if (rc)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, rc, "phantom.outdir",
				       "cannot write %s", path);
	return 0;
}

/* FSL's text tables: b-values in one row, gradient directions in three. */
static int write_gradients(const char *outdir, const struct gradient_table *t,
			   struct errbuf *err)
{
	const double *bval_rows[1] = { t->bval };
	const double *bvec_rows[3] = { t->bvec[0], t->bvec[1], t->bvec[2] };
	int rc = write_rows(outdir, DWI_BVAL_NAME, bval_rows, 1, t->count, err);

	if (!rc)
		rc = write_rows(outdir, DWI_BVEC_NAME, bvec_rows, 3, t->count, err);
	return rc;
}

static int load_sphere(const char *name, struct sphere *s, struct errbuf *err)
{
	int rc = sphere_builtin(name, s, err);

	/* Keep sphere_builtin's code and message; name the parameter. */
	if (rc && err)
		snprintf(err->field, sizeof(err->field), "phantom.sphere");
	return rc;
}

int phantom_generate(const struct phantom_params *p, const char *outdir, struct errbuf *err)
{
	struct phantom_volumes volumes = { 0 };
	struct sphere sphere = { 0 };
	struct phantom_names names;
	struct dwi_series dwi = { 0 };
	struct layout layout;
	int rc = check_params(p, outdir, err);

	if (!rc)
		rc = plan_dwi(p, &dwi, err);
	if (!rc)
		rc = load_sphere(p->sphere, &sphere, err);
	if (!rc)
		rc = make_directories(outdir, err);
	if (!rc)
		rc = alloc_volumes(p, sphere.nv, &dwi, &volumes, err);
	if (!rc) {
		plan_layout(p->dim, &layout);
		fill_volumes(&layout, &sphere, &dwi, &volumes);
		make_names(p->compress, &names);
		rc = save_volumes(outdir, &names, &volumes, err);
	}
	if (!rc)
		rc = write_bundles(outdir, &layout, err);
	if (!rc)
		rc = write_job(outdir, p, &names, err);
	if (!rc)
		rc = write_ptt_job(outdir, p, &names, err);
	if (!rc)
		rc = write_act_job(outdir, p, &names, err);
	if (!rc)
		rc = write_5tt_jobs(outdir, p, &names, err);
	if (!rc && p->write_dwi)
		rc = write_gradients(outdir, &dwi.gradients, err);
	if (!rc && p->write_dwi)
		rc = write_dwi_job(outdir, p, &names, err);
	if (!rc && p->write_dwi)
		rc = write_boot_job(outdir, p, &names, err);
	free_volumes(&volumes);
	sphere_free(&sphere);
	free_gradients(&dwi.gradients);
	return rc;
}
