/* SPDX-License-Identifier: MIT */
/*
 * volume: NIfTI reading and writing. An image is read from one open file:
 * the header bytes are read here and libnifti2 only interprets them
 * (nifti_convert_n*hdr2nim), so that it never opens a name of its own (a
 * companion "x.nii" for "x", an ".img" for a ".hdr": names nobody checked).
 * Voxel data are read here too because libnifti silently replaces NaN/Inf
 * with 0 and cannot tell a truncated file from other failures.
 */
#include "formats/volume.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nifti2_io.h>
#include <zlib.h>

#include "formats/affine.h"
#include "base/fdio.h"
#include "base/infile.h"
#include "base/parallel.h"

/* Writing: voxel data move through a buffer of whole x-rows of about this size. */
#define IO_CHUNK_BYTES ((size_t)4 << 20)
/* Reading (see "reading voxel data" below): pieces of up to BLOCK_VOLUMES
 * volumes' z-planes, on threads (parallel.h); a compressed file is inflated
 * in blocks of at most BLOCK_BYTES of whole volumes. */
#define BLOCK_VOLUMES 32
#define BLOCK_BYTES ((size_t)256 << 20)
/* Voxel data of at least HUGE_DATA_BYTES are aligned for huge pages. */
#define HUGE_DATA_BYTES ((size_t)64 << 20)
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

#define NIFTI1_DATA_OFFSET 352
/* The longest header (NIfTI-2); a NIfTI-1 header is the first 348 bytes. */
#define HEADER_BYTES sizeof(nifti_2_header)
/* Where the one-file magics sit: "n+1\0" ends a NIfTI-1 header, "n+2\0"
 * follows a NIfTI-2 header's sizeof_hdr. "ni1"/"ni2" mark a .hdr whose data
 * are in another file. */
#define NIFTI1_MAGIC_AT 344
#define NIFTI2_MAGIC_AT 4

/* The open file an image is read from. */
struct image_file {
	int fd;
	bool gz;          /* gzip-compressed (by its content, not its name) */
	int64_t bytes;    /* the file's size */
};

/* Header fields as stored in the file; libnifti rewrites zero dims to 1 and
 * non-finite scaling to 0, both of which must be rejected or honoured as
 * nibabel does. */
struct raw_header {
	int64_t ndim;
	int64_t dim[8];
	double pixdim[8];
	double scl_slope;
	double scl_inter;
	int datatype;
};

typedef double (*sample_reader)(const unsigned char *p);

/* How to turn one stored sample into the value get_fdata() returns. */
struct conversion {
	sample_reader read;
	size_t size;
	double slope;
	double inter;
};

/* One x-row of the file (fixed y, z, t), which lands in data with stride. */
struct row_cursor {
	int64_t y, z, t;
};

#define DEFINE_SAMPLE_READER(name, ctype)                  \
	static double name(const unsigned char *p)         \
	{                                                  \
		ctype value;                               \
		memcpy(&value, p, sizeof(value));          \
		return (double)value;                      \
	}

DEFINE_SAMPLE_READER(read_uint8, uint8_t)
DEFINE_SAMPLE_READER(read_int8, int8_t)
DEFINE_SAMPLE_READER(read_uint16, uint16_t)
DEFINE_SAMPLE_READER(read_int16, int16_t)
DEFINE_SAMPLE_READER(read_uint32, uint32_t)
DEFINE_SAMPLE_READER(read_int32, int32_t)
DEFINE_SAMPLE_READER(read_uint64, uint64_t)
DEFINE_SAMPLE_READER(read_int64, int64_t)
DEFINE_SAMPLE_READER(read_float32, float)
DEFINE_SAMPLE_READER(read_float64, double)

static sample_reader reader_for_datatype(int datatype)
{
	switch (datatype) {
	case NIFTI_TYPE_UINT8: return read_uint8;
	case NIFTI_TYPE_INT8: return read_int8;
	case NIFTI_TYPE_UINT16: return read_uint16;
	case NIFTI_TYPE_INT16: return read_int16;
	case NIFTI_TYPE_UINT32: return read_uint32;
	case NIFTI_TYPE_INT32: return read_int32;
	case NIFTI_TYPE_UINT64: return read_uint64;
	case NIFTI_TYPE_INT64: return read_int64;
	case NIFTI_TYPE_FLOAT32: return read_float32;
	case NIFTI_TYPE_FLOAT64: return read_float64;
	default: return NULL;
	}
}

static int mul_overflows(size_t a, size_t b, size_t *out)
{
	return __builtin_mul_overflow(a, b, out);
}

static size_t data_count(const struct volume *v)
{
	return volume_voxels(v) * (size_t)v->dim[3];
}

/* Number of floats for dim, or -EINVAL when a product (in bytes) overflows. */
static int checked_count(const int64_t dim[4], size_t *count)
{
	size_t n = 1, bytes;

	for (int i = 0; i < 4; i++) {
		if (dim[i] <= 0 || (uint64_t)dim[i] > SIZE_MAX || mul_overflows(n, (size_t)dim[i], &n))
			return -EINVAL;
	}
	if (mul_overflows(n, sizeof(float), &bytes))
		return -EINVAL;
	*count = n;
	return 0;
}

size_t volume_voxels(const struct volume *v)
{
	return (size_t)v->dim[0] * (size_t)v->dim[1] * (size_t)v->dim[2];
}

void volume_free(struct volume *v)
{
	free(v->data);
	memset(v, 0, sizeof(*v));
}

int volume_alloc(struct volume *v, const int64_t dim[4], double voxel_mm)
{
	size_t count;

	memset(v, 0, sizeof(*v));
	if (!(voxel_mm > 0.0) || !isfinite(voxel_mm) || checked_count(dim, &count))
		return -EINVAL;
	v->data = calloc(count, sizeof(float));
	if (!v->data)
		return -ENOMEM;
	memcpy(v->dim, dim, sizeof(v->dim));
	for (int i = 0; i < 3; i++)
		v->affine[i][i] = voxel_mm;
	v->affine[3][3] = 1.0;
	return 0;
}

int volume_alloc_on_grid(struct volume *v, const struct volume *grid, int64_t nt)
{
	int64_t shape[4] = { grid->dim[0], grid->dim[1], grid->dim[2], nt };
	int r = volume_alloc(v, shape, 1.0);

	if (r == 0)
		memcpy(v->affine, grid->affine, sizeof(v->affine));
	return r;
}

