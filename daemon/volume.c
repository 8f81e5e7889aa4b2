/* SPDX-License-Identifier: MIT */
/*
 * volume: NIfTI reading and writing. libnifti2 parses headers and resolves
 * file names; voxel data are read here because libnifti silently replaces
 * NaN/Inf with 0 and cannot tell a truncated file from other failures.
 */
#include "volume.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nifti2_io.h>

#include "affine.h"

/* Writing: voxel data move through a buffer of whole x-rows of about this size. */
#define IO_CHUNK_BYTES ((size_t)4 << 20)
/* Reading: up to BLOCK_VOLUMES whole volumes (at most BLOCK_BYTES of them)
 * are read at once and interleaved into the t-fastest array by up to
 * MAX_LOAD_THREADS threads. */
#define BLOCK_BYTES ((size_t)256 << 20)
#define BLOCK_VOLUMES 16
#define MAX_LOAD_THREADS 16

#define NIFTI1_DATA_OFFSET 352

/* Header fields as stored in the file; libnifti rewrites zero dims to 1 and
 * non-finite scaling to 0, both of which must be rejected or honoured as
 * nibabel does. */
struct raw_header {
	int64_t ndim;
	int64_t dim[8];
	double pixdim[8];
	double scl_slope;
	double scl_inter;
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

/* The header as stored, in host byte order. nim->nifti_type cannot tell the
 * versions apart (libnifti reports NIfTI-2 files as NIfTI-1), hence nver. */
static int read_raw_header(const char *path, struct raw_header *raw)
{
	int nver = -1;
	void *h = nifti_read_header(path, &nver, 0);

	if (!h)
		return -EINVAL;
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
	}
	free(h);
	raw->ndim = raw->dim[0];
	return 0;
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
			   size_t data_bytes, struct errbuf *err)
{
	int64_t file_bytes = nifti_get_filesize(nim->iname);

	if (file_bytes < 0)
		return errbuf_set(err, -EIO, field, "%s: cannot determine the size of %s", path, nim->iname);
	if (nifti_is_gzfile(nim->iname)) {
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

/* One thread's share of a block of volumes: the x-planes [x0, x1) of the
 * t-fastest array, converted from the block's raw volumes (file order). */
struct block_part {
	const unsigned char *raw;
	const struct conversion *cv;
	struct volume *v;
	size_t nb, t0;              /* volumes in the block, and the first one's index */
	int64_t x0, x1;
	size_t bad;                 /* first non-finite value (b * nvox + i), or SIZE_MAX */
	pthread_t thread;
};

static float convert_value(const struct block_part *p, size_t k)
{
	const struct conversion *cv = p->cv;

	return (float)(cv->read(p->raw + k * cv->size) * cv->slope + cv->inter);
}

/* Writes each voxel's nb values side by side, walking the destination in
 * order: the raw reads are the scattered ones, and threads write apart. */
static void *convert_part(void *arg)
{
	struct block_part *p = arg;
	const struct volume *v = p->v;
	size_t nvox = volume_voxels(v), nt = (size_t)v->dim[3];
	int64_t nx = v->dim[0], ny = v->dim[1], nz = v->dim[2];
	bool plain = p->cv->read == read_float32 && p->cv->slope == 1.0 && p->cv->inter == 0.0;
	const float *raw_f = (const float *)(const void *)p->raw;

	p->bad = SIZE_MAX;
	for (int64_t x = p->x0; x < p->x1; x++)
		for (int64_t y = 0; y < ny; y++)
			for (int64_t z = 0; z < nz; z++) {
				size_t i = (size_t)((z * ny + y) * nx + x);
				float *dst = v->data + volume_index(v, x, y, z) * nt + p->t0;
				for (size_t b = 0; b < p->nb; b++) {
					size_t k = b * nvox + i;
					float f = plain ? raw_f[k] : convert_value(p, k);
					dst[b] = f;
					if (!isfinite(f) && k < p->bad)
						p->bad = k;
				}
			}
	return NULL;
}

static size_t load_threads(int64_t nx)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t n = cpus > 0 ? (size_t)cpus : 1;

	n = n > MAX_LOAD_THREADS ? MAX_LOAD_THREADS : n;
	return n > (size_t)nx ? (size_t)nx : n;
}

/* A block being converted on up to load_threads() threads, while the calling
 * thread reads the next one. */
struct block_job {
	struct block_part parts[MAX_LOAD_THREADS];
	bool started[MAX_LOAD_THREADS];
	size_t n;
};

static void start_block(struct block_job *job, const unsigned char *raw,
			const struct conversion *cv, size_t nb, size_t t0, struct volume *v)
{
	job->n = load_threads(v->dim[0]);
	for (size_t k = 0; k < job->n; k++) {
		job->parts[k] = (struct block_part){ .raw = raw, .cv = cv, .v = v, .nb = nb,
						     .t0 = t0,
						     .x0 = v->dim[0] * (int64_t)k / (int64_t)job->n,
						     .x1 = v->dim[0] * (int64_t)(k + 1) / (int64_t)job->n };
		job->started[k] = pthread_create(&job->parts[k].thread, NULL, convert_part,
						 &job->parts[k]) == 0;
	}
}

/* Waits for the block (a share whose thread could not start is converted
 * here); returns the first non-finite value's index (b * nvox + i) or
 * SIZE_MAX. */
static size_t finish_block(struct block_job *job)
{
	size_t bad = SIZE_MAX;

	for (size_t k = 0; k < job->n; k++) {
		if (job->started[k])
			pthread_join(job->parts[k].thread, NULL);
		else
			convert_part(&job->parts[k]);
		bad = job->parts[k].bad < bad ? job->parts[k].bad : bad;
	}
	return bad;
}

static bool read_block(znzFile fp, unsigned char *raw, size_t bytes, int swap, size_t values,
		       int swapsize)
{
	if (znzread(raw, 1, bytes, fp) != bytes)
		return false;
	if (swap)
		nifti_swap_Nbytes((int64_t)values, swapsize, raw);
	return true;
}

/* Reads whole volumes a block at a time (the file is t-slowest, the data
 * t-fastest), converting and checking each value; a block is read while
 * the one before is converted. Blocks of 16 volumes give each voxel a
 * cache line of float values per pass. */
static int read_volumes(znzFile fp, const char *path, const char *field, const nifti_image *nim,
			const struct conversion *cv, struct volume *v, struct errbuf *err)
{
	size_t nvox = volume_voxels(v), nt = (size_t)v->dim[3];
	size_t vol_bytes = nvox * cv->size;
	size_t block = BLOCK_BYTES / vol_bytes;
	int swap = nim->swapsize > 1 && nim->byteorder != nifti_short_order();
	unsigned char *raw[2];
	struct block_job job;
	bool have;
	int rc = 0;

	block = block < 1 ? 1 : block > BLOCK_VOLUMES ? BLOCK_VOLUMES : block;
	block = block > nt ? nt : block;
	raw[0] = malloc(block * vol_bytes);
	raw[1] = nt > block ? malloc(block * vol_bytes) : NULL;
	if (!raw[0] || (nt > block && !raw[1])) {
		free(raw[0]);
		free(raw[1]);
		return errbuf_set(err, -ENOMEM, field, "%s: out of memory", path);
	}
	have = read_block(fp, raw[0], (nt < block ? nt : block) * vol_bytes, swap,
			  (nt < block ? nt : block) * nvox, nim->swapsize);
	for (size_t t0 = 0, cur = 0; t0 < nt && rc == 0; t0 += block, cur ^= 1) {
		size_t nb = nt - t0 < block ? nt - t0 : block, bad;
		size_t next = nt - (t0 + nb) < block ? nt - (t0 + nb) : block;
		if (!have) {
			rc = errbuf_set(err, -EIO, field, "%s: file is truncated or corrupt: "
					"voxel data ended early", path);
			break;
		}
		start_block(&job, raw[cur], cv, nb, t0, v);
		if (next > 0)
			have = read_block(fp, raw[cur ^ 1], next * vol_bytes, swap, next * nvox,
					  nim->swapsize);
		bad = finish_block(&job);
		if (bad != SIZE_MAX) {
			size_t i = bad % nvox;
			rc = errbuf_set(err, -EINVAL, field,
					"%s: non-finite value at voxel (%lld, %lld, %lld), volume %zu",
					path, (long long)(i % (size_t)v->dim[0]),
					(long long)(i / (size_t)v->dim[0] % (size_t)v->dim[1]),
					(long long)(i / ((size_t)v->dim[0] * (size_t)v->dim[1])),
					t0 + bad / nvox);
		}
	}
	free(raw[0]);
	free(raw[1]);
	return rc;
}

static int read_voxels(const char *path, const char *field, const nifti_image *nim,
		       const struct conversion *cv, struct volume *v, struct errbuf *err)
{
	size_t count = data_count(v), data_bytes = count * cv->size;
	znzFile fp;
	int rc;

	if (nim->iname_offset < 0)
		return errbuf_set(err, -EINVAL, field, "%s: negative vox_offset is not supported", path);
	rc = check_data_size(path, field, nim, data_bytes, err);
	if (rc)
		return rc;
	v->data = malloc(count * sizeof(float));
	if (!v->data)
		return errbuf_set(err, -ENOMEM, field, "%s: out of memory for %zu voxel values", path, count);
	fp = znzopen(nim->iname, "rb", nifti_is_gzfile(nim->iname));
	if (znz_isnull(fp))
		return errbuf_set(err, -EIO, field, "%s: cannot open image data %s", path, nim->iname);
	if (znzseek(fp, (znz_off_t)nim->iname_offset, SEEK_SET) < 0)
		rc = errbuf_set(err, -EIO, field, "%s: cannot seek to voxel data at offset %lld", path,
				(long long)nim->iname_offset);
	else
		rc = read_volumes(fp, path, field, nim, cv, v, err);
	znzclose(fp);
	return rc;
}

static int check_readable(const char *path, const char *field, struct errbuf *err)
{
	struct stat st;
	FILE *f;

	if (stat(path, &st) != 0)
		return errbuf_set(err, -ENOENT, field, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return errbuf_set(err, -EINVAL, field, "%s: not a regular file", path);
	f = fopen(path, "rb");
	if (!f)
		return errbuf_set(err, -ENOENT, field, "%s: %s", path, strerror(errno));
	fclose(f);
	return 0;
}

/* v->dim already holds the shape of raw (shape_from_header). */
static int load_image(const char *path, const char *field, const nifti_image *nim,
		      const struct raw_header *raw, struct volume *v, struct errbuf *err)
{
	struct conversion cv;
	int rc = conversion_for(path, field, nim, raw, &cv, err);

	if (!rc)
		rc = best_affine(path, field, nim, raw, v->affine, err);
	if (!rc)
		rc = read_voxels(path, field, nim, &cv, v, err);
	return rc;
}

int volume_load(const char *path, const char *field, struct volume *ret, struct errbuf *err)
{
	struct raw_header raw;
	struct volume v;
	nifti_image *nim;
	int rc = check_readable(path, field, err);

	if (rc)
		return rc;
	memset(&v, 0, sizeof(v));
	/* libnifti reports problems on stderr unless quiet; ours go to err. */
	nifti_set_debug_level(0);
	/* The shape is checked before nifti_image_read(): Debian 12's libnifti
	 * does not bound a NIfTI-2 dim[0] and writes past its stack (and ours)
	 * for dim[0] > 7 (found by tests/fuzz/fuzz_nifti). */
	if (read_raw_header(path, &raw))
		return errbuf_set(err, -EINVAL, field,
				  "%s: not a readable NIfTI-1/-2 image (.nii, .nii.gz or .hdr/.img)", path);
	rc = shape_from_header(path, field, &raw, v.dim, err);
	if (rc)
		return rc;
	nim = nifti_image_read(path, 0);
	if (!nim)
		return errbuf_set(err, -EINVAL, field,
				  "%s: not a readable NIfTI-1/-2 image (.nii, .nii.gz or .hdr/.img)", path);
	rc = load_image(path, field, nim, &raw, &v, err);
	nifti_image_free(nim);
	if (rc) {
		volume_free(&v);
		return rc;
	}
	*ret = v;
	return 0;
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
