/* SPDX-License-Identifier: MIT */
/*
 * gpu: the Vulkan context. Owns the instance, the chosen physical and logical
 * device, one compute queue, a command pool, descriptor pool, two staging
 * buffers, the query pool that times each batch on the device's clock, every
 * compiled pipeline (cached by shader name + defines for the life
 * of the context, backed by a VkPipelineCache on disk and their SPIR-V in
 * DIR/spirv/ beside it) and the buffers it hands out (each buffer owns its
 * VkBuffer, memory and mapping).
 *
 * Shaders are the GLSL sources embedded from shaders/ (daemon/engine/shaders.h),
 * compiled with libshaderc on first use. Work is recorded into one batch at a
 * time (dispatches, copies, barriers) and submitted, then waited for; two
 * batches may be in flight at once (the queue runs them in order); callers
 * are single-threaded per context. Sizes are never assumed: gpu_get_limits()
 * reports what the device allows, optionally lowered by gpu_options so that
 * tests can force splitting on lavapipe. gpu_options.memory_limit caps the
 * device memory the context's buffers hold, each counted at its
 * allocation's size, as if the device had no more.
 *
 * Errors: negative errno plus struct errbuf (field "device"); Vulkan result
 * codes are mapped (OUT_OF_*_MEMORY -> -ENOSPC / -ENOMEM, DEVICE_LOST -> -ENODEV).
 * Logs at debug level only (with each compiled pipeline's statistics, where
 * the driver has VK_KHR_pipeline_executable_properties).
 */
#ifndef TRACTD_GPU_H
#define TRACTD_GPU_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/errbuf.h"

struct gpu_ctx;
struct gpu_buffer;
struct gpu_pipeline;

#define GPU_UUID_LEN 36           /* 8-4-4-4-12 hex digits */

struct gpu_options {
	int device_index;            /* -1: best by type (discrete > integrated > virtual > cpu) */
	const char *device_uuid;     /* or the device with this UUID (`tractd devices`); NULL: none */
	uint64_t max_binding_bytes;  /* 0: device limit; otherwise lowers maxStorageBufferRange */
	uint64_t max_alloc_bytes;    /* 0: device limit; otherwise lowers maxMemoryAllocationSize */
	uint64_t memory_limit;       /* 0: none; otherwise the most the context's buffers may
				      * hold at once (gpu_memory_limit), as if the device had
				      * this much memory */
	const char *pipeline_cache_path; /* NULL: no on-disk pipeline or SPIR-V cache */
};

struct gpu_limits {
	char device_name[256];
	const char *device_type;     /* "discrete", "integrated", "virtual", "cpu", "other" */
	uint32_t api_version;
	uint64_t max_binding_bytes;  /* effective maxStorageBufferRange */
	uint64_t max_alloc_bytes;    /* effective maxMemoryAllocationSize */
	uint64_t device_local_bytes; /* size of the largest device-local heap */
	uint64_t memory_limit;       /* gpu_options.memory_limit (0: none) */
	uint32_t subgroup_size;
	uint32_t max_shared_bytes;
	uint32_t max_workgroup_invocations;
	uint32_t max_workgroup_count_x;
	uint32_t max_push_constant_bytes;
	bool loop_limited;           /* loops end after a fixed number of iterations (lavapipe) */
	bool shader_int64;           /* 64-bit integers in shaders (enabled when present) */
	bool shader_float64;         /* 64-bit floats in shaders (enabled when present) */
};

enum gpu_memory {
	GPU_MEMORY_DEVICE,   /* device-local; mapped too when the device allows it */
	GPU_MEMORY_READBACK, /* host-visible, cached when possible: copy targets read by the CPU */
};

/* Opens the device. Returns 0, -ENODEV (no Vulkan device / index out of range /
 * no compute queue), -ENOTSUP (a required feature is missing: the message
 * names it), -ENOMEM. */
int gpu_open(const struct gpu_options *opts, struct gpu_ctx **ret, struct errbuf *err);

/* Whether text looks like a device UUID as `tractd devices` prints it. */
bool gpu_is_uuid(const char *text);

#define GPU_MAX_DEVICES 16

