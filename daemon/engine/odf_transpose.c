/* SPDX-License-Identifier: MIT */
/*
 * odf_transpose: a streamed ODF transposed on the GPU (see odf_transpose.h).
 *
 * Flow: the antipodal pairs and zeroed flags go up -> for each slab of the
 * stream, chunk by chunk (as many voxels of its z-planes as the scratch
 * buffer holds in every volume): the chunk's run of each volume is copied
 * from the mapping through the staging buffers into the scratch buffer
 * (gpu_upload_regions, on threads), then the kernel writes its voxels into
 * the pages -> the slab's mapped pages are dropped -> the flags come back:
 * a non-finite value fails the upload as the slabs would, an asymmetric
 * voxel goes to the stream.
 */
#include "engine/odf_transpose.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/timing.h"
#include "models/fit.h"

/* The scratch buffer at most: a whole slab of the HCP-sized ODF (8 planes
 * of 145 x 174 voxels x 724 values, 584 MB), so that a slab is one chunk,
 * its staging buffers filled by the threads while the GPU copies the last
 * one out, with a pause only between chunks (each chunk's kernel waits for
 * its copies). Never more than a slab: chunks do not span slabs. */
#define SCRATCH_BYTES (1ull << 30)

/* Voxels a workgroup of odf_transpose.comp takes. */
#define TRANSPOSE_TILE 32u

/* odf_transpose.comp's push constants. */
struct transpose_params {
	uint32_t first, voxels;
	uint32_t nx, ny, nz;
	uint32_t channels;
	uint32_t n_pairs;
};

/* odf_transpose.comp's flags. */
enum { FLAG_ASYMMETRIC, FLAG_NONFINITE, FLAG_TINY, N_FLAGS };

/* One upload's device objects and what it has taken so far. */
struct odf_transpose {
	struct odf_stream *stream;
	struct odf_raw raw;
	uint64_t chunk_voxels;    /* the scratch buffer's */
	struct gpu_buffer *scratch, *pairs, *flags;
	struct gpu_pipeline *pipe;
	int n_pairs;
	size_t chunks;
	bool host_symmetry;       /* the host decided the symmetry (FLAG_TINY) */
	double stage_seconds, kernel_seconds, device_seconds;
};

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Voxels of every volume the scratch buffer holds on this device, before
 * the pages are allocated: at most a slab's, and half the memory the limit
 * leaves beside the pages (the buffer goes once they are written). */
static uint64_t chunk_voxels(const struct gpu_ctx *gpu, const struct odf_stream *s,
			     const struct paged_layout *layout)
{
	const struct gpu_limits *lim = gpu_get_limits(gpu);
	uint64_t left = gpu_memory_free(gpu), pages = paged_bytes(layout);
	uint64_t bytes = min_u64(SCRATCH_BYTES, min_u64(lim->max_alloc_bytes,
							lim->max_binding_bytes));
	uint64_t columns, column_voxels, first_z, planes;

	odf_stream_columns(s, &columns, &column_voxels);
	odf_stream_slab_span(s, 0, &first_z, &planes);
	bytes = min_u64(bytes, left > pages ? (left - pages) / 2 : 0);
	return min_u64(min_u64(bytes / (4ull * layout->channels), columns * planes),
		       (uint64_t)TRANSPOSE_TILE * lim->max_workgroup_count_x);
}

/* The cheap conditions, before anything is allocated. */
static bool usable(const struct gpu_ctx *gpu, const struct odf_stream *s,
		   const struct paged_layout *layout)
{
	const struct gpu_limits *lim = gpu_get_limits(gpu);
	struct odf_raw raw;

	/* The kernel's indices are 32-bit. */
	return !gpu_cpu_kernels(lim) && lim->shader_float64 && layout->type == PAGED_FLOAT32 &&
	       odf_stream_raw(s, &raw) && layout->voxels <= UINT32_MAX &&
	       chunk_voxels(gpu, s, layout) > 0;
}

static int upload_pairs(struct gpu_ctx *gpu, const struct sphere *sphere, struct odf_transpose *t,
			struct errbuf *err)
{
	int *first, *second;
	uint32_t *pairs;
	int r = fit_antipodal_pairs(sphere, &first, &second, &t->n_pairs);

