/* SPDX-License-Identifier: MIT */
/*
 * tractogram_read: reads back the tractograms tractd writes (trk.c, tck.c,
 * trx.c), record by record, in the writers' own terms: points in voxel
 * coordinates (voxel centres at integers) and, where the file has them,
 * seeds in RAS+ mm. It is the inverse of the writers, so that a finished
 * result can be re-encoded in another format (tractogram_convert) without
 * re-running the job.
 *
 * Only tractd's own output is promised: little-endian TRK v2 (with any
 * scalars skipped and a 3-valued "seeds" property kept), TCK Float32LE, TRX
 * with float32 or float16 positions and uint64 offsets. TCK carries no grid,
 * so its reader needs the job's; TRK and TRX take theirs from the file when
 * none is given.
 *
 * Owns the reader state (and for TRX the open archive), not the FILE. Does
 * not log.
 */
#ifndef TRACTD_TRACTOGRAM_READ_H
#define TRACTD_TRACTOGRAM_READ_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/errbuf.h"
#include "formats/output.h"

/* The reference grid of a tractogram: dims and voxel-to-RAS+ mm. */
struct tractogram_grid {
	int64_t dim[3];
	double affine[4][4];
};

struct tractogram_reader;

/* Reads the header of in (positioned at its start). grid may be NULL for
 * TRK and TRX (the file's float32 affine is used); for TCK it is required
 * (-EINVAL without). Returns 0, -EINVAL (not a tractogram of that format, or
 * one this reader does not handle), -EIO, -ENOMEM. */
int tractogram_reader_open(FILE *in, enum output_format format,
			   const struct tractogram_grid *grid, struct tractogram_reader **ret,
			   struct errbuf *err);

/* The grid records are expressed in. */
void tractogram_reader_grid(const struct tractogram_reader *r, struct tractogram_grid *out);

/* Whether every record carries its seed (TRK "seeds" property, TRX dps/seeds). */
bool tractogram_reader_has_seeds(const struct tractogram_reader *r);

/* The next record: *points (xyz interleaved, voxel coordinates, n points)
 * and, when the file has seeds, *seed_ras (else NULL); both stay valid until
 * the next call. Returns 1 for a record, 0 at the end, -EINVAL for a
 * malformed file, -EIO, -ENOMEM. */
int tractogram_reader_next(struct tractogram_reader *r, const float **points, uint32_t *n,
			   const float **seed_ras);

/* Frees the reader (not the FILE). Accepts NULL. */
void tractogram_reader_close(struct tractogram_reader *r);

/* Re-encodes the tractogram in (format from) as format to into out, through
 * output.h's writer, seeds kept where both formats have them (TCK has none:
 * they are dropped). grid as for tractogram_reader_open. Returns the number
 * of streamlines in *count (may be NULL), 0 or a negative errno with err set. */
int tractogram_convert(FILE *in, enum output_format from, const struct tractogram_grid *grid,
		       FILE *out, enum output_format to, uint64_t *count, struct errbuf *err);

#endif
