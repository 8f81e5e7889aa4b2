/* SPDX-License-Identifier: MIT */
/*
 * output: one writer interface over the TRK, TCK and TRX writers (see output.h).
 */
#include "formats/output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/parallel.h"
#include "base/timing.h"

#include "formats/tck.h"
#include "formats/trk.h"
#include "formats/trx.h"

#define TRK_VALUES 5            /* seeds (3), seed_index, direction_getter */

struct output_writer {
	enum output_format format;
	FILE *seeds_file;       /* TCK's seeds text; NULL when not asked for */
	uint64_t count;         /* streamlines written, the seeds file's Track_index */
	bool seeds, seed_index, dg;  /* the per-streamline data asked for */
	size_t trk_values;      /* TRK: property floats each record carries */
	int writeback_fd;       /* opts.writeback: the file's descriptor, else -1 */
	off_t written_back;     /* the file's bytes handed to writeback so far */
	union {
		struct trk_writer *trk;
		struct tck_writer *tck;
		struct trx_writer *trx;
	} w;
};

#define FORMAT_NAME(id, name) [OUTPUT_##id] = name,
static const char *const format_names[] = { TRACTOGRAM_FORMATS(FORMAT_NAME) };
#undef FORMAT_NAME

const char *output_format_name(enum output_format format)
{
	return format_names[format];
}

int output_format_parse(const char *name, enum output_format *ret)
{
	for (size_t i = 0; i < sizeof(format_names) / sizeof(format_names[0]); i++)
		if (strcmp(name, format_names[i]) == 0) {
			*ret = (enum output_format)i;
			return 0;
		}
	return -EINVAL;
}

bool output_format_streams(enum output_format format)
{
	return format != OUTPUT_TRX;
}

static int new_trx(FILE *out, const int64_t dim[3], const double affine[4][4],
		   const struct output_options *opts, struct trx_writer **ret, struct errbuf *err)
{
	struct trx_options t = {
		.positions = opts->positions,
		.compression = opts->compression,
		.with_seeds = opts->with_seeds,
		.with_seed_index = opts->with_seed_index,
		.with_direction_getter = opts->with_direction_getter,
		.shard_tag = opts->shard_tag,
	};

	return trx_writer_new(out, dim, affine, &t, ret, err);
}

static int new_trk(FILE *out, const int64_t dim[3], const double affine[4][4],
		   const struct output_options *opts, struct trk_writer **ret, struct errbuf *err)
{
	struct trk_property props[3];
	size_t n = 0;

	if (opts->with_seeds)
		props[n++] = (struct trk_property){ .name = "seeds", .n_values = 3 };
	if (opts->with_seed_index)
		props[n++] = (struct trk_property){ .name = "seed_index", .n_values = 1 };
	if (opts->with_direction_getter)
		props[n++] = (struct trk_property){ .name = "direction_getter", .n_values = 1 };
	return trk_writer_new_tagged(out, dim, affine, props, n, opts->shard_tag, ret, err);
}

/* The header of MRtrix3's tckgen -output_seeds file: a comment line (tckgen
 * puts its command line there) and the column names. */
static int seeds_file_header(FILE *f)
{
	return fprintf(f, "# tractd\n#Track_index,Seed_index,Pos_x,Pos_y,Pos_z,\n") < 0 ? -EIO : 0;
}

/* A shard's record goes last among the properties, where merge finds it. */
static int new_tck_tagged(FILE *out, const double affine[4][4], const struct output_options *opts,
			  struct tck_writer **ret, struct errbuf *err)
{
	const char *props = opts->tck_properties ? opts->tck_properties : "";
	char *tagged = NULL;
	int r;

	if (!opts->shard_tag)
		return tck_writer_new(out, affine, props, ret, err);
	if (asprintf(&tagged, "%s" TCK_SHARD_KEY ": %s\n", props, opts->shard_tag) < 0)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	r = tck_writer_new(out, affine, tagged, ret, err);
	free(tagged);
	return r;
}

/* TCK has no per-streamline data: seeds go to tckgen's text file; the
 * other values have nowhere to go. */
static int new_tck(FILE *out, const double affine[4][4], const struct output_options *opts,
		   struct tck_writer **ret, struct errbuf *err)
{
	if (opts->with_seed_index)
		return errbuf_set(err, -EINVAL, "output.save_seed_index",
				  "TCK keeps no per-streamline data");
	if (opts->with_direction_getter)
		return errbuf_set(err, -EINVAL, "output.save_direction_getter",
				  "TCK keeps no per-streamline data");
	if (opts->with_seeds && !opts->seeds_file)
		return errbuf_set(err, -EINVAL, "output.save_seeds",
				  "TCK seeds go to a separate file, and there is none here");
	if (opts->with_seeds && seeds_file_header(opts->seeds_file) < 0)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -EIO, "output.path",
				       "cannot write the seeds file");
	return new_tck_tagged(out, affine, opts, ret, err);
}