	pairs = r == 0 ? malloc(8 * (size_t)(t->n_pairs ? t->n_pairs : 1)) : NULL;
	if (!pairs) {
		free(first);
		free(second);
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	}
	for (int i = 0; i < t->n_pairs; i++) {
		pairs[2 * i] = (uint32_t)first[i];
		pairs[2 * i + 1] = (uint32_t)second[i];
	}
	r = gpu_upload_new(gpu, pairs, 8ull * (uint64_t)t->n_pairs, &t->pairs, err);
	free(first);
	free(second);
	free(pairs);
	return r;
}

static int get_pipeline(struct gpu_ctx *gpu, struct odf_transpose *t, struct errbuf *err)
{
	char tolerance[64];
	const char *defines[] = { tolerance, NULL };

	/* Every digit, so that the shader's double is fit.c's. */
	snprintf(tolerance, sizeof(tolerance), "ODF_SYMMETRY_TOLERANCE=%.17gLF",
		 (double)FIT_ODF_SYMMETRY_TOLERANCE);
	return gpu_pipeline_get(gpu, "odf_transpose.comp", defines, 4,
				sizeof(struct transpose_params), &t->pipe, err);
}

static int setup(struct gpu_ctx *gpu, const struct sphere *sphere,
		 const struct paged_layout *layout, struct odf_transpose *t, struct errbuf *err)
{
	uint32_t zero[N_FLAGS] = { 0 };
	int r;

	(void)odf_stream_raw(t->stream, &t->raw);   /* usable() saw it */
	t->chunk_voxels = chunk_voxels(gpu, t->stream, layout);
	r = gpu_buffer_new(gpu, 4 * t->chunk_voxels * layout->channels, GPU_MEMORY_DEVICE,
			   &t->scratch, err);
	if (r == 0)
		r = upload_pairs(gpu, sphere, t, err);
	if (r == 0)
		r = gpu_upload_new(gpu, zero, sizeof(zero), &t->flags, err);
	if (r == 0)
		r = get_pipeline(gpu, t, err);
	return r;
}

/* A chunk: voxels [first, first + voxels) of every volume, in the file's
 * order, into the scratch buffer volume after volume. */
struct chunk {
	const unsigned char *data;
	uint64_t volume_bytes;
	uint64_t first, voxels;
};

static void fill_chunk(void *dst, uint64_t offset, uint64_t size, void *userdata)
{
	const struct chunk *c = userdata;
	uint64_t run = 4 * c->voxels;
	char *out = dst;

	while (size > 0) {
		uint64_t volume = offset / run, at = offset % run, take = min_u64(size, run - at);
		memcpy(out, c->data + volume * c->volume_bytes + 4 * c->first + at, take);
		out += take;
		offset += take;
		size -= take;
	}
}

static int transpose_chunk(struct gpu_ctx *gpu, struct paged_volume *v, struct odf_transpose *t,
			   const struct chunk *c, struct errbuf *err)
{
	const struct paged_layout *l = &v->layout;
	struct gpu_copy_region whole = { 0, 0, 4 * c->voxels * l->channels };
	struct transpose_params p = {
		.first = (uint32_t)c->first, .voxels = (uint32_t)c->voxels,
		.nx = (uint32_t)t->raw.dim[0], .ny = (uint32_t)t->raw.dim[1],
		.nz = (uint32_t)t->raw.dim[2], .channels = l->channels,
		.n_pairs = (uint32_t)t->n_pairs,
	};
	struct gpu_buffer *buffers[] = { t->scratch, v->table, t->pairs, t->flags };
	uint32_t groups = (uint32_t)((c->voxels + TRANSPOSE_TILE - 1) / TRANSPOSE_TILE);
	double t0 = timing_now(), t1;
	int r = gpu_upload_regions(gpu, t->scratch, &whole, 1, fill_chunk, (void *)c, err);

	t1 = timing_now();
	t->stage_seconds += t1 - t0;
	if (r == 0)
		r = gpu_batch_begin(gpu, err);
	if (r == 0)
		r = gpu_batch_dispatch(gpu, t->pipe, buffers, &p, groups, err);
	if (r == 0)
		r = gpu_batch_submit_wait(gpu, err);
	t->kernel_seconds += timing_now() - t1;
	if (r == 0 && gpu_batch_device_seconds(gpu) > 0)
		t->device_seconds += gpu_batch_device_seconds(gpu);
	t->chunks++;
	return r;
}

