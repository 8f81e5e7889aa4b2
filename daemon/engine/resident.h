/* SPDX-License-Identifier: MIT */
/*
 * resident: the GPU copies of a job's inputs (inputs.h), reusable by every
 * job on them: the ODF (float32, float16 or SH coefficients with their
 * sampling matrix) or for boot the DWI and the model's matrices, the stop
 * map and the sphere with its neighbours.
 *
 * Owns the storage choice (the requested one, or the first that fits the
 * job's GPU memory budget with room to track), the uploads (on CPU
 * devices with each voxel's largest ODF value, found on the host as the
 * values go up) and the buffers,
 * from resident_new_all() to resident_free(). Volumes go up in pages that only
 * the memory budget bounds (paged_volume.h); an ODF left on disk
 * (odf_stream.h) goes up slab by slab as it is read, to all devices at once. The engine binds the buffers
 * through resident_bindings(). Logs the upload at debug level; failures go
 * to the caller through errbuf.
 */
#ifndef TRACTD_RESIDENT_H
#define TRACTD_RESIDENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "models/fit.h"
#include "engine/gpu.h"
#include "job/inputs.h"
#include "job/jobspec.h"

/* The GPU memory a job keeps for tracking at least, besides its inputs: an
 * upload that does not leave it within the budget is refused. */
#define RESIDENT_MIN_WORK_BYTES (8ull << 20)

struct resident;

struct resident_upload {
	/* tracking.odf_storage; auto takes the first of float32, float16 and
	 * SH coefficients that fits memory_budget, and what the device's
	 * memory limit leaves (gpu_memory_free), with room to track. */
	enum jobspec_odf_storage odf_storage;
	uint64_t memory_budget;     /* bytes of GPU memory a job may use; 0: default */
	const struct fit_options *fit;  /* threads and progress for sampling SH
					 * inputs on the sphere; may be NULL */
	/* The ODF read while it is uploaded (inputs_odf_stream), every device
	 * taking each slab as it is read; NULL: the inputs' host copy. */
	struct odf_stream *odf_stream;
};

/* The GPU memory a job may use (its inputs, tables, work and read-back
 * buffers): requested, or by default (0) half the device's memory, or of
 * the memory limit where one is set (gpu_memory_bytes). */
uint64_t resident_budget(const struct gpu_limits *lim, uint64_t requested);

/* What the upload of in needs of the inputs alone, done ahead of it where
 * the caller has time while the devices open (resident_new_all does what
 * is left): a streamed ODF's guess at pages of half the sphere, which reads
 * a plane of each of its volumes. */
void resident_prepare(struct inputs *in);

/* Uploads in to each of n devices, a thread each so that the uploads
 * overlap: ret[i] is gpus[i]'s. An ODF sampled from SH coefficients is
 * sampled once for all of them. -E2BIG when the inputs do not fit the
 * budget (the message says how much each storage needs and what would
 * help; the field is gpu_memory_limit where the memory limit set the
 * bound); GPU errors with field "device". On failure none is kept (the
 * first device's error is reported). */
int resident_new_all(struct gpu_ctx *const *gpus, size_t n, const struct inputs *in,
		     const struct resident_upload *up, struct resident **ret, struct errbuf *err);
/* GPU bytes held. */
uint64_t resident_bytes(const struct resident *res);
/* How the ODF is held: "float32", "float16", "sh", or "dwi" for boot. */
const char *resident_storage(const struct resident *res);
/* The same for a prob or ptt job's kernels: never auto. */
enum jobspec_odf_storage resident_odf_storage(const struct resident *res);
/* SH storage: coefficients per voxel. */
uint32_t resident_sh_coefs(const struct resident *res);

/* The buffers the kernels bind; those a job's inputs lack are NULL. */
struct resident_bindings {
	struct gpu_buffer *odf;       /* prob, ptt: the ODF's page table (paged_volume.h) */
	struct gpu_buffer *odf_basis; /* SH storage: the sampling matrix */
	struct gpu_buffer *odf_max;   /* CPU devices, float32 and float16 storage: each
				       * voxel's largest value, a page table (the bound
				       * of prob_track's cone lists) */
	struct gpu_buffer *dwi;       /* boot: the DWI's page table */
	struct gpu_buffer *matrices;  /* boot: boot.glsl's layout */
	struct gpu_buffer *stop;      /* the stop map's page table; stopping act: its include
				       * and exclude maps, 2 channels */
	struct gpu_buffer *vertices, *nbr_offset, *nbr;   /* the sphere */
};
struct resident_bindings resident_bindings(const struct resident *res);

/* The device must be idle for res (no engine_run using it). Accepts NULL. */
void resident_free(struct gpu_ctx *gpu, struct resident *res);

#endif
