/* SPDX-License-Identifier: MIT */
/*
 * output: one writer interface over the TRK and TCK writers (see output.h).
 */
#include "output.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tck.h"
#include "trk.h"

struct output_writer {
	enum output_format format;
	union {
		struct trk_writer *trk;
		struct tck_writer *tck;
	} w;
};

static const char *const format_names[] = { [OUTPUT_TRK] = "trk", [OUTPUT_TCK] = "tck" };

const char *output_format_name(enum output_format format)
{
	return format_names[format];
}

int output_writer_new(enum output_format format, FILE *out, const int64_t dim[3],
		      const double affine[4][4], bool with_seeds, struct output_writer **ret,
		      struct errbuf *err)
{
	struct output_writer *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	w->format = format;
	switch (format) {
	case OUTPUT_TRK:
		r = trk_writer_new_with_property(out, dim, affine, with_seeds ? "seeds" : NULL, 3,
						 &w->w.trk, err);
		break;
	case OUTPUT_TCK:
		r = with_seeds ? errbuf_set(err, -EINVAL, "output.save_seeds",
					    "TCK keeps no per-streamline data")
			       : tck_writer_new(out, affine, &w->w.tck, err);
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
	if (w->format == OUTPUT_TCK)
		return tck_write_streamline(w->w.tck, points_vox, n);
	return trk_write_streamline_with(w->w.trk, points_vox, n, seed_ras);
}

int output_flush(struct output_writer *w)
{
	if (w->format == OUTPUT_TCK)
		return tck_flush(w->w.tck);
	return trk_flush(w->w.trk);
}

int output_writer_finish(struct output_writer *w)
{
	int r;

	if (!w)
		return 0;
	r = w->format == OUTPUT_TCK ? tck_writer_finish(w->w.tck) : trk_writer_finish(w->w.trk);
	free(w);
	return r;
}
