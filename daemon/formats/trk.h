/* SPDX-License-Identifier: MIT */
/*
 * trk: streaming TrackVis (.trk, version 2) writer.
 *
 * Owns the writer state, not the FILE. The 1000-byte header is written from
 * the reference grid (dims, voxel-to-RAS affine, voxel sizes = the affine's
 * column norms, voxel order = aff2axcodes) so that nibabel/DIPY load points
 * back as affine * voxel_point. Streamlines are appended one record at a time
 * as they are produced; n_count is patched at the end when the stream is
 * seekable (a pipe keeps 0, which TrackVis readers accept as "unknown").
 * Points given to the writer are in voxel coordinates with voxel centres at
 * integers; the writer stores TrackVis "voxmm" = (p + 0.5) * voxel_size.
 * Does not log.
 */
#ifndef TRACTD_TRK_H
#define TRACTD_TRK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/errbuf.h"

#define TRK_HEADER_SIZE 1000

/* Byte offsets of the TrackVis v2 header fields tractd writes or reads back. */
enum {
	TRK_OFF_ID_STRING = 0,
	TRK_OFF_DIM = 6,
	TRK_OFF_VOXEL_SIZE = 12,
	TRK_OFF_N_SCALARS = 36,
	TRK_OFF_N_PROPERTIES = 238,
	TRK_OFF_PROPERTY_NAME = 240,
	TRK_OFF_VOX_TO_RAS = 440,
	TRK_OFF_RESERVED = 504,     /* 444 bytes: a shard's record (merge.h), else zero */
	TRK_OFF_VOXEL_ORDER = 948,
	TRK_OFF_N_COUNT = 988,
	TRK_OFF_VERSION = 992,
	TRK_OFF_HDR_SIZE = 996,
};
#define TRK_RESERVED_LEN 444
#define TRK_PROPERTY_NAME_LEN 20
#define TRK_MAX_PROPERTIES 10   /* name slots in the header */

/* One per-streamline property: n_values floats named name (nibabel's
 * data_per_streamline[name], an (N, n_values) array). */
struct trk_property {
	const char *name;
	uint16_t n_values;
};

struct trk_writer;

/* Writes the header to out and returns a writer in *ret. Returns 0,
 * -EINVAL (degenerate affine, dims outside int16), -EIO, -ENOMEM. */
int trk_writer_new(FILE *out, const int64_t dim[3], const double affine[4][4],
		   struct trk_writer **ret, struct errbuf *err);

/* As trk_writer_new, declaring one per-streamline property of n_values
 * floats (nibabel's data_per_streamline[property], e.g. "seeds" with 3).
 * -EINVAL when the encoded name exceeds TrackVis's 20 bytes. */
int trk_writer_new_with_property(FILE *out, const int64_t dim[3], const double affine[4][4],
				 const char *property, uint16_t n_values, struct trk_writer **ret,
				 struct errbuf *err);

/* As trk_writer_new_with_property for n_props properties, stored in this
 * order after each record's points. -EINVAL over TRK_MAX_PROPERTIES names. */
int trk_writer_new_with_properties(FILE *out, const int64_t dim[3], const double affine[4][4],
				   const struct trk_property *props, size_t n_props,
				   struct trk_writer **ret, struct errbuf *err);

/* As trk_writer_new_with_properties, with tag (NULL: none) in the header's
 * reserved bytes; -EINVAL when it does not fit them. */
int trk_writer_new_tagged(FILE *out, const int64_t dim[3], const double affine[4][4],
			  const struct trk_property *props, size_t n_props, const char *tag,
			  struct trk_writer **ret, struct errbuf *err);

/* Appends one streamline of n points (xyz interleaved, voxel coordinates).
 * Returns 0, -EIO, or -EINVAL (n over INT32_MAX; the writer has properties). */
int trk_write_streamline(struct trk_writer *w, const float *points_vox, uint32_t n);

/* Appends one streamline and its property values (NULL when none declared). */
int trk_write_streamline_with(struct trk_writer *w, const float *points_vox, uint32_t n,
			      const float *properties);

/* The bytes of the record of a streamline of n points with the writer's
 * properties (0 for n == 0, which is not written). */
size_t trk_record_bytes(const struct trk_writer *w, uint32_t n);

/* Encodes that record into dst (trk_record_bytes of room) exactly as
 * trk_write_streamline_with would write it (n at most INT32_MAX, properties
 * given when declared). Only reads the writer: any number of threads may
 * encode at once, for trk_write_records to append in order. */
void trk_record_encode(const struct trk_writer *w, unsigned char *dst, const float *points_vox,
		       uint32_t n, const float *properties);

/* Appends len bytes of n_records records from trk_record_encode, counted as
 * trk_write_streamline_with counts them. Returns 0 or -EIO. */
int trk_write_records(struct trk_writer *w, const unsigned char *records, size_t len,
		      uint64_t n_records);

/* Pushes every complete record written so far to the FILE and flushes it, so
 * a reader of the file sees whole records. Returns 0 or -EIO. */
int trk_flush(struct trk_writer *w);

/* Flushes, patches n_count when out is seekable, and frees the writer (not the
 * FILE). Returns 0 or -EIO; the writer is freed either way. Accepts NULL. */
int trk_writer_finish(struct trk_writer *w);

/* Fills the 1000-byte header into buf (exposed for tests and for writers that
 * do not use a FILE). Returns 0 or -EINVAL. */
int trk_header_fill(unsigned char buf[TRK_HEADER_SIZE], const int64_t dim[3],
		    const double affine[4][4], uint32_t n_count, struct errbuf *err);

#endif
