/* SPDX-License-Identifier: MIT */
/*
 * mif: MRtrix3 images (.mif, and .mif.gz inflated as they are read) into
 * the float32 volumes of volume.h, with the gradient table a DWI carries.
 *
 * Owns the parsed header and, from mif_load_fd, the converted voxel data
 * and the table. An image is read as `mrconvert x.mif x.nii` would write
 * it, so that a .mif and its NIfTI conversion are the same volume here: the
 * voxel axes are the three spatial axes in the order of their strides
 * (layout), each running the way it is stored; the volume axis keeps its
 * index order; the affine maps those axes through MRtrix3's transform
 * (which takes index x vox to scanner RAS+ mm). Values are scaled
 * (offset + scale x stored) and refused when not finite, as volume.h does.
 * Read: header and data in one file ("file: . OFFSET"); any layout; Bit,
 * Int8, UInt8, (U)Int16/32/64 and Float32/64 in either byte order. Refused,
 * with the field and the reason: data in a separate file (.mih), complex
 * types, more than 4 used axes. Does not log.
 */
#ifndef TRACTD_MIF_H
#define TRACTD_MIF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "formats/volume.h"

#define MIF_MAX_AXES 16
/* A header longer than this (it holds the whole dw_scheme and the command
 * history, a few kB in practice) is refused rather than read into memory. */
#define MIF_MAX_HEADER_BYTES ((size_t)4 << 20)

/* The gradient table of a DWI ("dw_scheme"): per volume gx, gy, gz (a
 * direction in scanner RAS+ coordinates) and b (s/mm^2). */
struct mif_scheme {
	size_t n;        /* rows */
	double *rows;    /* 4 * n */
};

/* One header, as stored (before the axes are reordered). */
struct mif_header {
	int ndim;
	int64_t dim[MIF_MAX_AXES];
	double vox[MIF_MAX_AXES];
	int order[MIF_MAX_AXES];    /* layout: the axis' rank in memory, 0 fastest */
	bool reversed[MIF_MAX_AXES]; /* layout '-': stored from the last index down */
	int type;                   /* index in mif.c's datatype table */
	double scale, offset;       /* scaling: value = offset + scale * stored */
	double transform[3][4];     /* index x vox -> scanner mm (MRtrix3's default when absent) */
	uint64_t data_offset;       /* "file: . OFFSET", in the (inflated) file */
	struct mif_scheme scheme;   /* empty when the header has no dw_scheme */
};

/* Whether the open regular file fd holds an MRtrix3 image: its content
 * (inflated when it starts with the gzip magic) starts "mrtrix image\n". */
bool mif_detect_fd(int fd);

/* Parses the header text[0..len) (from "mrtrix image" to "END") into *ret;
 * path names the file and field the input in errors (-EINVAL, -ENOMEM).
 * On success free ret->scheme with mif_scheme_free. */
int mif_parse_header(const char *text, size_t len, const char *path, const char *field,
		     struct mif_header *ret, struct errbuf *err);

/* Reads the MRtrix3 image in the open file fd (never closed here) into
 * *ret, and its gradient table into *scheme when scheme is not NULL (empty
 * when the header has none). Both are written only on success. Errors as
 * volume_load_fd's (-EINVAL, -EIO, -ENOMEM), naming field and path. */
int mif_load_fd(int fd, const char *path, const char *field, struct volume *ret,
		struct mif_scheme *scheme, struct errbuf *err);

/* The shape as mif_load_fd gives it and the bytes of one stored value
 * (1 for Bit) from the header alone, as volume_probe_fd. */
int mif_probe_fd(int fd, const char *path, const char *field, int64_t dim[4],
		 size_t *stored_size, struct errbuf *err);

/* Frees the rows and zeroes *s; accepts a zeroed or freed table. */
void mif_scheme_free(struct mif_scheme *s);

#endif
