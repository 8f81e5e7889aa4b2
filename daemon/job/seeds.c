/* SPDX-License-Identifier: MIT */
#include "job/seeds.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/affine.h"
#include "base/parallel.h"
#include "base/philox.h"

struct seeds {
	uint64_t count;
	/* The global indices seeds_fill serves, [first, end): all of them
	 * unless a shard restricted them. */
	uint64_t first, end;
	/* The global index of seed 0 (seeds_number_from; points only). */
	uint64_t base;
	/* From a mask (points == NULL): mask voxels as [x][y][z] indices in
	 * seeding order, or with faces interface faces as 6 x voxel + face;
	 * seed i sits in order[i % nvox]. */
	uint64_t nvox;
	uint64_t *order;
	uint64_t ny, nz;
	bool faces;
	uint32_t key[2];
	/* From points: 3*count voxel coordinates. */
	float *points;
};

/* Uniform integer in [0, bound) for draw `item` of the shuffle, by rejection
 * from 64-bit words so that no value is favoured; each Philox block offers two
 * candidates, and a rejected pair moves on to the next draw index. */
static uint64_t uniform_below(uint64_t bound, const uint32_t key[2], uint64_t item)
{
	/* 2^64 mod bound: the candidates below it would make small results
	 * more likely. */
	uint64_t reject_below = (0 - bound) % bound;

	for (uint32_t draw = 0;; draw++) {
		const uint32_t counter[4] = {draw, (uint32_t)item, (uint32_t)(item >> 32),
					     PHILOX_STREAM_SEED_ORDER};
		uint32_t out[4];

		philox4x32_10(counter, key, out);
		for (int w = 0; w < 4; w += 2) {
			uint64_t x = (uint64_t)out[w] << 32 | out[w + 1];

			if (x >= reject_below)
				return x % bound;
		}
	}
}

/* Fisher-Yates, swap i drawn as item i. */
static void shuffle(uint64_t *order, uint64_t n, const uint32_t key[2])
{
	for (uint64_t i = n; i-- > 1;) {
		uint64_t j = uniform_below(i + 1, key, i), swap = order[i];

		order[i] = order[j];
		order[j] = swap;
	}
}

static uint64_t voxels_of(const struct volume *v)
{
	return (uint64_t)v->dim[0] * (uint64_t)v->dim[1] * (uint64_t)v->dim[2];
}

/* Voxels with a value > 0 in the first volume, counted (order == NULL) or
 * listed in index order. */
static uint64_t mask_voxels(const struct volume *mask, uint64_t *order)
{
	uint64_t n = 0, total = voxels_of(mask);
	size_t stride = (size_t)mask->dim[3];

	for (uint64_t idx = 0; idx < total; idx++) {
		if (!(mask->data[idx * stride] > 0))
			continue;
		if (order)
			order[n] = idx;
		n++;
	}
	return n;
}

static int seed_total(uint64_t count, bool per_voxel, uint64_t nvox, uint64_t *total,
		      struct errbuf *err)
{
	if (count == 0)
		return errbuf_set(err, -EINVAL, "seeds.count", "must be at least 1");
	if (per_voxel && count > UINT64_MAX / nvox)
		return errbuf_set(err, -EINVAL, "seeds.count",
				  "%llu seeds in each of %llu voxels overflow the seed count",
				  (unsigned long long)count, (unsigned long long)nvox);
	*total = per_voxel ? count * nvox : count;
	return 0;
}

static uint64_t *alloc_order(uint64_t n)
{
	return n <= SIZE_MAX / sizeof(uint64_t) ? malloc((size_t)n * sizeof(uint64_t)) : NULL;
}

/* Seeds over the n elements listed in order (taken, also on failure), total
 * of them, in an order shuffled once. */
static int seeds_shuffled(uint64_t *order, uint64_t n, uint64_t total, const int64_t dim[3],
			  bool faces, uint64_t rng_seed, struct seeds **ret)
{
	struct seeds *s = calloc(1, sizeof(*s));

	if (!s) {
		free(order);
		return -ENOMEM;
	}
	s->order = order;
	s->nvox = n;
	s->faces = faces;
	s->count = total;
	s->end = total;
	s->ny = (uint64_t)dim[1];
	s->nz = (uint64_t)dim[2];
	philox_key_from_seed(rng_seed, s->key);
	shuffle(s->order, n, s->key);
	*ret = s;
	return 0;
}