/* Slab k's voxels, chunk by chunk. */
static int transpose_slab(struct gpu_ctx *gpu, struct paged_volume *v, struct odf_transpose *t,
			  size_t k, struct errbuf *err)
{
	uint64_t plane = (uint64_t)t->raw.dim[0] * (uint64_t)t->raw.dim[1];
	uint64_t first_z, planes, end;
	struct chunk c = { .data = t->raw.data, .volume_bytes = 4 * plane * (uint64_t)t->raw.dim[2] };
	int r = 0;

	odf_stream_slab_span(t->stream, k, &first_z, &planes);
	end = (first_z + planes) * plane;
	for (c.first = first_z * plane; c.first < end && r == 0; c.first += c.voxels) {
		c.voxels = min_u64(t->chunk_voxels, end - c.first);
		r = transpose_chunk(gpu, v, t, &c, err);
	}
	odf_stream_raw_done(t->stream);
	return r;
}

/* The flags the kernel set: the slabs' error for a non-finite value, and
 * the ODF's symmetry to the stream (the host's where a voxel's values are
 * too small for the GPU to be sure). */
static int take_flags(struct gpu_ctx *gpu, struct odf_transpose *t, struct errbuf *err)
{
	uint32_t flags[N_FLAGS];
	bool symmetric;
	int r = gpu_download(gpu, t->flags, 0, flags, sizeof(flags), err);

	symmetric = r == 0 && !flags[FLAG_ASYMMETRIC];
	if (r == 0 && flags[FLAG_NONFINITE])
		r = odf_stream_raw_check_finite(t->stream, err);
	t->host_symmetry = r == 0 && flags[FLAG_TINY];
	if (t->host_symmetry)
		r = odf_stream_raw_host_symmetry(t->stream, &symmetric, err);
	if (r == 0)
		odf_stream_raw_symmetry(t->stream, symmetric);
	return r;
}

/* paged_upload_with's producer: every slab, then the flags. */
static int fill_pages(struct gpu_ctx *gpu, struct paged_volume *v, void *userdata,
		      struct errbuf *err)
{
	struct odf_transpose *t = userdata;
	int r = 0;

	for (size_t k = 0; k < odf_stream_slabs(t->stream) && r == 0; k++)
		r = transpose_slab(gpu, v, t, k, err);
	return r < 0 ? r : take_flags(gpu, t, err);
}

void odf_transpose_free(struct gpu_ctx *gpu, struct odf_transpose *t)
{
	if (!t)
		return;
	gpu_buffer_free(gpu, t->scratch);
	gpu_buffer_free(gpu, t->pairs);
	gpu_buffer_free(gpu, t->flags);
	free(t);
}

struct odf_transpose *odf_transpose_new(struct gpu_ctx *gpu, struct odf_stream *s,
					const struct sphere *sphere,
					const struct paged_layout *layout)
{
	struct odf_transpose *t;
	struct errbuf err = { 0 };
	int r;

	if (!usable(gpu, s, layout))
		return NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->stream = s;
	r = setup(gpu, sphere, layout, t, &err);
	if (r < 0) {
		log_debug("the ODF's transpose on the GPU cannot start (%s): the host takes it",
			  err.message);
		odf_transpose_free(gpu, t);
		return NULL;
	}
	return t;
}

int odf_transpose_upload(struct gpu_ctx *gpu, struct odf_transpose *t,
			 const struct paged_layout *layout, struct paged_volume *ret,
			 struct errbuf *err)
{
	double start = timing_now();
	int r = paged_upload_with(gpu, layout, fill_pages, t, ret, err);

	if (r == 0)
		log_debug("ODF transposed on the GPU (raw float32 upload): %zu slabs in %zu chunks "
			  "of up to %llu voxels, %.3f s: staging (memcpy from the file on threads "
			  "+ copy to the device) %.3f s, transpose kernels %.3f s (%.3f s on the "
			  "device's clock)%s", odf_stream_slabs(t->stream), t->chunks,
			  (unsigned long long)t->chunk_voxels, timing_now() - start,
			  t->stage_seconds, t->kernel_seconds, t->device_seconds,
			  t->host_symmetry ? "; symmetry checked on the host (a voxel's values "
					     "under 2^-90)" : "");
	return r;
}