int volume_same_grid(const struct volume *a, const struct volume *b)
{
	double va[3], vb[3], tol;

	for (int i = 0; i < 3; i++)
		if (a->dim[i] != b->dim[i])
			return 0;
	affine_voxel_sizes(a->affine, va);
	affine_voxel_sizes(b->affine, vb);
	tol = 1e-4 * fmin(fmin(fmin(va[0], va[1]), va[2]), fmin(fmin(vb[0], vb[1]), vb[2]));
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 4; c++)
			if (!(fabs(a->affine[r][c] - b->affine[r][c]) <= tol))
				return 0;
	return 1;
}

/* ---- loading ---- */

/* The header as stored, in host byte order, from a copy of its bytes. */
static void raw_from_header(void *h, int nver, struct raw_header *raw)
{
	if (nver == 2) {
		nifti_2_header *h2 = h;
		if (h2->sizeof_hdr != (int)sizeof(*h2))
			swap_nifti_header(h2, nver);
		for (int i = 0; i < 8; i++) {
			raw->dim[i] = h2->dim[i];
			raw->pixdim[i] = h2->pixdim[i];
		}
		raw->scl_slope = h2->scl_slope;
		raw->scl_inter = h2->scl_inter;
		raw->datatype = h2->datatype;
	} else {
		nifti_1_header *h1 = h;
		if (h1->sizeof_hdr != (int)sizeof(*h1))
			swap_nifti_header(h1, nver);
		for (int i = 0; i < 8; i++) {
			raw->dim[i] = h1->dim[i];
			raw->pixdim[i] = h1->pixdim[i];
		}
		raw->scl_slope = h1->scl_slope;
		raw->scl_inter = h1->scl_inter;
		raw->datatype = h1->datatype;
	}
	raw->ndim = raw->dim[0];
}

static int shape_from_header(const char *path, const char *field, const struct raw_header *raw,
			     int64_t dim[4], struct errbuf *err)
{
	size_t count;

	if (raw->ndim < 1 || raw->ndim > 7)
		return errbuf_set(err, -EINVAL, field, "%s: invalid number of dimensions %lld",
				  path, (long long)raw->ndim);
	for (int64_t i = 1; i <= raw->ndim; i++) {
		if (raw->dim[i] <= 0)
			return errbuf_set(err, -EINVAL, field, "%s: dimension %lld has size %lld",
					  path, (long long)i, (long long)raw->dim[i]);
		if (i > 4 && raw->dim[i] != 1)
			return errbuf_set(err, -EINVAL, field,
					  "%s: %lld-dimensional image (size %lld along dimension %lld); at most 4 dimensions are supported",
					  path, (long long)raw->ndim, (long long)raw->dim[i], (long long)i);
	}
	for (int i = 0; i < 4; i++)
		dim[i] = i < raw->ndim ? raw->dim[i + 1] : 1;
	if (checked_count(dim, &count))
		return errbuf_set(err, -EINVAL, field, "%s: image size %lld x %lld x %lld x %lld is too large",
				  path, (long long)dim[0], (long long)dim[1], (long long)dim[2],
				  (long long)dim[3]);
	return 0;
}

/* nibabel's header check on load: pixdim 0 becomes 1, negatives their abs. */
static double fixed_zoom(double pixdim)
{
	return pixdim == 0.0 ? 1.0 : fabs(pixdim);
}

static void copy_dmat44(const nifti_dmat44 *m, double affine[4][4])
{
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			affine[r][c] = m->m[r][c];
}

/* nibabel's get_base_affine(): x flipped, origin at the image centre. */
static void base_affine(const struct raw_header *raw, double affine[4][4])
{
	memset(affine, 0, 16 * sizeof(double));
	for (int i = 0; i < 3; i++) {
		int64_t n = i < raw->ndim ? raw->dim[i + 1] : 1;
		double zoom = i < raw->ndim ? fixed_zoom(raw->pixdim[i + 1]) : 1.0;
		if (i == 0)
			zoom = -zoom;
		affine[i][i] = zoom;
		affine[i][3] = -((double)n - 1.0) / 2.0 * zoom;
	}
	affine[3][3] = 1.0;
}

/* nibabel's get_qform(), which takes the fixed pixdims (libnifti would use 1
 * for negative ones) and treats any qfac other than -1 as 1. */
static void qform_affine(const nifti_image *nim, const struct raw_header *raw, double affine[4][4])
{
	double qfac = raw->pixdim[0] == -1.0 ? -1.0 : 1.0;
	nifti_dmat44 q = nifti_quatern_to_dmat44(nim->quatern_b, nim->quatern_c, nim->quatern_d,
						 nim->qoffset_x, nim->qoffset_y, nim->qoffset_z,
						 fixed_zoom(raw->pixdim[1]), fixed_zoom(raw->pixdim[2]),
						 fixed_zoom(raw->pixdim[3]), qfac);
	copy_dmat44(&q, affine);
}

static int best_affine(const char *path, const char *field, const nifti_image *nim,
		       const struct raw_header *raw, double affine[4][4], struct errbuf *err)
{
	if (nim->sform_code > 0)
		copy_dmat44(&nim->sto_xyz, affine);
	else if (nim->qform_code > 0)
		qform_affine(nim, raw, affine);
	else
		base_affine(raw, affine);
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			if (!isfinite(affine[r][c]))
				return errbuf_set(err, -EINVAL, field, "%s: the %s affine has non-finite entries",
						  path, nim->sform_code > 0 ? "sform" :
						  nim->qform_code > 0 ? "qform" : "pixdim");
	return 0;
}

static int conversion_for(const char *path, const char *field, const nifti_image *nim,
			  const struct raw_header *raw, struct conversion *cv, struct errbuf *err)
{
	cv->read = reader_for_datatype(nim->datatype);
	cv->size = (size_t)nim->nbyper;
	cv->slope = 1.0;
	cv->inter = 0.0;
	if (!cv->read)
		return errbuf_set(err, -EINVAL, field,
				  "%s: datatype %s (%d) is not supported; expected a real-valued integer or float type",
				  path, nifti_datatype_string(nim->datatype), nim->datatype);
	if (raw->scl_slope == 0.0 || !isfinite(raw->scl_slope))
		return 0;
	if (!isfinite(raw->scl_inter))
		return errbuf_set(err, -EINVAL, field, "%s: scl_slope %g is valid but scl_inter is %g",
				  path, raw->scl_slope, raw->scl_inter);
	cv->slope = raw->scl_slope;
	cv->inter = raw->scl_inter;
	return 0;
}

