/* SPDX-License-Identifier: MIT */
/*
 * odf_stream: an ODF read in z-slabs while it is uploaded (see odf_stream.h).
 *
 * Flow: every consumer joins, taking slabs or not (a GPU that reads the
 * file itself, odf_stream_raw) -> where one takes slabs, the reader thread
 * takes slab k into buffer k % 2 once both consumers' holds on it are gone
 * -> reads it from the mapping, clips it and checks its symmetry -> hands
 * it to the consumers, who copy it to their devices while the reader goes
 * on with slab k + 1.
 */
#include "job/odf_stream.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/parallel.h"
#include "base/timing.h"

/* z-planes per slab. The file keeps each volume's z-planes one after
 * another, so a slab reads one contiguous run of each volume (the slabs
 * together read each page of the file once); on the GPU it is a run of this
 * many voxels of every z-column, 23 KB of float32 at 724 vertices, one copy
 * region each. An HCP-sized ODF (145 x 174 x 145 voxels x 724 vertices)
 * takes 19 slabs of up to 585 MB: the host holds two, and the mapped pages
 * of the one being read (16 planes cost 0.55 GB more host memory and no
 * less time on lavapipe). */
#define SLAB_PLANES 8

/* The least a thread of the filler copies (odf_stream_share_*). */
#define SHARE_FILL_MIN_BYTES (4u << 20)

/* A shared buffer at most: its chunk's copy from the file, on threads,
 * overlaps the devices' copies of the one before and their kernels; the
 * buffers are pinned by each import (the first import faulting their
 * pages in), so two whole HCP-sized slabs (1.2 GB) would cost more there
 * than the smaller chunks' extra submits (80 chunks, not 19, of the
 * HCP-sized ODF; not yet measured on a GPU). */
#define SHARE_BUFFER_BYTES (128u << 20)

struct slab_buffer {
	struct volume v;          /* SLAB_PLANES z-planes (or the whole ODF when fewer) */
	size_t slab;              /* the slab it holds, when ready */
	bool ready;
	size_t holders;           /* consumers yet to release it */
};

/* A host buffer the raw readers share (odf_stream_share_*). */
struct share_buffer {
	void *host;
	size_t chunk;             /* the chunk it holds, when ready */
	bool ready;
	size_t holders;           /* readers yet to release it */
};

/* The raw readers' shared host copies: the offers, the agreement, the
 * buffers and the filler thread (under the stream's lock). */
struct share {
	size_t offered, agreed;
	bool decided;             /* every reader offered: readers known, buffers allocated or not */
	size_t readers;           /* the raw readers, once decided */
	bool offered_buffers;     /* decided so: the readers import them and agree */
	bool agreement_done;
	bool on;                  /* every reader agreed and the filler runs */
	const char *why_not;      /* why the readers do not share */
	bool half;                /* the readers stage half the sphere
				   * (odf_stream_copy_chunk's half) */
	bool unmirrored;          /* half: the filler found a value unequal to
				   * its antipode's and stopped after that chunk */
	uint64_t chunk_voxels, alignment, bytes;
	struct share_buffer buf[ODF_SHARE_BUFFERS];
	pthread_t filler;
	double fill_seconds;
};

struct odf_stream {
	struct volume_slabs *file;
	int64_t dim[4];
	const struct sphere *sphere;
	struct fit_options fit;
	size_t n_slabs;
	struct slab_buffer buf[2];
	size_t consumers;
	size_t joined, slab_consumers;   /* consumers that joined; of them, those taking slabs */
	struct odf_symmetry symmetry;   /* the slabs' */
	struct odf_symmetry raw;        /* what consumers reading the file itself found */
	enum { PLANE_UNCHECKED, PLANE_MIRRORED, PLANE_UNMIRRORED } plane;   /* the middle
					 * z-plane's check, done once */

	pthread_mutex_t lock;
	pthread_cond_t changed;
	pthread_t reader;
	bool started;
	struct share share;
	bool failed;              /* the reader's error is in r and err */
	bool cancelled;
	int r;
	struct errbuf err;
};

int odf_stream_open(int fd, const char *path, const struct sphere *s,
		    const struct fit_options *fit, struct volume *header, struct odf_stream **ret,
		    struct errbuf *err)
{
	struct volume_slabs *file;
	struct odf_stream *st;
	int r = volume_slabs_open(fd, path, "inputs.odf", header, &file, err);

