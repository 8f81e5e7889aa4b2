/* SPDX-License-Identifier: MIT */
#include "engine/paged_volume.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/timing.h"
#include "formats/half.h"

/* The table: uvec4 (voxels per page, channels, 0, 0), then uvec2 addresses. */
#define TABLE_HEADER_BYTES 16u

static uint64_t value_bytes(enum paged_type type)
{
	return type == PAGED_FLOAT16 ? 2 : 4;
}

/* Bytes of a page of n voxels: float16 pairs fill 32-bit words. */
static uint64_t page_bytes(enum paged_type type, uint32_t channels, uint64_t n)
{
	uint64_t values = n * channels;

	if (type == PAGED_FLOAT16)
		return 4 * ((values + 1) / 2);
	return 4 * values;
}

static uint64_t table_bytes(uint32_t n_pages)
{
	return TABLE_HEADER_BYTES + 8ull * n_pages;
}

int paged_plan(uint64_t voxels, uint32_t channels, enum paged_type type, uint64_t max_page_bytes,
	       struct paged_layout *ret, struct errbuf *err)
{
	/* The kernels index a page's values with 32-bit integers. */
	uint64_t limit = max_page_bytes < (1ull << 32) ? max_page_bytes : (1ull << 32) - 4;
	uint64_t per_page = limit / (value_bytes(type) * channels);
	uint64_t n_pages;

	memset(ret, 0, sizeof(*ret));
	/* float16 pages end on a whole word, which may add two bytes. */
	while (per_page > 0 && page_bytes(type, channels, per_page) > limit)
		per_page--;
	if (per_page == 0 || voxels == 0)
		return errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -E2BIG, "device",
				       "one voxel of %u values does not fit the "
				       "device's %llu-byte allocations", channels,
				       (unsigned long long)max_page_bytes);
	if (per_page > voxels)
		per_page = voxels;
	n_pages = (voxels + per_page - 1) / per_page;
	if (per_page > UINT32_MAX || n_pages > UINT32_MAX / 8)
		return errbuf_set_kind(err, ERR_KIND_TOO_LARGE, -E2BIG, "device",
				       "a volume of %llu voxels needs %llu pages "
				       "of %llu voxels, more than the kernels address",
				       (unsigned long long)voxels, (unsigned long long)n_pages,
				       (unsigned long long)per_page);
	ret->voxels = voxels;
	ret->channels = channels;
	ret->type = type;
	ret->voxels_per_page = per_page;
	ret->n_pages = (uint32_t)n_pages;
	return 0;
}

uint64_t paged_bytes(const struct paged_layout *l)
{
	uint64_t full = l->voxels / l->voxels_per_page;
	uint64_t rest = l->voxels - full * l->voxels_per_page;

	return full * page_bytes(l->type, l->channels, l->voxels_per_page) +
	       (rest ? page_bytes(l->type, l->channels, rest) : 0) +
	       table_bytes(l->n_pages);
}

/* A page's bytes from its float32 values: as they are, or as float16
 * (byte 2i is value i, and the pad value of an odd count is 0); from a
 * source of more values a voxel, each voxel's first `kept`, the rest of its
 * channels 0. */
struct page_values {
	const float *src;         /* the piece's first voxel's values */
	uint64_t n;               /* the piece's values in the page */
	enum paged_type type;
	uint32_t channels;        /* a voxel's in the page */
	uint32_t src_channels;    /* a voxel's in src */
	uint32_t kept;
};

static void fill_values(void *dst, uint64_t offset, uint64_t size, void *userdata)
{
	const struct page_values *pv = userdata;
	uint64_t first = offset / value_bytes(pv->type), n = size / value_bytes(pv->type);
	uint64_t voxel = first / pv->channels;
	uint32_t c = (uint32_t)(first % pv->channels);

	if (pv->type == PAGED_FLOAT32 && pv->src_channels == pv->channels &&
	    pv->kept == pv->channels) {
		memcpy(dst, (const char *)pv->src + offset, size);
		return;
	}
	for (uint64_t i = 0; i < n; i++) {
		float v = first + i < pv->n && c < pv->kept ? pv->src[voxel * pv->src_channels + c]
							     : 0.0f;
		if (pv->type == PAGED_FLOAT32)
			((float *)dst)[i] = v;
		else
			((uint16_t *)dst)[i] = half_from_float(v);
		if (++c == pv->channels) {
			c = 0;
			voxel++;
		}
	}
}

/* Voxels of page k. */
static uint64_t page_voxels(const struct paged_layout *l, uint32_t k)
{
	uint64_t first = (uint64_t)k * l->voxels_per_page;

	return l->voxels - first < l->voxels_per_page ? l->voxels - first : l->voxels_per_page;
}

/* A float16 piece must start on a word of its own, and only the last
 * piece of a page may end inside one (its pad). */