/* Deflate expands at most 1032:1 (258-byte matches in 2-bit codes), so a
 * gzip file of n bytes holds at most this many times n bytes of data. */
#define DEFLATE_MAX_RATIO 1032u

/* Fails early, before allocating, when a file cannot hold the voxel data its
 * header announces: an uncompressed file that is too short, or a gzip file
 * too small to inflate to that much (a few bytes of header must not make
 * the reader allocate whatever count they claim). */
static int check_data_size(const char *path, const char *field, const nifti_image *nim,
			   const struct image_file *f, size_t data_bytes, struct errbuf *err)
{
	int64_t file_bytes = f->bytes;

	if (f->gz) {
		if ((uint64_t)file_bytes < UINT64_MAX / DEFLATE_MAX_RATIO &&
		    data_bytes / DEFLATE_MAX_RATIO > (uint64_t)file_bytes)
			return errbuf_set(err, -EIO, field, "%s: file is truncated or corrupt: voxel "
					  "data need %zu bytes, more than a gzip file of %lld bytes "
					  "can hold", path, data_bytes, (long long)file_bytes);
		return 0;
	}
	if (file_bytes < nim->iname_offset || (uint64_t)(file_bytes - nim->iname_offset) < data_bytes)
		return errbuf_set(err, -EIO, field,
				  "%s: file is truncated: voxel data need %zu bytes from offset %lld but the file has %lld bytes",
				  path, data_bytes, (long long)nim->iname_offset, (long long)file_bytes);
	return 0;
}

static size_t row_start(const struct volume *v, const struct row_cursor *row)
{
	return volume_index(v, 0, row->y, row->z) * (size_t)v->dim[3] + (size_t)row->t;
}

static void row_advance(const struct volume *v, struct row_cursor *row)
{
	if (++row->y < v->dim[1])
		return;
	row->y = 0;
	if (++row->z < v->dim[2])
		return;
	row->z = 0;
	row->t++;
}

static size_t rows_per_chunk(size_t row_bytes)
{
	return row_bytes >= IO_CHUNK_BYTES ? 1 : IO_CHUNK_BYTES / row_bytes;
}

/* ---- reading voxel data ----
 *
 * The file holds whole volumes one after another (t slowest); the data keep
 * each voxel's values together (t fastest). Values move in pieces of one
 * z-plane of up to BLOCK_VOLUMES consecutive volumes, interleaved so that a
 * voxel gets that many consecutive values at a time. An uncompressed file
 * is read piece by piece on every load thread at once, each piece into its
 * thread's buffer (small enough to stay in cache while it is interleaved).
 * A compressed file can only be inflated in order: one thread inflates a
 * block of whole volumes while the others interleave the previous block's
 * planes. */

/* Rows [y0, y1) of a z-plane of nb consecutive volumes [t0, t0 + nb) as
 * stored: volume t0 + b's plane starts at raw + b * stride. */
struct plane_piece {
	const unsigned char *raw;
	size_t stride;
	int64_t z, y0, y1;
	size_t t0, nb;
};

static bool plain_float32(const struct conversion *cv)
{
	return cv->read == read_float32 && cv->slope == 1.0 && cv->inter == 0.0;
}

static size_t file_voxels(const int64_t dim[4])
{
	return (size_t)dim[0] * (size_t)dim[1] * (size_t)dim[2];
}

/* Interleaves a piece of an image of shape file_dim into v's data, which
 * holds its z-planes [z0, z0 + v->dim[2]); returns the file index (t * nvox
 * + i) of its first non-finite value, or SIZE_MAX. Walks x, then y, so that
 * the piece's cache lines are reused along x and the data's writes stay
 * within one x-plane. */
static size_t interleave_plane(const struct plane_piece *p, const struct conversion *cv,
			       const int64_t file_dim[4], int64_t z0, struct volume *v)
{
	size_t nvox = file_voxels(file_dim), nt = (size_t)v->dim[3];
	int64_t nx = file_dim[0], ny = v->dim[1];
	size_t plane_first = (size_t)p->z * (size_t)nx * (size_t)ny;
	bool plain = plain_float32(cv);
	size_t bad = SIZE_MAX;

	for (int64_t x = 0; x < v->dim[0]; x++)
		for (int64_t y = p->y0; y < p->y1; y++) {
			size_t i = (size_t)(y * nx + x);
			const unsigned char *src = p->raw + i * cv->size;
			float *dst = v->data + volume_index(v, x, y, p->z - z0) * nt + p->t0;
			for (size_t b = 0; b < p->nb; b++, src += p->stride) {
				float f;
				if (plain)
					memcpy(&f, src, sizeof(f));
				else
					f = (float)(cv->read(src) * cv->slope + cv->inter);
				dst[b] = f;
				if (!isfinite(f) && (p->t0 + b) * nvox + plane_first + i < bad)
					bad = (p->t0 + b) * nvox + plane_first + i;
			}
		}
	return bad;
}

/* interleave_plane of a piece BLOCK_VOLUMES volumes at a time: a piece of
 * more (a row of every volume, volume_slabs_read) would read from as many
 * pages at each voxel, more than the TLB and the prefetchers follow. */
static size_t interleave_piece(const struct plane_piece *p, const struct conversion *cv,
			       const int64_t file_dim[4], int64_t z0, struct volume *v)
{
	size_t bad = SIZE_MAX;

	for (size_t b0 = 0; b0 < p->nb; b0 += BLOCK_VOLUMES) {
		struct plane_piece part = *p;
		size_t part_bad;
		part.raw += b0 * p->stride;
		part.t0 += b0;
		part.nb = p->nb - b0 < BLOCK_VOLUMES ? p->nb - b0 : BLOCK_VOLUMES;
		part_bad = interleave_plane(&part, cv, file_dim, z0, v);
		bad = part_bad < bad ? part_bad : bad;
	}
	return bad;
}

/* What the load threads share: the pieces to do (taken in turn from next),
 * how to get one, and the first failure. */