	*ret = NULL;
	if (r < 0 || !file)
		return r;
	st = calloc(1, sizeof(*st));
	if (!st) {
		volume_slabs_close(file);
		return errbuf_set(err, -ENOMEM, "inputs.odf", "out of memory");
	}
	st->file = file;
	memcpy(st->dim, header->dim, sizeof(st->dim));
	st->sphere = s;
	/* Progress is the whole load's, not a slab's. */
	st->fit.threads = fit ? fit->threads : 0;
	st->n_slabs = (size_t)((header->dim[2] + SLAB_PLANES - 1) / SLAB_PLANES);
	st->symmetry = ODF_SYMMETRY_ALL;
	st->raw = ODF_SYMMETRY_ALL;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->changed, NULL);
	*ret = st;
	return 0;
}

size_t odf_stream_slabs(const struct odf_stream *s)
{
	return s->n_slabs;
}

void odf_stream_columns(const struct odf_stream *s, uint64_t *columns, uint64_t *column_voxels)
{
	*columns = (uint64_t)s->dim[0] * (uint64_t)s->dim[1];
	*column_voxels = (uint64_t)s->dim[2];
}

static int64_t slab_planes(const struct odf_stream *s, size_t k)
{
	int64_t z0 = (int64_t)k * SLAB_PLANES;

	return s->dim[2] - z0 < SLAB_PLANES ? s->dim[2] - z0 : SLAB_PLANES;
}

/* Slab k into v (room for SLAB_PLANES planes): read, clipped, its
 * symmetry in *symmetry (all of it where the read fails). */
static int read_slab(const struct odf_stream *s, size_t k, const struct volume *v,
		     struct odf_symmetry *symmetry, struct errbuf *err)
{
	struct volume view = *v;
	int r;

	*symmetry = ODF_SYMMETRY_ALL;
	view.dim[2] = slab_planes(s, k);
	r = volume_slabs_read(s->file, (int64_t)k * SLAB_PLANES, &view, err);
	if (r == 0)
		r = fit_prepare_odf(&view, s->sphere, &s->fit, symmetry, err);
	return r;
}

/* A slab buffer's shape: SLAB_PLANES planes, or the whole ODF when fewer. */
static void slab_dim(const struct odf_stream *s, int64_t dim[4])
{
	memcpy(dim, s->dim, 4 * sizeof(dim[0]));
	dim[2] = s->dim[2] < SLAB_PLANES ? s->dim[2] : SLAB_PLANES;
}

/* Waits until no consumer holds a buffer (a slab's, or a shared copy's:
 * its holders and ready), then marks it not ready for refilling; false
 * when the stream was cancelled. */
static bool wait_free(struct odf_stream *s, const size_t *holders, bool *ready)
{
	bool go;

	pthread_mutex_lock(&s->lock);
	while (*holders > 0 && !s->cancelled)
		pthread_cond_wait(&s->changed, &s->lock);
	go = !s->cancelled;
	*ready = false;
	pthread_mutex_unlock(&s->lock);
	return go;
}

/* Waits until every consumer joined; the count of those taking slabs (0
 * when the stream was cancelled). */