int seeds_from_mask(const struct volume *mask, uint64_t count, bool per_voxel,
		    uint64_t rng_seed, struct seeds **ret, struct errbuf *err)
{
	uint64_t nvox = mask_voxels(mask, NULL), total = 0;
	uint64_t *order;
	int rc;

	if (nvox == 0)
		return errbuf_set(err, -EINVAL, "seeds.roi", "the mask has no voxel above 0");
	rc = seed_total(count, per_voxel, nvox, &total, err);
	if (rc)
		return rc;
	order = alloc_order(nvox);
	if (!order)
		return -ENOMEM;
	mask_voxels(mask, order);
	return seeds_shuffled(order, nvox, total, mask->dim, false, rng_seed, ret);
}

/* The neighbour of voxel v across face f (0/1: -x/+x, 2/3: -y/+y, 4/5:
 * -z/+z) into *n; false where that leaves the image. */
static bool face_neighbour(const struct volume *v, const int64_t voxel[3], int f, int64_t n[3])
{
	int axis = f / 2;

	memcpy(n, voxel, 3 * sizeof(*n));
	n[axis] += f % 2 ? 1 : -1;
	return n[axis] >= 0 && n[axis] < v->dim[axis];
}

/* The interface's faces (see seeds.h), counted (order == NULL) or listed
 * as 6 x voxel index + face, in that order. */
static uint64_t interface_faces(const struct volume *wm, const struct volume *gm,
				uint64_t *order)
{
	uint64_t n = 0;
	int64_t v[3], nb[3];

	for (v[0] = 0; v[0] < wm->dim[0]; v[0]++)
		for (v[1] = 0; v[1] < wm->dim[1]; v[1]++)
			for (v[2] = 0; v[2] < wm->dim[2]; v[2]++) {
				size_t idx = volume_index(wm, v[0], v[1], v[2]);

				if (!(wm->data[idx] > SEEDS_TISSUE_MAJORITY))
					continue;
				for (int f = 0; f < 6; f++) {
					if (!face_neighbour(wm, v, f, nb) ||
					    !(gm->data[volume_index(gm, nb[0], nb[1], nb[2])] >
					      SEEDS_TISSUE_MAJORITY))
						continue;
					if (order)
						order[n] = 6 * (uint64_t)idx + (uint64_t)f;
					n++;
				}
			}
	return n;
}

int seeds_from_interface(const struct volume *wm, const struct volume *gm, uint64_t count,
			 uint64_t rng_seed, struct seeds **ret, struct errbuf *err)
{
	uint64_t nfaces = interface_faces(wm, gm, NULL);
	uint64_t *order;

	if (nfaces == 0)
		return errbuf_set(err, -EINVAL, "seeds.interface", "no voxel of white matter "
				  "(wm > 0.5) shares a face with one of grey matter (gm > 0.5)");
	if (count == 0)
		return errbuf_set(err, -EINVAL, "seeds.count", "must be at least 1");
	order = alloc_order(nfaces);
	if (!order)
		return -ENOMEM;
	interface_faces(wm, gm, order);
	return seeds_shuffled(order, nfaces, count, wm->dim, true, rng_seed, ret);
}

/* One point in voxel coordinates, or -EINVAL with the reason in err. */
static int point_to_voxel(const char *from, const double in[3],
			  const double (*world_to_voxel)[4], const int64_t dim[3], uint64_t i,
			  float out[3], struct errbuf *err)
{
	static const char axis[3] = {'i', 'j', 'k'};
	char field[sizeof(err->field)];
	double v[3];

	snprintf(field, sizeof(field), "%s[%llu]", from, (unsigned long long)i);
	if (!isfinite(in[0]) || !isfinite(in[1]) || !isfinite(in[2]))
		return errbuf_set(err, -EINVAL, field, "coordinate is not finite");
	if (world_to_voxel)
		affine_apply(world_to_voxel, in, v);
	else
		memcpy(v, in, sizeof(v));
	for (int k = 0; k < 3; k++) {
		if (!(v[k] >= -0.5 && v[k] < (double)dim[k] - 0.5))
			return errbuf_set(err, -EINVAL, field,
					  "voxel %c = %g lies outside the image (0..%lld)",
					  axis[k], v[k], (long long)dim[k] - 1);
		out[k] = (float)v[k];
	}
	return 0;
}

static int convert_points(const char *field, const double *pts, uint64_t n,
			  const double (*world_to_voxel)[4], const int64_t dim[3], float *out,
			  struct errbuf *err)
{
	for (uint64_t i = 0; i < n; i++) {
		int rc = point_to_voxel(field, pts + 3 * i, world_to_voxel, dim, i, out + 3 * i,
					err);

		if (rc)
			return rc;
	}
	return 0;
}

int seeds_from_points(const char *field, const double *pts, uint64_t n, bool ras_mm,
		      const double affine[4][4], const int64_t dim[3], struct seeds **ret,
		      struct errbuf *err)
{
	double inverse[4][4];
	struct seeds *s;
	int rc;