struct load_job {
	const struct conversion *cv;
	struct volume *v;
	/* The image's shape: v holds its z-planes [z0, z0 + v->dim[2]), all
	 * of them (z0 0, file_dim v->dim) unless read in slabs (volume_slabs). */
	const int64_t *file_dim;
	int64_t z0;
	/* y-rows of a plane per piece: whole planes, or one row when read from
	 * the mapping (volume_slabs_read). */
	size_t rows;
	size_t plane_bytes;       /* one z-plane of one volume, as stored */
	size_t n_items;
	atomic_size_t next;
	atomic_bool failed;
	/* An uncompressed file: item k is a piece of `rows` rows of plane
	 * z = k / pieces % nz of the k / (pieces * nz)-th group of `block`
	 * volumes (pieces per plane), read from fd, or in place from the mapped
	 * file when mapped is not NULL. */
	int fd;
	const unsigned char *mapped;
	int64_t data_offset;
	size_t block;
	int swapsize;             /* bytes to swap per value, or 0 */
	/* A compressed file: item k is plane k of the block in memory. */
	const unsigned char *block_raw;
	size_t block_t0, block_nb;
};

struct load_worker {
	struct load_job *job;
	unsigned char *buf;       /* an uncompressed file's piece */
	size_t bad;               /* first non-finite value's file index, or SIZE_MAX */
	int error;                /* 0, -EIO (the file ended early) or a read's -errno */
};

static int read_file_item(struct load_worker *w, size_t k, struct plane_piece *piece)
{
	const struct load_job *job = w->job;
	size_t nz = (size_t)job->v->dim[2], nt = (size_t)job->v->dim[3];
	size_t ny = (size_t)job->v->dim[1], pieces = (ny + job->rows - 1) / job->rows;
	size_t plane = k / pieces, y0 = k % pieces * job->rows;
	size_t y1 = ny - y0 < job->rows ? ny : y0 + job->rows;
	size_t nvox = file_voxels(job->file_dim), t0 = plane / nz * job->block;
	size_t nb = nt - t0 < job->block ? nt - t0 : job->block;
	size_t z = (size_t)job->z0 + plane % nz;

	if (job->mapped) {
		*piece = (struct plane_piece){
			.raw = job->mapped + job->data_offset + (t0 * nvox) * job->cv->size +
			       z * job->plane_bytes,
			.stride = nvox * job->cv->size, .z = (int64_t)z, .y0 = (int64_t)y0,
			.y1 = (int64_t)y1, .t0 = t0, .nb = nb,
		};
		return 0;
	}
	for (size_t b = 0; b < nb; b++) {
		int64_t at = job->data_offset + (int64_t)(((t0 + b) * nvox) * job->cv->size +
							   z * job->plane_bytes);
		int r = fdio_pread_all(job->fd, w->buf + b * job->plane_bytes, job->plane_bytes, (off_t)at);
		if (r < 0)
			return r;
	}
	if (job->swapsize > 1)
		nifti_swap_Nbytes((int64_t)(nb * job->plane_bytes / job->cv->size), job->swapsize,
				  w->buf);
	*piece = (struct plane_piece){ .raw = w->buf, .stride = job->plane_bytes, .z = (int64_t)z,
				       .y0 = (int64_t)y0, .y1 = (int64_t)y1, .t0 = t0, .nb = nb };
	return 0;
}

static void load_worker_main(void *arg)
{
	struct load_worker *w = arg;
	struct load_job *job = w->job;
	size_t k;

	while (!atomic_load(&job->failed) && (k = atomic_fetch_add(&job->next, 1)) < job->n_items) {
		struct plane_piece piece;
		size_t bad;
		if (job->block_raw) {
			piece = (struct plane_piece){
				.raw = job->block_raw + k * job->plane_bytes,
				.stride = file_voxels(job->file_dim) * job->cv->size,
				.z = (int64_t)k, .y0 = 0, .y1 = job->v->dim[1],
				.t0 = job->block_t0, .nb = job->block_nb,
			};
		} else {
			w->error = read_file_item(w, k, &piece);
			if (w->error < 0) {
				atomic_store(&job->failed, true);
				break;
			}
		}
		bad = interleave_piece(&piece, job->cv, job->file_dim, job->z0, job->v);
		w->bad = bad < w->bad ? bad : w->bad;
	}
}

/* A worker per thread (at most one per item): they take items from one
 * counter, so any of them may do all the work. */
static size_t load_threads(size_t items)
{
	return parallel_parts(items, 1);
}

/* The error for the non-finite value at file index bad (t * nvox + i) of
 * an image of shape dim; 0 when bad is SIZE_MAX. */
static int nonfinite_err(const char *path, const char *field, const int64_t dim[4], size_t bad,
			 struct errbuf *err)
{
	size_t nvox = file_voxels(dim), nx = (size_t)dim[0], i = bad % nvox;

	if (bad == SIZE_MAX)
		return 0;
	return errbuf_set(err, -EINVAL, field,
			  "%s: non-finite value at voxel (%zu, %zu, %zu), volume %zu", path,
			  i % nx, i / nx % (size_t)dim[1], i / (nx * (size_t)dim[1]),
			  bad / nvox);
}

/* The result of the workers: the first failure, or the first non-finite
 * value of an image of shape dim. */
static int workers_result(const struct load_worker *w, size_t n, const char *path,
			  const char *field, const int64_t dim[4], struct errbuf *err)
{
	size_t bad = SIZE_MAX;

	for (size_t k = 0; k < n; k++) {
		if (w[k].error == -EIO)
			return errbuf_set(err, -EIO, field, "%s: file is truncated or corrupt: "
					  "voxel data ended early", path);
		if (w[k].error < 0)
			return errbuf_set(err, -EIO, field, "%s: cannot read voxel data: %s", path,
					  strerror(-w[k].error));
		bad = w[k].bad < bad ? w[k].bad : bad;
	}
	return nonfinite_err(path, field, dim, bad, err);
}

static void free_workers(struct load_worker *w, size_t n)
{
	for (size_t i = 0; w && i < n; i++)
		free(w[i].buf);
	free(w);
}

/* n workers for job, each with a buffer of buf_bytes (none when 0). */
static struct load_worker *new_workers(struct load_job *job, size_t n, size_t buf_bytes)
{
	struct load_worker *w = calloc(n, sizeof(*w));

	for (size_t i = 0; w && i < n; i++) {
		w[i] = (struct load_worker){ .job = job, .bad = SIZE_MAX };
		if (buf_bytes && !(w[i].buf = malloc(buf_bytes))) {
			free_workers(w, n);
			return NULL;
		}
	}
	return w;
}

/* The workers pread from the file at their own offsets (job->fd is the
 * caller's, not closed here), or read the mapped file in place. */
static int read_uncompressed(const char *path, const char *field, struct load_job *job,
			     struct errbuf *err)
{
	size_t n = load_threads(job->n_items);
	struct load_worker *w = new_workers(job, n, job->mapped ? 0 : job->block * job->plane_bytes);
	int r;

