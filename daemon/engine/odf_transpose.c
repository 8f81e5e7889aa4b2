/* SPDX-License-Identifier: MIT */
/*
 * odf_transpose: a streamed ODF transposed on the GPU (see odf_transpose.h).
 *
 * Flow: the antipodal pairs and zeroed flags go up -> where other devices
 * read the file raw too, the stream's shared host copies are imported
 * (every device then takes the same chunks) -> for each slab of the
 * stream, chunk by chunk (as many voxels of its z-planes as the scratch
 * buffer holds in every volume): the chunk's run of each volume is copied
 * into the scratch buffer, from the mapping through the staging buffers
 * (gpu_upload_regions, on threads), or from the shared copy's import in
 * one GPU copy (the stream's filler thread wrote it, once for all
 * devices), then the kernel writes its voxels into the pages -> the slab's
 * mapped pages are dropped -> the flags come back: a non-finite value
 * fails the upload as the slabs would, an asymmetric voxel goes to the
 * stream.
 */
#include "engine/odf_transpose.h"

#include <errno.h>
#include <stdatomic.h>
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
enum { FLAG_ASYMMETRIC, FLAG_NONFINITE, FLAG_TINY, FLAG_UNMIRRORED, N_FLAGS };

/* One upload's device objects and what it has taken so far. */
struct odf_transpose {
	struct odf_stream *stream;
	struct odf_raw raw;
	uint64_t scratch_bytes;
	uint64_t chunk_voxels;    /* of every staged volume, this upload's */
	uint32_t staged;          /* volumes staged: all, or with half pages the first half */
	bool half;                /* pages of half the sphere (odf_transpose_upload) */
	atomic_bool unmirrored;   /* half: a staged value differed from its antipode's */
	bool share_decided;       /* the first upload offered to share */
	struct gpu_buffer *scratch, *pairs, *flags;
	struct gpu_pipeline *pipe;
	int n_pairs;
	size_t chunks;
	bool host_symmetry;       /* the host decided the symmetry (FLAG_TINY) */
	double stage_seconds, kernel_seconds, device_seconds;
	/* The stream's host copies shared with the other devices, imported
	 * (odf_stream_share_*): sharers 0 where this device reads the file. */
	size_t sharers;
	struct gpu_buffer *shared[ODF_SHARE_BUFFERS];
	double wait_seconds;      /* of stage_seconds, waiting for the shared copy */
};

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Voxels of channels volumes that bytes of scratch buffer hold, at most a
 * slab's and what one dispatch's workgroups cover. */
static uint64_t voxels_held(const struct gpu_ctx *gpu, const struct odf_stream *s, uint64_t bytes,
			    uint32_t channels)
{
	uint64_t columns, column_voxels, first_z, planes;

	odf_stream_columns(s, &columns, &column_voxels);
	odf_stream_slab_span(s, 0, &first_z, &planes);
	return min_u64(min_u64(bytes / (4ull * channels), columns * planes),
		       (uint64_t)TRANSPOSE_TILE * gpu_get_limits(gpu)->max_workgroup_count_x);
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

	bytes = min_u64(bytes, left > pages ? (left - pages) / 2 : 0);
	return voxels_held(gpu, s, bytes, layout->channels);
}

