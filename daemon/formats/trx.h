/* SPDX-License-Identifier: MIT */
/*
 * trx: TRX tractogram writer (tee-ar-ex/trx-spec), a zip of
 *   positions.3.float32   (or .float16) points in RAS+ mm, little-endian
 *   header.json           VOXEL_TO_RASMM, DIMENSIONS, NB_STREAMLINES, NB_VERTICES
 *   offsets.uint64        first vertex of each streamline, then NB_VERTICES
 *                         (the closing entry trx-python 0.6 requires)
 *   dps/seeds.3.float32   each streamline's seed in RAS+ mm (with_seeds only)
 *   dps/seed_index.uint32 each streamline's global seed index (with_seed_index)
 *   dps/direction_getter.uint8  the getter that tracked it, 0 prob, 1 boot
 *                         (with_direction_getter; one value per job, a column
 *                         so that merged tractograms keep it per streamline)
 *
 * The archive (zipout.h) starts with the positions entry, by far the
 * biggest: the records' positions stream straight into the FILE, which need
 * not seek, with their CRC-32 (which the callers of trx_write_records
 * compute on their own threads) and sizes in a data descriptor after them.
 * The small columns wait in unlinked temporary files (tmpfile()), and
 * trx_writer_finish() appends them, header.json (the counts) and the
 * central directory. The FILE is a readable archive only once finish
 * returned 0; before, or on failure, it holds a truncated one.
 *
 * Owns the writer state, its temporary files and its zipout, not the FILE.
 * Does not log.
 */
#ifndef TRACTD_TRX_H
#define TRACTD_TRX_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/errbuf.h"

enum trx_positions { TRX_POSITIONS_FLOAT32, TRX_POSITIONS_FLOAT16 };
enum trx_compression { TRX_COMPRESSION_STORE, TRX_COMPRESSION_DEFLATE };

struct trx_options {
	enum trx_positions positions;
	enum trx_compression compression;
	bool with_seeds;
	bool with_seed_index;
	bool with_direction_getter;
	const char *shard_tag;  /* a shard's record (merge.h) as header.json's
				 * TRACTD_SHARD; NULL: none */
};

/* A streamline's data_per_streamline; seed_ras is NULL without seeds. */
struct trx_dps {
	const float *seed_ras;
	uint32_t seed_index;
	uint8_t direction_getter;
};

struct trx_writer;

/* header.json's key for a shard's record (merge.h). */
#define TRX_SHARD_KEY "TRACTD_SHARD"
#define TRX_SHARD_TAG_MAX 256

/* What an archive trx_writer_finish wrote holds, as merge needs it. */
struct trx_archive_info {
	int64_t dim[3];
	double affine[4][4];
	struct trx_options opts;        /* shard_tag points into tag */
	uint64_t nb_streamlines, nb_vertices;
	char tag[TRX_SHARD_TAG_MAX];    /* TRACTD_SHARD, "" when absent */
};

/* Reads path's header.json and entries into *info. -EINVAL (err says why)
 * for an archive trx_writer_finish would not write, -EIO, -ENOMEM. */
int trx_archive_read_info(const char *path, struct trx_archive_info *info, struct errbuf *err);

/* Appends all streamlines of the archive at path (written with w's options)
 * to w, as if written to w one by one. Returns 0, -EINVAL, -EIO, -ENOMEM. */
int trx_writer_append_archive(struct trx_writer *w, const char *path, struct errbuf *err);

/* Opens the temporary files. Returns 0, -EINVAL (non-finite affine, a
 * dimension outside [1, 65535], which header readers keep as uint16), -EIO,
 * -ENOMEM. */
int trx_writer_new(FILE *out, const int64_t dim[3], const double affine[4][4],
		   const struct trx_options *opts, struct trx_writer **ret, struct errbuf *err);

/* Appends one streamline of n points (xyz interleaved, voxel coordinates)
 * and, with seeds, its seed (RAS+ mm). n == 0 is skipped, as TCK does, so
 * that every format of a job holds the same streamlines. Returns 0 or -EIO. */
int trx_write_streamline(struct trx_writer *w, const float *points_vox, uint32_t n,
			 const float seed_ras[3]);

/* As trx_write_streamline with every dps column the options asked for (dps
 * NULL: a NaN seed, zero index and getter). */
int trx_write_streamline_dps(struct trx_writer *w, const float *points_vox, uint32_t n,
			     const struct trx_dps *dps);

#define TRX_SEED_BYTES 12       /* a dps/seeds.3.float32 row */
#define TRX_SEED_INDEX_BYTES 4  /* a dps/seed_index.uint32 row */

/* Streamlines encoded apart from the writer, for trx_write_records: every
 * one has points (counts[i] > 0), and a column is NULL unless the options
 * asked for it. */
struct trx_records {
	const unsigned char *positions;   /* trx_positions_encode of each, in order */
	size_t positions_bytes;
	uint32_t positions_crc;           /* zlib's crc32(0, positions, positions_bytes) */
	const uint32_t *counts;           /* n: each streamline's points */
	const unsigned char *seeds;       /* n * TRX_SEED_BYTES, from trx_dps_encode */
	const unsigned char *seed_index;  /* n * TRX_SEED_INDEX_BYTES */
	const unsigned char *direction_getter;  /* n bytes */
	uint64_t n;
};

/* The bytes of n points in the writer's positions type. */
size_t trx_positions_bytes(const struct trx_writer *w, uint32_t n);

/* Encodes n points (trx_positions_bytes of room) as trx_write_streamline
 * would store them. Only reads the writer: any number of threads may
 * encode at once. */
void trx_positions_encode(const struct trx_writer *w, unsigned char *dst, const float *points_vox,
			  uint32_t n);

/* A streamline's dps rows as trx_write_streamline_dps stores them (dps NULL:
 * a NaN seed, zero index and getter); the caller keeps those its writer has. */
void trx_dps_encode(const struct trx_dps *dps, unsigned char seed[TRX_SEED_BYTES],
		    unsigned char seed_index[TRX_SEED_INDEX_BYTES], unsigned char *direction_getter);

/* Appends the run of records in order, with their offsets, exactly as
 * trx_write_streamline_dps of each in turn. Returns 0 or -EIO. */
int trx_write_records(struct trx_writer *w, const struct trx_records *rec);

/* Flushes the FILE and the temporary files. Returns 0 or -EIO. */
int trx_flush(struct trx_writer *w);

/* Ends the archive in the FILE (the entries after the positions, the
 * central directory) and flushes it, removes the temporary files and frees
 * the writer (not the FILE). Returns 0, -EIO or -ENOMEM; the writer is freed
 * either way. Accepts NULL. */
int trx_writer_finish(struct trx_writer *w);

#endif
