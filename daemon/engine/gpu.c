/* SPDX-License-Identifier: MIT */
/*
 * gpu: Vulkan context, buffers, shaderc-compiled compute pipelines and batches.
 * See gpu.h for what it owns. Everything created here is destroyed by
 * gpu_close() in reverse order; buffers and pipelines are kept on intrusive
 * lists so that nothing leaks when a caller fails half-way.
 */
#include "engine/gpu.h"

#include <ctype.h>
#include <strings.h>
#include <errno.h>
#include <fcntl.h>
#include <shaderc/shaderc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "base/fnv.h"
#include "base/log.h"
#include "base/parallel.h"
#include "engine/shaders.h"
#include "base/timing.h"

/* Transfers go through UPLOAD_SLOTS staging buffers of STAGING_BYTES each:
 * the CPU fills one (on threads, each at least FILL_MIN_BYTES) while the GPU
 * copies another out. */
#define STAGING_BYTES (64u << 20)
#define UPLOAD_SLOTS 2
#define FILL_MIN_BYTES (4u << 20)
#define DESCRIPTOR_SETS_PER_BATCH 256
/* Batches in flight at once: the engine tracks one batch while the host
 * reads the one before and packs it. */
#define BATCH_FRAMES 2
#define MAX_BINDINGS 16

struct gpu_buffer {
	VkBuffer buffer;
	VkDeviceMemory memory;
	void *host;            /* persistent mapping, or NULL */
	bool coherent;
	uint64_t size;
	uint64_t bytes;        /* of device memory: its allocation's size (>= size) */
	enum gpu_memory kind;
	struct gpu_buffer *next;
};

struct gpu_pipeline {
	char *key;             /* shader name + defines */
	VkDescriptorSetLayout set_layout;
	VkPipelineLayout layout;
	VkPipeline pipeline;
	uint32_t n_buffers;
	uint32_t push_bytes;
	struct gpu_pipeline *next;
};

/* A staging buffer with the command buffer and fence of the copy out of it. */
struct upload_slot {
	struct gpu_buffer *staging;
	VkCommandBuffer cmd;
	VkFence fence;
	bool pending;            /* submitted, not yet waited for */
};

/* What one batch is recorded into, and held while it runs: its descriptor
 * sets live until its fence signals. */
struct batch_frame {
	VkCommandBuffer cmd;
	VkFence fence;
	VkDescriptorPool descriptor_pool;
	uint64_t serial;         /* the batch recorded into it last (gpu_ticket) */
	double device_seconds;   /* that batch's, once waited for (-1: no clock) */
	bool pending;            /* submitted, not yet waited for */
};

struct gpu_ctx {
	VkInstance instance;
	VkPhysicalDevice physical;
	VkDevice device;
	VkQueue queue;
	uint32_t queue_family;
	unsigned frame;          /* of frames: the one recording, or submitted last */
	VkCommandPool command_pool;
	struct batch_frame frames[BATCH_FRAMES];
	uint64_t batch_serial;   /* batches begun so far */
	VkCommandBuffer cmd;     /* frames[frame]'s, while it records */
	VkPipelineCache pipeline_cache;
	char *pipeline_cache_path;
	VkPhysicalDeviceMemoryProperties memory_props;
	bool size_control;       /* can require the subgroup size and full subgroups */
	bool recording;
	struct upload_slot slots[UPLOAD_SLOTS];   /* created at the first transfer */
	struct gpu_buffer *buffers;
	uint64_t buffer_bytes, peak_buffer_bytes;   /* held by buffers, and by them and the
						     * spares at most */
	struct gpu_buffer *spares;   /* recycled, for a buffer_new of their size and kind */
	uint64_t spare_bytes, reused_bytes;          /* held by spares; served from them */
	struct gpu_pipeline *pipelines;
	shaderc_compiler_t compiler;
	double compile_seconds;
	struct gpu_limits limits;
	bool lost;               /* a submit failed for good: every later one fails */
	bool fault_armed;        /* TRACTD_FAULT_DEVICE_LOST_AFTER applies to this context */
	uint64_t fault_after;    /* submits that succeed before the injected loss */
	uint64_t submits;
	bool staged_uploads;     /* TRACTD_STAGED_UPLOADS: mapped buffers filled as unmapped ones */
	/* Each batch's start and end on the device's clock, where its queue
	 * keeps one: what the batch took there, apart from the host's submit
	 * and wait. */
	VkQueryPool timestamps;  /* 2 queries a frame, or VK_NULL_HANDLE */
	uint64_t timestamp_mask; /* the bits the queue's timestamps hold */
	double timestamp_ns;     /* nanoseconds a tick */
	double batch_device_seconds;   /* the last batch waited for, or -1 */
	/* VK_KHR_pipeline_executable_properties, on when the log is at debug
	 * level: each compiled pipeline's registers, shared memory and the like
	 * as the driver reports them. */
	bool pipeline_statistics;
	/* VK_EXT_external_memory_host, where the device has it: host memory
	 * imported as a buffer (gpu_buffer_import_host) must start and end at
	 * multiples of this (0: not enabled). */
	uint64_t host_import_alignment;
	long host_import_rank;    /* the test hook's: -1 until its first import */
	PFN_vkGetMemoryHostPointerPropertiesEXT host_pointer_properties;
};

/* The test hook TRACTD_FAULT_DEVICE_LOST_AFTER=N: the first context the
 * process opens fails its submit number N+1 as if the device were lost
 * (lavapipe never loses it), so that the daemon's recovery can be tested.
 * Only the first context, so the one recreated after the loss works. */
static atomic_flag fault_taken = ATOMIC_FLAG_INIT;

static void arm_fault(struct gpu_ctx *ctx)
{
	const char *value = getenv("TRACTD_FAULT_DEVICE_LOST_AFTER");
	char *end;
	unsigned long long n;

	if (!value || !value[0] || atomic_flag_test_and_set(&fault_taken))
		return;
	errno = 0;
	n = strtoull(value, &end, 10);
	if (errno || *end)
		return;
	ctx->fault_armed = true;
	ctx->fault_after = n;
	log_debug("fault injection: the device is lost after %llu submits", n);
}

/* The test hook TRACTD_STAGED_UPLOADS=1: uploads to mapped device memory
 * (lavapipe's) go through the staging buffers and the GPU's copies, as
 * they do on a discrete GPU, so that tests here cover that path. */
static bool staged_uploads(void)
{
	const char *value = getenv("TRACTD_STAGED_UPLOADS");

	return value && strcmp(value, "1") == 0;
}

static const char *vk_result_name(VkResult r)
{
	switch (r) {
	case VK_SUCCESS: return "VK_SUCCESS";
	case VK_NOT_READY: return "VK_NOT_READY";
	case VK_TIMEOUT: return "VK_TIMEOUT";
	case VK_INCOMPLETE: return "VK_INCOMPLETE";
	case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
	case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
	case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
	case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
	case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
	case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
	case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
	case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
	case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
	case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
	case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
	case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
	case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
	default: return "VkResult(other)";
	}
}

static int vk_errno(VkResult r)
{
	switch (r) {
	case VK_ERROR_OUT_OF_HOST_MEMORY: return -ENOMEM;
	case VK_ERROR_OUT_OF_DEVICE_MEMORY: return -ENOSPC;
	case VK_ERROR_DEVICE_LOST: return -ENODEV;
	case VK_ERROR_INCOMPATIBLE_DRIVER: return -ENODEV;
	case VK_ERROR_INITIALIZATION_FAILED: return -ENODEV;
	case VK_ERROR_FEATURE_NOT_PRESENT: return -ENOTSUP;
	case VK_ERROR_EXTENSION_NOT_PRESENT: return -ENOTSUP;
	default: return -EIO;
	}
}

/* A failure of the GPU, or of the choice of one: field "device". */
#define device_err(err, code, ...) \
	errbuf_set_kind((err), ERR_KIND_DEVICE, (code), "device", __VA_ARGS__)

/* Reports a failed Vulkan call with its text and location, once, and maps it. */
#define GPU_TRY(err, call)                                                              \
	do {                                                                            \
		VkResult vr_ = (call);                                                  \
		if (vr_ != VK_SUCCESS)                                                  \
			return device_err((err), vk_errno(vr_), "%s failed: %s (%s:%d)",       \
					  #call, vk_result_name(vr_), __FILE__, __LINE__); \
	} while (0)

/* ---- instance and device selection ------------------------------------- */

static int create_instance(VkInstance *ret, struct errbuf *err)
{
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = "tractd",
		.applicationVersion = 1,
		.pEngineName = "tractd",
		.apiVersion = VK_API_VERSION_1_2,
	};
	VkInstanceCreateInfo info = {
		.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
		.pApplicationInfo = &app,
	};
	VkResult r = vkCreateInstance(&info, NULL, ret);

	if (r != VK_SUCCESS)
		return device_err(err, -ENODEV,
				  "cannot create a Vulkan instance (%s): is a Vulkan driver installed "
				  "(e.g. mesa-vulkan-drivers for lavapipe)?", vk_result_name(r));
	return 0;
}

static int device_type_rank(VkPhysicalDeviceType t)
{
	switch (t) {
	case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
	case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
	case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
	case VK_PHYSICAL_DEVICE_TYPE_CPU: return 1;
	default: return 0;
	}
}

static const char *device_type_name(VkPhysicalDeviceType t)
{
	switch (t) {
	case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
	case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
	case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
	case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
	default: return "other";
	}
}

static int enumerate_devices(VkInstance instance, VkPhysicalDevice **ret, uint32_t *ret_n,
			     struct errbuf *err)
{
	uint32_t n = 0;
	VkPhysicalDevice *devs;

	GPU_TRY(err, vkEnumeratePhysicalDevices(instance, &n, NULL));
	if (n == 0)
		return device_err(err, -ENODEV, "no Vulkan device found (install "
				  "mesa-vulkan-drivers for the CPU fallback lavapipe)");
	devs = calloc(n, sizeof(*devs));
	if (!devs)
		return device_err(err, -ENOMEM, "out of memory");
	VkResult r = vkEnumeratePhysicalDevices(instance, &n, devs);
	if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
		free(devs);
		return device_err(err, vk_errno(r), "vkEnumeratePhysicalDevices: %s",
				  vk_result_name(r));
	}
	*ret = devs;
	*ret_n = n;
	return 0;
}

static void format_uuid(const uint8_t id[VK_UUID_SIZE], char out[GPU_UUID_LEN + 1])
{
	char *p = out;

	for (unsigned i = 0; i < VK_UUID_SIZE; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		p += sprintf(p, "%02x", id[i]);
	}
}

static void device_uuid(VkPhysicalDevice dev, char out[GPU_UUID_LEN + 1])
{
	VkPhysicalDeviceIDProperties id = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES };
	VkPhysicalDeviceProperties2 p = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
					  .pNext = &id };

	vkGetPhysicalDeviceProperties2(dev, &p);
	format_uuid(id.deviceUUID, out);
}

bool gpu_is_uuid(const char *text)
{
	if (strlen(text) != GPU_UUID_LEN)
		return false;
	for (int i = 0; i < GPU_UUID_LEN; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (dash ? text[i] != '-' : !isxdigit((unsigned char)text[i]))
			return false;
	}
	return true;
}