	if (!w)
		return errbuf_set(err, -ENOMEM, field, "%s: out of memory", path);
	parallel_run(load_worker_main, w, sizeof(*w), n);
	r = workers_result(w, n, path, field, job->file_dim, err);
	free_workers(w, n);
	return r;
}

gzFile volume_gz_reopen(int image_fd)
{
	int fd = infile_reopen(image_fd);
	gzFile fp;

	if (fd < 0)
		return NULL;
	fp = gzdopen(fd, "rb");
	if (!fp)
		close(fd);
	return fp;
}

static bool inflate_block(gzFile fp, unsigned char *raw, size_t bytes, int swapsize,
			  size_t value_size)
{
	if (gzfread(raw, 1, bytes, fp) != bytes)
		return false;
	if (swapsize > 1)
		nifti_swap_Nbytes((int64_t)(bytes / value_size), swapsize, raw);
	return true;
}

/* Inflates whole volumes a block at a time, the next block while the
 * workers interleave the current one. */
static int read_compressed(const char *path, const char *field, const nifti_image *nim,
			   const struct image_file *f, struct load_job *job, struct errbuf *err)
{
	struct volume *v = job->v;
	size_t nt = (size_t)v->dim[3], vol_bytes = volume_voxels(v) * job->cv->size;
	size_t block = BLOCK_BYTES / vol_bytes, n = load_threads((size_t)v->dim[2]);
	struct parallel workers;
	unsigned char *raw[2] = { NULL, NULL };
	struct load_worker *w = new_workers(job, n, 0);
	gzFile fp;
	bool have;
	int r = 0;

	block = block < 1 ? 1 : block > BLOCK_VOLUMES ? BLOCK_VOLUMES : block;
	block = block > nt ? nt : block;
	raw[0] = malloc(block * vol_bytes);
	raw[1] = nt > block ? malloc(block * vol_bytes) : NULL;
	if (!w || !raw[0] || (nt > block && !raw[1])) {
		r = errbuf_set(err, -ENOMEM, field, "%s: out of memory", path);
		goto done;
	}
	fp = volume_gz_reopen(f->fd);
	if (!fp) {
		r = errbuf_set(err, -EIO, field, "%s: cannot read the compressed image", path);
		goto done;
	}
	if (gzseek(fp, (z_off_t)nim->iname_offset, SEEK_SET) < 0) {
		r = errbuf_set(err, -EIO, field, "%s: cannot seek to voxel data at offset %lld",
			       path, (long long)nim->iname_offset);
		gzclose(fp);
		goto done;
	}
	have = inflate_block(fp, raw[0], block * vol_bytes, job->swapsize, job->cv->size);
	for (size_t t0 = 0, cur = 0; t0 < nt && r == 0; t0 += block, cur ^= 1) {
		size_t nb = nt - t0 < block ? nt - t0 : block;
		size_t next = nt - (t0 + nb) < block ? nt - (t0 + nb) : block;
		if (!have) {
			r = errbuf_set(err, -EIO, field, "%s: file is truncated or corrupt: "
				       "voxel data ended early", path);
			break;
		}
		job->block_raw = raw[cur];
		job->block_t0 = t0;
		job->block_nb = nb;
		atomic_store(&job->next, 0);
		parallel_start(&workers, load_worker_main, w, sizeof(*w), n);
		if (next > 0)
			have = inflate_block(fp, raw[cur ^ 1], next * vol_bytes, job->swapsize,
					     job->cv->size);
		parallel_finish(&workers);
		r = workers_result(w, n, path, field, job->file_dim, err);
	}
	gzclose(fp);
done:
	free_workers(w, n);
	free(raw[0]);
	free(raw[1]);
	return r;
}

/* The voxel data of a large volume sit on transparent huge pages where the
 * kernel allows it: fewer page faults while they are filled, fewer TLB
 * misses while they are interleaved and uploaded, and a faster free. */
static float *alloc_voxel_data(size_t count)
{
	size_t bytes = count * sizeof(float);
	void *p = NULL;

	if (bytes < HUGE_DATA_BYTES)
		return malloc(bytes);
	if (posix_memalign(&p, HUGE_PAGE_BYTES, bytes) != 0)
		return NULL;
	(void)madvise(p, bytes, MADV_HUGEPAGE);   /* advice only: fine if refused */
	return p;
}

/* Whether the file holds the voxel data that nim announces where it says. */
static int check_voxel_data(const char *path, const char *field, const nifti_image *nim,
			    const struct image_file *f, size_t data_bytes, struct errbuf *err)
{
	if (nim->iname_offset < 0)
		return errbuf_set(err, -EINVAL, field, "%s: negative vox_offset is not supported", path);
	return check_data_size(path, field, nim, f, data_bytes, err);
}

/* An uncompressed file's items: each piece of `rows` rows of each z-plane
 * of every block of at most `block` volumes. */
static struct load_job *plan_uncompressed(struct load_job *job, size_t block, size_t rows)
{
	size_t nt = (size_t)job->v->dim[3], ny = (size_t)job->v->dim[1];

	job->block = nt < block ? nt : block;
	job->rows = rows;
	job->n_items = (nt + job->block - 1) / job->block * (size_t)job->v->dim[2] *
		       ((ny + rows - 1) / rows);
	return job;
}

static int read_voxels(const char *path, const char *field, const nifti_image *nim,
		       const struct image_file *f, const struct conversion *cv, struct volume *v,
		       struct errbuf *err)
{
	size_t count = data_count(v), data_bytes = count * cv->size;
	struct load_job job = {
		.cv = cv, .v = v, .file_dim = v->dim,
		.plane_bytes = (size_t)v->dim[0] * (size_t)v->dim[1] * cv->size,
		.fd = f->fd, .data_offset = nim->iname_offset,
		.swapsize = nim->swapsize > 1 && nim->byteorder != nifti_short_order() ?
			    nim->swapsize : 0,
	};
	int rc = check_voxel_data(path, field, nim, f, data_bytes, err);

	if (rc)
		return rc;
	v->data = alloc_voxel_data(count);
	if (!v->data)
		return errbuf_set(err, -ENOMEM, field, "%s: out of memory for %zu voxel values", path, count);
	atomic_init(&job.next, 0);
	atomic_init(&job.failed, false);
	if (f->gz) {
		job.n_items = (size_t)v->dim[2];
		return read_compressed(path, field, nim, f, &job, err);
	}
	return read_uncompressed(path, field,
				 plan_uncompressed(&job, BLOCK_VOLUMES, (size_t)v->dim[1]), err);
}

