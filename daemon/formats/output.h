/* SPDX-License-Identifier: MIT */
/*
 * output: the tractogram formats behind one writer interface, so the engine
 * streams records without knowing the format. TRK (TrackVis, voxel-mm,
 * trk.h), TCK (MRtrix3, RAS+ mm, tck.h) and TRX (zip of RAS+ mm arrays,
 * trx.h). A batch of streamlines can be encoded on several threads and
 * appended in order (output_write_lines), the same bytes as one call per
 * streamline. Owns the chosen writer and, during output_write_lines, the
 * encoding threads and their buffers; not the FILE. Does not log.
 */
#ifndef TRACTD_OUTPUT_H
#define TRACTD_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/errbuf.h"
#include "common/tractogram_formats.h"

#include "formats/trx.h"

#define OUTPUT_FORMAT_ID(id, name) OUTPUT_##id,
enum output_format { TRACTOGRAM_FORMATS(OUTPUT_FORMAT_ID) };
#undef OUTPUT_FORMAT_ID

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
	bool writeback;         /* after each round of records written, start the
				 * kernel writing what it holds of the file to disk
				 * (sync_file_range, not waiting), so that an fsync
				 * at the end finds little left: the daemon's spool
				 * files. Changes no byte of the file */
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
/* A streamline of a batch, as output_write_lines asks for it; points_vox
 * and dps.seed_ras must stay valid until the next line of the same part
 * (dps.seed_ras may point at seed_ras). n == 0: none, skipped as always. */
struct output_line {
	const float *points_vox;
	uint32_t n;
	struct output_dps dps;
	float seed_ras[3];
};

/* Fills *line (zeroed) with line i of a batch. part (below
 * PARALLEL_MAX_PARTS) is the calling thread's, which it keeps for a run of
 * lines: memory it indexes (a compression buffer) is that thread's alone.
 * Called from several threads at once. */
typedef void output_line_fn(void *userdata, uint64_t i, unsigned part, struct output_line *line);

/* What output_write_lines adds to. encode_seconds is the time the caller
 * waited for the encoders (on all the threads), write_seconds the time it
 * wrote to the FILE, while the encoders ran on; their sum is the call's. */
struct output_write_stats {
	uint64_t streamlines, points;
	double encode_seconds, write_seconds;
};

/* Writes lines [0, n) from fn in order, exactly the bytes that
 * output_write_streamline_dps of each in turn writes (the TCK seeds file's
 * too), encoding them on up to `threads` threads (1: the calling thread):
 * a round of a few thousand lines a thread is encoded into memory while the
 * calling thread writes the round before. Returns 0, -EIO, -ENOMEM, or
 * -EINVAL (a line the writer refuses, as output_write_streamline_dps). */
int output_write_lines(struct output_writer *w, uint64_t n, output_line_fn *fn, void *userdata,
		       size_t threads, struct output_write_stats *stats);

int output_flush(struct output_writer *w);
/* Ends the file (count patched when seekable; TRX: the whole archive written)
 * and frees the writer. Accepts NULL. */
int output_writer_finish(struct output_writer *w);

#endif