static size_t wait_joined(struct odf_stream *s)
{
	size_t n;

	pthread_mutex_lock(&s->lock);
	while (s->joined < s->consumers && !s->cancelled)
		pthread_cond_wait(&s->changed, &s->lock);
	n = s->cancelled ? 0 : s->slab_consumers;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* The two slab buffers (one when the ODF takes one slab). */
static int alloc_buffers(struct odf_stream *s, struct errbuf *err)
{
	int64_t dim[4];

	slab_dim(s, dim);
	for (size_t i = 0; i < (s->n_slabs > 1 ? 2u : 1u); i++)
		if (volume_alloc(&s->buf[i].v, dim, 1.0) < 0)
			return errbuf_set(err, -ENOMEM, "inputs.odf",
					  "out of memory for a slab of the ODF");
	return 0;
}

static void *reader_main(void *arg)
{
	struct odf_stream *s = arg;
	struct errbuf err = { 0 };
	int r;

	if (wait_joined(s) == 0)
		return NULL;
	r = alloc_buffers(s, &err);
	for (size_t k = 0; k < s->n_slabs && r == 0; k++) {
		struct slab_buffer *b = &s->buf[k % 2];
		struct odf_symmetry symmetry;

		if (!wait_free(s, &b->holders, &b->ready))
			break;
		r = read_slab(s, k, &b->v, &symmetry, &err);
		if (r < 0)
			break;
		/* Only the reader writes it, read after the join. */
		odf_symmetry_and(&s->symmetry, symmetry);
		pthread_mutex_lock(&s->lock);
		b->slab = k;
		b->ready = true;
		b->holders = s->slab_consumers;
		pthread_cond_broadcast(&s->changed);
		pthread_mutex_unlock(&s->lock);
	}
	if (r < 0) {
		pthread_mutex_lock(&s->lock);
		s->failed = true;
		s->r = r;
		s->err = err;
		pthread_cond_broadcast(&s->changed);
		pthread_mutex_unlock(&s->lock);
	}
	return NULL;
}

int odf_stream_start(struct odf_stream *s, size_t consumers, struct errbuf *err)
{
	s->consumers = consumers;
	if (pthread_create(&s->reader, NULL, reader_main, s) != 0)
		return errbuf_set(err, -EAGAIN, "inputs.odf", "cannot start the ODF reader thread");
	s->started = true;
	return 0;
}

static int cancelled_err(struct errbuf *err)
{
	return errbuf_set(err, -ECANCELED, "device", "the upload to another device failed");
}

int odf_stream_get(struct odf_stream *s, size_t k, struct odf_slab *ret, struct errbuf *err)
{
	struct slab_buffer *b = &s->buf[k % 2];
	int r = 0;

	pthread_mutex_lock(&s->lock);
	while (!(b->ready && b->slab == k) && !s->failed && !s->cancelled)
		pthread_cond_wait(&s->changed, &s->lock);
	if (s->failed) {
		r = s->r;
		*err = s->err;
	} else if (s->cancelled) {
		r = cancelled_err(err);
	}
	pthread_mutex_unlock(&s->lock);
	if (r == 0)
		*ret = (struct odf_slab){ .values = b->v.data, .first_z = (uint64_t)k * SLAB_PLANES,
					  .planes = (uint64_t)slab_planes(s, k) };
	return r;
}

void odf_stream_join(struct odf_stream *s, bool takes_slabs)
{
	pthread_mutex_lock(&s->lock);
	s->joined++;
	s->slab_consumers += takes_slabs;
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->lock);
}

bool odf_stream_raw(const struct odf_stream *s, struct odf_raw *ret)
{
	ret->data = volume_slabs_float32(s->file);
	memcpy(ret->dim, s->dim, sizeof(ret->dim));
	return ret->data != NULL;
}

void odf_stream_slab_span(const struct odf_stream *s, size_t k, uint64_t *first_z,
			  uint64_t *planes)
{
	*first_z = (uint64_t)k * SLAB_PLANES;
	*planes = (uint64_t)slab_planes(s, k);
}

void odf_stream_raw_done(const struct odf_stream *s)
{
	volume_slabs_drop_pages(s->file);
}

int odf_stream_raw_check_finite(const struct odf_stream *s, struct errbuf *err)
{
	int r = 0;

	for (size_t k = 0; k < s->n_slabs && r == 0; k++)
		r = volume_slabs_check_finite(s->file, (int64_t)k * SLAB_PLANES, slab_planes(s, k),
					      err);
	return r;
}

int odf_stream_raw_host_symmetry(const struct odf_stream *s, struct odf_symmetry *symmetry,
				 struct errbuf *err)
{
	struct volume v;
	int64_t dim[4];
	int r = 0;

	slab_dim(s, dim);
	if (volume_alloc(&v, dim, 1.0) < 0)
		return errbuf_set(err, -ENOMEM, "inputs.odf", "out of memory for a slab of the ODF");
	*symmetry = ODF_SYMMETRY_ALL;
	for (size_t k = 0; k < s->n_slabs && r == 0; k++) {
		struct odf_symmetry slab;
		r = read_slab(s, k, &v, &slab, err);
		odf_symmetry_and(symmetry, slab);
	}
	volume_free(&v);
	return r;
}

void odf_stream_raw_symmetry(struct odf_stream *s, struct odf_symmetry found)
{
	pthread_mutex_lock(&s->lock);
	odf_symmetry_and(&s->raw, found);
	pthread_mutex_unlock(&s->lock);
}

void odf_stream_release(struct odf_stream *s, size_t k)
{
	pthread_mutex_lock(&s->lock);
	s->buf[k % 2].holders--;
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->lock);
}

void odf_stream_cancel(struct odf_stream *s)
{
	pthread_mutex_lock(&s->lock);
	s->cancelled = true;
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->lock);
}

/* ---- raw readers: chunks, and the host copies they share --------------- */