int gpu_parse_devices(const char *text, struct gpu_device_choice out[GPU_MAX_DEVICES],
		      size_t *n, struct errbuf *err)
{
	const char *p = text;

	*n = 0;
	if (strcmp(text, "-1") == 0)
		return 0;
	while (*p) {
		size_t len = strcspn(p, ",");
		char item[GPU_UUID_LEN + 2] = "";
		char *end = NULL;
		long index = -1;

		if (*n == GPU_MAX_DEVICES)
			return device_err(err, -EINVAL, "lists more than %d devices",
					  GPU_MAX_DEVICES);
		if (len < sizeof(item))
			memcpy(item, p, len);
		if (len > 0 && len < 10 && isdigit((unsigned char)item[0]))
			index = strtol(item, &end, 10);
		memset(&out[*n], 0, sizeof(out[*n]));
		out[*n].index = -1;
		if (end && *end == '\0' && index >= 0)
			out[*n].index = (int)index;
		else if (len < sizeof(item) && gpu_is_uuid(item))
			memcpy(out[*n].uuid, item, GPU_UUID_LEN + 1);
		else
			return device_err(err, -EINVAL, "'%.*s' is neither a device index "
					  "nor a UUID as `tractd devices` lists them", (int)(len < 64 ? len : 64), p);
		(*n)++;
		p += len;
		if (*p == ',' && !*++p)
			return device_err(err, -EINVAL, "ends with a comma");
	}
	return 0;
}

int gpu_open_devices(const struct gpu_options *opts, const struct gpu_device_choice *choices,
		     size_t n, struct gpu_ctx **ret, size_t *opened, struct errbuf *err)
{
	size_t want = n ? n : 1;
	int r = 0;

	*opened = 0;
	for (size_t i = 0; r == 0 && i < want; i++) {
		struct gpu_options o = *opts;
		if (n) {
			o.device_index = choices[i].index;
			o.device_uuid = choices[i].uuid[0] ? choices[i].uuid : NULL;
		}
		r = gpu_open(&o, &ret[i], err);
		if (r == 0)
			(*opened)++;
	}
	if (r < 0) {
		for (size_t i = 0; i < *opened; i++)
			gpu_close(ret[i]);
		*opened = 0;
	}
	return r;
}

static int index_of_uuid(VkPhysicalDevice *devs, uint32_t n, const char *uuid)
{
	char have[GPU_UUID_LEN + 1];

	for (uint32_t i = 0; i < n; i++) {
		device_uuid(devs[i], have);
		if (strcasecmp(have, uuid) == 0)
			return (int)i;
	}
	return -1;
}

static int pick_device(VkInstance instance, int index, const char *uuid, VkPhysicalDevice *ret,
		       struct errbuf *err)
{
	VkPhysicalDevice *devs;
	uint32_t n;
	int best = -1, best_rank = -1;
	int r = enumerate_devices(instance, &devs, &n, err);

	if (r < 0)
		return r;
	if (uuid) {
		index = index_of_uuid(devs, n, uuid);
		if (index < 0) {
			free(devs);
			return device_err(err, -ENODEV, "no device has UUID %s (see "
					  "`tractd devices`)", uuid);
		}
	}
	if (index >= 0) {
		if ((uint32_t)index >= n) {
			free(devs);
			return device_err(err, -ENODEV,
					  "device index %d out of range: %u device(s) present "
					  "(see `tractd devices`)", index, n);
		}
		best = index;
	} else {
		for (uint32_t i = 0; i < n; i++) {
			VkPhysicalDeviceProperties p;
			vkGetPhysicalDeviceProperties(devs[i], &p);
			if (device_type_rank(p.deviceType) > best_rank) {
				best_rank = device_type_rank(p.deviceType);
				best = (int)i;
			}
		}
	}
	*ret = devs[best];
	free(devs);
	return 0;
}

static int find_compute_queue(VkPhysicalDevice phys, uint32_t *ret, uint32_t *ret_timestamp_bits,
			      struct errbuf *err)
{
	uint32_t n = 0;
	VkQueueFamilyProperties *q;
	int found = -1;

	vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, NULL);
	q = calloc(n ? n : 1, sizeof(*q));
	if (!q)
		return device_err(err, -ENOMEM, "out of memory");
	vkGetPhysicalDeviceQueueFamilyProperties(phys, &n, q);
	/* Prefer a compute family without graphics (async compute) when present. */
	for (uint32_t i = 0; i < n && found < 0; i++)
		if ((q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
			found = (int)i;
	for (uint32_t i = 0; i < n && found < 0; i++)
		if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT)
			found = (int)i;
	if (found >= 0)
		*ret_timestamp_bits = q[found].timestampValidBits;
	free(q);
	if (found < 0)
		return device_err(err, -ENODEV, "the device has no compute queue");
	*ret = (uint32_t)found;
	return 0;
}

static int check_subgroup_support(const VkPhysicalDeviceSubgroupProperties *sg, struct errbuf *err)
{
	const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_VOTE_BIT |
		VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | VK_SUBGROUP_FEATURE_BALLOT_BIT;

	if (!(sg->supportedStages & VK_SHADER_STAGE_COMPUTE_BIT))
		return device_err(err, -ENOTSUP, "subgroup operations are not supported "
				  "in compute shaders on this device");
	if ((sg->supportedOperations & need) != need)
		return device_err(err, -ENOTSUP, "the device lacks subgroup basic/vote/"
				  "arithmetic/ballot operations (have 0x%x)", sg->supportedOperations);
	if (sg->subgroupSize < 4 || sg->subgroupSize > 128)
		return device_err(err, -ENOTSUP, "unsupported subgroup size %u",
				  sg->subgroupSize);
	return 0;
}

static uint64_t largest_device_heap(const VkPhysicalDeviceMemoryProperties *m)
{
	uint64_t best = 0;

	for (uint32_t i = 0; i < m->memoryHeapCount; i++)
		if ((m->memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
		    m->memoryHeaps[i].size > best)
			best = m->memoryHeaps[i].size;
	return best;
}

static uint64_t lower_limit(uint64_t device_value, uint64_t requested)
{
	return (requested && requested < device_value) ? requested : device_value;
}

/* Reads the properties the engine plans with, and whether subgroup size control
 * (required size + full subgroups) is available for compute shaders. */
static int read_limits(struct gpu_ctx *ctx, const struct gpu_options *opts, struct errbuf *err)
{
	VkPhysicalDeviceDriverProperties driver = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES,
	};
	VkPhysicalDeviceSubgroupSizeControlProperties size_ctl = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES,
		.pNext = &driver,
	};
	VkPhysicalDeviceSubgroupProperties sg = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
		.pNext = &size_ctl,
	};
	VkPhysicalDeviceMaintenance3Properties m3 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
		.pNext = &sg,
	};
	VkPhysicalDeviceProperties2 props = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
		.pNext = &m3,
	};
	struct gpu_limits *l = &ctx->limits;
	int r;

	vkGetPhysicalDeviceProperties2(ctx->physical, &props);
	r = check_subgroup_support(&sg, err);
	if (r < 0)
		return r;
	vkGetPhysicalDeviceMemoryProperties(ctx->physical, &ctx->memory_props);

	snprintf(l->device_name, sizeof(l->device_name), "%s", props.properties.deviceName);
	l->device_type = device_type_name(props.properties.deviceType);
	l->api_version = props.properties.apiVersion;
	l->max_binding_bytes = lower_limit(props.properties.limits.maxStorageBufferRange,
					   opts->max_binding_bytes);
	l->max_alloc_bytes = lower_limit(m3.maxMemoryAllocationSize, opts->max_alloc_bytes);
	l->device_local_bytes = largest_device_heap(&ctx->memory_props);
	l->memory_limit = opts->memory_limit;
	l->subgroup_size = sg.subgroupSize;
	l->max_shared_bytes = props.properties.limits.maxComputeSharedMemorySize;
	l->max_workgroup_invocations = props.properties.limits.maxComputeWorkGroupInvocations;
	l->max_workgroup_count_x = props.properties.limits.maxComputeWorkGroupCount[0];
	l->max_push_constant_bytes = props.properties.limits.maxPushConstantsSize;
	/* llvmpipe ends every loop of a shader invocation past 65535 iterations
	 * in all (shaders/track.glsl resumes the streamlines it cut). */
	l->loop_limited = props.properties.apiVersion >= VK_API_VERSION_1_2 &&
		driver.driverID == VK_DRIVER_ID_MESA_LLVMPIPE;

	ctx->size_control = props.properties.apiVersion >= VK_API_VERSION_1_3 &&
		(size_ctl.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
		size_ctl.minSubgroupSize <= sg.subgroupSize && sg.subgroupSize <= size_ctl.maxSubgroupSize;
	return 0;
}

static bool device_has_extension(VkPhysicalDevice phys, const char *name)
{
	uint32_t n = 0;
	VkExtensionProperties *ext;
	bool found = false;

	if (vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL) != VK_SUCCESS || n == 0)
		return false;
	ext = calloc(n, sizeof(*ext));
	if (ext && vkEnumerateDeviceExtensionProperties(phys, NULL, &n, ext) == VK_SUCCESS)
		for (uint32_t i = 0; i < n && !found; i++)
			found = strcmp(ext[i].extensionName, name) == 0;
	free(ext);
	return found;
}

/* Pipeline statistics cost the driver a little at each compile, so they are
 * asked for only when the log would show them. */
static bool wants_pipeline_statistics(VkPhysicalDevice phys)
{
	return log_get_level() >= LOG_LEVEL_DEBUG &&
	       device_has_extension(phys, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
}

/* The alignment and entry point of host memory imports, with
 * VK_EXT_external_memory_host enabled (none where the driver lacks the
 * entry point). */
static void enable_host_import(struct gpu_ctx *ctx)
{
	VkPhysicalDeviceExternalMemoryHostPropertiesEXT host = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT,
	};
	VkPhysicalDeviceProperties2 props = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
		.pNext = &host,
	};

	vkGetPhysicalDeviceProperties2(ctx->physical, &props);
	ctx->host_pointer_properties = (PFN_vkGetMemoryHostPointerPropertiesEXT)
		vkGetDeviceProcAddr(ctx->device, "vkGetMemoryHostPointerPropertiesEXT");
	if (ctx->host_pointer_properties)
		ctx->host_import_alignment = host.minImportedHostPointerAlignment;
}

