/* SPDX-License-Identifier: MIT */
/*
 * output: the tractogram formats behind one writer interface, so the engine
 * streams records without knowing the format. TRK (TrackVis, voxel-mm,
 * trk.h), TCK (MRtrix3, RAS+ mm, tck.h) and TRX (zip of RAS+ mm arrays,
 * trx.h). Owns the chosen writer, not the FILE. Does not log.
 */
#ifndef TRACTD_OUTPUT_H
#define TRACTD_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/errbuf.h"

#include "formats/trx.h"

enum output_format { OUTPUT_TRK, OUTPUT_TCK, OUTPUT_TRX };

/* What a job may choose beyond the format. positions and compression are
 * TRX's (jobspec refuses them with other formats; the others ignore them). */
struct output_options {
	bool with_seeds;        /* each record carries its seed: TRK "seeds"
				 * data_per_streamline, TRX dps/seeds; TCK: a line of
				 * seeds_file (-EINVAL without one) */
	bool with_seed_index;   /* TRK "seed_index" (float, exact below 2^24),
				 * TRX dps/seed_index.uint32; -EINVAL for TCK */
	bool with_direction_getter; /* TRK "direction_getter" (float), TRX
				 * dps/direction_getter.uint8, the OUTPUT_DG_* code;
				 * -EINVAL for TCK */
	FILE *seeds_file;       /* TCK with seeds: the text tckgen -output_seeds
				 * writes (not owned) */
	enum trx_positions positions;
	enum trx_compression compression;
	const char *tck_properties; /* TCK: "key: value" lines of the header (tck.h),
				     * the job's parameters as tckgen writes its own;
				     * NULL for none */
	const char *shard_tag;  /* a shard's record (merge.h) in the header: TRK's
				 * reserved bytes, TCK's "tractd_shard" line, TRX's
				 * header.json "TRACTD_SHARD"; NULL for a whole job */
};

/* Direction getter codes stored per streamline (jobspec's order). */
enum { OUTPUT_DG_PROB = 0, OUTPUT_DG_BOOT = 1, OUTPUT_DG_PTT = 2 };

/* A streamline's data beyond its points; the writer stores what its options
 * asked for. seed_vertex is the index of the seed among the points written
 * (TCK's seeds file, MRtrix3's Seed_index column). */
struct output_dps {
	const float *seed_ras;  /* RAS+ mm; NULL when the writer has no seeds */
	uint32_t seed_index;    /* the seed's global index in the job */
	uint32_t seed_vertex;
	uint8_t direction_getter;
};

struct output_writer;

/* "trk" / "tck" / "trx". */
const char *output_format_name(enum output_format format);

/* The format named name ("trk" / "tck" / "trx"); -EINVAL for any other. */
int output_format_parse(const char *name, enum output_format *ret);

/* Whether the file is a readable tractogram while it grows (TRK, TCK: whole
 * records are pushed at each flush). TRX is written whole at finish, so a
 * reader must wait for the end of the job. */
bool output_format_streams(enum output_format format);

/* Writes the format's header for the reference grid (dims and voxel-to-RAS);
 * opts NULL means the defaults (no seeds, float32, stored). */
int output_writer_new(enum output_format format, FILE *out, const int64_t dim[3],
		      const double affine[4][4], const struct output_options *opts,
		      struct output_writer **ret, struct errbuf *err);
/* seed_ras: the streamline's seed in RAS+ mm when the writer has seeds, else NULL. */
int output_write_streamline(struct output_writer *w, const float *points_vox, uint32_t n,
			    const float seed_ras[3]);
/* As output_write_streamline with all of a streamline's data (NULL: none). */
int output_write_streamline_dps(struct output_writer *w, const float *points_vox, uint32_t n,
				const struct output_dps *dps);
int output_flush(struct output_writer *w);
/* Ends the file (count patched when seekable; TRX: the whole archive written)
 * and frees the writer. Accepts NULL. */
int output_writer_finish(struct output_writer *w);

#endif