int output_writer_new(enum output_format format, FILE *out, const int64_t dim[3],
		      const double affine[4][4], const struct output_options *opts,
		      struct output_writer **ret, struct errbuf *err)
{
	static const struct output_options defaults = { 0 };
	struct output_writer *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	if (!opts)
		opts = &defaults;
	w->format = format;
	w->seeds = opts->with_seeds;
	w->seed_index = opts->with_seed_index;
	w->dg = opts->with_direction_getter;
	w->trk_values = 3u * w->seeds + w->seed_index + w->dg;
	w->writeback_fd = opts->writeback ? fileno(out) : -1;
	switch (format) {
	case OUTPUT_TRK:
		r = new_trk(out, dim, affine, opts, &w->w.trk, err);
		break;
	case OUTPUT_TCK:
		r = new_tck(out, affine, opts, &w->w.tck, err);
		w->seeds_file = opts->with_seeds ? opts->seeds_file : NULL;
		break;
	case OUTPUT_TRX:
		r = new_trx(out, dim, affine, opts, &w->w.trx, err);
		break;
	default:
		r = errbuf_set(err, -EINVAL, "output.format", "unknown format");
		break;
	}
	if (r < 0) {
		free(w);
		return r;
	}
	*ret = w;
	return 0;
}

/* A row of tckgen's seeds file after its first column (the streamline's
 * index in the file, which only the writer knows): the seed's index among
 * its points, the seed in scanner (RAS+) mm, the trailing comma and the
 * newline. %.9g keeps every float bit. Returns the length (below
 * SEED_ROW_TAIL_BYTES), -EINVAL without a seed. */
#define SEED_ROW_TAIL_BYTES 128
static int seed_row_tail(char dst[SEED_ROW_TAIL_BYTES], const struct output_dps *dps)
{
	const float *s = dps ? dps->seed_ras : NULL;
	int len;

	if (!s)
		return -EINVAL;
	len = snprintf(dst, SEED_ROW_TAIL_BYTES, "%lu,%.9g,%.9g,%.9g,\n",
		       (unsigned long)dps->seed_vertex, (double)s[0], (double)s[1], (double)s[2]);
	return len < 0 || len >= SEED_ROW_TAIL_BYTES ? -EINVAL : len;
}

/* A whole row: the file's index of the streamline, then its tail. */
static int write_seed_row_tail(struct output_writer *w, uint64_t index, const char *tail,
			       size_t len)
{
	if (fprintf(w->seeds_file, "%llu,", (unsigned long long)index) < 0 ||
	    fwrite(tail, 1, len, w->seeds_file) != len)
		return -EIO;
	return 0;
}

static int write_seed_row(struct output_writer *w, const struct output_dps *dps)
{
	char tail[SEED_ROW_TAIL_BYTES];
	int len = seed_row_tail(tail, dps);

	return len < 0 ? len : write_seed_row_tail(w, w->count, tail, (size_t)len);
}

static int write_tck(struct output_writer *w, const float *points_vox, uint32_t n,
		     const struct output_dps *dps)
{
	int r;

	if (n == 0)
		return 0;
	r = tck_write_streamline(w->w.tck, points_vox, n);
	if (r == 0 && w->seeds_file)
		r = write_seed_row(w, dps);
	return r;
}

/* The TRK property values in new_trk's order: how many. */
static size_t trk_values(const struct output_writer *w, const struct output_dps *dps,
			 float props[TRK_VALUES])
{
	size_t k = 0;

	if (dps && dps->seed_ras)
		for (int c = 0; c < 3; c++)
			props[k++] = dps->seed_ras[c];
	if (dps && w->seed_index)
		props[k++] = (float)dps->seed_index;
	if (dps && w->dg)
		props[k++] = (float)dps->direction_getter;
	return k;
}

/* A missing seed leaves the properties NULL, which the TRK writer refuses
 * when it declared seeds. */
static int write_trk(struct output_writer *w, const float *points_vox, uint32_t n,
		     const struct output_dps *dps)
{
	float props[TRK_VALUES];
	size_t k = trk_values(w, dps, props);

	return trk_write_streamline_with(w->w.trk, points_vox, n, k ? props : NULL);
}