static int create_device(struct gpu_ctx *ctx, struct errbuf *err)
{
	float priority = 1.0f;
	VkDeviceQueueCreateInfo queue = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
		.queueFamilyIndex = ctx->queue_family,
		.queueCount = 1,
		.pQueuePriorities = &priority,
	};
	VkPhysicalDeviceVulkan13Features f13 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
	};
	VkPhysicalDeviceVulkan12Features f12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
		.pNext = ctx->size_control ? &f13 : NULL,
	};
	VkPhysicalDeviceFeatures2 have = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
		.pNext = &f12,
	};
	VkPhysicalDeviceVulkan13Features want13 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
	};
	/* Volumes larger than one binding are read through device addresses
	 * (gpu_buffer_address), which only maxMemoryAllocationSize bounds. */
	VkPhysicalDeviceVulkan12Features want12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
		.bufferDeviceAddress = VK_TRUE,
	};
	VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR want_statistics = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
		.pipelineExecutableInfo = VK_TRUE,
	};
	const char *extensions[2];
	/* Optional: several devices read one host copy of a streamed ODF. */
	bool host_import = device_has_extension(ctx->physical,
						VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
	VkPhysicalDeviceFeatures want10 = { 0 };
	VkDeviceCreateInfo info = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.pNext = &want12,
		.queueCreateInfoCount = 1,
		.pQueueCreateInfos = &queue,
		.pEnabledFeatures = &want10,
	};

	vkGetPhysicalDeviceFeatures2(ctx->physical, &have);
	/* Optional: lavapipe's kernels read the ODF in 64-bit words (pmf.glsl). */
	want10.shaderInt64 = have.features.shaderInt64;
	ctx->limits.shader_int64 = want10.shaderInt64;
	/* Optional: the ODF's transpose checks symmetry as fit.c does, in double. */
	want10.shaderFloat64 = have.features.shaderFloat64;
	ctx->limits.shader_float64 = want10.shaderFloat64;
	if (!f12.bufferDeviceAddress)
		return device_err(err, -ENOTSUP, "the device lacks bufferDeviceAddress "
				  "(Vulkan 1.2), which tractd needs to read large volumes");
	if (ctx->size_control && f13.subgroupSizeControl && f13.computeFullSubgroups) {
		want13.subgroupSizeControl = VK_TRUE;
		want13.computeFullSubgroups = VK_TRUE;
		want12.pNext = &want13;
	} else {
		ctx->size_control = false;
	}
	ctx->pipeline_statistics = wants_pipeline_statistics(ctx->physical);
	if (ctx->pipeline_statistics) {
		want_statistics.pNext = &want12;
		info.pNext = &want_statistics;
		extensions[info.enabledExtensionCount++] =
			VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
	}
	if (host_import)
		extensions[info.enabledExtensionCount++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
	info.ppEnabledExtensionNames = extensions;
	GPU_TRY(err, vkCreateDevice(ctx->physical, &info, NULL, &ctx->device));
	vkGetDeviceQueue(ctx->device, ctx->queue_family, 0, &ctx->queue);
	if (host_import)
		enable_host_import(ctx);
	return 0;
}

static int create_command_objects(struct gpu_ctx *ctx, struct errbuf *err)
{
	VkCommandPoolCreateInfo pool = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
		.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
		.queueFamilyIndex = ctx->queue_family,
	};
	VkCommandBufferAllocateInfo alloc = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
		.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
		.commandBufferCount = 1,
	};
	VkFenceCreateInfo fence = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
	VkDescriptorPoolSize sizes = {
		.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		.descriptorCount = DESCRIPTOR_SETS_PER_BATCH * MAX_BINDINGS,
	};
	VkDescriptorPoolCreateInfo dpool = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
		.maxSets = DESCRIPTOR_SETS_PER_BATCH,
		.poolSizeCount = 1,
		.pPoolSizes = &sizes,
	};

	GPU_TRY(err, vkCreateCommandPool(ctx->device, &pool, NULL, &ctx->command_pool));
	alloc.commandPool = ctx->command_pool;
	for (unsigned i = 0; i < BATCH_FRAMES; i++) {
		struct batch_frame *f = &ctx->frames[i];
		GPU_TRY(err, vkAllocateCommandBuffers(ctx->device, &alloc, &f->cmd));
		GPU_TRY(err, vkCreateFence(ctx->device, &fence, NULL, &f->fence));
		GPU_TRY(err, vkCreateDescriptorPool(ctx->device, &dpool, NULL,
						    &f->descriptor_pool));
	}
	return 0;
}

/* The batches' timestamps, where the queue keeps them (timestamp_bits > 0). */
static int create_timestamps(struct gpu_ctx *ctx, uint32_t timestamp_bits, struct errbuf *err)
{
	VkQueryPoolCreateInfo info = {
		.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
		.queryType = VK_QUERY_TYPE_TIMESTAMP,
		.queryCount = 2 * BATCH_FRAMES,
	};
	VkPhysicalDeviceProperties props;

	ctx->batch_device_seconds = -1.0;
	if (timestamp_bits == 0)
		return 0;
	vkGetPhysicalDeviceProperties(ctx->physical, &props);
	ctx->timestamp_ns = props.limits.timestampPeriod;
	ctx->timestamp_mask = timestamp_bits >= 64 ? UINT64_MAX : (1ull << timestamp_bits) - 1;
	GPU_TRY(err, vkCreateQueryPool(ctx->device, &info, NULL, &ctx->timestamps));
	return 0;
}

/* ---- pipeline cache on disk -------------------------------------------- */

static void *read_whole_file(const char *path, size_t *ret_size)
{
	FILE *f = fopen(path, "rb");
	void *data = NULL;
	long size;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
		data = malloc((size_t)size);
		if (data && fread(data, 1, (size_t)size, f) != (size_t)size) {
			free(data);
			data = NULL;
		}
		*ret_size = (size_t)size;
	}
	fclose(f);
	return data;
}

static int create_pipeline_cache(struct gpu_ctx *ctx, const char *path, struct errbuf *err)
{
	size_t size = 0;
	void *data = path ? read_whole_file(path, &size) : NULL;
	VkPipelineCacheCreateInfo info = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
		.initialDataSize = data ? size : 0,
		.pInitialData = data,
	};
	VkResult r = vkCreatePipelineCache(ctx->device, &info, NULL, &ctx->pipeline_cache);

	if (r != VK_SUCCESS && data) {
		/* A cache from another driver or version: start empty. */
		log_debug("pipeline cache %s rejected (%s), starting empty", path, vk_result_name(r));
		info.initialDataSize = 0;
		info.pInitialData = NULL;
		r = vkCreatePipelineCache(ctx->device, &info, NULL, &ctx->pipeline_cache);
	}
	free(data);
	if (r != VK_SUCCESS)
		return device_err(err, vk_errno(r), "vkCreatePipelineCache: %s",
				  vk_result_name(r));
	if (path) {
		ctx->pipeline_cache_path = strdup(path);
		if (!ctx->pipeline_cache_path)
			return device_err(err, -ENOMEM, "out of memory");
	}
	return 0;
}

static int mkdir_parents(const char *path)
{
	char *copy = strdup(path);
	int r = 0;

	if (!copy)
		return -ENOMEM;
	for (char *p = copy + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(copy, 0755) < 0 && errno != EEXIST)
			r = -errno;
		*p = '/';
	}
	free(copy);
	return r;
}

/* A temporary name beside path, for a file renamed over it once written:
 * one per process and context, since two devices of one process (closed
 * at once, or compiling the same shader) may write the same path. */
static void temporary_name(char *tmp, size_t len, const char *path, const struct gpu_ctx *ctx)
{
	snprintf(tmp, len, "%s.%d.%lx.tmp", path, (int)getpid(), (unsigned long)(uintptr_t)ctx);
}

/* Best effort: a cache that cannot be written only costs compile time later. */
static void save_pipeline_cache(struct gpu_ctx *ctx)
{
	size_t size = 0;
	void *data = NULL;
	char tmp[4200];
	bool written;
	FILE *f;

	if (!ctx->pipeline_cache_path || !ctx->pipeline_cache)
		return;
	if (vkGetPipelineCacheData(ctx->device, ctx->pipeline_cache, &size, NULL) != VK_SUCCESS || !size)
		return;
	data = malloc(size);
	if (!data || vkGetPipelineCacheData(ctx->device, ctx->pipeline_cache, &size, data) != VK_SUCCESS)
		goto out;
	if (mkdir_parents(ctx->pipeline_cache_path) < 0)
		goto out;
	temporary_name(tmp, sizeof(tmp), ctx->pipeline_cache_path, ctx);
	f = fopen(tmp, "wb");
	if (!f)
		goto out;
	written = fwrite(data, 1, size, f) == size;
	if (fclose(f) != 0 || !written || rename(tmp, ctx->pipeline_cache_path) < 0) {
		log_debug("cannot save pipeline cache %s", ctx->pipeline_cache_path);
		unlink(tmp);
	}
out:
	free(data);
}

/* ---- open / close ------------------------------------------------------- */

int gpu_open(const struct gpu_options *opts, struct gpu_ctx **ret, struct errbuf *err)
{
	struct gpu_ctx *ctx = calloc(1, sizeof(*ctx));
	uint32_t timestamp_bits = 0;
	double t0 = timing_now(), t_instance, t_device, t_cache;
	int r;

	if (!ctx)
		return device_err(err, -ENOMEM, "out of memory");
	ctx->host_import_rank = -1;
	r = create_instance(&ctx->instance, err);
	if (r < 0)
		goto fail;
	t_instance = timing_now();
	r = pick_device(ctx->instance, opts->device_index, opts->device_uuid, &ctx->physical, err);
	if (r < 0)
		goto fail;
	r = read_limits(ctx, opts, err);
	if (r < 0)
		goto fail;
	r = find_compute_queue(ctx->physical, &ctx->queue_family, &timestamp_bits, err);
	if (r < 0)
		goto fail;
	r = create_device(ctx, err);
	if (r < 0)
		goto fail;
	r = create_command_objects(ctx, err);
	if (r == 0)
		r = create_timestamps(ctx, timestamp_bits, err);
	if (r < 0)
		goto fail;
	t_device = timing_now();
	r = create_pipeline_cache(ctx, opts->pipeline_cache_path, err);
	if (r < 0)
		goto fail;
	t_cache = timing_now();
	ctx->compiler = shaderc_compiler_initialize();
	if (!ctx->compiler) {
		r = device_err(err, -ENOMEM, "cannot initialise the shader compiler");
		goto fail;
	}
	arm_fault(ctx);
	ctx->staged_uploads = staged_uploads();
	log_debug("device: %s (%s), subgroup %u, binding %llu B, allocation %llu B; opened in "
		  "%.3f s: instance %.3f s, device %.3f s, pipeline cache %.3f s",
		  ctx->limits.device_name, ctx->limits.device_type, ctx->limits.subgroup_size,
		  (unsigned long long)ctx->limits.max_binding_bytes,
		  (unsigned long long)ctx->limits.max_alloc_bytes, timing_now() - t0,
		  t_instance - t0, t_device - t_instance, t_cache - t_device);
	*ret = ctx;
	return 0;
fail:
	gpu_close(ctx);
	return r;
}

static void destroy_pipeline(VkDevice dev, struct gpu_pipeline *p)
{
	if (p->pipeline)
		vkDestroyPipeline(dev, p->pipeline, NULL);
	if (p->layout)
		vkDestroyPipelineLayout(dev, p->layout, NULL);
	if (p->set_layout)
		vkDestroyDescriptorSetLayout(dev, p->set_layout, NULL);
	free(p->key);
	free(p);
}

static void destroy_buffer(VkDevice dev, struct gpu_buffer *b)
{
	if (b->host)
		vkUnmapMemory(dev, b->memory);
	if (b->buffer)
		vkDestroyBuffer(dev, b->buffer, NULL);
	if (b->memory)
		vkFreeMemory(dev, b->memory, NULL);
	free(b);
}

/* The spares go back to the driver: at the end, and when an allocation
 * failed for want of memory they may hold. */
void gpu_drop_spares(struct gpu_ctx *ctx)
{
	while (ctx->spares) {
		struct gpu_buffer *next = ctx->spares->next;
		destroy_buffer(ctx->device, ctx->spares);
		ctx->spares = next;
	}
	ctx->spare_bytes = 0;
}