static int check_half_words(const struct paged_layout *l, uint32_t k, uint64_t at, uint64_t n,
			    struct errbuf *err)
{
	if (l->type != PAGED_FLOAT16)
		return 0;
	if (at * l->channels % 2)
		return errbuf_set_kind(err, ERR_KIND_DEVICE, -EINVAL, "device", "a float16 run "
				       "starts within a 32-bit word of its page");
	if (n * l->channels % 2 && at + n < page_voxels(l, k))
		return errbuf_set_kind(err, ERR_KIND_DEVICE, -EINVAL, "device", "a float16 run "
				       "ends within a 32-bit word of its page");
	return 0;
}

/* A run's pieces that fall in one page, in the order of the run's values:
 * regions with their stream offsets from the page's first piece. */
struct page_pieces {
	uint32_t page;
	uint64_t first_voxel;     /* of the run, where the page's stream starts */
	uint64_t voxels;          /* the run's voxels in the page */
	struct gpu_copy_region *regions;
	size_t n;
	uint64_t stream;          /* bytes so far */
};

static int upload_pieces(struct gpu_ctx *gpu, struct paged_volume *v, const struct paged_runs *runs,
			 const struct paged_run *run, const struct page_pieces *p,
			 struct errbuf *err)
{
	const struct paged_layout *l = &v->layout;
	uint32_t src_channels = runs->src_channels ? runs->src_channels : l->channels;
	struct page_values pv = { run->values + p->first_voxel * src_channels,
				  p->voxels * l->channels, l->type, l->channels, src_channels,
				  runs->kept ? runs->kept : l->channels };

	if (p->n == 0)
		return 0;
	return gpu_upload_regions(gpu, v->pages[p->page], p->regions, p->n, fill_values, &pv, err);
}

/* Voxels [at, at + n) of page k after the page's pieces so far; a piece
 * that goes on from the last one extends it. */
static void add_piece(const struct paged_layout *l, struct page_pieces *p, uint64_t at, uint64_t n)
{
	uint64_t dst = page_bytes(l->type, l->channels, at);
	uint64_t size = page_bytes(l->type, l->channels, n);
	struct gpu_copy_region *last = p->n ? &p->regions[p->n - 1] : NULL;

	if (last && last->dst_offset + last->size == dst)
		last->size += size;
	else
		p->regions[p->n++] = (struct gpu_copy_region){ p->stream, dst, size };
	p->stream += size;
	p->voxels += n;
}

/* Run's voxels of every column into the pages they fall in, one upload per
 * page; regions has room for a piece of every column. */
static int upload_run(struct gpu_ctx *gpu, struct paged_volume *v, const struct paged_runs *runs,
		      const struct paged_run *run, struct gpu_copy_region *regions,
		      struct errbuf *err)
{
	const struct paged_layout *l = &v->layout;
	uint64_t done = 0;
	struct page_pieces p = { .page = UINT32_MAX, .regions = regions };
	int r = 0;

	for (uint64_t c = 0; c < runs->columns && r == 0; c++) {
		uint64_t first = c * runs->column_voxels + run->first_voxel, left = run->voxels;
		while (left > 0 && r == 0) {
			uint32_t k = (uint32_t)(first / l->voxels_per_page);
			uint64_t at = first - (uint64_t)k * l->voxels_per_page;
			uint64_t take = page_voxels(l, k) - at < left ? page_voxels(l, k) - at : left;
			if (k != p.page) {
				r = upload_pieces(gpu, v, runs, run, &p, err);
				p = (struct page_pieces){ .page = k, .first_voxel = done,
							  .regions = regions };
			}
			if (r == 0)
				r = check_half_words(l, k, at, take, err);
			if (r == 0)
				add_piece(l, &p, at, take);
			first += take;
			left -= take;
			done += take;
		}
	}
	return r < 0 ? r : upload_pieces(gpu, v, runs, run, &p, err);
}

/* The runs into the allocated pages, each as it comes; they must cover
 * the columns in order. */
static int upload_runs(struct gpu_ctx *gpu, struct paged_volume *v, void *userdata,
		       struct errbuf *err)
{
	const struct paged_runs *runs = userdata;
	uint64_t next = 0;
	struct gpu_copy_region *regions;
	int r = 0;

