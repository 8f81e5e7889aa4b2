/* SPDX-License-Identifier: MIT */
/*
 * output: the tractogram formats behind one writer interface, so the engine
 * streams records without knowing the format. TRK (TrackVis, voxel-mm,
 * trk.h) and TCK (MRtrix3, RAS+ mm, tck.h). Owns the chosen writer, not the
 * FILE. Does not log.
 */
#ifndef TRACTD_OUTPUT_H
#define TRACTD_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "errbuf.h"

enum output_format { OUTPUT_TRK, OUTPUT_TCK };

struct output_writer;

/* "trk" / "tck". */
const char *output_format_name(enum output_format format);

/* Writes the format's header for the reference grid (dims and voxel-to-RAS).
 * with_seeds: each record carries its seed (TRK "seeds" data_per_streamline;
 * -EINVAL for formats without per-streamline data). */
int output_writer_new(enum output_format format, FILE *out, const int64_t dim[3],
		      const double affine[4][4], bool with_seeds, struct output_writer **ret,
		      struct errbuf *err);
/* seed_ras: the streamline's seed in RAS+ mm when the writer has seeds, else NULL. */
int output_write_streamline(struct output_writer *w, const float *points_vox, uint32_t n,
			    const float seed_ras[3]);
int output_flush(struct output_writer *w);
/* Ends the file (count patched when seekable) and frees the writer. Accepts NULL. */
int output_writer_finish(struct output_writer *w);

#endif