void gpu_close(struct gpu_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->device) {
		double t0 = timing_now(), t_buffers, t_device;

		vkDeviceWaitIdle(ctx->device);
		save_pipeline_cache(ctx);
		while (ctx->pipelines) {
			struct gpu_pipeline *next = ctx->pipelines->next;
			destroy_pipeline(ctx->device, ctx->pipelines);
			ctx->pipelines = next;
		}
		t_buffers = timing_now();
		while (ctx->buffers) {
			struct gpu_buffer *next = ctx->buffers->next;
			destroy_buffer(ctx->device, ctx->buffers);
			ctx->buffers = next;
		}
		gpu_drop_spares(ctx);
		t_device = timing_now();
		if (ctx->pipeline_cache)
			vkDestroyPipelineCache(ctx->device, ctx->pipeline_cache, NULL);
		for (unsigned i = 0; i < BATCH_FRAMES; i++) {
			if (ctx->frames[i].descriptor_pool)
				vkDestroyDescriptorPool(ctx->device, ctx->frames[i].descriptor_pool,
							NULL);
			if (ctx->frames[i].fence)
				vkDestroyFence(ctx->device, ctx->frames[i].fence, NULL);
		}
		if (ctx->timestamps)
			vkDestroyQueryPool(ctx->device, ctx->timestamps, NULL);
		for (int i = 0; i < UPLOAD_SLOTS; i++)
			if (ctx->slots[i].fence)
				vkDestroyFence(ctx->device, ctx->slots[i].fence, NULL);
		if (ctx->command_pool)
			vkDestroyCommandPool(ctx->device, ctx->command_pool, NULL);
		vkDestroyDevice(ctx->device, NULL);
		log_debug("%s closed in %.3f s: its buffers freed in %.3f s, the device destroyed "
			  "in %.3f s", ctx->limits.device_name, timing_now() - t0,
			  t_device - t_buffers, timing_now() - t_device);
	}
	if (ctx->instance)
		vkDestroyInstance(ctx->instance, NULL);
	if (ctx->compiler)
		shaderc_compiler_release(ctx->compiler);
	free(ctx->pipeline_cache_path);
	free(ctx);
}

const struct gpu_limits *gpu_get_limits(const struct gpu_ctx *ctx)
{
	return &ctx->limits;
}

uint64_t gpu_memory_bytes(const struct gpu_limits *lim)
{
	return lower_limit(lim->device_local_bytes, lim->memory_limit);
}

/* The test hook TRACTD_GPU_KERNELS=1: CPU devices get the GPU's kernel
 * variants, so that tests compare the two on lavapipe. */
static bool gpu_kernels_hook(void)
{
	const char *value = getenv("TRACTD_GPU_KERNELS");

	return value && strcmp(value, "1") == 0;
}

bool gpu_cpu_kernels(const struct gpu_limits *lim)
{
	return strcmp(lim->device_type, "cpu") == 0 && !gpu_kernels_hook();
}

double gpu_compile_seconds(const struct gpu_ctx *ctx)
{
	return ctx->compile_seconds;
}

int gpu_list_devices(FILE *out, struct errbuf *err)
{
	VkInstance instance;
	VkPhysicalDevice *devs;
	uint32_t n;
	int r = create_instance(&instance, err);

	if (r < 0)
		return r;
	r = enumerate_devices(instance, &devs, &n, err);
	if (r < 0) {
		vkDestroyInstance(instance, NULL);
		return r;
	}
	for (uint32_t i = 0; i < n; i++) {
		VkPhysicalDeviceSubgroupProperties sg = {
			.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
		};
		VkPhysicalDeviceProperties2 p = {
			.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
			.pNext = &sg,
		};
		VkPhysicalDeviceMemoryProperties mem;
		char uuid[GPU_UUID_LEN + 1];
		vkGetPhysicalDeviceProperties2(devs[i], &p);
		vkGetPhysicalDeviceMemoryProperties(devs[i], &mem);
		device_uuid(devs[i], uuid);
		fprintf(out, "%u\t%s\t%s\t%s\tVulkan %u.%u\tsubgroup %u\tbinding %u MiB\t"
			"memory %llu MiB\n",
			i, device_type_name(p.properties.deviceType), p.properties.deviceName, uuid,
			VK_API_VERSION_MAJOR(p.properties.apiVersion),
			VK_API_VERSION_MINOR(p.properties.apiVersion), sg.subgroupSize,
			p.properties.limits.maxStorageBufferRange >> 20,
			(unsigned long long)(largest_device_heap(&mem) >> 20));
	}
	free(devs);
	vkDestroyInstance(instance, NULL);
	return 0;
}

/* ---- buffers ------------------------------------------------------------ */

static int find_memory_type(const struct gpu_ctx *ctx, uint32_t allowed,
			    const VkMemoryPropertyFlags *preferences, int n_pref)
{
	const VkPhysicalDeviceMemoryProperties *m = &ctx->memory_props;

	for (int p = 0; p < n_pref; p++)
		for (uint32_t i = 0; i < m->memoryTypeCount; i++)
			if ((allowed & (1u << i)) &&
			    (m->memoryTypes[i].propertyFlags & preferences[p]) == preferences[p])
				return (int)i;
	return -1;
}

static int memory_type_for(const struct gpu_ctx *ctx, uint32_t allowed, enum gpu_memory kind)
{
	static const VkMemoryPropertyFlags device_pref[] = {
		VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
		0,
	};
	static const VkMemoryPropertyFlags readback_pref[] = {
		VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
			VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
		VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
	};

	if (kind == GPU_MEMORY_DEVICE)
		return find_memory_type(ctx, allowed, device_pref, 2);
	return find_memory_type(ctx, allowed, readback_pref, 2);
}

static void track_buffer(struct gpu_ctx *ctx, struct gpu_buffer *b)
{
	b->next = ctx->buffers;
	ctx->buffers = b;
	ctx->buffer_bytes += b->bytes;
	if (ctx->buffer_bytes + ctx->spare_bytes > ctx->peak_buffer_bytes)
		ctx->peak_buffer_bytes = ctx->buffer_bytes + ctx->spare_bytes;
}

static void untrack_buffer(struct gpu_ctx *ctx, struct gpu_buffer *buf)
{
	for (struct gpu_buffer **p = &ctx->buffers; *p; p = &(*p)->next) {
		if (*p == buf) {
			*p = buf->next;
			break;
		}
	}
	ctx->buffer_bytes -= buf->bytes;
}

/* A spare of exactly size bytes and kind memory, taken off the spares; or NULL. */
static struct gpu_buffer *take_spare(struct gpu_ctx *ctx, uint64_t size, enum gpu_memory memory)
{
	for (struct gpu_buffer **p = &ctx->spares; *p; p = &(*p)->next) {
		struct gpu_buffer *b = *p;
		if (b->size == size && b->kind == memory) {
			*p = b->next;
			ctx->spare_bytes -= b->bytes;
			ctx->reused_bytes += b->bytes;
			return b;
		}
	}
	return NULL;
}

/* Whether an allocation of bytes would take what the buffers and spares
 * hold past the memory limit. */
static bool over_memory_limit(const struct gpu_ctx *ctx, uint64_t bytes)
{
	uint64_t limit = ctx->limits.memory_limit, held = ctx->buffer_bytes + ctx->spare_bytes;

	return limit && (held > limit || bytes > limit - held);
}

static int memory_limit_err(const struct gpu_ctx *ctx, uint64_t bytes, struct errbuf *err)
{
	return errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -ENOSPC, GPU_MEMORY_LIMIT_FIELD,
			       "a buffer of %.1f MiB would take tractd's GPU memory to %.1f MiB, "
			       "over the limit of %.1f MiB (gpu_memory_limit; tractd run "
			       "--gpu-memory): raise the limit, or lower the job's budget "
			       "(gpu_memory_budget) or the warm volumes' (volume_cache_bytes)",
			       (double)bytes / (1 << 20),
			       (double)(ctx->buffer_bytes + ctx->spare_bytes + bytes) / (1 << 20),
			       (double)ctx->limits.memory_limit / (1 << 20));
}

static int allocate_buffer(struct gpu_ctx *ctx, uint64_t size, enum gpu_memory memory,
			   struct gpu_buffer **ret, struct errbuf *err)
{
	VkBufferCreateInfo info = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.size = size,
		.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
			 VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
		.sharingMode = VK_SHARING_MODE_EXCLUSIVE,
	};
	VkMemoryRequirements req;
	VkMemoryAllocateFlagsInfo alloc_flags = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
		.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT,
	};
	VkMemoryAllocateInfo alloc = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
				       .pNext = &alloc_flags };
	struct gpu_buffer *b;
	VkMemoryPropertyFlags flags;
	VkResult vr;
	int type;

	if (size == 0 || size > ctx->limits.max_alloc_bytes)
		return device_err(err, -EINVAL, "buffer of %llu bytes is outside (0, %llu], "
				  "the device's allocation limit", (unsigned long long)size,
				  (unsigned long long)ctx->limits.max_alloc_bytes);
	b = calloc(1, sizeof(*b));
	if (!b)
		return device_err(err, -ENOMEM, "out of memory");
	b->size = size;
	b->kind = memory;
	vr = vkCreateBuffer(ctx->device, &info, NULL, &b->buffer);
	if (vr != VK_SUCCESS)
		goto vk_fail;
	vkGetBufferMemoryRequirements(ctx->device, b->buffer, &req);
	if (over_memory_limit(ctx, req.size)) {
		destroy_buffer(ctx->device, b);
		return memory_limit_err(ctx, req.size, err);
	}
	b->bytes = req.size;
	type = memory_type_for(ctx, req.memoryTypeBits, memory);
	if (type < 0) {
		destroy_buffer(ctx->device, b);
		return device_err(err, -ENOTSUP, "no suitable memory type for a %s buffer",
				  memory == GPU_MEMORY_DEVICE ? "device" : "readback");
	}
	alloc.allocationSize = req.size;
	alloc.memoryTypeIndex = (uint32_t)type;
	vr = vkAllocateMemory(ctx->device, &alloc, NULL, &b->memory);
	if (vr != VK_SUCCESS)
		goto vk_fail;
	vr = vkBindBufferMemory(ctx->device, b->buffer, b->memory, 0);
	if (vr != VK_SUCCESS)
		goto vk_fail;
	flags = ctx->memory_props.memoryTypes[type].propertyFlags;
	if (flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
		vr = vkMapMemory(ctx->device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->host);
		if (vr != VK_SUCCESS)
			goto vk_fail;
		b->coherent = flags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
	}
	*ret = b;
	return 0;
vk_fail:
	destroy_buffer(ctx->device, b);
	return device_err(err, vk_errno(vr), "cannot allocate a buffer of %llu bytes: %s",
			  (unsigned long long)size, vk_result_name(vr));
}

int gpu_buffer_new(struct gpu_ctx *ctx, uint64_t size, enum gpu_memory memory,
		   struct gpu_buffer **ret, struct errbuf *err)
{
	struct gpu_buffer *b = take_spare(ctx, size, memory);
	int r = 0;

	if (!b) {
		r = allocate_buffer(ctx, size, memory, &b, err);
		if (r < 0 && ctx->spares) {
			gpu_drop_spares(ctx);
			r = allocate_buffer(ctx, size, memory, &b, err);
		}
	}
	if (r == 0) {
		track_buffer(ctx, b);
		*ret = b;
	}
	return r;
}

/* The test hook TRACTD_FAULT_HOST_IMPORT=N: the imports of host memory of
 * every device after the process's first N to import fail, as a driver's
 * may (NVIDIA's refuses a file's mapping), so that tests here cover the
 * fallback. Devices, not imports: devices import at once, on threads of
 * their own, and which of their imports come first is the scheduler's. */
static atomic_long host_importers;

static bool host_import_refused(struct gpu_ctx *ctx)
{
	const char *value = getenv("TRACTD_FAULT_HOST_IMPORT");
	char *end;
	unsigned long n;

	if (!value || !value[0])
		return false;
	errno = 0;
	n = strtoul(value, &end, 10);
	if (errno || *end)
		return false;
	if (ctx->host_import_rank < 0)
		ctx->host_import_rank = atomic_fetch_add(&host_importers, 1);
	return (unsigned long)ctx->host_import_rank >= n;
}