/* Up to len bytes from the start of f (inflated when f->gz) into buf;
 * *got says how many. */
static int read_head(const struct image_file *f, unsigned char *buf, size_t len, size_t *got)
{
	gzFile fp;
	ssize_t n;

	if (!f->gz) {
		do
			n = pread(f->fd, buf, len, 0);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return -errno;
		*got = (size_t)n;
		return 0;
	}
	fp = volume_gz_reopen(f->fd);
	if (!fp)
		return -EIO;
	*got = gzfread(buf, 1, len, fp);
	gzclose(fp);
	return 0;
}

static bool magic_is(const unsigned char *head, size_t at, const char *magic)
{
	return memcmp(head + at, magic, 4) == 0;
}

/* Which NIfTI version head's sizeof_hdr announces, in either byte order:
 * 1, 2, or 0 for none. */
static int header_version(const unsigned char *head, size_t got)
{
	int32_t size;

	if (got < sizeof(nifti_1_header))
		return 0;
	memcpy(&size, head, sizeof(size));
	if (size == (int32_t)sizeof(nifti_1_header) ||
	    size == (int32_t)__builtin_bswap32(sizeof(nifti_1_header)))
		return 1;
	if (got == HEADER_BYTES && (size == (int32_t)sizeof(nifti_2_header) ||
				    size == (int32_t)__builtin_bswap32(sizeof(nifti_2_header))))
		return 2;
	return 0;
}

/* Checks that head is a one-file NIfTI header and interprets it: *raw as
 * stored, its shape into dim, *ret as libnifti reads it. A .hdr/.img pair (or an ANALYZE
 * header) is refused, since its data would be in a file nobody opened. */
static int parse_header(const char *path, const char *field, const unsigned char *head,
			size_t got, struct raw_header *raw, int64_t dim[4], nifti_image **ret,
			struct errbuf *err)
{
	int nver = header_version(head, got);
	union { nifti_1_header h1; nifti_2_header h2; } copy;
	nifti_image *nim;
	int rc;

	if (nver == 0)
		return errbuf_set(err, -EINVAL, field, "%s: not a NIfTI-1/-2 image (.nii or .nii.gz)",
				  path);
	if (nver == 1 ? !magic_is(head, NIFTI1_MAGIC_AT, "n+1") : !magic_is(head, NIFTI2_MAGIC_AT, "n+2"))
		return errbuf_set(err, -EINVAL, field, "%s: not a one-file NIfTI image: header and "
				  "data must be in one .nii or .nii.gz (a .hdr/.img pair is not "
				  "read)", path);
	memcpy(&copy, head, nver == 1 ? sizeof(copy.h1) : sizeof(copy.h2));
	raw_from_header(&copy, nver, raw);
	/* The shape is checked before libnifti sees the header: Debian 12's
	 * libnifti does not bound a NIfTI-2 dim[0] and writes past its stack
	 * (and ours) for dim[0] > 7 (found by tests/fuzz/fuzz_nifti). */
	rc = shape_from_header(path, field, raw, dim, err);
	if (rc)
		return rc;
	memcpy(&copy, head, nver == 1 ? sizeof(copy.h1) : sizeof(copy.h2));
	nim = nver == 1 ? nifti_convert_n1hdr2nim(copy.h1, path)
			: nifti_convert_n2hdr2nim(copy.h2, path);
	if (!nim)
		return errbuf_set(err, -EINVAL, field, "%s: not a readable NIfTI-1/-2 image", path);
	*ret = nim;
	return 0;
}

/* v->dim already holds the shape of raw (shape_from_header). */
static int load_image(const char *path, const char *field, const nifti_image *nim,
		      const struct image_file *f, const struct raw_header *raw, struct volume *v,
		      struct errbuf *err)
{
	struct conversion cv;
	int rc = conversion_for(path, field, nim, raw, &cv, err);

	if (!rc)
		rc = best_affine(path, field, nim, raw, v->affine, err);
	if (!rc)
		rc = read_voxels(path, field, nim, f, &cv, v, err);
	return rc;
}

