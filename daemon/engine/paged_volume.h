/* SPDX-License-Identifier: MIT */
/*
 * paged_volume: a voxel volume on the GPU that no single buffer limit
 * bounds. The voxels ([x][y][z], channels fastest) are split into pages of
 * whole voxels, one allocation each, and the kernels reach them through
 * device addresses (shaders/volume.glsl), so neither maxStorageBufferRange
 * nor maxMemoryAllocationSize caps the volume: only the memory it needs.
 *
 * Owns the pages and the small table the kernels bind: voxels per page,
 * channels, then each page's address. Values are stored as float32, or as
 * float16 (binary16, round to nearest even, two per 32-bit word), which
 * halves the memory of an ODF. Uploads host data whole, or runs of voxels
 * as a source delivers them (paged_upload_runs). Does not log.
 */
#ifndef TRACTD_PAGED_VOLUME_H
#define TRACTD_PAGED_VOLUME_H

#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "engine/gpu.h"

enum paged_type {
	PAGED_FLOAT32,
	PAGED_FLOAT16,
};

struct paged_layout {
	uint64_t voxels;
	uint32_t channels;
	enum paged_type type;
	uint64_t voxels_per_page;
	uint32_t n_pages;
};

struct paged_volume {
	struct paged_layout layout;
	struct gpu_buffer **pages;
	struct gpu_buffer *table;
	uint64_t bytes;           /* pages and table */
};

/* The page layout of voxels x channels values of type in pages of at most
 * max_page_bytes. -E2BIG when one voxel does not fit a page or the page
 * count passes what the table's 32-bit fields can address. */
int paged_plan(uint64_t voxels, uint32_t channels, enum paged_type type, uint64_t max_page_bytes,
	       struct paged_layout *ret, struct errbuf *err);

/* GPU bytes a layout takes (pages and table). */
uint64_t paged_bytes(const struct paged_layout *layout);

/* Allocates the layout's pages and uploads data (voxels x channels floats,
 * converted to float16 in pieces when the layout says so). GPU errors have
 * field "device"; on failure nothing stays allocated. */
int paged_upload(struct gpu_ctx *gpu, const struct paged_layout *layout, const float *data,
		 struct paged_volume *ret, struct errbuf *err);

/* paged_upload from data of src_channels values a voxel: each voxel's
 * first kept (at most the layout's channels), the rest of its channels 0
 * (resident.c's pages of half a mirrored sphere). */
int paged_upload_part(struct gpu_ctx *gpu, const struct paged_layout *layout, const float *data,
		      uint32_t src_channels, uint32_t kept, struct paged_volume *ret,
		      struct errbuf *err);
/* Values that arrive in runs of whole voxels (an ODF read while it is
 * uploaded, odf_stream.h). The volume is `columns` columns of
 * `column_voxels` consecutive voxels each (a grid's z-columns, or one column
 * of every voxel); run k holds voxels [first_voxel, first_voxel + voxels)
 * of every column, column after column, channels values each; the runs
 * cover the columns in order. */
struct paged_run {
	const float *values;
	uint64_t first_voxel;
	uint64_t voxels;
};

struct paged_runs {
	size_t n_runs;
	uint64_t columns, column_voxels;
	/* Run k, waiting for it if need be; a failure ends the upload. */
	int (*get)(void *userdata, size_t k, struct paged_run *ret, struct errbuf *err);
	/* The upload is done with run k (called after every get that
	 * succeeded); may be NULL. */
	void (*release)(void *userdata, size_t k);
	void *userdata;
	/* Values a voxel in the runs (0: the layout's channels), of which each
	 * voxel's first `kept` (0: all) go to its page, the rest of its
	 * channels being 0. */
	uint32_t src_channels, kept;
};

/* paged_upload of runs, each scattered into its pages as it comes, one
 * upload (gpu_upload_regions) per page it touches (a float16 run must start
 * on a whole 32-bit word of its page, and with several columns hold an even
 * count of values per column: an even channel count does). -EIO (field
 * "device") when the runs skip or repeat voxels. */
int paged_upload_runs(struct gpu_ctx *gpu, const struct paged_layout *layout,
		      const struct paged_runs *runs, struct paged_volume *ret, struct errbuf *err);

/* Fills the allocated pages of v (its table already on the device, for a
 * kernel that writes through it): the producer of paged_upload_with. */
typedef int paged_fill_fn(struct gpu_ctx *gpu, struct paged_volume *v, void *userdata,
			  struct errbuf *err);

/* paged_upload with the pages filled by fill (paged_upload_runs' runs, or
 * a GPU kernel that writes them, engine/odf_transpose.h): allocates the
 * pages, uploads the table, fills the pages; on failure nothing stays
 * allocated. */
int paged_upload_with(struct gpu_ctx *gpu, const struct paged_layout *layout,
		      paged_fill_fn *fill, void *userdata, struct paged_volume *ret,
		      struct errbuf *err);

/* Accepts a zeroed volume. The device must be idle for it. */
void paged_free(struct gpu_ctx *gpu, struct paged_volume *v);

#endif