uint64_t gpu_host_import_alignment(const struct gpu_ctx *ctx)
{
	return ctx->host_import_alignment;
}

/* The first of bits' memory types that the host sees coherently (the
 * device reads what the host wrote before the submit, with no flush), or -1. */
static int host_coherent_type(const struct gpu_ctx *ctx, uint32_t bits)
{
	VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
				     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

	for (uint32_t i = 0; i < ctx->memory_props.memoryTypeCount; i++)
		if ((bits & (1u << i)) &&
		    (ctx->memory_props.memoryTypes[i].propertyFlags & want) == want)
			return (int)i;
	return -1;
}

/* b's memory: the host range at host imported, bound to b's buffer. */
static VkResult import_host_memory(struct gpu_ctx *ctx, struct gpu_buffer *b, void *host,
				   bool *no_type)
{
	VkImportMemoryHostPointerInfoEXT import = {
		.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
		.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
		.pHostPointer = host,
	};
	VkMemoryAllocateInfo alloc = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
		.pNext = &import,
		.allocationSize = b->size,
	};
	VkMemoryHostPointerPropertiesEXT pointer = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT,
	};
	VkMemoryRequirements req;
	VkResult vr = ctx->host_pointer_properties(ctx->device,
						   VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
						   host, &pointer);
	int type;

	if (vr != VK_SUCCESS)
		return vr;
	vkGetBufferMemoryRequirements(ctx->device, b->buffer, &req);
	type = host_coherent_type(ctx, req.memoryTypeBits & pointer.memoryTypeBits);
	*no_type = type < 0 || req.size > b->size;
	if (*no_type)
		return VK_ERROR_FEATURE_NOT_PRESENT;
	alloc.memoryTypeIndex = (uint32_t)type;
	vr = vkAllocateMemory(ctx->device, &alloc, NULL, &b->memory);
	return vr == VK_SUCCESS ? vkBindBufferMemory(ctx->device, b->buffer, b->memory, 0) : vr;
}

int gpu_buffer_import_host(struct gpu_ctx *ctx, void *host, uint64_t size,
			   struct gpu_buffer **ret, struct errbuf *err)
{
	VkExternalMemoryBufferCreateInfo external = {
		.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
		.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
	};
	VkBufferCreateInfo info = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.pNext = &external,
		.size = size,
		.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
		.sharingMode = VK_SHARING_MODE_EXCLUSIVE,
	};
	uint64_t align = ctx->host_import_alignment;
	struct gpu_buffer *b;
	bool no_type = false;
	VkResult vr;

	if (!align)
		return device_err(err, -ENOTSUP, "the device cannot import host memory "
				  "(no VK_EXT_external_memory_host)");
	if (size == 0 || size % align || (uintptr_t)host % align)
		return device_err(err, -EINVAL, "host memory of %llu bytes is not aligned to the "
				  "device's %llu bytes", (unsigned long long)size,
				  (unsigned long long)align);
	if (host_import_refused(ctx))
		return device_err(err, -ENOTSUP, "the import of host memory was refused "
				  "(TRACTD_FAULT_HOST_IMPORT)");
	b = calloc(1, sizeof(*b));
	if (!b)
		return device_err(err, -ENOMEM, "out of memory");
	/* Host memory: b->bytes stays 0, as nothing of the device's is held,
	 * and b->host NULL, as the caller owns the mapping. */
	b->size = size;
	b->kind = GPU_MEMORY_READBACK;
	vr = vkCreateBuffer(ctx->device, &info, NULL, &b->buffer);
	if (vr == VK_SUCCESS)
		vr = import_host_memory(ctx, b, host, &no_type);
	if (vr != VK_SUCCESS) {
		destroy_buffer(ctx->device, b);
		if (no_type)
			return device_err(err, -ENOTSUP, "no host-coherent memory type can import "
					  "host memory for a buffer");
		return device_err(err, vk_errno(vr), "cannot import %llu bytes of host memory: %s",
				  (unsigned long long)size, vk_result_name(vr));
	}
	track_buffer(ctx, b);
	*ret = b;
	return 0;
}

void gpu_buffer_free(struct gpu_ctx *ctx, struct gpu_buffer *buf)
{
	if (!buf)
		return;
	untrack_buffer(ctx, buf);
	destroy_buffer(ctx->device, buf);
}

/* Destroys the spares recycled longest ago (the list's tail) until bytes
 * more fit within limit. */
static void drop_oldest_spares(struct gpu_ctx *ctx, uint64_t bytes, uint64_t limit)
{
	while (ctx->spares && ctx->spare_bytes + bytes > limit) {
		struct gpu_buffer **last = &ctx->spares;

		while ((*last)->next)
			last = &(*last)->next;
		ctx->spare_bytes -= (*last)->bytes;
		destroy_buffer(ctx->device, *last);
		*last = NULL;
	}
}

void gpu_buffer_recycle(struct gpu_ctx *ctx, struct gpu_buffer *buf)
{
	/* A share of the memory tractd may use, as the budget and the cache. */
	uint64_t limit = gpu_memory_bytes(&ctx->limits) / GPU_SPARE_DIVISOR;

	if (!buf)
		return;
	untrack_buffer(ctx, buf);
	if (buf->bytes > limit) {
		destroy_buffer(ctx->device, buf);
		return;
	}
	/* The latest job's shape is the likeliest to come again. */
	drop_oldest_spares(ctx, buf->bytes, limit);
	buf->next = ctx->spares;
	ctx->spares = buf;
	ctx->spare_bytes += buf->bytes;
}

uint64_t gpu_spare_bytes(const struct gpu_ctx *ctx)
{
	return ctx->spare_bytes;
}

uint64_t gpu_reused_bytes(const struct gpu_ctx *ctx)
{
	return ctx->reused_bytes;
}

uint64_t gpu_peak_buffer_bytes(const struct gpu_ctx *ctx)
{
	return ctx->peak_buffer_bytes;
}

uint64_t gpu_buffer_bytes(const struct gpu_ctx *ctx)
{
	return ctx->buffer_bytes;
}

void *gpu_buffer_host(const struct gpu_buffer *buf)
{
	return buf->host;
}

uint64_t gpu_buffer_address(struct gpu_ctx *ctx, const struct gpu_buffer *buf)
{
	VkBufferDeviceAddressInfo info = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO,
		.buffer = buf->buffer,
	};

	return vkGetBufferDeviceAddress(ctx->device, &info);
}

static int sync_host_range(struct gpu_ctx *ctx, struct gpu_buffer *b, bool to_device,
			   struct errbuf *err)
{
	VkMappedMemoryRange range = {
		.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE,
		.memory = b->memory,
		.offset = 0,
		.size = VK_WHOLE_SIZE,
	};

	if (b->coherent)
		return 0;
	if (to_device)
		GPU_TRY(err, vkFlushMappedMemoryRanges(ctx->device, 1, &range));
	else
		GPU_TRY(err, vkInvalidateMappedMemoryRanges(ctx->device, 1, &range));
	return 0;
}

static int check_range(const struct gpu_buffer *b, uint64_t offset, uint64_t size, struct errbuf *err)
{
	if (offset > b->size || size > b->size - offset)
		return device_err(err, -EINVAL, "transfer of %llu bytes at %llu exceeds "
				  "a buffer of %llu bytes", (unsigned long long)size,
				  (unsigned long long)offset, (unsigned long long)b->size);
	return 0;
}

static int batch_copy(struct gpu_ctx *ctx, struct gpu_buffer *src, struct gpu_buffer *dst,
		      const struct gpu_copy_region *regions, uint32_t n_regions, struct errbuf *err);

static int staged_copy(struct gpu_ctx *ctx, struct gpu_buffer *src, uint64_t src_off,
		       struct gpu_buffer *dst, uint64_t dst_off, uint64_t size, struct errbuf *err)
{
	struct gpu_copy_region region = { src_off, dst_off, size };
	int r = gpu_batch_begin(ctx, err);

	if (r < 0)
		return r;
	r = batch_copy(ctx, src, dst, &region, 1, err);
	if (r < 0)
		return r;
	return gpu_batch_submit_wait(ctx, err);
}

/* A failed submit or wait. Out of memory leaves the device usable; anything
 * else (DEVICE_LOST, a driver reset) leaves the context's state unknown. */
static int gpu_failed(struct gpu_ctx *ctx, VkResult vr, struct errbuf *err)
{
	if (vr != VK_ERROR_OUT_OF_HOST_MEMORY && vr != VK_ERROR_OUT_OF_DEVICE_MEMORY)
		ctx->lost = true;
	return device_err(err, vk_errno(vr), "the GPU work failed: %s",
			  vk_result_name(vr));
}

/* A staging buffer's size: STAGING_BYTES, less where one allocation may not
 * hold that, or where it would take more than 1/STAGING_SHARE of the memory
 * limit (the pair of them slows uploads, not tracking); whole 64-byte units,
 * so that every fill starts at a multiple of 64. */
#define STAGING_SHARE 64

static uint64_t staging_size(const struct gpu_ctx *ctx)
{
	uint64_t size = STAGING_BYTES < ctx->limits.max_alloc_bytes ? STAGING_BYTES
								    : ctx->limits.max_alloc_bytes;

	if (ctx->limits.memory_limit && ctx->limits.memory_limit / STAGING_SHARE < size)
		size = ctx->limits.memory_limit / STAGING_SHARE;
	size &= ~63ull;
	return size ? size : 64;
}

uint64_t gpu_memory_free(const struct gpu_ctx *ctx)
{
	uint64_t limit = ctx->limits.memory_limit;
	uint64_t held = ctx->buffer_bytes + (ctx->slots[0].staging ? 0
					     : UPLOAD_SLOTS * staging_size(ctx));

	if (!limit)
		return UINT64_MAX;
	return held < limit ? limit - held : 0;
}

