/* SPDX-License-Identifier: MIT */
/*
 * volume: NIfTI-1/-2 images (.nii, .nii.gz) read into float32 and written back.
 *
 * Owns the converted voxel data of one image, read from one open file (see
 * volume_load_fd). Headers are interpreted by libnifti2
 * (which handles both NIfTI versions and gzip); any numeric datatype is
 * converted to float32 with scl_slope/scl_inter applied as nibabel's
 * get_fdata() does. Data are stored in C order [x][y][z][t], t fastest, so that
 * the values of one voxel (e.g. all ODF samples) are contiguous.
 * The affine is nibabel's "best affine": sform if sform_code > 0, else qform if
 * qform_code > 0, else the pixdim-only fallback. Does not log.
 */
#ifndef TRACTD_VOLUME_H
#define TRACTD_VOLUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#include "base/errbuf.h"

struct volume {
	int64_t dim[4];        /* nx, ny, nz, nt; nt == 1 for a 3D image */
	double affine[4][4];   /* voxel centre (i,j,k,1) -> RAS+ mm */
	float *data;           /* dim[0]*dim[1]*dim[2]*dim[3] floats, [x][y][z][t] */
};

/* Reads path (one file, as named: "x" is not "x.nii") into *ret (ret is
 * written only on success). Rejects: missing or unreadable files (-ENOENT,
 * "not found or not permitted"), anything but a regular file, unreadable or
 * truncated files, non-numeric or complex datatypes, more than 4 used
 * dimensions (a 5th dimension of size 1 is accepted), zero-sized dimensions,
 * and non-finite values (NaN/Inf; the message gives the first offending voxel).
 * field is the name used in errors (e.g. "inputs.odf").
 * Returns 0 or a negative errno (-ENOENT, -EINVAL, -EIO, -ENOMEM). */
int volume_load(const char *path, const char *field, struct volume *ret, struct errbuf *err);

/* The same from fd, an open regular file that is read only through fd
 * (never closed here; its offset may move); path only names it in
 * messages. Header and data must be in that one file: a .hdr/.img pair,
 * and ANALYZE, are refused (-EINVAL). */
int volume_load_fd(int fd, const char *path, const char *field, struct volume *ret,
		   struct errbuf *err);

/* Opens path as the calling user (infile.h) into *fd (close it), with
 * volume_load's errors naming field: the opening every image reader of a
 * path shares (image.h). */
int volume_open(const char *path, const char *field, int *fd, struct errbuf *err);

/* A gzip stream over a new descriptor of the open file image_fd, from its
 * start (gzclose closes both; image_fd stays open), or NULL: how .nii.gz
 * and .mif.gz are inflated. */
gzFile volume_gz_reopen(int image_fd);

/* The open image file fd's size, and whether it starts with the gzip magic
 * (by its content, not its name); -EINVAL when it is not a regular file,
 * else 0 or -errno. How .nii(.gz) and .mif(.gz) files are told apart. */
int volume_describe_fd(int fd, int64_t *bytes, bool *gz);

/* Host memory that loading an image of shape dim whose values are stored in
 * stored_size bytes takes at most: each value as stored (read or inflated)
 * and as the float32 it becomes. -EOVERFLOW when that exceeds 2^64 - 1. */
int volume_host_bytes(const int64_t dim[4], size_t stored_size, uint64_t *ret);

/* The shape (as volume_load_fd would give it) and the bytes of one stored
 * value of the open file fd, from the header alone: nothing is allocated by
 * the header's sizes, so a few bytes that declare a huge image cost nothing.
 * Errors as volume_load_fd's for an unreadable or unsupported header. */
int volume_probe_fd(int fd, const char *path, const char *field, int64_t dim[4],
		    size_t *stored_size, struct errbuf *err);
/* The same for path, opened as the calling user. */
int volume_probe(const char *path, const char *field, int64_t dim[4], size_t *stored_size,
		 struct errbuf *err);

/* An uncompressed NIfTI image read in z-slabs: whole z-planes [z0, z0 + w)
 * of every volume at a time, straight from the file's mapping, so that the
 * whole image is never in host memory (the GPU upload streams it: in the
 * volume's [x][y][z] order a slab holds a run of w voxels of every
 * z-column; in the file, one contiguous run of each volume). */
struct volume_slabs;

/* Reads the header of the open file fd (not kept: the mapping holds the
 * file) into header (dim and affine; data stays NULL) and maps the file
 * into *ret. *ret is NULL, with 0 returned and header untouched, when the
 * image cannot be read in place (gzip-compressed, or not in the host's byte
 * order): volume_load_fd reads those. Errors as volume_load_fd's for a bad
 * header or a short file; field must outlive *ret. */
int volume_slabs_open(int fd, const char *path, const char *field, struct volume *header,
		      struct volume_slabs **ret, struct errbuf *err);

/* Reads z-planes [z0, z0 + slab->dim[2]) of every volume into slab (its
 * data allocated by the caller; dim 0, 1 and 3 the image's), converted as
 * volume_load_fd converts, on every load thread. Errors as volume_load_fd's
 * for non-finite values (the first of the slab is named). */
int volume_slabs_read(struct volume_slabs *s, int64_t z0, struct volume *slab,
		      struct errbuf *err);

/* The voxel data as stored (volume after volume, x fastest), where they
 * are float32 as read (no scaling): the mapping, for a reader that
 * converts nothing (a GPU that transposes them itself); NULL otherwise.
 * Valid until volume_slabs_close. */
const unsigned char *volume_slabs_float32(const struct volume_slabs *s);

/* Drops the mapped pages read so far from the process, as each
 * volume_slabs_read does (the page cache keeps them). */
void volume_slabs_drop_pages(const struct volume_slabs *s);

/* For a float32 image (volume_slabs_float32): the error volume_slabs_read
 * gives for the first non-finite value of z-planes [z0, z0 + planes), or 0. */
int volume_slabs_check_finite(const struct volume_slabs *s, int64_t z0, int64_t planes,
			      struct errbuf *err);

/* Unmaps the file. Accepts NULL. */
void volume_slabs_close(struct volume_slabs *s);

/* Writes v as NIfTI-1 float32 (gzip when path ends in .gz) with sform and qform
 * (codes 1, "scanner") set from v->affine and pixdim from its column norms.
 * Returns 0 or a negative errno. */
int volume_save(const char *path, const struct volume *v, struct errbuf *err);

/* Allocates zeroed data for the given shape with an identity affine scaled by
 * voxel_mm (isotropic). Returns 0 or -ENOMEM / -EINVAL (non-positive dims or overflow). */
int volume_alloc(struct volume *v, const int64_t dim[4], double voxel_mm);

/* Allocates zeroed data for nt volumes on grid's voxel grid and affine.
 * Returns 0 or -ENOMEM / -EINVAL. */
int volume_alloc_on_grid(struct volume *v, const struct volume *grid, int64_t nt);

/* Frees data and zeroes *v; accepts a zeroed or already-freed volume. */
void volume_free(struct volume *v);

/* Number of voxels (nx*ny*nz, not counting t). */
size_t volume_voxels(const struct volume *v);

/* Index of voxel (x,y,z) in the [x][y][z] part (multiply by dim[3] for data). */
static inline size_t volume_index(const struct volume *v, int64_t x, int64_t y, int64_t z)
{
	return ((size_t)x * (size_t)v->dim[1] + (size_t)y) * (size_t)v->dim[2] + (size_t)z;
}

/* Non-zero when a and b share nx, ny, nz and an affine equal within 1e-4 mm
 * (per element, relative to the voxel size). */
int volume_same_grid(const struct volume *a, const struct volume *b);

#endif