int volume_describe_fd(int fd, int64_t *bytes, bool *gz)
{
	unsigned char magic[2];
	struct stat st;
	ssize_t n;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	do
		n = pread(fd, magic, sizeof(magic), 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	*bytes = st.st_size;
	*gz = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
	return 0;
}

/* What f is: its size, and whether it is gzip-compressed. */
static int describe_file(int fd, struct image_file *f)
{
	*f = (struct image_file){ .fd = fd };
	return volume_describe_fd(fd, &f->bytes, &f->gz);
}

static int read_header_fd(int fd, const char *path, const char *field, struct image_file *f,
			  struct raw_header *raw, int64_t dim[4], nifti_image **nim,
			  struct errbuf *err)
{
	unsigned char head[HEADER_BYTES];
	size_t got = 0;
	int rc = describe_file(fd, f);

	if (rc == -EINVAL)
		return errbuf_set(err, -EINVAL, field, "%s: not a regular file", path);
	if (rc == 0)
		rc = read_head(f, head, sizeof(head), &got);
	if (rc)
		return errbuf_set(err, -EIO, field, "%s: cannot read: %s", path, strerror(-rc));
	/* libnifti reports problems on stderr unless quiet; ours go to err. */
	nifti_set_debug_level(0);
	return parse_header(path, field, head, got, raw, dim, nim, err);
}

int volume_load_fd(int fd, const char *path, const char *field, struct volume *ret,
		   struct errbuf *err)
{
	struct raw_header raw;
	struct image_file f = { .fd = -1 };
	struct volume v;
	nifti_image *nim = NULL;
	int rc;

	memset(&v, 0, sizeof(v));
	rc = read_header_fd(fd, path, field, &f, &raw, v.dim, &nim, err);
	if (rc == 0)
		rc = load_image(path, field, nim, &f, &raw, &v, err);
	nifti_image_free(nim);
	if (rc) {
		volume_free(&v);
		return rc;
	}
	*ret = v;
	return 0;
}

int volume_host_bytes(const int64_t dim[4], size_t stored_size, uint64_t *ret)
{
	uint64_t n = 1, per_value, bytes;

	for (int i = 0; i < 4; i++)
		if (dim[i] <= 0 || __builtin_mul_overflow(n, (uint64_t)dim[i], &n))
			return -EOVERFLOW;
	if (__builtin_add_overflow((uint64_t)stored_size, (uint64_t)sizeof(float), &per_value) ||
	    __builtin_mul_overflow(n, per_value, &bytes))
		return -EOVERFLOW;
	*ret = bytes;
	return 0;
}

int volume_probe_fd(int fd, const char *path, const char *field, int64_t dim[4],
		    size_t *stored_size, struct errbuf *err)
{
	struct raw_header raw;
	struct image_file f = { .fd = -1 };
	nifti_image *nim = NULL;
	int nbyper = 0, swapsize = 0;
	int rc = read_header_fd(fd, path, field, &f, &raw, dim, &nim, err);

	nifti_image_free(nim);
	if (rc)
		return rc;
	nifti_datatype_sizes(raw.datatype, &nbyper, &swapsize);
	if (!reader_for_datatype(raw.datatype) || nbyper <= 0)
		return errbuf_set(err, -EINVAL, field, "%s: datatype %s (%d) is not supported; "
				  "expected a real-valued integer or float type", path,
				  nifti_datatype_string(raw.datatype), raw.datatype);
	*stored_size = (size_t)nbyper;
	return 0;
}

int volume_open(const char *path, const char *field, int *fd, struct errbuf *err)
{
	int rc = infile_open(path, fd);

	if (rc == -ENOENT)
		return errbuf_set(err, -ENOENT, field, "%s: not found or not permitted", path);
	if (rc == -EINVAL)
		return errbuf_set(err, -EINVAL, field, "%s: not a regular file", path);
	if (rc)
		return errbuf_set(err, -EIO, field, "%s: cannot open: %s", path, strerror(-rc));
	return 0;
}

int volume_load(const char *path, const char *field, struct volume *ret, struct errbuf *err)
{
	int fd, rc = volume_open(path, field, &fd, err);

	if (rc)
		return rc;
	rc = volume_load_fd(fd, path, field, ret, err);
	close(fd);
	return rc;
}

int volume_probe(const char *path, const char *field, int64_t dim[4], size_t *stored_size,
		 struct errbuf *err)
{
	int fd, rc = volume_open(path, field, &fd, err);

	if (rc)
		return rc;
	rc = volume_probe_fd(fd, path, field, dim, stored_size, err);
	close(fd);
	return rc;
}

/* ---- reading in z-slabs ----
 *
 * The file is mapped, and a slab's pieces (z-planes of blocks of volumes,
 * as read_uncompressed's) are interleaved straight from the mapping: for
 * each volume a slab is one contiguous run of the file, so the slabs
 * together read each page of the file once, and no copy of the whole
 * image is made. */

struct volume_slabs {
	struct conversion cv;
	int64_t dim[4];
	const unsigned char *map;
	size_t map_bytes;
	int64_t data_offset;
	char *path;
	const char *field;
};

/* Whether f's voxel data can be read in place: uncompressed, in the
 * host's byte order. */
static bool readable_in_place(const struct image_file *f, const nifti_image *nim)
{
	return !f->gz && !(nim->swapsize > 1 && nim->byteorder != nifti_short_order());
}

static int map_image(const char *path, const char *field, const nifti_image *nim,
		     const struct image_file *f, const struct raw_header *raw,
		     struct volume *header, struct volume_slabs *s, struct errbuf *err)
{
	void *map;
	int rc = conversion_for(path, field, nim, raw, &s->cv, err);

	if (!rc)
		rc = best_affine(path, field, nim, raw, header->affine, err);
	if (!rc)
		rc = check_voxel_data(path, field, nim, f, data_count(header) * s->cv.size, err);
	if (rc)
		return rc;
	map = mmap(NULL, (size_t)f->bytes, PROT_READ, MAP_SHARED, f->fd, 0);
	if (map == MAP_FAILED)
		return errbuf_set(err, -EIO, field, "%s: cannot map: %s", path, strerror(errno));
	s->map = map;
	s->map_bytes = (size_t)f->bytes;
	s->data_offset = nim->iname_offset;
	memcpy(s->dim, header->dim, sizeof(s->dim));
	s->field = field;
	return 0;
}

int volume_slabs_open(int fd, const char *path, const char *field, struct volume *header,
		      struct volume_slabs **ret, struct errbuf *err)
{
	struct raw_header raw;
	struct image_file f = { .fd = -1 };
	struct volume v;
	nifti_image *nim = NULL;
	struct volume_slabs *s = NULL;
	int rc;

	memset(&v, 0, sizeof(v));
	*ret = NULL;
	rc = read_header_fd(fd, path, field, &f, &raw, v.dim, &nim, err);
	if (rc == 0 && readable_in_place(&f, nim)) {
		s = calloc(1, sizeof(*s));
		if (!s || !(s->path = strdup(path)))
			rc = errbuf_set(err, -ENOMEM, field, "%s: out of memory", path);
		if (rc == 0)
			rc = map_image(path, field, nim, &f, &raw, &v, s, err);
	}
	nifti_image_free(nim);
	if (rc) {
		volume_slabs_close(s);
		return rc;
	}
	*header = v;
	*ret = s;
	return 0;
}

/* Drops the mapping's pages from the process (the page cache keeps them),
 * so that it holds one slab's, not the whole image: one call per slab, as a
 * call per piece would cost every thread a TLB flush each time. */
static void unmap_read_pages(const struct volume_slabs *s)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t first = (uintptr_t)s->map & ~(page - 1);
	uintptr_t end = ((uintptr_t)s->map + s->map_bytes) & ~(page - 1);

	if (end > first)
		(void)madvise((void *)first, end - first, MADV_DONTNEED);   /* advice only */
}

int volume_slabs_read(struct volume_slabs *s, int64_t z0, struct volume *slab,
		      struct errbuf *err)
{
	struct load_job job = {
		.cv = &s->cv, .v = slab, .file_dim = s->dim, .z0 = z0,
		.plane_bytes = (size_t)s->dim[0] * (size_t)s->dim[1] * s->cv.size,
		.fd = -1, .mapped = s->map, .data_offset = s->data_offset,
	};
	int r;

	atomic_init(&job.next, 0);
	atomic_init(&job.failed, false);
	/* A piece is one row of x of every volume: it reads a run of each
	 * volume and writes whole voxels, both small enough to stay in the
	 * caches and the TLB (a whole plane of a block of volumes, as
	 * read_voxels takes, walks hundreds of pages for each row of x). */
	r = read_uncompressed(s->path, s->field,
			      plan_uncompressed(&job, (size_t)slab->dim[3], 1), err);
	unmap_read_pages(s);
	return r;
}

