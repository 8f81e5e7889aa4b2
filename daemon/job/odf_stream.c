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

/* z-planes per slab. The file keeps each volume's z-planes one after
 * another, so a slab reads one contiguous run of each volume (the slabs
 * together read each page of the file once); on the GPU it is a run of this
 * many voxels of every z-column, 23 KB of float32 at 724 vertices, one copy
 * region each. An HCP-sized ODF (145 x 174 x 145 voxels x 724 vertices)
 * takes 19 slabs of up to 585 MB: the host holds two, and the mapped pages
 * of the one being read (16 planes cost 0.55 GB more host memory and no
 * less time on lavapipe). */
#define SLAB_PLANES 8

struct slab_buffer {
	struct volume v;          /* SLAB_PLANES z-planes (or the whole ODF when fewer) */
	size_t slab;              /* the slab it holds, when ready */
	bool ready;
	size_t holders;           /* consumers yet to release it */
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
	bool symmetric;
	bool raw_asymmetric;      /* a consumer reading the file itself found an asymmetry */

	pthread_mutex_t lock;
	pthread_cond_t changed;
	pthread_t reader;
	bool started;
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
	st->symmetric = true;
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
 * symmetry in *symmetric (true where the read fails). */
static int read_slab(const struct odf_stream *s, size_t k, const struct volume *v,
		     bool *symmetric, struct errbuf *err)
{
	struct volume view = *v;
	int r;

	*symmetric = true;
	view.dim[2] = slab_planes(s, k);
	r = volume_slabs_read(s->file, (int64_t)k * SLAB_PLANES, &view, err);
	if (r == 0)
		r = fit_prepare_odf(&view, s->sphere, &s->fit, symmetric, err);
	return r;
}

/* A slab buffer's shape: SLAB_PLANES planes, or the whole ODF when fewer. */
static void slab_dim(const struct odf_stream *s, int64_t dim[4])
{
	memcpy(dim, s->dim, 4 * sizeof(dim[0]));
	dim[2] = s->dim[2] < SLAB_PLANES ? s->dim[2] : SLAB_PLANES;
}

/* Waits until no consumer holds b; false when the stream was cancelled. */
static bool wait_free(struct odf_stream *s, struct slab_buffer *b)
{
	bool go;

	pthread_mutex_lock(&s->lock);
	while (b->holders > 0 && !s->cancelled)
		pthread_cond_wait(&s->changed, &s->lock);
	go = !s->cancelled;
	b->ready = false;
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
		bool symmetric;

		if (!wait_free(s, b))
			break;
		r = read_slab(s, k, &b->v, &symmetric, &err);
		if (r < 0)
			break;
		if (!symmetric)
			s->symmetric = false;   /* only the reader writes it, read after the join */
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
		r = errbuf_set(err, -ECANCELED, "device", "the upload to another device failed");
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

int odf_stream_raw_host_symmetry(const struct odf_stream *s, bool *symmetric,
				 struct errbuf *err)
{
	struct volume v;
	int64_t dim[4];
	int r = 0;

	slab_dim(s, dim);
	if (volume_alloc(&v, dim, 1.0) < 0)
		return errbuf_set(err, -ENOMEM, "inputs.odf", "out of memory for a slab of the ODF");
	*symmetric = true;
	for (size_t k = 0; k < s->n_slabs && r == 0; k++) {
		bool slab_symmetric;
		r = read_slab(s, k, &v, &slab_symmetric, err);
		*symmetric = *symmetric && (r < 0 || slab_symmetric);
	}
	volume_free(&v);
	return r;
}

void odf_stream_raw_symmetry(struct odf_stream *s, bool symmetric)
{
	pthread_mutex_lock(&s->lock);
	s->raw_asymmetric |= !symmetric;
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

void odf_stream_finish(struct odf_stream *s)
{
	if (s->started)
		pthread_join(s->reader, NULL);
	s->started = false;
	for (size_t i = 0; i < 2; i++)
		volume_free(&s->buf[i].v);
}

bool odf_stream_symmetric(const struct odf_stream *s)
{
	return s->symmetric && !s->raw_asymmetric;
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