bool odf_stream_next_chunk(const struct odf_stream *s, uint64_t max_voxels,
			   struct odf_chunk *c)
{
	uint64_t plane = (uint64_t)s->dim[0] * (uint64_t)s->dim[1];
	uint64_t first_z, planes, end;

	/* The slabs' voxels follow one another: slab k + 1 starts where k ends. */
	if (c->voxels == 0) {
		*c = (struct odf_chunk){ 0 };
	} else {
		c->first += c->voxels;
		c->slab += c->ends_slab;
	}
	if (c->slab >= s->n_slabs)
		return false;
	odf_stream_slab_span(s, c->slab, &first_z, &planes);
	end = (first_z + planes) * plane;
	c->voxels = end - c->first < max_voxels ? end - c->first : max_voxels;
	c->ends_slab = c->first + c->voxels == end;
	return true;
}

/* A value's bits clipped at zero (negative numbers, -inf too, as +0), -0 as
 * +0: equal exactly where odf_transpose.comp's mirrored check finds two
 * values equal (on the bits, NaN included). */
static uint32_t mirror_bits(uint32_t bits)
{
	return bits >= 0x80000000u && bits <= 0xff800000u ? 0u : bits;
}

/* Whether n values of a equal those of b as mirror_bits() compares them. */
static bool values_mirrored(const unsigned char *a, const unsigned char *b, uint64_t n)
{
	if (memcmp(a, b, 4 * n) == 0)
		return true;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t x, y;
		memcpy(&x, a + 4 * i, 4);
		memcpy(&y, b + 4 * i, 4);
		if (mirror_bits(x) != mirror_bits(y))
			return false;
	}
	return true;
}

static uint64_t volume_bytes(const struct odf_stream *s)
{
	return 4ull * (uint64_t)s->dim[0] * (uint64_t)s->dim[1] * (uint64_t)s->dim[2];
}

bool odf_stream_raw_plane_mirrored(struct odf_stream *s)
{
	const unsigned char *data = volume_slabs_float32(s->file);
	uint64_t plane = (uint64_t)s->dim[0] * (uint64_t)s->dim[1];
	uint64_t start = 4 * plane * (uint64_t)(s->dim[2] / 2);
	uint64_t antipode = (uint64_t)s->dim[3] / 2 * volume_bytes(s);
	bool mirrored = true;

	if (s->plane != PLANE_UNCHECKED)
		return s->plane == PLANE_MIRRORED;
	for (int64_t v = 0; v < s->dim[3] / 2 && mirrored; v++) {
		const unsigned char *from = data + (uint64_t)v * volume_bytes(s) + start;
		mirrored = values_mirrored(from, from + antipode, plane);
	}
	/* A plane of every volume touches pages all over the file, and a
	 * fault maps more than its page: on an H100 host the process held
	 * 2.7 GiB at the upload's start, not 1.7, until the first slab's end
	 * dropped them. */
	volume_slabs_drop_pages(s->file);
	s->plane = mirrored ? PLANE_MIRRORED : PLANE_UNMIRRORED;
	return mirrored;
}

bool odf_stream_copy_chunk(const struct odf_stream *s, const struct odf_chunk *c, bool half,
			   uint64_t offset, uint64_t size, void *dst)
{
	const unsigned char *data = volume_slabs_float32(s->file);
	uint64_t antipode = (uint64_t)s->dim[3] / 2 * volume_bytes(s);
	uint64_t run = 4 * c->voxels;
	char *out = dst;
	bool mirrored = true;

	while (size > 0) {
		uint64_t volume = offset / run, at = offset % run;
		uint64_t take = size < run - at ? size : run - at;
		const unsigned char *from = data + volume * volume_bytes(s) + 4 * c->first + at;

		memcpy(out, from, take);
		if (half)
			mirrored = mirrored && values_mirrored(from, from + antipode, take / 4);
		out += take;
		offset += take;
		size -= take;
	}
	return mirrored;
}

uint64_t odf_stream_staged_volumes(const struct odf_stream *s, bool half)
{
	return (uint64_t)(half ? s->dim[3] / 2 : s->dim[3]);
}

/* A piece of a chunk's copy into a shared buffer, on a thread of its own. */
struct fill_part {
	const struct odf_stream *s;
	const struct odf_chunk *c;
	unsigned char *dst;
	uint64_t offset, size;
	bool half;
	bool mirrored;            /* out, with half */
};