const unsigned char *volume_slabs_float32(const struct volume_slabs *s)
{
	return plain_float32(&s->cv) ? s->map + s->data_offset : NULL;
}

void volume_slabs_drop_pages(const struct volume_slabs *s)
{
	unmap_read_pages(s);
}

int volume_slabs_check_finite(const struct volume_slabs *s, int64_t z0, int64_t planes,
			      struct errbuf *err)
{
	size_t nvox = file_voxels(s->dim), first = (size_t)z0 * (size_t)s->dim[0] * (size_t)s->dim[1];
	size_t n = (size_t)planes * (size_t)s->dim[0] * (size_t)s->dim[1];
	const unsigned char *data = s->map + s->data_offset;

	/* The first in file order (volume by volume), as volume_slabs_read names it. */
	for (size_t t = 0; t < (size_t)s->dim[3]; t++)
		for (size_t i = first; i < first + n; i++) {
			float f;
			memcpy(&f, data + (t * nvox + i) * sizeof(f), sizeof(f));
			if (!isfinite(f))
				return nonfinite_err(s->path, s->field, s->dim, t * nvox + i, err);
		}
	return 0;
}

void volume_slabs_close(struct volume_slabs *s)
{
	if (!s)
		return;
	if (s->map)
		munmap((void *)s->map, s->map_bytes);
	free(s->path);
	free(s);
}

/* ---- saving ---- */

static int fill_nifti1_header(const char *path, const struct volume *v, nifti_1_header *h,
			      struct errbuf *err)
{
	nifti_dmat44 m;
	double qb, qc, qd, qx, qy, qz, dx, dy, dz, qfac, zooms[3];

	memset(h, 0, sizeof(*h));
	for (int i = 0; i < 4; i++)
		if (v->dim[i] > INT16_MAX)
			return errbuf_set(err, -EINVAL, NULL,
					  "%s: dimension %d has size %lld; NIfTI-1 allows at most %d",
					  path, i, (long long)v->dim[i], INT16_MAX);
	h->sizeof_hdr = (int)sizeof(*h);
	h->dim[0] = v->dim[3] > 1 ? 4 : 3;
	for (int i = 0; i < 4; i++)
		h->dim[i + 1] = (short)v->dim[i];
	for (int i = 5; i < 8; i++)
		h->dim[i] = 1;
	h->datatype = NIFTI_TYPE_FLOAT32;
	h->bitpix = 32;
	affine_voxel_sizes(v->affine, zooms);
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			m.m[r][c] = v->affine[r][c];
	nifti_dmat44_to_quatern(m, &qb, &qc, &qd, &qx, &qy, &qz, &dx, &dy, &dz, &qfac);
	h->pixdim[0] = (float)qfac;
	for (int i = 0; i < 3; i++)
		h->pixdim[i + 1] = (float)zooms[i];
	for (int i = 4; i < 8; i++)
		h->pixdim[i] = 1.0f;
	h->vox_offset = NIFTI1_DATA_OFFSET;
	h->scl_slope = 1.0f;
	h->xyzt_units = NIFTI_UNITS_MM;
	h->qform_code = NIFTI_XFORM_SCANNER_ANAT;
	h->sform_code = NIFTI_XFORM_SCANNER_ANAT;
	h->quatern_b = (float)qb;
	h->quatern_c = (float)qc;
	h->quatern_d = (float)qd;
	h->qoffset_x = (float)qx;
	h->qoffset_y = (float)qy;
	h->qoffset_z = (float)qz;
	for (int c = 0; c < 4; c++) {
		h->srow_x[c] = (float)v->affine[0][c];
		h->srow_y[c] = (float)v->affine[1][c];
		h->srow_z[c] = (float)v->affine[2][c];
	}
	memcpy(h->magic, "n+1", 4);
	return 0;
}

static void gather_row(const struct volume *v, const struct row_cursor *row, float *dst)
{
	size_t stride = (size_t)v->dim[1] * (size_t)v->dim[2] * (size_t)v->dim[3];
	const float *src = v->data + row_start(v, row);

	for (int64_t x = 0; x < v->dim[0]; x++)
		dst[x] = src[(size_t)x * stride];
}

static int write_rows(znzFile fp, const struct volume *v)
{
	size_t row_bytes = (size_t)v->dim[0] * sizeof(float);
	size_t rows_left = (size_t)v->dim[1] * (size_t)v->dim[2] * (size_t)v->dim[3];
	size_t chunk_rows = rows_per_chunk(row_bytes);
	struct row_cursor row = { 0, 0, 0 };
	float *buf = malloc(chunk_rows * row_bytes);
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	while (rows_left > 0 && rc == 0) {
		size_t n = rows_left < chunk_rows ? rows_left : chunk_rows;

		for (size_t r = 0; r < n; r++, row_advance(v, &row))
			gather_row(v, &row, buf + r * (size_t)v->dim[0]);
		if (znzwrite(buf, 1, n * row_bytes, fp) != n * row_bytes)
			rc = -EIO;
		rows_left -= n;
	}
	free(buf);
	return rc;
}

static int write_nifti1(const char *path, const struct volume *v, const nifti_1_header *h,
			struct errbuf *err)
{
	static const unsigned char no_extensions[4] = { 0 };
	znzFile fp;
	int rc = 0;

	errno = 0;
	fp = znzopen(path, "wb", nifti_is_gzfile(path));
	if (znz_isnull(fp))
		return errbuf_set(err, -EIO, NULL, "%s: cannot create: %s", path,
				  errno ? strerror(errno) : "open failed");
	if (znzwrite(h, 1, sizeof(*h), fp) != sizeof(*h) ||
	    znzwrite(no_extensions, 1, sizeof(no_extensions), fp) != sizeof(no_extensions))
		rc = -EIO;
	else
		rc = write_rows(fp, v);
	if (znzclose(fp) != 0 && rc == 0)
		rc = -EIO;
	if (rc) {
		remove(path);
		return errbuf_set(err, rc, NULL, "%s: %s", path,
				  rc == -ENOMEM ? "out of memory while writing" : "write failed");
	}
	return 0;
}

int volume_save(const char *path, const struct volume *v, struct errbuf *err)
{
	nifti_1_header h;
	size_t count;
	int rc;

	if (!v->data || checked_count(v->dim, &count))
		return errbuf_set(err, -EINVAL, NULL, "%s: volume has no data or an invalid shape", path);
	rc = fill_nifti1_header(path, v, &h, err);
	if (rc)
		return rc;
	return write_nifti1(path, v, &h, err);
}