/* The staging slots, their command buffers and fences; made once per context. */
static int ensure_slots(struct gpu_ctx *ctx, struct errbuf *err)
{
	uint64_t size = staging_size(ctx);
	VkCommandBufferAllocateInfo alloc = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
		.commandPool = ctx->command_pool,
		.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
		.commandBufferCount = 1,
	};
	VkFenceCreateInfo fence = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };

	for (int i = 0; i < UPLOAD_SLOTS; i++) {
		struct upload_slot *slot = &ctx->slots[i];
		if (slot->staging)
			continue;
		if (!slot->cmd)
			GPU_TRY(err, vkAllocateCommandBuffers(ctx->device, &alloc, &slot->cmd));
		if (!slot->fence)
			GPU_TRY(err, vkCreateFence(ctx->device, &fence, NULL, &slot->fence));
		int r = gpu_buffer_new(ctx, size, GPU_MEMORY_READBACK, &slot->staging, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Submits cmd with fence (the injected fault and a lost device included). */
static int submit(struct gpu_ctx *ctx, VkCommandBuffer cmd, VkFence fence, struct errbuf *err)
{
	VkSubmitInfo info = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.commandBufferCount = 1,
		.pCommandBuffers = &cmd,
	};
	VkResult vr;

	if (ctx->lost)
		return device_err(err, -ENODEV, "the device was lost by an earlier "
				  "submit");
	GPU_TRY(err, vkResetFences(ctx->device, 1, &fence));
	if (ctx->fault_armed && ctx->submits >= ctx->fault_after) {
		ctx->lost = true;
		return device_err(err, -ENODEV, "the GPU work failed: VK_ERROR_DEVICE_LOST "
				  "(injected by TRACTD_FAULT_DEVICE_LOST_AFTER)");
	}
	ctx->submits++;
	vr = vkQueueSubmit(ctx->queue, 1, &info, fence);
	return vr == VK_SUCCESS ? 0 : gpu_failed(ctx, vr, err);
}

static int wait_fence(struct gpu_ctx *ctx, VkFence fence, struct errbuf *err)
{
	VkResult vr = vkWaitForFences(ctx->device, 1, &fence, VK_TRUE, UINT64_MAX);

	return vr == VK_SUCCESS ? 0 : gpu_failed(ctx, vr, err);
}

/* Waits for a slot's copy, if one is under way. */
static int settle_slot(struct gpu_ctx *ctx, struct upload_slot *slot, struct errbuf *err)
{
	if (!slot->pending)
		return 0;
	slot->pending = false;
	return wait_fence(ctx, slot->fence, err);
}

/* Waits for every slot; the first error is kept. */
static int settle_slots(struct gpu_ctx *ctx, int r, struct errbuf *err)
{
	for (int i = 0; i < UPLOAD_SLOTS; i++) {
		int rs = settle_slot(ctx, &ctx->slots[i], r < 0 ? NULL : err);
		r = r < 0 ? r : rs;
	}
	return r;
}

/* Records and submits the copies of a slot's bytes into dst, made visible
 * to whatever the queue runs next. */
static int submit_slot_copy(struct gpu_ctx *ctx, struct upload_slot *slot, struct gpu_buffer *dst,
			    const VkBufferCopy *copies, uint32_t n, struct errbuf *err)
{
	VkCommandBufferBeginInfo begin = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
	};
	VkMemoryBarrier done = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
				 VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
	};
	int r;

	GPU_TRY(err, vkResetCommandBuffer(slot->cmd, 0));
	GPU_TRY(err, vkBeginCommandBuffer(slot->cmd, &begin));
	vkCmdCopyBuffer(slot->cmd, slot->staging->buffer, dst->buffer, n, copies);
	vkCmdPipelineBarrier(slot->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
			     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
			     0, 1, &done, 0, NULL, 0, NULL);
	GPU_TRY(err, vkEndCommandBuffer(slot->cmd));
	r = submit(ctx, slot->cmd, slot->fence, err);
	slot->pending = r == 0;
	return r;
}

/* The regions' pieces that fall in bytes [from, to) of an upload's stream. */
struct region_walk {
	const struct gpu_copy_region *regions;
	size_t n, next;
	uint64_t from, to;
};

/* The next piece: stream bytes [*at, *at + *size) go to dst offset *dst;
 * false after the last. */
static bool next_piece(struct region_walk *w, uint64_t *at, uint64_t *dst, uint64_t *size)
{
	for (; w->next < w->n && w->regions[w->next].src_offset < w->to; w->next++) {
		const struct gpu_copy_region *g = &w->regions[w->next];
		uint64_t lo = g->src_offset > w->from ? g->src_offset : w->from;
		uint64_t hi = g->src_offset + g->size < w->to ? g->src_offset + g->size : w->to;
		if (hi > lo) {
			*at = lo;
			*dst = g->dst_offset + (lo - g->src_offset);
			*size = hi - lo;
			w->next++;
			return true;
		}
	}
	return false;
}

/* One thread's part of a fill: stream bytes [offset, offset + size),
 * written where the regions put them in base. */
struct fill_part {
	gpu_fill_fn *fill;
	void *userdata;
	char *base;
	const struct gpu_copy_region *regions;
	size_t n_regions;
	uint64_t offset, size;
};

static void fill_part(void *arg)
{
	struct fill_part *p = arg;
	struct region_walk w = { p->regions, p->n_regions, 0, p->offset, p->offset + p->size };
	uint64_t at, dst, size;

	while (next_piece(&w, &at, &dst, &size))
		p->fill(p->base + dst, at, size, p->userdata);
}

/* Calls fill for stream bytes [offset, offset + size) into base where the
 * regions put them, split over threads at multiples of 64 bytes. */
static void fill_parallel(char *base, const struct gpu_copy_region *regions, size_t n_regions,
			  uint64_t offset, uint64_t size, gpu_fill_fn *fill, void *userdata)
{
	struct fill_part parts[PARALLEL_MAX_PARTS];
	size_t n = parallel_parts(size, FILL_MIN_BYTES);
	uint64_t share = (size / n + 63) & ~63ull, at = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t len = size - at < share ? size - at : share;
		parts[i] = (struct fill_part){ .fill = fill, .userdata = userdata, .base = base,
					       .regions = regions, .n_regions = n_regions,
					       .offset = offset + at, .size = len };
		at += len;
	}
	parallel_run(fill_part, parts, sizeof(parts[0]), n);
}

/* The bytes the regions take from the stream; each must fit dst. */
static int check_regions(const struct gpu_buffer *dst, const struct gpu_copy_region *regions,
			 size_t n, uint64_t *total, struct errbuf *err)
{
	*total = 0;
	for (size_t i = 0; i < n; i++) {
		int r = check_range(dst, regions[i].dst_offset, regions[i].size, err);
		if (r < 0)
			return r;
		if (regions[i].src_offset != *total)
			return device_err(err, -EINVAL, "upload region %zu starts at byte %llu of "
					  "its stream, not %llu", i,
					  (unsigned long long)regions[i].src_offset,
					  (unsigned long long)*total);
		*total += regions[i].size;
	}
	return 0;
}

/* Staging slot piece [done, done + size) of the stream as copies into dst:
 * the pieces of the regions, walked on from *walk. */
static uint32_t slot_copies(struct region_walk *walk, uint64_t done, uint64_t size,
			    VkBufferCopy *copies)
{
	uint64_t at, dst, len;
	uint32_t m = 0;

	walk->from = done;
	walk->to = done + size;
	if (walk->next > 0)
		walk->next--;   /* the last region may go on in this piece */
	while (next_piece(walk, &at, &dst, &len))
		copies[m++] = (VkBufferCopy){ at - done, dst, len };
	return m;
}

int gpu_upload_regions(struct gpu_ctx *ctx, struct gpu_buffer *dst,
		       const struct gpu_copy_region *regions, size_t n_regions, gpu_fill_fn *fill,
		       void *userdata, struct errbuf *err)
{
	struct region_walk walk = { regions, n_regions, 0, 0, 0 };
	VkBufferCopy *copies;
	uint64_t total;
	int r = check_regions(dst, regions, n_regions, &total, err);

	if (r < 0 || total == 0)
		return r;
	if (dst->host && !ctx->staged_uploads) {
		fill_parallel(dst->host, regions, n_regions, 0, total, fill, userdata);
		return sync_host_range(ctx, dst, true, err);
	}
	copies = malloc(n_regions * sizeof(*copies));
	if (!copies)
		return device_err(err, -ENOMEM, "out of memory");
	r = ensure_slots(ctx, err);
	for (uint64_t done = 0, k = 0; r == 0 && done < total; k++) {
		struct upload_slot *slot = &ctx->slots[k % UPLOAD_SLOTS];
		uint64_t n = total - done < slot->staging->size ? total - done : slot->staging->size;
		struct gpu_copy_region whole = { done, 0, n };
		r = settle_slot(ctx, slot, err);
		if (r < 0)
			break;
		fill_parallel(slot->staging->host, &whole, 1, done, n, fill, userdata);
		r = sync_host_range(ctx, slot->staging, true, err);
		if (r == 0)
			r = submit_slot_copy(ctx, slot, dst, copies,
					     slot_copies(&walk, done, n, copies), err);
		done += n;
	}
	free(copies);
	return settle_slots(ctx, r, err);
}

int gpu_upload_fill(struct gpu_ctx *ctx, struct gpu_buffer *dst, uint64_t offset, uint64_t size,
		    gpu_fill_fn *fill, void *userdata, struct errbuf *err)
{
	struct gpu_copy_region whole = { 0, offset, size };

	return gpu_upload_regions(ctx, dst, &whole, 1, fill, userdata, err);
}

static void fill_copy(void *dst, uint64_t offset, uint64_t size, void *src)
{
	memcpy(dst, (const char *)src + offset, size);
}

int gpu_upload(struct gpu_ctx *ctx, struct gpu_buffer *dst, uint64_t offset,
	       const void *src, uint64_t size, struct errbuf *err)
{
	return gpu_upload_fill(ctx, dst, offset, size, fill_copy, (void *)src, err);
}

int gpu_upload_new(struct gpu_ctx *ctx, const void *src, uint64_t size,
			  struct gpu_buffer **ret, struct errbuf *err)
{
	int r = gpu_buffer_new(ctx, size ? size : 4, GPU_MEMORY_DEVICE, ret, err);

	if (r < 0)
		return r;
	return gpu_upload(ctx, *ret, 0, src, size, err);
}

int gpu_download(struct gpu_ctx *ctx, struct gpu_buffer *src, uint64_t offset,
		 void *dst, uint64_t size, struct errbuf *err)
{
	char *bytes = dst;
	struct gpu_buffer *staging;
	int r = check_range(src, offset, size, err);

	if (r < 0)
		return r;
	if (src->host) {
		r = sync_host_range(ctx, src, false, err);
		if (r < 0)
			return r;
		memcpy(dst, (const char *)src->host + offset, size);
		return 0;
	}
	r = ensure_slots(ctx, err);
	if (r < 0)
		return r;
	staging = ctx->slots[0].staging;
	for (uint64_t done = 0; done < size;) {
		uint64_t n = size - done < staging->size ? size - done : staging->size;
		r = staged_copy(ctx, src, offset + done, staging, 0, n, err);
		if (r < 0)
			return r;
		r = sync_host_range(ctx, staging, false, err);
		if (r < 0)
			return r;
		memcpy(bytes + done, staging->host, n);
		done += n;
	}
	return 0;
}

/* ---- shader compilation and pipelines ----------------------------------- */

static const struct shader_source *find_shader(const char *name)
{
	for (const struct shader_source *s = shader_sources; s->name; s++)
		if (strcmp(s->name, name) == 0)
			return s;
	return NULL;
}

static shaderc_include_result *resolve_include(void *user, const char *requested, int type,
					       const char *requesting, size_t depth)
{
	const struct shader_source *s = find_shader(requested);
	shaderc_include_result *res = calloc(1, sizeof(*res));

	(void)user;
	(void)type;
	(void)requesting;
	(void)depth;
	if (!res)
		return NULL;
	if (s) {
		res->source_name = s->name;
		res->source_name_length = strlen(s->name);
		res->content = s->text;
		res->content_length = strlen(s->text);
	} else {
		/* shaderc reports an empty source name as a failed include. */
		res->content = "include not found among the embedded shaders";
		res->content_length = strlen(res->content);
	}
	return res;
}

static void release_include(void *user, shaderc_include_result *res)
{
	(void)user;
	free(res);
}

static int add_define(shaderc_compile_options_t opts, const char *def, struct errbuf *err)
{
	const char *eq = strchr(def, '=');

	if (!eq)
		return device_err(err, -EINVAL, "bad shader define '%s'", def);
	shaderc_compile_options_add_macro_definition(opts, def, (size_t)(eq - def), eq + 1,
						     strlen(eq + 1));
	return 0;
}

static int compile_glsl(struct gpu_ctx *ctx, const struct shader_source *src,
			const char *const *defines, shaderc_compilation_result_t *ret,
			struct errbuf *err)
{
	shaderc_compile_options_t opts = shaderc_compile_options_initialize();
	shaderc_compilation_result_t res;
	int r = 0;