static void fill_part(void *arg)
{
	struct fill_part *p = arg;

	p->mirrored = odf_stream_copy_chunk(p->s, p->c, p->half, p->offset, p->size,
					    p->dst + p->offset);
}

/* Chunk c into dst on threads, in pieces of whole 64-byte units; with half,
 * whether every value copied equals its antipode's. */
static bool fill_shared(const struct odf_stream *s, const struct odf_chunk *c, bool half,
			void *dst)
{
	struct fill_part parts[PARALLEL_MAX_PARTS];
	uint64_t bytes = 4 * c->voxels * odf_stream_staged_volumes(s, half), at = 0;
	size_t n = parallel_parts(bytes, SHARE_FILL_MIN_BYTES);
	uint64_t piece = (bytes / n + 63) & ~63ull;
	bool mirrored = true;

	for (size_t i = 0; i < n; i++) {
		uint64_t size = bytes - at < piece ? bytes - at : piece;

		parts[i] = (struct fill_part){ .s = s, .c = c, .dst = dst, .offset = at, .size = size,
					       .half = half };
		at += size;
	}
	parallel_run(fill_part, parts, sizeof(parts[0]), n);
	for (size_t i = 0; i < n; i++)
		mirrored = mirrored && parts[i].mirrored;
	return mirrored;
}

/* The filler: chunk j into buffer j % ODF_SHARE_BUFFERS once the readers
 * released it, the slab's mapped pages dropped after its last chunk. With
 * half the sphere, a chunk with a value unequal to its antipode's is the
 * last: the readers see unmirrored with it and stop there. */
static void *filler_main(void *arg)
{
	struct odf_stream *s = arg;
	struct share *sh = &s->share;
	struct odf_chunk c = { 0 };
	bool mirrored = true;

	for (size_t j = 0; mirrored && odf_stream_next_chunk(s, sh->chunk_voxels, &c); j++) {
		struct share_buffer *b = &sh->buf[j % ODF_SHARE_BUFFERS];
		double t0;

		if (!wait_free(s, &b->holders, &b->ready))
			break;
		t0 = timing_now();
		mirrored = fill_shared(s, &c, sh->half, b->host);
		if (c.ends_slab)
			volume_slabs_drop_pages(s->file);
		pthread_mutex_lock(&s->lock);
		sh->fill_seconds += timing_now() - t0;
		sh->unmirrored = !mirrored;
		b->chunk = j;
		b->ready = true;
		b->holders = sh->readers;
		pthread_cond_broadcast(&s->changed);
		pthread_mutex_unlock(&s->lock);
	}
	return NULL;
}

/* The shared buffers, for chunks of sh->chunk_voxels voxels, or fewer
 * where those would take more than SHARE_BUFFER_BYTES (under the lock,
 * once every reader offered): why_not set where they are not. */
static void allocate_share(struct odf_stream *s)
{
	struct share *sh = &s->share;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t align = sh->alignment > page ? sh->alignment : page;
	uint64_t voxel_bytes = 4 * odf_stream_staged_volumes(s, sh->half), bytes;

	if (sh->chunk_voxels * voxel_bytes > SHARE_BUFFER_BYTES)
		sh->chunk_voxels = SHARE_BUFFER_BYTES / voxel_bytes ? SHARE_BUFFER_BYTES / voxel_bytes
								   : 1;
	bytes = sh->chunk_voxels * voxel_bytes;
	sh->bytes = (bytes + align - 1) / align * align;
	for (size_t i = 0; i < ODF_SHARE_BUFFERS && !sh->why_not; i++)
		if (posix_memalign(&sh->buf[i].host, align, sh->bytes) != 0) {
			sh->buf[i].host = NULL;
			sh->why_not = "out of host memory for the shared copies";
		}
}

/* What every reader gets from its offer: the decision alone (an agreement
 * under way changes why_not, not the offer's outcome). */
static void describe_share(const struct share *sh, struct odf_share *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (sh->readers < 2)
		return;
	if (!sh->offered_buffers) {
		ret->why_not = sh->why_not;
		return;
	}
	ret->readers = sh->readers;
	for (size_t i = 0; i < ODF_SHARE_BUFFERS; i++)
		ret->buffers[i] = sh->buf[i].host;
	ret->bytes = sh->bytes;
	ret->chunk_voxels = sh->chunk_voxels;
}