	if (n == 0)
		return errbuf_set(err, -EINVAL, field, "no seed points given");
	if (ras_mm && affine_invert(affine, inverse) != 0)
		return errbuf_set(err, -EINVAL, field,
				  "the image affine is singular, so mm points cannot be mapped to voxels");
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->count = n;
	s->end = n;
	s->points = n <= SIZE_MAX / (3 * sizeof(*s->points)) ?
		    malloc((size_t)n * 3 * sizeof(*s->points)) : NULL;
	rc = s->points ? convert_points(field, pts, n, ras_mm ? inverse : NULL, dim, s->points,
					err) : -ENOMEM;
	if (rc) {
		seeds_free(s);
		return rc;
	}
	*ret = s;
	return 0;
}

void seeds_limit(struct seeds *s, uint64_t max)
{
	if (s->count > max)
		s->count = max;
	if (s->end > max)
		s->end = max;
}

void seeds_restrict(struct seeds *s, uint64_t first, uint64_t end)
{
	s->first = first < s->count ? first : s->count;
	s->end = end < s->count ? end : s->count;
	if (s->end < s->first)
		s->end = s->first;
}

void seeds_number_from(struct seeds *s, uint64_t first)
{
	s->base = first;
}

uint64_t seeds_index_end(const struct seeds *s)
{
	return s->base + s->count;
}

void seeds_range(const struct seeds *s, uint64_t *first, uint64_t *end)
{
	*first = s->base + s->first;
	*end = s->base + s->end;
}

uint64_t seeds_count(const struct seeds *s)
{
	return s->count;
}

/* Seed i: the voxel at its place in the round, jittered by three uniforms
 * drawn for item i; an interface face's seed lies on the face, jittered
 * along its two axes only. */
static void fill_from_mask(const struct seeds *s, uint64_t first, uint64_t n, float *out)
{
	uint64_t place = first % s->nvox, yz = s->ny * s->nz;

	for (uint64_t i = first; i < first + n; i++) {
		const uint32_t counter[4] = {0, (uint32_t)i, (uint32_t)(i >> 32),
					     PHILOX_STREAM_SEED_JITTER};
		uint64_t idx = s->faces ? s->order[place] / 6 : s->order[place];
		int face = s->faces ? (int)(s->order[place] % 6) : -1;
		/* NOLINTNEXTLINE(bugprone-integer-division): the voxel index to its i, j, k */
		double voxel[3] = {(double)(idx / yz), (double)(idx % yz / s->nz),
				   (double)(idx % s->nz)};
		uint32_t u[4];

		philox4x32_10(counter, s->key, u);
		for (int k = 0; k < 3; k++) {
			bool across = face >= 0 && k == face / 2;
			double offset = across ? (face % 2 ? 0.5 : -0.5) :
						 philox_uniform_float(u[k]) - 0.5;

			*out++ = (float)(voxel[k] + offset);
		}
		if (++place == s->nvox)
			place = 0;
	}
}

/* A chunk of two million seeds takes ~0.1 s on one core: they are drawn
 * in parts of at least FILL_MIN_SEEDS on threads (each seed depends on its
 * index alone, so the parts are independent). */
#define FILL_MIN_SEEDS 65536

struct fill_part {
	const struct seeds *s;
	uint64_t first, n;
	float *out;
};

static void fill_part(void *arg)
{
	struct fill_part *p = arg;

	fill_from_mask(p->s, p->first, p->n, p->out);
}

static void fill_from_mask_parallel(const struct seeds *s, uint64_t first, uint64_t n,
				    float *out)
{
	struct fill_part parts[PARALLEL_MAX_PARTS];
	size_t k = parallel_parts(n, FILL_MIN_SEEDS);
	uint64_t at = 0;

	for (size_t i = 0; i < k; i++) {
		uint64_t len = n / k + (i < n % k);
		parts[i] = (struct fill_part){ s, first + at, len, out + 3 * at };
		at += len;
	}
	parallel_run(fill_part, parts, sizeof(parts[0]), k);
}

int seeds_fill(struct seeds *s, uint64_t first, uint64_t n, float *out)
{
	uint64_t at = first - s->base;   /* in the job's list */

	if (first < s->base || at < s->first || n > s->end - s->first ||
	    at - s->first > s->end - s->first - n)
		return -EINVAL;
	if (s->points)
		memcpy(out, s->points + 3 * at, (size_t)n * 3 * sizeof(*out));
	else
		fill_from_mask_parallel(s, at, n, out);
	return 0;
}

void seeds_free(struct seeds *s)
{
	if (!s)
		return;
	free(s->order);
	free(s->points);
	free(s);
}