/* The TRX columns of a streamline's data. */
static struct trx_dps trx_dps_of(const struct output_dps *dps)
{
	struct trx_dps t = { 0 };

	if (dps)
		t = (struct trx_dps){ .seed_ras = dps->seed_ras, .seed_index = dps->seed_index,
				      .direction_getter = dps->direction_getter };
	return t;
}

int output_write_streamline_dps(struct output_writer *w, const float *points_vox, uint32_t n,
				const struct output_dps *dps)
{
	int r;

	switch (w->format) {
	case OUTPUT_TCK:
		r = write_tck(w, points_vox, n, dps);
		break;
	case OUTPUT_TRX: {
		struct trx_dps t = trx_dps_of(dps);
		r = trx_write_streamline_dps(w->w.trx, points_vox, n, &t);
		break;
	}
	default:
		r = write_trk(w, points_vox, n, dps);
		break;
	}
	if (r == 0 && n > 0)
		w->count++;
	return r;
}

int output_write_streamline(struct output_writer *w, const float *points_vox, uint32_t n,
			    const float seed_ras[3])
{
	struct output_dps dps = { .seed_ras = seed_ras };

	return output_write_streamline_dps(w, points_vox, n, seed_ras ? &dps : NULL);
}

int output_flush(struct output_writer *w)
{
	switch (w->format) {
	case OUTPUT_TCK:
		return tck_flush(w->w.tck);
	case OUTPUT_TRX:
		return trx_flush(w->w.trx);
	default:
		return trk_flush(w->w.trk);
	}
}

int output_writer_finish(struct output_writer *w)
{
	int r;

	if (!w)
		return 0;
	switch (w->format) {
	case OUTPUT_TCK:
		r = tck_writer_finish(w->w.tck);
		/* tckgen ends its seeds file with an empty line. */
		if (w->seeds_file && (fputc('\n', w->seeds_file) == EOF || fflush(w->seeds_file)))
			r = r < 0 ? r : -EIO;
		break;
	case OUTPUT_TRX:
		r = trx_writer_finish(w->w.trx);
		break;
	default:
		r = trk_writer_finish(w->w.trk);
		break;
	}
	free(w);
	return r;
}

/* ---- many streamlines at once ------------------------------------------- */

/* Lines a part encodes per round: rounds keep the encoded bytes in memory
 * to a few MiB a part, whatever the batch. */
#define PART_LINES 4096

struct byte_buf {
	unsigned char *data;
	size_t len, cap;
};

/* Room for bytes more at the end, counted as used; NULL without memory. */
static unsigned char *buf_take(struct byte_buf *b, size_t bytes)
{
	unsigned char *dst;

	if (bytes > b->cap - b->len) {
		size_t cap = b->cap ? b->cap : 1 << 16;
		unsigned char *data;

		while (cap - b->len < bytes)
			cap *= 2;
		data = realloc(b->data, cap);
		if (!data)
			return NULL;
		b->data = data;
		b->cap = cap;
	}
	dst = b->data + b->len;
	b->len += bytes;
	return dst;
}

/* One part's streamlines, encoded in the columns of the writer's format. */
struct encoded {
	struct byte_buf records;  /* TRK, TCK records; TRX positions */
	struct byte_buf rows;     /* TCK: seeds-file rows after their index */
	struct byte_buf counts;   /* TRX: uint32 points per streamline */
	struct byte_buf seeds, seed_index, dg;   /* TRX dps columns */
	uint32_t positions_crc;   /* TRX: CRC-32 of records, summed here, on the
				   * encoding thread, not on the writing one */
	uint64_t streamlines, points;
};

static int encode_trk(const struct output_writer *w, struct encoded *e, const struct output_line *l)
{
	float props[TRK_VALUES];
	size_t k = trk_values(w, &l->dps, props);
	unsigned char *dst;

	/* As trk_write_streamline_with: no record without its properties. */
	if (l->n > INT32_MAX || (k == 0 && w->trk_values > 0))
		return -EINVAL;
	dst = buf_take(&e->records, trk_record_bytes(w->w.trk, l->n));
	if (!dst)
		return -ENOMEM;
	trk_record_encode(w->w.trk, dst, l->points_vox, l->n, props);
	return 0;
}