int odf_stream_share_offer(struct odf_stream *s, uint64_t max_voxels, uint64_t alignment,
			   bool half, struct odf_share *ret, struct errbuf *err)
{
	struct share *sh = &s->share;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	if (sh->offered == 0)
		sh->half = half;
	else if (sh->half != half)
		sh->why_not = "the devices stage different parts of the sphere";
	sh->chunk_voxels = sh->offered++ == 0 || max_voxels < sh->chunk_voxels ? max_voxels
										 : sh->chunk_voxels;
	if (alignment == 0)
		sh->why_not = "a device cannot import host memory (no VK_EXT_external_memory_host)";
	sh->alignment = alignment > sh->alignment ? alignment : sh->alignment;
	pthread_cond_broadcast(&s->changed);
	while (!s->cancelled &&
	       !(s->joined == s->consumers && sh->offered == s->joined - s->slab_consumers))
		pthread_cond_wait(&s->changed, &s->lock);
	if (s->cancelled) {
		r = cancelled_err(err);
	} else if (!sh->decided) {
		sh->decided = true;
		sh->readers = sh->offered;
		if (sh->readers >= 2 && !sh->why_not)
			allocate_share(s);
		sh->offered_buffers = sh->readers >= 2 && !sh->why_not;
	}
	if (r == 0)
		describe_share(sh, ret);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int odf_stream_share_agree(struct odf_stream *s, bool imported, const char **why_not,
			   struct errbuf *err)
{
	struct share *sh = &s->share;
	int r;

	pthread_mutex_lock(&s->lock);
	sh->agreed++;
	if (!imported)
		sh->why_not = "a device could not import the shared host buffers";
	pthread_cond_broadcast(&s->changed);
	while (!s->cancelled && sh->agreed < sh->readers)
		pthread_cond_wait(&s->changed, &s->lock);
	if (!s->cancelled && !sh->agreement_done) {
		sh->agreement_done = true;
		sh->on = !sh->why_not && pthread_create(&sh->filler, NULL, filler_main, s) == 0;
		if (!sh->on && !sh->why_not)
			sh->why_not = "cannot start the thread that fills the shared copies";
	}
	r = s->cancelled ? cancelled_err(err) : sh->on;
	*why_not = sh->why_not;
	pthread_mutex_unlock(&s->lock);
	return r;
}

int odf_stream_share_get(struct odf_stream *s, size_t j, size_t *buffer, bool *unmirrored,
			 struct errbuf *err)
{
	struct share_buffer *b = &s->share.buf[j % ODF_SHARE_BUFFERS];
	int r = 0;

	pthread_mutex_lock(&s->lock);
	while (!(b->ready && b->chunk == j) && !s->cancelled)
		pthread_cond_wait(&s->changed, &s->lock);
	if (s->cancelled)
		r = cancelled_err(err);
	*unmirrored = s->share.unmirrored;
	pthread_mutex_unlock(&s->lock);
	*buffer = j % ODF_SHARE_BUFFERS;
	return r;
}

void odf_stream_share_release(struct odf_stream *s, size_t j)
{
	pthread_mutex_lock(&s->lock);
	s->share.buf[j % ODF_SHARE_BUFFERS].holders--;
	pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->lock);
}

double odf_stream_share_fill_seconds(struct odf_stream *s)
{
	double seconds;

	pthread_mutex_lock(&s->lock);
	seconds = s->share.fill_seconds;
	pthread_mutex_unlock(&s->lock);
	return seconds;
}

/* Waits for the filler and frees the shared buffers (the readers' imports
 * of them are gone: every consumer has finished). */
static void finish_share(struct odf_stream *s)
{
	struct share *sh = &s->share;

	if (sh->on)
		pthread_join(sh->filler, NULL);
	sh->on = false;
	for (size_t i = 0; i < ODF_SHARE_BUFFERS; i++) {
		free(sh->buf[i].host);
		sh->buf[i].host = NULL;
	}
}

void odf_stream_finish(struct odf_stream *s)
{
	if (s->started)
		pthread_join(s->reader, NULL);
	s->started = false;
	for (size_t i = 0; i < 2; i++)
		volume_free(&s->buf[i].v);
	finish_share(s);
}

struct odf_symmetry odf_stream_symmetry(const struct odf_stream *s)
{
	struct odf_symmetry all = s->symmetry;

	odf_symmetry_and(&all, s->raw);
	return all;
}

void odf_stream_free(struct odf_stream *s)
{
	if (!s)
		return;
	odf_stream_cancel(s);
	odf_stream_finish(s);
	volume_slabs_close(s->file);
	pthread_cond_destroy(&s->changed);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