/* A device named in a list: its index, or (index -1) its UUID. */
struct gpu_device_choice {
	int index;
	char uuid[GPU_UUID_LEN + 1];
};

/* Parses a comma-separated list of device indices and UUIDs ("0,1",
 * "e22b2a88-...,1"); "" and "-1" are the empty list (the best device). A
 * device may repeat: each entry opens a context of its own. 0, or -EINVAL
 * with the reason in err (field "device"). */
int gpu_parse_devices(const char *text, struct gpu_device_choice out[GPU_MAX_DEVICES],
		      size_t *n, struct errbuf *err);

/* Opens a context on each of the n devices chosen (n = 0: one, on the best
 * device), each with opts otherwise: ret[0..*opened). On failure none stays
 * open (*opened = 0). Errors as gpu_open. */
int gpu_open_devices(const struct gpu_options *opts, const struct gpu_device_choice *choices,
		     size_t n, struct gpu_ctx **ret, size_t *opened, struct errbuf *err);

/* Waits for the device, saves the pipeline cache, destroys everything the
 * context owns (including buffers not yet freed). Accepts NULL. */
void gpu_close(struct gpu_ctx *ctx);

const struct gpu_limits *gpu_get_limits(const struct gpu_ctx *ctx);

/* The device memory tractd plans with, which the default budgets are
 * fractions of: the memory limit where one is set below the device-local
 * heap, else that heap. */
uint64_t gpu_memory_bytes(const struct gpu_limits *lim);

/* Whether the device gets the kernels' CPU variants (engine.c) and the
 * table only those use (resident.c), and the host's transpose of a streamed
 * ODF (odf_transpose.h): a CPU (lavapipe), whose lanes load and scan one by
 * one, unless the test hook TRACTD_GPU_KERNELS=1 is set. */
bool gpu_cpu_kernels(const struct gpu_limits *lim);

/* The field an allocation over the memory limit names. */
#define GPU_MEMORY_LIMIT_FIELD "gpu_memory_limit"

/* Prints one line per Vulkan device (index, type, name, UUID, key limits) to out. */
int gpu_list_devices(FILE *out, struct errbuf *err);

/* A buffer of size bytes (> 0, <= max_alloc_bytes). Returns 0, -EINVAL, -ENOSPC
 * (also, naming GPU_MEMORY_LIMIT_FIELD, when it would take what the
 * context holds past the memory limit: the spares go first). */
int gpu_buffer_new(struct gpu_ctx *ctx, uint64_t size, enum gpu_memory memory,
		   struct gpu_buffer **ret, struct errbuf *err);
/* Destroys the buffer now (the caller guarantees no pending work uses it). Accepts NULL. */
void gpu_buffer_free(struct gpu_ctx *ctx, struct gpu_buffer *buf);

/* Spares kept at most: this fraction of the largest device-local heap (an
 * eighth: 10 GiB of an 80 GiB card), so that a warm daemon's repeated jobs
 * of 100,000 seeds and more keep their work buffers too, while the volume
 * cache (a quarter) and a running job (half) still fit beside them. */
#define GPU_SPARE_DIVISOR 8

/* Like gpu_buffer_free, but keeps the buffer (up to the device's memory
 * or gpu_memory_limit over GPU_SPARE_DIVISOR of them, the oldest going
 * first to make room)
 * for a later gpu_buffer_new of the same
 * size and memory kind, which gets it as it is (contents undefined, as a
 * new one's): a warm daemon's next job of the same shape allocates
 * nothing, where each allocation of pinned read-back memory costs
 * milliseconds on a discrete GPU. The spares go when the context closes,
 * when an allocation fails for want of memory, or at gpu_drop_spares.
 * Accepts NULL. */
void gpu_buffer_recycle(struct gpu_ctx *ctx, struct gpu_buffer *buf);

/* Gives the spares back to the driver now (a daemon left idle hands the
 * GPU's memory back to whoever else shares the device). */
void gpu_drop_spares(struct gpu_ctx *ctx);

/* Bytes held by spares now. */
uint64_t gpu_spare_bytes(const struct gpu_ctx *ctx);