	if (!opts)
		return device_err(err, -ENOMEM, "out of memory");
	shaderc_compile_options_set_target_env(opts, shaderc_target_env_vulkan,
					       shaderc_env_version_vulkan_1_2);
	shaderc_compile_options_set_optimization_level(opts, shaderc_optimization_level_performance);
	shaderc_compile_options_set_include_callbacks(opts, resolve_include, release_include, NULL);
	for (const char *const *d = defines; d && *d && r == 0; d++)
		r = add_define(opts, *d, err);
	if (r < 0) {
		shaderc_compile_options_release(opts);
		return r;
	}
	res = shaderc_compile_into_spv(ctx->compiler, src->text, strlen(src->text),
				       shaderc_compute_shader, src->name, "main", opts);
	shaderc_compile_options_release(opts);
	if (!res)
		return device_err(err, -ENOMEM, "shader compiler failed");
	if (shaderc_result_get_compilation_status(res) != shaderc_compilation_status_success) {
		r = device_err(err, -EINVAL, "compiling %s: %s", src->name,
			       shaderc_result_get_error_message(res));
		shaderc_result_release(res);
		return r;
	}
	*ret = res;
	return 0;
}

/* ---- SPIR-V cache on disk ------------------------------------------------- */

/* shaderc's output is kept beside the pipeline cache, in DIR/spirv/HASH.spv,
 * so that a later process skips the GLSL compiler: a VkPipelineCache keeps
 * only the driver's part, and lavapipe's keeps nothing (Mesa keeps
 * llvmpipe's machine code in its own cache, under XDG_CACHE_HOME). A file
 * holds the pipeline key, a NUL and the SPIR-V; its name hashes the key with
 * every embedded source and the compile options, so that an edited shader
 * or a changed option misses. */
#define SPIRV_CACHE_TAG "tractd-spirv-1 vulkan1.2 performance"

/* Where the SPIR-V of key is cached; false without a pipeline cache. */
static bool spirv_cache_path(const struct gpu_ctx *ctx, const char *key, char *path, size_t len)
{
	const char *dir_end = ctx->pipeline_cache_path ? strrchr(ctx->pipeline_cache_path, '/') : NULL;
	uint64_t h = fnv1a64(FNV1A64_INIT, SPIRV_CACHE_TAG, sizeof(SPIRV_CACHE_TAG));
	int n;

	if (!ctx->pipeline_cache_path)
		return false;
	for (const struct shader_source *src = shader_sources; src->name; src++) {
		h = fnv1a64(h, src->name, strlen(src->name) + 1);
		h = fnv1a64(h, src->text, strlen(src->text) + 1);
	}
	h = fnv1a64(h, key, strlen(key) + 1);
	if (dir_end)
		n = snprintf(path, len, "%.*s/spirv/%016llx.spv",
			     (int)(dir_end - ctx->pipeline_cache_path), ctx->pipeline_cache_path,
			     (unsigned long long)h);
	else
		n = snprintf(path, len, "spirv/%016llx.spv", (unsigned long long)h);
	return n > 0 && (size_t)n < len;
}

/* The cached SPIR-V of key (malloc'd words, *bytes of them), or NULL. */
static uint32_t *spirv_cache_load(const struct gpu_ctx *ctx, const char *key, size_t *bytes)
{
	size_t key_bytes = strlen(key) + 1, size = 0;
	char path[4200], *data;
	uint32_t *code = NULL;

	if (!spirv_cache_path(ctx, key, path, sizeof(path)))
		return NULL;
	data = read_whole_file(path, &size);
	if (data && size > key_bytes && (size - key_bytes) % 4 == 0 &&
	    memcmp(data, key, key_bytes) == 0) {
		code = malloc(size - key_bytes);
		if (code) {
			memcpy(code, data + key_bytes, size - key_bytes);
			*bytes = size - key_bytes;
		}
	}
	free(data);
	return code;
}

/* Best effort, as the pipeline cache: a file not written costs a compile later. */
static void spirv_cache_save(const struct gpu_ctx *ctx, const char *key, const uint32_t *code,
			     size_t bytes)
{
	char path[4200], tmp[4300];
	bool written;
	FILE *f;

	if (!spirv_cache_path(ctx, key, path, sizeof(path)) || mkdir_parents(path) < 0)
		return;
	temporary_name(tmp, sizeof(tmp), path, ctx);
	f = fopen(tmp, "wb");
	if (!f)
		return;
	written = fwrite(key, 1, strlen(key) + 1, f) == strlen(key) + 1 &&
		  fwrite(code, 1, bytes, f) == bytes;
	if (fclose(f) != 0 || !written || rename(tmp, path) < 0) {
		log_debug("cannot save %s", path);
		unlink(tmp);
	}
}

/* The SPIR-V of src with defines (malloc'd): from the disk cache, else
 * compiled and saved there. */
static int get_spirv(struct gpu_ctx *ctx, const struct shader_source *src,
		     const char *const *defines, const char *key, uint32_t **ret, size_t *bytes,
		     struct errbuf *err)
{
	shaderc_compilation_result_t spv = NULL;
	int r;

	*ret = spirv_cache_load(ctx, key, bytes);
	if (*ret) {
		log_debug("%s: SPIR-V from the cache, no GLSL compile", key);
		return 0;
	}
	r = compile_glsl(ctx, src, defines, &spv, err);
	if (r < 0)
		return r;
	*bytes = shaderc_result_get_length(spv);
	*ret = malloc(*bytes);
	if (*ret) {
		memcpy(*ret, shaderc_result_get_bytes(spv), *bytes);
		spirv_cache_save(ctx, key, *ret, *bytes);
	}
	shaderc_result_release(spv);
	return *ret ? 0 : device_err(err, -ENOMEM, "out of memory");
}

static char *pipeline_key(const char *shader, const char *const *defines)
{
	size_t len = strlen(shader) + 1;
	char *key, *end;

	for (const char *const *d = defines; d && *d; d++)
		len += strlen(*d) + 1;
	key = malloc(len);
	if (!key)
		return NULL;
	end = stpcpy(key, shader);
	for (const char *const *d = defines; d && *d; d++)
		end = stpcpy(stpcpy(end, " "), *d);
	return key;
}

static int create_layouts(struct gpu_ctx *ctx, struct gpu_pipeline *p, struct errbuf *err)
{
	VkDescriptorSetLayoutBinding bindings[MAX_BINDINGS];
	VkDescriptorSetLayoutCreateInfo set_info = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.bindingCount = p->n_buffers,
		.pBindings = bindings,
	};
	VkPushConstantRange push = {
		.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
		.offset = 0,
		.size = p->push_bytes,
	};
	VkPipelineLayoutCreateInfo layout_info = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
		.setLayoutCount = 1,
		.pSetLayouts = &p->set_layout,
		.pushConstantRangeCount = p->push_bytes ? 1 : 0,
		.pPushConstantRanges = &push,
	};

	for (uint32_t i = 0; i < p->n_buffers; i++)
		bindings[i] = (VkDescriptorSetLayoutBinding){
			.binding = i,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.descriptorCount = 1,
			.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
		};
	GPU_TRY(err, vkCreateDescriptorSetLayout(ctx->device, &set_info, NULL, &p->set_layout));
	GPU_TRY(err, vkCreatePipelineLayout(ctx->device, &layout_info, NULL, &p->layout));
	return 0;
}

static int create_compute_pipeline(struct gpu_ctx *ctx, struct gpu_pipeline *p,
				   const uint32_t *code, size_t bytes, struct errbuf *err)
{
	VkShaderModuleCreateInfo mod_info = {
		.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
		.codeSize = bytes,
		.pCode = code,
	};
	VkPipelineShaderStageRequiredSubgroupSizeCreateInfo required = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
		.requiredSubgroupSize = ctx->limits.subgroup_size,
	};
	VkComputePipelineCreateInfo info = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {
			.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			/* The kernels give each subgroup one seed or streamline and size
			 * their per-lane loops by the subgroup size they were built for. */
			.pNext = ctx->size_control ? &required : NULL,
			.flags = ctx->size_control ?
				VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT : 0,
			.stage = VK_SHADER_STAGE_COMPUTE_BIT,
			.pName = "main",
		},
		.flags = ctx->pipeline_statistics ? VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR : 0,
		.layout = p->layout,
	};
	VkShaderModule module;
	VkResult vr;

	GPU_TRY(err, vkCreateShaderModule(ctx->device, &mod_info, NULL, &module));
	info.stage.module = module;
	vr = vkCreateComputePipelines(ctx->device, ctx->pipeline_cache, 1, &info, NULL, &p->pipeline);
	vkDestroyShaderModule(ctx->device, module, NULL);
	if (vr != VK_SUCCESS)
		return device_err(err, vk_errno(vr), "vkCreateComputePipelines: %s",
				  vk_result_name(vr));
	return 0;
}

/* One statistic as "name value" into out. */
static void format_statistic(const VkPipelineExecutableStatisticKHR *st, char *out, size_t len)
{
	switch (st->format) {
	case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
		snprintf(out, len, "%s %s", st->name, st->value.b32 ? "yes" : "no");
		break;
	case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
		snprintf(out, len, "%s %lld", st->name, (long long)st->value.i64);
		break;
	case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
		snprintf(out, len, "%s %llu", st->name, (unsigned long long)st->value.u64);
		break;
	default:
		snprintf(out, len, "%s %g", st->name, st->value.f64);
		break;
	}
}

/* Logs what the driver says of each of the pipeline's executables (its
 * registers, shared memory, spills...): the figures occupancy follows from,
 * where no profiler sees Vulkan kernels. Best effort: only a log. */
static void log_pipeline_statistics(struct gpu_ctx *ctx, const struct gpu_pipeline *p)
{
	PFN_vkGetPipelineExecutableStatisticsKHR get_statistics = (PFN_vkGetPipelineExecutableStatisticsKHR)
		vkGetDeviceProcAddr(ctx->device, "vkGetPipelineExecutableStatisticsKHR");
	VkPipelineExecutableInfoKHR exe = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR,
		.pipeline = p->pipeline,
	};
	VkPipelineExecutableStatisticKHR st[32];
	uint32_t n = 32;
	char line[1024], item[160];
	size_t used = 0;

	if (!get_statistics)
		return;
	for (uint32_t i = 0; i < n; i++)
		st[i] = (VkPipelineExecutableStatisticKHR){
			.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR,
		};
	if (get_statistics(ctx->device, &exe, &n, st) < 0)
		return;
	line[0] = '\0';
	for (uint32_t i = 0; i < n && used < sizeof(line); i++) {
		format_statistic(&st[i], item, sizeof(item));
		used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%s", i ? ", " : "", item);
	}
	log_debug("pipeline %s: %s", p->key, line);
}

static int build_pipeline(struct gpu_ctx *ctx, const struct shader_source *src,
			  const char *const *defines, struct gpu_pipeline *p, struct errbuf *err)
{
	uint32_t *code = NULL;
	size_t bytes = 0;
	int r = get_spirv(ctx, src, defines, p->key, &code, &bytes, err);

	if (r < 0)
		return r;
	r = create_layouts(ctx, p, err);
	if (r == 0)
		r = create_compute_pipeline(ctx, p, code, bytes, err);
	free(code);
	return r;
}

bool gpu_pipeline_cached(const struct gpu_ctx *ctx, const char *shader, const char *const *defines)
{
	char *key = pipeline_key(shader, defines);
	bool cached = false;
	uint32_t *code;
	size_t bytes;

	if (!key)
		return false;
	for (const struct gpu_pipeline *p = ctx->pipelines; p && !cached; p = p->next)
		cached = strcmp(p->key, key) == 0;
	if (!cached && (code = spirv_cache_load(ctx, key, &bytes))) {
		cached = true;
		free(code);
	}
	free(key);
	return cached;
}