/* The cheap conditions, before anything is allocated. */
static bool usable(const struct gpu_ctx *gpu, const struct odf_stream *s,
		   const struct paged_layout *layout)
{
	const struct gpu_limits *lim = gpu_get_limits(gpu);
	struct odf_raw raw;

	/* The kernel's indices are 32-bit; float16 pages take a word of two
	 * channels at a time. */
	return !gpu_cpu_kernels(lim) && lim->shader_float64 &&
	       (layout->type == PAGED_FLOAT32 ||
		(layout->type == PAGED_FLOAT16 && layout->channels % 2 == 0)) &&
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

static int get_pipeline(struct gpu_ctx *gpu, const struct paged_layout *layout,
			struct odf_transpose *t, struct errbuf *err)
{
	char tolerance[64];
	const char *defines[] = { tolerance, layout->type == PAGED_FLOAT16 ? "HALF_PAGES=1" :
						"HALF_PAGES=0", NULL };

	/* Every digit, so that the shader's double is fit.c's. */
	snprintf(tolerance, sizeof(tolerance), "ODF_SYMMETRY_TOLERANCE=%.17gLF",
		 (double)FIT_ODF_SYMMETRY_TOLERANCE);
	return gpu_pipeline_get(gpu, "odf_transpose.comp", defines, 4,
				sizeof(struct transpose_params), &t->pipe, err);
}

static int setup(struct gpu_ctx *gpu, const struct sphere *sphere,
		 const struct paged_layout *layout, struct odf_transpose *t, struct errbuf *err)
{
	int r;

	(void)odf_stream_raw(t->stream, &t->raw);   /* usable() saw it */
	t->scratch_bytes = 4 * chunk_voxels(gpu, t->stream, layout) * layout->channels;
	r = gpu_buffer_new(gpu, t->scratch_bytes, GPU_MEMORY_DEVICE, &t->scratch, err);
	if (r == 0)
		r = upload_pairs(gpu, sphere, t, err);
	if (r == 0)
		r = gpu_buffer_new(gpu, 4 * N_FLAGS, GPU_MEMORY_DEVICE, &t->flags, err);
	if (r == 0)
		r = get_pipeline(gpu, layout, t, err);
	return r;
}

/* A chunk of the stream, for gpu_upload_regions' fill (on threads). */
struct chunk_fill {
	struct odf_transpose *t;
	const struct odf_chunk *chunk;
};

static void fill_chunk(void *dst, uint64_t offset, uint64_t size, void *userdata)
{
	const struct chunk_fill *f = userdata;

	if (!odf_stream_copy_chunk(f->t->stream, f->chunk, f->t->half, offset, size, dst))
		atomic_store(&f->t->unmirrored, true);
}

/* Chunk j's values into the scratch buffer, volume after volume: copied
 * from the file on threads through the staging buffers, or from the
 * shared host copy's import, released once copied out. */
static int stage_chunk(struct gpu_ctx *gpu, struct odf_transpose *t, const struct odf_chunk *c,
		       struct errbuf *err)
{
	struct gpu_copy_region whole = { 0, 0, 4 * c->voxels * t->staged };
	struct chunk_fill fill = { t, c };
	double t0 = timing_now();
	size_t buffer;
	bool unmirrored;
	int r;

	if (!t->sharers)
		return gpu_upload_regions(gpu, t->scratch, &whole, 1, fill_chunk, &fill, err);
	r = odf_stream_share_get(t->stream, t->chunks, &buffer, &unmirrored, err);
	t->wait_seconds += timing_now() - t0;
	if (r < 0)
		return r;
	if (unmirrored)
		atomic_store(&t->unmirrored, true);
	r = gpu_batch_begin(gpu, err);
	if (r == 0)
		r = gpu_batch_copy(gpu, t->shared[buffer], t->scratch, &whole, err);
	if (r == 0)
		r = gpu_batch_submit_wait(gpu, err);
	odf_stream_share_release(t->stream, t->chunks);
	return r;
}

static int transpose_chunk(struct gpu_ctx *gpu, struct paged_volume *v, struct odf_transpose *t,
			   const struct odf_chunk *c, struct errbuf *err)
{
	struct transpose_params p = {
		.first = (uint32_t)c->first, .voxels = (uint32_t)c->voxels,
		.nx = (uint32_t)t->raw.dim[0], .ny = (uint32_t)t->raw.dim[1],
		.nz = (uint32_t)t->raw.dim[2], .channels = t->staged,
		.n_pairs = t->half ? 0u : (uint32_t)t->n_pairs,
	};
	struct gpu_buffer *buffers[] = { t->scratch, v->table, t->pairs, t->flags };
	uint32_t groups = (uint32_t)((c->voxels + TRANSPOSE_TILE - 1) / TRANSPOSE_TILE);
	double t0 = timing_now(), t1;
	int r = stage_chunk(gpu, t, c, err);

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

/* The imports of the shared host copies go (sharing or not). */
static void drop_shared(struct gpu_ctx *gpu, struct odf_transpose *t)
{
	for (size_t i = 0; i < ODF_SHARE_BUFFERS; i++) {
		gpu_buffer_free(gpu, t->shared[i]);
		t->shared[i] = NULL;
	}
}

/* This device's imports of the shared buffers; false (logged) where it
 * cannot import them. */
static bool import_shared(struct gpu_ctx *gpu, struct odf_transpose *t,
			  const struct odf_share *share, double *seconds)
{
	struct errbuf err = { 0 };
	double t0 = timing_now();
	int r = 0;

	for (size_t i = 0; i < ODF_SHARE_BUFFERS && r == 0; i++)
		r = gpu_buffer_import_host(gpu, share->buffers[i], share->bytes, &t->shared[i], &err);
	*seconds = timing_now() - t0;
	if (r < 0)
		log_debug("%s cannot import the ODF's shared host copy (%s)",
			  gpu_get_limits(gpu)->device_name, err.message);
	return r == 0;
}

/* Imports the stream's shared host copies where two or more devices read
 * the file raw and every one can (chunks then the same on all), else this
 * device reads the file itself. Errors: -ECANCELED only (another device
 * failed). */
static int share_host_copy(struct gpu_ctx *gpu, struct odf_transpose *t, struct errbuf *err)
{
	const char *device = gpu_get_limits(gpu)->device_name, *why_not = NULL;
	struct odf_share share;
	double seconds;
	int r = odf_stream_share_offer(t->stream, t->chunk_voxels, gpu_host_import_alignment(gpu),
				       t->half, &share, err);

	if (r < 0 || share.readers == 0) {
		if (r == 0 && share.why_not)
			log_debug("%s reads the ODF's file itself: %s", device, share.why_not);
		return r;
	}
	r = odf_stream_share_agree(t->stream, import_shared(gpu, t, &share, &seconds), &why_not,
				   err);
	if (r <= 0) {
		drop_shared(gpu, t);
		if (r == 0)
			log_debug("%s reads the ODF's file itself: %s", device, why_not);
		return r;
	}
	t->sharers = share.readers;
	t->chunk_voxels = share.chunk_voxels;
	log_debug("%s reads the ODF from the host copy shared by %zu devices (%d buffers of "
		  "%.1f MiB imported in %.3f s, chunks of %llu voxels)", device, t->sharers,
		  ODF_SHARE_BUFFERS, (double)share.bytes / (1 << 20), seconds,
		  (unsigned long long)t->chunk_voxels);
	return 0;
}

/* The flags the kernel set: the slabs' error for a non-finite value, and
 * the ODF's symmetry to the stream (the host's where a voxel's values are
 * too small for the GPU to be sure; with half pages, mirrored: the staging
 * found every value equal to its antipode's). */
static int take_flags(struct gpu_ctx *gpu, struct odf_transpose *t, struct errbuf *err)
{
	uint32_t flags[N_FLAGS];
	struct odf_symmetry found = { .symmetric = true, .mirrored = true };
	int r = gpu_download(gpu, t->flags, 0, flags, sizeof(flags), err);

	if (r == 0 && flags[FLAG_NONFINITE])
		r = odf_stream_raw_check_finite(t->stream, err);
	if (r < 0)
		return r;
	if (!t->half) {
		/* Mirrored takes pairs: a hemisphere has none. */
		found.symmetric = !flags[FLAG_ASYMMETRIC];
		found.mirrored = !flags[FLAG_UNMIRRORED] && t->n_pairs > 0;
		t->host_symmetry = flags[FLAG_TINY];
	}
	if (t->host_symmetry)
		r = odf_stream_raw_host_symmetry(t->stream, &found, err);
	if (r == 0)
		odf_stream_raw_symmetry(t->stream, found);
	return r;
}

/* Only the first upload shares the file's host copies with the other
 * devices (share_host_copy): an upload again of the whole sphere reads the
 * file itself. */
static int offer_to_share(struct gpu_ctx *gpu, struct odf_transpose *t, struct errbuf *err)
{
	if (t->share_decided)
		return 0;
	t->share_decided = true;
	return share_host_copy(gpu, t, err);
}

/* paged_upload_with's producer: every chunk, then the flags. With half
 * pages, a value unequal to its antipode's ends the upload. */
static int fill_pages(struct gpu_ctx *gpu, struct paged_volume *v, void *userdata,
		      struct errbuf *err)
{
	struct odf_transpose *t = userdata;
	struct odf_chunk c = { 0 };
	int r = offer_to_share(gpu, t, err);

	while (r == 0 && odf_stream_next_chunk(t->stream, t->chunk_voxels, &c)) {
		r = transpose_chunk(gpu, v, t, &c, err);
		if (r == 0 && atomic_load(&t->unmirrored))
			r = errbuf_set(err, -EAGAIN, "inputs.odf", "the ODF's values at antipodal "
				       "vertices differ: half the sphere cannot hold it");
		/* A device reading the file itself drops the slab's pages; the
		 * shared copies' filler does where it reads for all. */
		if (!t->sharers && c.ends_slab)
			odf_stream_raw_done(t->stream);
	}
	drop_shared(gpu, t);
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

/* The staging's part of the upload's log line: the shared host copy's
 * wait and copies, or the device's own memcpy and copies. */
static void describe_staging(struct odf_transpose *t, char *out, size_t size)
{
	if (!t->sharers) {
		snprintf(out, size, "staging (memcpy from the file on threads + copy to the "
			 "device) %.3f s", t->stage_seconds);
		return;
	}
	snprintf(out, size, "staging from the host copy shared by %zu devices %.3f s (waiting "
		 "for it %.3f s + copy to the device %.3f s; the host copy, memcpy from the file "
		 "on threads once for all, %.3f s so far)", t->sharers, t->stage_seconds,
		 t->wait_seconds, t->stage_seconds - t->wait_seconds,
		 odf_stream_share_fill_seconds(t->stream));
}

static void log_upload(struct odf_transpose *t, const struct paged_layout *layout,
		       double seconds)
{
	char staging[320];

	describe_staging(t, staging, sizeof(staging));
	log_debug("ODF transposed on the GPU (raw float32 upload%s%s%s): %zu slabs in %zu chunks "
		  "of up to %llu voxels, %.3f s: %s, transpose kernels %.3f s (%.3f s on the "
		  "device's clock)%s",
		  t->half ? " of half the sphere" : "",
		  layout->type == PAGED_FLOAT16 ? " into float16 pages" : "",
		  t->sharers ? ", one host copy shared" : "",
		  odf_stream_slabs(t->stream), t->chunks, (unsigned long long)t->chunk_voxels,
		  seconds, staging, t->kernel_seconds, t->device_seconds,
		  t->host_symmetry ? "; symmetry checked on the host (a voxel's values "
				     "under 2^-90)" : "");
}

/* This upload's staging: every volume, or the first half's. */
static void start_upload(struct gpu_ctx *gpu, struct odf_transpose *t, bool half)
{
	t->half = half;
	t->staged = (uint32_t)odf_stream_staged_volumes(t->stream, half);
	t->chunk_voxels = voxels_held(gpu, t->stream, t->scratch_bytes, t->staged);
	t->sharers = 0;   /* until the first upload's share_host_copy: a later one reads the file */
	atomic_store(&t->unmirrored, false);
	t->chunks = 0;
	t->stage_seconds = t->kernel_seconds = t->device_seconds = t->wait_seconds = 0.0;
}

int odf_transpose_upload(struct gpu_ctx *gpu, struct odf_transpose *t,
			 const struct paged_layout *layout, bool half, struct paged_volume *ret,
			 struct errbuf *err)
{
	uint32_t zero[N_FLAGS] = { 0 };
	double start = timing_now();
	int r;

	start_upload(gpu, t, half);
	r = gpu_upload(gpu, t->flags, 0, zero, sizeof(zero), err);
	if (r == 0)
		r = paged_upload_with(gpu, layout, fill_pages, t, ret, err);
	if (r == 0)
		log_upload(t, layout, timing_now() - start);
	return r;
}

bool odf_transpose_unmirrored(const struct odf_transpose *t)
{
	return atomic_load(&t->unmirrored);
}
