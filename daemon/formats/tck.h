/* SPDX-License-Identifier: MIT */
/*
 * tck: streaming MRtrix3 .tck writer.
 *
 * Owns the writer state, not the FILE. The text header ("mrtrix tracks",
 * datatype Float32LE, "file: . OFFSET", a fixed-width count) is written
 * first; streamlines follow as float32 xyz triplets in RAS+ mm (the affine
 * applied to the voxel coordinates the engine produces), each ended by a NaN
 * triplet, and the file by an Inf triplet. The count is patched at the end
 * when the stream is seekable. Does not log.
 */
#ifndef TRACTD_TCK_H
#define TRACTD_TCK_H

#include <stdint.h>
#include <stdio.h>

#include "base/errbuf.h"

struct tck_writer;

/* The header property a shard's record (merge.h) is written under. */
#define TCK_SHARD_KEY "tractd_shard"

/* Writes a header of count streamlines with properties as tck_writer_new
 * does (merge joins parts under it); returns its length (the data offset)
 * or -EIO, -ENOMEM. */
long tck_write_header(FILE *out, const char *properties, uint64_t count);

/* The properties of a header tck_writer_new wrote, text up to its END line
 * (NUL-terminated): a copy into *ret (the caller frees it), its count and
 * data offset. -EINVAL when text is not such a header. */
int tck_parse_header(const char *text, char **ret, uint64_t *count, long *offset);

/* Writes the header, which must start the file ("file: . OFFSET" is an
 * absolute position), with properties (NULL: none): "key: value" lines,
 * each ended by a newline, as tckgen writes its parameters (step_size,
 * max_angle, ...), between datatype and file. Returns 0, -EINVAL (non-finite
 * affine; properties not such lines, or naming count, datatype, file or
 * END), -EIO, -ENOMEM. */
int tck_writer_new(FILE *out, const double affine[4][4], const char *properties,
		   struct tck_writer **ret, struct errbuf *err);

/* Appends one streamline of n finite points (xyz interleaved, voxel
 * coordinates, centres at integers; a NaN would read as a record end).
 * n == 0 is skipped. Returns 0 or -EIO. */
int tck_write_streamline(struct tck_writer *w, const float *points_vox, uint32_t n);

/* The bytes of a record of n points, the end-of-streamline triplet
 * included (0 for n == 0, which is not written). */
size_t tck_record_bytes(uint32_t n);

/* Encodes that record into dst (tck_record_bytes of room) exactly as
 * tck_write_streamline would write it. Only reads the writer: any number of
 * threads may encode at once, for tck_write_records to append in order. */
void tck_record_encode(const struct tck_writer *w, unsigned char *dst, const float *points_vox,
		       uint32_t n);

/* Appends len bytes of n_records records from tck_record_encode, counted as
 * tck_write_streamline counts them. Returns 0 or -EIO. */
int tck_write_records(struct tck_writer *w, const unsigned char *records, size_t len,
		      uint64_t n_records);

/* Pushes whole records to the FILE and flushes it. On a seekable stream the
 * file then ends in the Inf marker (so a reader of the file mid-run sees a
 * complete file) and the stream stands just before it, so ftell counts whole
 * records only; the count is patched at finish only. Returns 0 or -EIO. */
int tck_flush(struct tck_writer *w);

/* Writes the end marker, patches the count when seekable, frees the writer
 * (not the FILE). Returns 0 or -EIO; the writer is freed either way. Accepts NULL. */
int tck_writer_finish(struct tck_writer *w);

#endif