static int encode_tck(const struct output_writer *w, struct encoded *e, const struct output_line *l)
{
	unsigned char *dst = buf_take(&e->records, tck_record_bytes(l->n));

	if (!dst)
		return -ENOMEM;
	tck_record_encode(w->w.tck, dst, l->points_vox, l->n);
	if (w->seeds_file) {
		char tail[SEED_ROW_TAIL_BYTES];
		int len = seed_row_tail(tail, &l->dps);

		if (len < 0)
			return len;
		dst = buf_take(&e->rows, (size_t)len);
		if (!dst)
			return -ENOMEM;
		memcpy(dst, tail, (size_t)len);
	}
	return 0;
}

/* A dps column's row, when the writer keeps that column. */
static int take_row(struct byte_buf *b, bool kept, const void *row, size_t len)
{
	unsigned char *dst = kept ? buf_take(b, len) : NULL;

	if (kept && !dst)
		return -ENOMEM;
	if (kept)
		memcpy(dst, row, len);
	return 0;
}

static int encode_trx(const struct output_writer *w, struct encoded *e, const struct output_line *l)
{
	struct trx_dps t = trx_dps_of(&l->dps);
	unsigned char seed[TRX_SEED_BYTES], seed_index[TRX_SEED_INDEX_BYTES], dg;
	unsigned char *points = buf_take(&e->records, trx_positions_bytes(w->w.trx, l->n));

	if (!points)
		return -ENOMEM;
	trx_positions_encode(w->w.trx, points, l->points_vox, l->n);
	e->positions_crc = (uint32_t)crc32_z(e->positions_crc, points,
					     trx_positions_bytes(w->w.trx, l->n));
	trx_dps_encode(&t, seed, seed_index, &dg);
	if (take_row(&e->counts, true, &l->n, sizeof(uint32_t)) ||
	    take_row(&e->seeds, w->seeds, seed, sizeof(seed)) ||
	    take_row(&e->seed_index, w->seed_index, seed_index, sizeof(seed_index)) ||
	    take_row(&e->dg, w->dg, &dg, 1))
		return -ENOMEM;
	return 0;
}

static int encode_line(const struct output_writer *w, struct encoded *e, const struct output_line *l)
{
	int r;

	if (l->n == 0)
		return 0;
	switch (w->format) {
	case OUTPUT_TCK:
		r = encode_tck(w, e, l);
		break;
	case OUTPUT_TRX:
		r = encode_trx(w, e, l);
		break;
	default:
		r = encode_trk(w, e, l);
		break;
	}
	if (r == 0) {
		e->streamlines++;
		e->points += l->n;
	}
	return r;
}

/* The seeds-file rows of a part, each given its index in the file. */
static int write_rows(struct output_writer *w, const struct encoded *e)
{
	const char *row = (const char *)e->rows.data, *end = row + e->rows.len;

	for (uint64_t i = 0; row < end; i++) {
		const char *nl = memchr(row, '\n', (size_t)(end - row));
		size_t len = (size_t)(nl - row) + 1;

		if (write_seed_row_tail(w, w->count + i, row, len) < 0)
			return -EIO;
		row += len;
	}
	return 0;
}

/* Appends a part's streamlines after those written before. */
static int write_encoded(struct output_writer *w, const struct encoded *e)
{
	int r;

	switch (w->format) {
	case OUTPUT_TCK:
		r = tck_write_records(w->w.tck, e->records.data, e->records.len, e->streamlines);
		if (r == 0 && w->seeds_file)
			r = write_rows(w, e);
		break;
	case OUTPUT_TRX: {
		struct trx_records rec = {
			.positions = e->records.data, .positions_bytes = e->records.len,
			.positions_crc = e->positions_crc,
			.counts = (const uint32_t *)(const void *)e->counts.data,
			.seeds = e->seeds.data, .seed_index = e->seed_index.data,
			.direction_getter = e->dg.data, .n = e->streamlines,
		};
		r = trx_write_records(w->w.trx, &rec);
		break;
	}
	default:
		r = trk_write_records(w->w.trk, e->records.data, e->records.len, e->streamlines);
		break;
	}
	if (r == 0)
		w->count += e->streamlines;
	return r;
}

/* A part of a round: lines [first, end), encoded by one thread. */
struct encode_part {
	const struct output_writer *w;
	output_line_fn *fn;
	void *userdata;
	unsigned index;
	uint64_t first, end;
	struct encoded e;
	int error;
};

static void clear_encoded(struct encoded *e)
{
	e->records.len = e->rows.len = e->counts.len = 0;
	e->seeds.len = e->seed_index.len = e->dg.len = 0;
	e->positions_crc = 0;
	e->streamlines = e->points = 0;
}