/* Bytes gpu_buffer_new served from spares so far (for a run's log). */
uint64_t gpu_reused_bytes(const struct gpu_ctx *ctx);
/* Host pointer for mapped buffers (READBACK always; DEVICE when host-visible), else NULL. */
void *gpu_buffer_host(const struct gpu_buffer *buf);
/* The buffer's device address, for shaders that reach it through a buffer
 * reference rather than a binding (no maxStorageBufferRange limit). */
uint64_t gpu_buffer_address(struct gpu_ctx *ctx, const struct gpu_buffer *buf);

/* Writes bytes [offset, offset + size) of an upload to dst. Called on
 * several threads at once, for disjoint ranges (gpu_upload_fill's start at
 * multiples of 64 bytes). */
typedef void gpu_fill_fn(void *dst, uint64_t offset, uint64_t size, void *userdata);

/* Uploads the size bytes that fill writes into a buffer at offset:
 * directly when it is mapped, else through the staging buffers, the CPU
 * filling one on several threads while the GPU copies another out.
 * Returns when the data are in place: 0 or a negative errno. */
int gpu_upload_fill(struct gpu_ctx *ctx, struct gpu_buffer *dst, uint64_t offset, uint64_t size,
		    gpu_fill_fn *fill, void *userdata, struct errbuf *err);
/* A piece of an upload: stream bytes [src_offset, src_offset + size) go to
 * dst_offset (also a copy between buffers, src_offset in the source). */
struct gpu_copy_region {
	uint64_t src_offset, dst_offset, size;
};
/* gpu_upload_fill of a stream scattered into dst: the regions follow one
 * another in the stream from byte 0 (sorted, no gaps), each put at its
 * dst_offset; the GPU copies them out of the staging buffers in one command
 * per buffer, so that many small regions cost no submit each. fill is
 * called for pieces of one region at a time: disjoint ranges, not
 * necessarily at multiples of 64 bytes. */
int gpu_upload_regions(struct gpu_ctx *ctx, struct gpu_buffer *dst,
		       const struct gpu_copy_region *regions, size_t n_regions, gpu_fill_fn *fill,
		       void *userdata, struct errbuf *err);
/* gpu_upload_fill of a copy of host data. */
int gpu_upload(struct gpu_ctx *ctx, struct gpu_buffer *dst, uint64_t offset,
	       const void *src, uint64_t size, struct errbuf *err);
/* A DEVICE buffer holding a copy of size bytes of src (4 bytes when size
 * is 0, so that a binding of nothing still has a buffer). On an upload
 * failure *ret is the buffer, for the caller to free. */
int gpu_upload_new(struct gpu_ctx *ctx, const void *src, uint64_t size,
			  struct gpu_buffer **ret, struct errbuf *err);
/* What host memory imported as a buffer must start and end at a multiple
 * of (minImportedHostPointerAlignment); 0 where the device cannot import
 * it (no VK_EXT_external_memory_host, enabled at gpu_open where present). */
uint64_t gpu_host_import_alignment(const struct gpu_ctx *ctx);
/* A buffer over size bytes of the caller's host memory at host (both
 * multiples of gpu_host_import_alignment; anonymous memory: drivers may
 * refuse a file's mapping), which the device copies from (gpu_batch_copy)
 * without a staging buffer. The memory must outlive the buffer, which goes
 * with gpu_buffer_free (never gpu_buffer_recycle: a spare would keep the
 * caller's memory); it holds none of the device's (the memory limit does
 * not count it). -ENOTSUP
 * where the device cannot import it (test hook: TRACTD_FAULT_HOST_IMPORT=N
 * fails the imports of the devices after the process's first N to
 * import), -EINVAL when unaligned,
 * or the driver's error. */
int gpu_buffer_import_host(struct gpu_ctx *ctx, void *host, uint64_t size,
			   struct gpu_buffer **ret, struct errbuf *err);
/* Copies buffer contents to host memory, waiting for completion. */
int gpu_download(struct gpu_ctx *ctx, struct gpu_buffer *src, uint64_t offset,
		 void *dst, uint64_t size, struct errbuf *err);

