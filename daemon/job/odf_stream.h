/* SPDX-License-Identifier: MIT */
/*
 * odf_stream: an uncompressed ODF input (inputs.odf, a .nii in the host's
 * byte order) read in z-slabs while the devices upload it (resident.h),
 * instead of whole into host memory first: reading overlaps the upload, and
 * the host holds two slabs, not the ODF.
 *
 * Owns the image's mapping (volume_slabs), two slab buffers and the thread
 * that fills them in turn: slab k + 1 is read, clipped at zero and checked
 * for antipodal symmetry (fit_prepare_odf, as a whole ODF is when loaded)
 * while the consumers (one upload per device) copy slab k out. A buffer is
 * read again once every consumer has released its slab. A consumer may
 * instead read the file's float32 values itself (odf_stream_raw: a GPU
 * that transposes them, engine/odf_transpose.h); the reader reads no slab
 * that no consumer takes. Does not log; failures reach the consumers
 * through errbuf.
 */
#ifndef TRACTD_ODF_STREAM_H
#define TRACTD_ODF_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "formats/volume.h"
#include "models/fit.h"
#include "models/sphere.h"

struct odf_stream;

/* One slab: z-planes [first_z, first_z + planes) of the grid, in its
 * [x][y][z] order (a run of `planes` voxels of every z-column, column
 * after column), nv values each, clipped at zero. */
struct odf_slab {
	const float *values;
	uint64_t first_z;
	uint64_t planes;
};

/* Maps the ODF image in the open file fd (not kept) and reads its header
 * into header (dim, affine; no data). *ret is NULL (0 returned, header
 * untouched) when the image is not read in place (volume_slabs_open).
 * fit's threads read and check the slabs (fit may be NULL: all CPUs). */
int odf_stream_open(int fd, const char *path, const struct sphere *s,
		    const struct fit_options *fit, struct volume *header, struct odf_stream **ret,
		    struct errbuf *err);

/* How many slabs the ODF takes. */
size_t odf_stream_slabs(const struct odf_stream *s);
/* The grid's z-columns: how many, and their voxels (the grid's z size). */
void odf_stream_columns(const struct odf_stream *s, uint64_t *columns, uint64_t *column_voxels);

/* Starts the reader for consumers, each of which then joins
 * (odf_stream_join) or cancels, and if it takes slabs, takes every slab in
 * order: odf_stream_get, copies it out, odf_stream_release. The reader
 * reads nothing before every consumer has joined. Once only. */
int odf_stream_start(struct odf_stream *s, size_t consumers, struct errbuf *err);

/* A consumer says whether it takes the slabs, or reads the raw file. */
void odf_stream_join(struct odf_stream *s, bool takes_slabs);

/* The file's voxel data where they are float32 as stored (no scaling):
 * dim[3] volumes one after another, each x fastest, then y, then z. */
struct odf_raw {
	const unsigned char *data;
	int64_t dim[4];
};

/* Whether the ODF can be read raw (false: only as slabs). */
bool odf_stream_raw(const struct odf_stream *s, struct odf_raw *ret);
/* Slab k's z-planes [*first_z, *first_z + *planes), which a raw reader
 * follows too (each slab one contiguous run of each volume). */
void odf_stream_slab_span(const struct odf_stream *s, size_t k, uint64_t *first_z,
			  uint64_t *planes);
/* A raw reader is done with a slab: the mapping's pages go, as the
 * reader's do (the host holds one slab of the file, not all of it). */
void odf_stream_raw_done(const struct odf_stream *s);
/* A raw reader found a non-finite value: the error the slabs give, the
 * first in slab order (inputs.odf named). */
int odf_stream_raw_check_finite(const struct odf_stream *s, struct errbuf *err);
/* The symmetry fit_prepare_odf finds, slab by slab on the host, for a raw
 * reader that cannot decide it (a voxel whose values are too small for a
 * GPU that flushes subnormal floats). Errors as the slabs'. */
int odf_stream_raw_host_symmetry(const struct odf_stream *s, bool *symmetric,
				 struct errbuf *err);
/* A raw reader's symmetry check (fit_prepare_odf's rule): a false makes
 * odf_stream_symmetric false. */
void odf_stream_raw_symmetry(struct odf_stream *s, bool symmetric);

/* Slab k, once read. The reader's error (a bad value: inputs.odf named),
 * or -ECANCELED when a consumer gave up (odf_stream_cancel). */
int odf_stream_get(struct odf_stream *s, size_t k, struct odf_slab *ret, struct errbuf *err);

/* The caller is done with slab k. */
void odf_stream_release(struct odf_stream *s, size_t k);

/* A consumer failed: the reader stops and every get answers -ECANCELED. */
void odf_stream_cancel(struct odf_stream *s);

/* Waits for the reader. After a run whose consumers took every slab,
 * odf_stream_symmetric says whether the ODF is antipodally symmetric. */
void odf_stream_finish(struct odf_stream *s);
bool odf_stream_symmetric(const struct odf_stream *s);

/* Accepts NULL; finishes a started stream first. */
void odf_stream_free(struct odf_stream *s);

#endif
