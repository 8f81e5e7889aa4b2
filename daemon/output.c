/* SPDX-License-Identifier: MIT */
/*
 * output: one writer interface over the TRK, TCK and TRX writers (see output.h).
 */
#include "output.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tck.h"
#include "trk.h"
#include "trx.h"

struct output_writer {
	enum output_format format;
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
	};

	return trx_writer_new(out, dim, affine, &t, ret, err);
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
	switch (format) {
	case OUTPUT_TRK:
		r = trk_writer_new_with_property(out, dim, affine,
						 opts->with_seeds ? "seeds" : NULL, 3, &w->w.trk,
						 err);
		break;
	case OUTPUT_TCK:
		r = opts->with_seeds ? errbuf_set(err, -EINVAL, "output.save_seeds",
						  "TCK keeps no per-streamline data")
				     : tck_writer_new(out, affine, &w->w.tck, err);
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

int output_write_streamline(struct output_writer *w, const float *points_vox, uint32_t n,
			    const float seed_ras[3])
{
	switch (w->format) {
	case OUTPUT_TCK:
		return tck_write_streamline(w->w.tck, points_vox, n);
	case OUTPUT_TRX:
		return trx_write_streamline(w->w.trx, points_vox, n, seed_ras);
	default:
		return trk_write_streamline_with(w->w.trk, points_vox, n, seed_ras);
	}
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