int gpu_pipeline_get(struct gpu_ctx *ctx, const char *shader, const char *const *defines,
		     uint32_t n_buffers, uint32_t push_bytes, struct gpu_pipeline **ret,
		     struct errbuf *err)
{
	const struct shader_source *src = find_shader(shader);
	struct gpu_pipeline *p;
	char *key;
	double t0;
	int r;

	if (!src)
		return device_err(err, -ENOENT, "no embedded shader named %s", shader);
	if (n_buffers > MAX_BINDINGS || push_bytes > ctx->limits.max_push_constant_bytes)
		return device_err(err, -EINVAL, "pipeline %s needs %u bindings and %u "
				  "push-constant bytes; the limit is %d and %u", shader, n_buffers,
				  push_bytes, MAX_BINDINGS, ctx->limits.max_push_constant_bytes);
	key = pipeline_key(shader, defines);
	if (!key)
		return device_err(err, -ENOMEM, "out of memory");
	for (p = ctx->pipelines; p; p = p->next) {
		if (strcmp(p->key, key) == 0) {
			free(key);
			*ret = p;
			return 0;
		}
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		free(key);
		return device_err(err, -ENOMEM, "out of memory");
	}
	p->key = key;
	p->n_buffers = n_buffers;
	p->push_bytes = push_bytes;
	t0 = timing_now();
	r = build_pipeline(ctx, src, defines, p, err);
	ctx->compile_seconds += timing_now() - t0;
	if (r < 0) {
		destroy_pipeline(ctx->device, p);
		return r;
	}
	log_debug("compiled %s in %.3f s", key, timing_now() - t0);
	if (ctx->pipeline_statistics)
		log_pipeline_statistics(ctx, p);
	p->next = ctx->pipelines;
	ctx->pipelines = p;
	*ret = p;
	return 0;
}

/* ---- batches ------------------------------------------------------------ */

/* The finished frame's time on the device (-1 where it keeps no clock, or
 * the read fails: the timing is only for statistics). */
static double read_batch_time(const struct gpu_ctx *ctx, unsigned frame)
{
	uint64_t ticks[2];

	if (ctx->timestamps &&
	    vkGetQueryPoolResults(ctx->device, ctx->timestamps, 2 * frame, 2, sizeof(ticks), ticks,
				  sizeof(ticks[0]), VK_QUERY_RESULT_64_BIT) == VK_SUCCESS)
		return (double)((ticks[1] - ticks[0]) & ctx->timestamp_mask) * ctx->timestamp_ns *
		       1e-9;
	return -1.0;
}

/* Waits for a frame's batch, if it is still pending. */
static int settle_frame(struct gpu_ctx *ctx, unsigned frame, struct errbuf *err)
{
	struct batch_frame *f = &ctx->frames[frame];
	int r;

	if (!f->pending)
		return 0;
	f->pending = false;
	r = wait_fence(ctx, f->fence, err);
	f->device_seconds = r == 0 ? read_batch_time(ctx, frame) : -1.0;
	return r;
}

/* A frame to record into: one whose batch is done, else the oldest
 * pending one, once it is. */
static int free_frame(struct gpu_ctx *ctx, unsigned *ret, struct errbuf *err)
{
	unsigned oldest = 0;

	for (unsigned i = 0; i < BATCH_FRAMES; i++) {
		if (!ctx->frames[i].pending) {
			*ret = i;
			return 0;
		}
		if (ctx->frames[i].serial < ctx->frames[oldest].serial)
			oldest = i;
	}
	*ret = oldest;
	return settle_frame(ctx, oldest, err);
}

int gpu_batch_begin(struct gpu_ctx *ctx, struct errbuf *err)
{
	VkCommandBufferBeginInfo begin = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
	};
	struct batch_frame *f;
	unsigned frame;
	int r;

	if (ctx->lost)
		return device_err(err, -ENODEV, "the device was lost by an earlier "
				  "submit");
	r = free_frame(ctx, &frame, err);
	if (r < 0)
		return r;
	f = &ctx->frames[frame];
	/* Resetting also discards a batch abandoned after an error. */
	GPU_TRY(err, vkResetDescriptorPool(ctx->device, f->descriptor_pool, 0));
	GPU_TRY(err, vkResetCommandBuffer(f->cmd, 0));
	GPU_TRY(err, vkBeginCommandBuffer(f->cmd, &begin));
	if (ctx->timestamps) {
		vkCmdResetQueryPool(f->cmd, ctx->timestamps, 2 * frame, 2);
		vkCmdWriteTimestamp(f->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, ctx->timestamps,
				    2 * frame);
	}
	f->serial = ++ctx->batch_serial;
	ctx->frame = frame;
	ctx->cmd = f->cmd;
	ctx->recording = true;
	return 0;
}

/* Orders every command after the previous one (compute and transfer alike),
 * a batch's first after the batches before it. */
static void barrier_before_next(struct gpu_ctx *ctx)
{
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
				 VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
	};
	const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT |
					    VK_PIPELINE_STAGE_TRANSFER_BIT;

	vkCmdPipelineBarrier(ctx->cmd, stages, stages, 0, 1, &mb, 0, NULL, 0, NULL);
}

static int bind_buffers(struct gpu_ctx *ctx, struct gpu_pipeline *pipe,
			struct gpu_buffer *const *buffers, VkDescriptorSet *ret, struct errbuf *err)
{
	VkDescriptorSetAllocateInfo alloc = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
		.descriptorPool = ctx->frames[ctx->frame].descriptor_pool,
		.descriptorSetCount = 1,
		.pSetLayouts = &pipe->set_layout,
	};
	VkDescriptorBufferInfo infos[MAX_BINDINGS];
	VkWriteDescriptorSet writes[MAX_BINDINGS];
	VkDescriptorSet set;

	GPU_TRY(err, vkAllocateDescriptorSets(ctx->device, &alloc, &set));
	for (uint32_t i = 0; i < pipe->n_buffers; i++) {
		if (buffers[i]->size > ctx->limits.max_binding_bytes)
			return device_err(err, -EINVAL, "binding %u is %llu bytes, over the "
					  "device's storage-buffer range of %llu", i,
					  (unsigned long long)buffers[i]->size,
					  (unsigned long long)ctx->limits.max_binding_bytes);
		infos[i] = (VkDescriptorBufferInfo){ buffers[i]->buffer, 0, buffers[i]->size };
		writes[i] = (VkWriteDescriptorSet){
			.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
			.dstSet = set,
			.dstBinding = i,
			.descriptorCount = 1,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.pBufferInfo = &infos[i],
		};
	}
	vkUpdateDescriptorSets(ctx->device, pipe->n_buffers, writes, 0, NULL);
	*ret = set;
	return 0;
}

int gpu_batch_dispatch(struct gpu_ctx *ctx, struct gpu_pipeline *pipe,
		       struct gpu_buffer *const *buffers, const void *push, uint32_t groups,
		       struct errbuf *err)
{
	VkDescriptorSet set;
	int r;

	if (!ctx->recording)
		return device_err(err, -EINVAL, "dispatch outside a batch");
	if (groups == 0)
		return 0;
	if (groups > ctx->limits.max_workgroup_count_x)
		return device_err(err, -EINVAL, "%u workgroups exceed the device limit %u",
				  groups, ctx->limits.max_workgroup_count_x);
	r = bind_buffers(ctx, pipe, buffers, &set, err);
	if (r < 0)
		return r;
	barrier_before_next(ctx);
	vkCmdBindPipeline(ctx->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe->pipeline);
	vkCmdBindDescriptorSets(ctx->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe->layout, 0, 1, &set,
				0, NULL);
	if (pipe->push_bytes)
		vkCmdPushConstants(ctx->cmd, pipe->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
				   pipe->push_bytes, push);
	vkCmdDispatch(ctx->cmd, groups, 1, 1);
	return 0;
}

static int batch_copy(struct gpu_ctx *ctx, struct gpu_buffer *src, struct gpu_buffer *dst,
		      const struct gpu_copy_region *regions, uint32_t n_regions, struct errbuf *err)
{
	VkBufferCopy *copies;

	if (!ctx->recording)
		return device_err(err, -EINVAL, "copy outside a batch");
	if (n_regions == 0)
		return 0;
	copies = malloc(sizeof(*copies) * n_regions);
	if (!copies)
		return device_err(err, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n_regions; i++) {
		int r = check_range(src, regions[i].src_offset, regions[i].size, err);
		if (r == 0)
			r = check_range(dst, regions[i].dst_offset, regions[i].size, err);
		if (r < 0) {
			free(copies);
			return r;
		}
		copies[i] = (VkBufferCopy){ regions[i].src_offset, regions[i].dst_offset,
					    regions[i].size };
	}
	barrier_before_next(ctx);
	vkCmdCopyBuffer(ctx->cmd, src->buffer, dst->buffer, n_regions, copies);
	free(copies);
	return 0;
}

int gpu_batch_copy(struct gpu_ctx *ctx, struct gpu_buffer *src, struct gpu_buffer *dst,
		   const struct gpu_copy_region *region, struct errbuf *err)
{
	return batch_copy(ctx, src, dst, region, 1, err);
}

int gpu_batch_submit(struct gpu_ctx *ctx, struct gpu_ticket *ticket, struct errbuf *err)
{
	VkMemoryBarrier to_host = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_HOST_READ_BIT,
	};
	struct batch_frame *f = &ctx->frames[ctx->frame];
	int r;

	if (!ctx->recording)
		return device_err(err, -EINVAL, "no batch to submit");
	ctx->recording = false;
	vkCmdPipelineBarrier(f->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT |
			     VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
			     &to_host, 0, NULL, 0, NULL);
	if (ctx->timestamps)
		vkCmdWriteTimestamp(f->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, ctx->timestamps,
				    2 * ctx->frame + 1);
	GPU_TRY(err, vkEndCommandBuffer(f->cmd));
	r = submit(ctx, f->cmd, f->fence, err);
	f->pending = r == 0;
	*ticket = (struct gpu_ticket){ f->serial, ctx->frame };
	return r;
}

int gpu_batch_wait(struct gpu_ctx *ctx, struct gpu_ticket ticket, struct errbuf *err)
{
	int r;

	/* Its frame was waited for and taken again (by a third batch begun
	 * meanwhile): done, its time no longer known. */
	if (ticket.frame >= BATCH_FRAMES || ctx->frames[ticket.frame].serial != ticket.serial) {
		ctx->batch_device_seconds = -1.0;
		return 0;
	}
	r = settle_frame(ctx, ticket.frame, err);
	ctx->batch_device_seconds = ctx->frames[ticket.frame].device_seconds;
	return r;
}

int gpu_batch_submit_wait(struct gpu_ctx *ctx, struct errbuf *err)
{
	struct gpu_ticket ticket;
	int r = gpu_batch_submit(ctx, &ticket, err);

	return r == 0 ? gpu_batch_wait(ctx, ticket, err) : r;
}

void gpu_batch_settle(struct gpu_ctx *ctx)
{
	for (unsigned i = 0; i < BATCH_FRAMES; i++)
		settle_frame(ctx, i, NULL);
}

double gpu_batch_device_seconds(const struct gpu_ctx *ctx)
{
	return ctx->batch_device_seconds;
}

bool gpu_lost(const struct gpu_ctx *ctx)
{
	return ctx->lost;
}