	if (runs->columns == 0 || runs->columns * runs->column_voxels != v->layout.voxels)
		return errbuf_set_kind(err, ERR_KIND_DEVICE, -EIO, "device", "%llu columns of %llu "
				       "voxels do not make the volume's %llu voxels",
				       (unsigned long long)runs->columns,
				       (unsigned long long)runs->column_voxels,
				       (unsigned long long)v->layout.voxels);
	regions = calloc(runs->columns, sizeof(*regions));
	if (!regions)
		return errbuf_set_kind(err, ERR_KIND_DEVICE, -ENOMEM, "device", "out of memory");
	for (size_t k = 0; k < runs->n_runs && r == 0; k++) {
		struct paged_run run;
		r = runs->get(runs->userdata, k, &run, err);
		if (r < 0)
			break;
		if (run.first_voxel != next || run.voxels > runs->column_voxels - next)
			r = errbuf_set_kind(err, ERR_KIND_DEVICE, -EIO, "device", "run %zu of the "
					    "volume holds voxels from %llu, not %llu", k,
					    (unsigned long long)run.first_voxel,
					    (unsigned long long)next);
		else
			r = upload_run(gpu, v, runs, &run, regions, err);
		next += run.voxels;
		if (runs->release)
			runs->release(runs->userdata, k);
	}
	free(regions);
	if (r == 0 && next != runs->column_voxels)
		r = errbuf_set_kind(err, ERR_KIND_DEVICE, -EIO, "device", "the runs of the volume "
				    "end at voxel %llu of %llu", (unsigned long long)next,
				    (unsigned long long)runs->column_voxels);
	return r;
}

static int upload_table(struct gpu_ctx *gpu, struct paged_volume *v, struct errbuf *err)
{
	const struct paged_layout *l = &v->layout;
	uint64_t bytes = table_bytes(l->n_pages);
	uint32_t *table = calloc(1, bytes);
	int r;

	if (!table)
		return errbuf_set_kind(err, ERR_KIND_DEVICE, -ENOMEM, "device", "out of memory");
	table[0] = (uint32_t)l->voxels_per_page;
	table[1] = l->channels;
	for (uint32_t k = 0; k < l->n_pages; k++) {
		uint64_t address = gpu_buffer_address(gpu, v->pages[k]);
		memcpy(&table[4 + 2 * k], &address, sizeof(address));
	}
	r = gpu_buffer_new(gpu, bytes, GPU_MEMORY_DEVICE, &v->table, err);
	if (r == 0)
		r = gpu_upload(gpu, v->table, 0, table, bytes, err);
	free(table);
	return r;
}

int paged_upload_with(struct gpu_ctx *gpu, const struct paged_layout *layout,
		      paged_fill_fn *fill, void *userdata, struct paged_volume *ret,
		      struct errbuf *err)
{
	double t0 = timing_now();
	int r = 0;

	memset(ret, 0, sizeof(*ret));
	ret->layout = *layout;
	ret->pages = calloc(layout->n_pages, sizeof(*ret->pages));
	if (!ret->pages)
		return errbuf_set_kind(err, ERR_KIND_DEVICE, -ENOMEM, "device", "out of memory");
	for (uint32_t k = 0; k < layout->n_pages && r == 0; k++)
		r = gpu_buffer_new(gpu, page_bytes(layout->type, layout->channels,
						   page_voxels(layout, k)),
				   GPU_MEMORY_DEVICE, &ret->pages[k], err);
	if (r == 0)
		log_debug("%u page(s) of %.1f MiB allocated in %.3f s", layout->n_pages,
			  (double)paged_bytes(layout) / (1 << 20), timing_now() - t0);
	if (r == 0)
		r = upload_table(gpu, ret, err);
	if (r == 0)
		r = fill(gpu, ret, userdata, err);
	if (r < 0) {
		paged_free(gpu, ret);
		return r;
	}
	ret->bytes = paged_bytes(layout);
	return 0;
}

int paged_upload_runs(struct gpu_ctx *gpu, const struct paged_layout *layout,
		      const struct paged_runs *runs, struct paged_volume *ret, struct errbuf *err)
{
	return paged_upload_with(gpu, layout, upload_runs, (void *)runs, ret, err);
}

/* Host data: one run of every voxel. */
static int whole_run(void *userdata, size_t k, struct paged_run *ret, struct errbuf *err)
{
	(void)k;
	(void)err;
	*ret = *(const struct paged_run *)userdata;
	return 0;
}

int paged_upload_part(struct gpu_ctx *gpu, const struct paged_layout *layout, const float *data,
		      uint32_t src_channels, uint32_t kept, struct paged_volume *ret,
		      struct errbuf *err)
{
	struct paged_run all = { .values = data, .first_voxel = 0, .voxels = layout->voxels };
	struct paged_runs runs = { .n_runs = 1, .columns = 1, .column_voxels = layout->voxels,
				   .get = whole_run, .userdata = &all,
				   .src_channels = src_channels, .kept = kept };

	return paged_upload_runs(gpu, layout, &runs, ret, err);
}

int paged_upload(struct gpu_ctx *gpu, const struct paged_layout *layout, const float *data,
		 struct paged_volume *ret, struct errbuf *err)
{
	return paged_upload_part(gpu, layout, data, layout->channels, layout->channels, ret, err);
}

void paged_free(struct gpu_ctx *gpu, struct paged_volume *v)
{
	for (uint32_t k = 0; v->pages && k < v->layout.n_pages; k++)
		gpu_buffer_free(gpu, v->pages[k]);
	free(v->pages);
	gpu_buffer_free(gpu, v->table);
	memset(v, 0, sizeof(*v));
}