static void free_encoded(struct encoded *e)
{
	free(e->records.data);
	free(e->rows.data);
	free(e->counts.data);
	free(e->seeds.data);
	free(e->seed_index.data);
	free(e->dg.data);
}

static void encode_part(void *arg)
{
	struct encode_part *p = arg;

	clear_encoded(&p->e);
	p->error = 0;
	for (uint64_t i = p->first; i < p->end && p->error == 0; i++) {
		struct output_line line = { 0 };

		p->fn(p->userdata, i, p->index, &line);
		p->error = encode_line(p->w, &p->e, &line);
	}
}

/* A round's parts: lines [first, end) split evenly. */
static void plan_round(struct encode_part *parts, size_t n_parts, uint64_t first, uint64_t end)
{
	uint64_t lines = end - first;

	for (size_t j = 0; j < n_parts; j++) {
		parts[j].first = first + lines * j / n_parts;
		parts[j].end = first + lines * (j + 1) / n_parts;
	}
}

/* Appends a round's parts in order; the first part's error is the round's. */
static int write_round(struct output_writer *w, const struct encode_part *parts, size_t n_parts,
		       struct output_write_stats *stats)
{
	for (size_t j = 0; j < n_parts; j++) {
		int r = parts[j].error ? parts[j].error : write_encoded(w, &parts[j].e);

		if (r < 0)
			return r;
		stats->streamlines += parts[j].e.streamlines;
		stats->points += parts[j].e.points;
	}
	return 0;
}

/* opts.writeback: the bytes the kernel got since the last call (the
 * buffers' rest goes at the next flush) start on their way to disk while
 * the next round encodes. Best effort: an fsync at the end still decides
 * whether the file is safe, and reports any error. */
static void write_back(struct output_writer *w)
{
	off_t end;

	if (w->writeback_fd < 0)
		return;
	end = lseek(w->writeback_fd, 0, SEEK_CUR);
	if (end <= w->written_back)
		return;
	(void)sync_file_range(w->writeback_fd, w->written_back, end - w->written_back,
			      SYNC_FILE_RANGE_WRITE);
	w->written_back = end;
}

/* Encodes each round on the parts' threads while the calling thread writes
 * the round before, so encoding and writing overlap; one part encodes on
 * the calling thread, between the writes. */
static int encode_rounds(struct output_writer *w, uint64_t n, struct encode_part *round[2],
			 size_t n_parts, struct output_write_stats *stats)
{
	uint64_t lines = (uint64_t)n_parts * PART_LINES;
	struct encode_part *pending = NULL;
	int r = 0;

	for (uint64_t first = 0, k = 0; r == 0 && first < n; first += lines, k++) {
		struct encode_part *parts = round[k % 2];
		struct parallel par;
		double t_start = timing_now(), t_write, t_wait;

		plan_round(parts, n_parts, first, n - first < lines ? n : first + lines);
		if (n_parts > 1)
			parallel_start(&par, encode_part, parts, sizeof(*parts), n_parts);
		t_write = timing_now();
		if (pending)
			r = write_round(w, pending, n_parts, stats);
		write_back(w);
		t_wait = timing_now();
		/* Even after a failed write: the threads use the parts. */
		if (n_parts > 1)
			parallel_finish(&par);
		else
			encode_part(parts);
		stats->write_seconds += t_wait - t_write;
		stats->encode_seconds += (t_write - t_start) + (timing_now() - t_wait);
		pending = parts;
	}
	if (r == 0 && pending) {
		double t_write = timing_now();

		r = write_round(w, pending, n_parts, stats);
		write_back(w);
		stats->write_seconds += timing_now() - t_write;
	}
	return r;
}

int output_write_lines(struct output_writer *w, uint64_t n, output_line_fn *fn, void *userdata,
		       size_t threads, struct output_write_stats *stats)
{
	size_t n_parts = threads < 1 ? 1 : threads > PARALLEL_MAX_PARTS ? PARALLEL_MAX_PARTS : threads;
	struct encode_part *round[2];
	int r;

	round[0] = calloc(2 * n_parts, sizeof(*round[0]));
	if (!round[0])
		return -ENOMEM;
	round[1] = round[0] + n_parts;
	for (size_t j = 0; j < 2 * n_parts; j++)
		round[0][j] = (struct encode_part){ .w = w, .fn = fn, .userdata = userdata,
						    .index = (unsigned)(j % n_parts) };
	r = encode_rounds(w, n, round, n_parts, stats);
	for (size_t j = 0; j < 2 * n_parts; j++)
		free_encoded(&round[0][j].e);
	free(round[0]);
	return r;
}
