/* SPDX-License-Identifier: MIT */
/*
 * output: one writer interface over the TRK, TCK and TRX writers (see output.h).
 */
#include "formats/output.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "formats/tck.h"
#include "formats/trk.h"
#include "formats/trx.h"

struct output_writer {
	enum output_format format;
	FILE *seeds_file;       /* TCK's seeds text; NULL when not asked for */
	uint64_t count;         /* streamlines written, the seeds file's Track_index */
	bool seed_index, dg;    /* TRK: the properties after "seeds" */
	union {
		struct trk_writer *trk;
		struct tck_writer *tck;
		struct trx_writer *trx;
	} w;
};

static const char *const format_names[] = {
	[OUTPUT_TRK] = "trk", [OUTPUT_TCK] = "tck", [OUTPUT_TRX] = "trx"
};

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
	w->seed_index = opts->with_seed_index;
	w->dg = opts->with_direction_getter;
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

/* One row as tckgen writes it: the streamline's index in the file, the
 * seed's index among its points, the seed in scanner (RAS+) mm, and the
 * trailing comma. %.9g keeps every float bit. */
static int write_seed_row(struct output_writer *w, const struct output_dps *dps)
{
	const float *s = dps ? dps->seed_ras : NULL;

	if (!s)
		return -EINVAL;
	return fprintf(w->seeds_file, "%llu,%lu,%.9g,%.9g,%.9g,\n", (unsigned long long)w->count,
		       (unsigned long)dps->seed_vertex, (double)s[0], (double)s[1],
		       (double)s[2]) < 0 ? -EIO : 0;
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

/* The properties in new_trk's order; a missing seed stays NULL, which the
 * TRK writer refuses when it declared seeds. */
static int write_trk(struct output_writer *w, const float *points_vox, uint32_t n,
		     const struct output_dps *dps)
{
	float props[5];
	size_t k = 0;

	if (dps && dps->seed_ras)
		for (int c = 0; c < 3; c++)
			props[k++] = dps->seed_ras[c];
	if (dps && w->seed_index)
		props[k++] = (float)dps->seed_index;
	if (dps && w->dg)
		props[k++] = (float)dps->direction_getter;
	return trk_write_streamline_with(w->w.trk, points_vox, n, k ? props : NULL);
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
		struct trx_dps t = { 0 };
		if (dps)
			t = (struct trx_dps){ .seed_ras = dps->seed_ras,
					      .seed_index = dps->seed_index,
					      .direction_getter = dps->direction_getter };
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