/* Returns the compute pipeline for shaders/<shader> compiled with defines
 * ("NAME=VALUE" strings, NULL-terminated), binding storage buffers 0..n_buffers-1
 * and a push-constant block of push_bytes. Compiled once per context per
 * (shader, defines). The context owns the pipeline. */
int gpu_pipeline_get(struct gpu_ctx *ctx, const char *shader, const char *const *defines,
		     uint32_t n_buffers, uint32_t push_bytes, struct gpu_pipeline **ret,
		     struct errbuf *err);

/* Whether gpu_pipeline_get of shader with defines needs no GLSL compile:
 * the context has the pipeline, or the SPIR-V cache beside the pipeline
 * cache file (DIR/spirv/) has its code. */
bool gpu_pipeline_cached(const struct gpu_ctx *ctx, const char *shader, const char *const *defines);

/* Batch recording: begin, add dispatches, submit and wait. Commands run in
 * order, each after a full compute/transfer barrier, a batch's first after
 * the batches submitted before it. Two batches may be in flight: beginning
 * a third waits for the oldest first. */
int gpu_batch_begin(struct gpu_ctx *ctx, struct errbuf *err);
int gpu_batch_dispatch(struct gpu_ctx *ctx, struct gpu_pipeline *pipe,
		       struct gpu_buffer *const *buffers, const void *push, uint32_t groups,
		       struct errbuf *err);
/* Adds a copy of region from src to dst to the batch. */
int gpu_batch_copy(struct gpu_ctx *ctx, struct gpu_buffer *src, struct gpu_buffer *dst,
		   const struct gpu_copy_region *region, struct errbuf *err);
/* A submitted batch, to wait for. */
struct gpu_ticket {
	uint64_t serial;
	unsigned frame;
};
/* Submits the batch without waiting for it: its buffers must stay as they
 * are until gpu_batch_wait of its ticket returns. A submit that fails for
 * another reason than memory (VK_ERROR_DEVICE_LOST) marks the context
 * lost: see gpu_lost. */
int gpu_batch_submit(struct gpu_ctx *ctx, struct gpu_ticket *ticket, struct errbuf *err);
/* Waits for a submitted batch (at once when it was waited for already). */
int gpu_batch_wait(struct gpu_ctx *ctx, struct gpu_ticket ticket, struct errbuf *err);
/* gpu_batch_submit, then gpu_batch_wait. */
int gpu_batch_submit_wait(struct gpu_ctx *ctx, struct errbuf *err);
/* Waits for every batch still in flight, errors ignored (before freeing
 * what they use after a failure). */
void gpu_batch_settle(struct gpu_ctx *ctx);
/* The seconds the batch waited for last took on the device, from
 * timestamps written at its start and end (the host's submit and wait left
 * out); -1 where the device keeps no timestamps on its queue. */
double gpu_batch_device_seconds(const struct gpu_ctx *ctx);

/* The most device memory the context's buffers and spares held at once so
 * far (their allocations' sizes; for statistics): never over the memory
 * limit. */
uint64_t gpu_peak_buffer_bytes(const struct gpu_ctx *ctx);

/* What tractd may still allocate on the device under the memory limit: the
 * limit less what the buffers hold and what the staging buffers of a first
 * transfer will take (spares do not count: they go when memory is wanted).
 * UINT64_MAX without a limit. */
uint64_t gpu_memory_free(const struct gpu_ctx *ctx);

/* The bytes the context's buffers hold now (for a run's own share). */
uint64_t gpu_buffer_bytes(const struct gpu_ctx *ctx);

/* Whether a submit failed for good: the context and every buffer and
 * pipeline on it are useless; close it and open another. Test hook: the
 * environment variable TRACTD_FAULT_DEVICE_LOST_AFTER=N makes the first
 * context of the process fail its submit number N+1 with
 * VK_ERROR_DEVICE_LOST (README, "Testing"). */
bool gpu_lost(const struct gpu_ctx *ctx);

/* Seconds spent in shaderc + vkCreateComputePipelines so far (for statistics). */
double gpu_compile_seconds(const struct gpu_ctx *ctx);

#endif
