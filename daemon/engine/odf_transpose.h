/* SPDX-License-Identifier: MIT */
/*
 * odf_transpose: a streamed ODF (job/odf_stream.h) put into its pages by
 * the GPU. The file keeps the values volume after volume; the pages want
 * each voxel's values together ([x][y][z] voxels, channels fastest). On the
 * host that transpose, latency-bound, costs more than the upload itself, so
 * a GPU device takes the file's float32 values as they are: pieces of every
 * volume (a range of voxels of one slab's z-planes) copied on threads from
 * the mapping into the staging buffers, then into a scratch buffer on the
 * device, from which shaders/odf_transpose.comp writes each voxel into its
 * page (float32, or float16 rounded as half_from_float rounds; a sphere of
 * an even vertex count), clipped at zero, checking symmetry and finiteness
 * as the host does (fit_prepare_odf, volume_slabs_read; where a voxel's
 * values are too small for a GPU that flushes subnormal floats to be sure,
 * the host reads the slabs to decide the symmetry). The pages hold the host
 * path's bytes.
 * Where several devices read the file raw, the chunk is copied once, into
 * the stream's shared host buffers, which each device imports
 * (gpu_buffer_import_host) and copies from instead (odf_stream_share_*);
 * where a device cannot import them, each copies the file itself.
 *
 * Owns, for a device's upload of one stream (and where half the sphere did
 * not hold it, the upload again of the whole), the scratch buffer, the
 * antipodal pairs and the flags the kernel sets (allocated before the
 * stream is joined, so that a device short of memory takes the slabs
 * instead) and its imports of the stream's shared host copies; a second
 * producer of paged_volume's pages (paged_upload_with), the slabs being the
 * first. Logs the upload's times at debug level.
 */
#ifndef TRACTD_ODF_TRANSPOSE_H
#define TRACTD_ODF_TRANSPOSE_H

#include <stdbool.h>

#include "base/errbuf.h"
#include "engine/gpu.h"
#include "engine/paged_volume.h"
#include "job/odf_stream.h"
#include "models/sphere.h"

struct odf_transpose;

/* The device's means to put the stream's ODF into pages of layout itself
 * (scratch buffer, antipodal pairs, flags, kernel), or NULL where it takes
 * the slabs: a CPU device (gpu_cpu_kernels; the test hook
 * TRACTD_GPU_KERNELS=1 makes lavapipe a GPU), no 64-bit floats in shaders,
 * float16 pages, a file that is not float32 as stored (or scaled), a
 * memory limit that leaves no room for the scratch buffer beside the
 * pages, or a failure to set them up (logged at debug). */
struct odf_transpose *odf_transpose_new(struct gpu_ctx *gpu, struct odf_stream *s,
					const struct sphere *sphere,
					const struct paged_layout *layout);

/* Uploads the stream's ODF into pages of layout (ret as paged_upload's),
 * telling the stream its symmetry (odf_stream_raw_symmetry). The caller
 * has joined the stream without slabs. Errors: the device's, or the
 * slabs' error for a non-finite value (inputs.odf).
 * half: on a mirrored sphere (sphere_mirrored), the pages hold the first
 * nv/2 vertices' values (layout's channels, a multiple of 4, pass them:
 * the rest 0), which every antipode shares where the ODF is mirrored; the
 * upload stages only those volumes, comparing each value with its
 * antipode's on the way (odf_stream_copy_chunk's half), and ends at the
 * first chunk where one differs: odf_transpose_unmirrored() then says so,
 * and the caller uploads again with pages of the whole sphere (a later
 * upload re-reads the file; only the first shares the host copies). */
int odf_transpose_upload(struct gpu_ctx *gpu, struct odf_transpose *t,
			 const struct paged_layout *layout, bool half, struct paged_volume *ret,
			 struct errbuf *err);
/* The last upload, of half the sphere, found a value unequal to its
 * antipode's. */
bool odf_transpose_unmirrored(const struct odf_transpose *t);

/* Accepts NULL. */
void odf_transpose_free(struct gpu_ctx *gpu, struct odf_transpose *t);

#endif
