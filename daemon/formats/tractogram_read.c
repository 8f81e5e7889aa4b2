/* SPDX-License-Identifier: MIT */
/*
 * tractogram_read: TRK, TCK and TRX readers for tractd's own output and the
 * conversion between formats (see tractogram_read.h).
 */
#include "formats/tractogram_read.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include "formats/affine.h"
#include "formats/binio.h"
#include "formats/half.h"
#include "formats/trk.h"

/* A record longer than this is taken for a corrupt length, not allocated. */
#define MAX_RECORD_POINTS (UINT32_C(1) << 26)
#define TCK_HEADER_MAX 65536
#define SEED_VALUES 3

struct trx_state {
	zip_t *za;
	zip_file_t *positions;
	bool half;              /* positions.3.float16 */
	uint64_t *offsets;      /* nb_streamlines + 1 entries, the last nb_vertices */
	float *seeds;           /* 3 per streamline, or NULL */
	uint64_t nb_streamlines, nb_vertices;
};

struct tractogram_reader {
	enum output_format format;
	FILE *in;
	struct tractogram_grid grid;
	double to_voxel[4][4];  /* inverse of grid.affine, for TCK and TRX */
	uint64_t count;         /* from the header; 0 = until the end marker / EOF */
	uint64_t read;          /* records handed out */
	bool has_seeds;
	/* TRK */
	float voxel_size[3];
	uint16_t n_scalars, n_properties;
	/* TRX */
	struct trx_state trx;
	/* the current record */
	float *points;
	size_t cap;             /* points, in floats */
	unsigned char *raw;     /* file bytes of a record */
	size_t raw_cap;
	float seed[SEED_VALUES];
};

/* ---- buffers --------------------------------------------------------------- */

static int reserve_points(struct tractogram_reader *r, size_t floats)
{
	float *grown;
	size_t cap = r->cap ? r->cap : 3 * 256;

	if (floats <= r->cap)
		return 0;
	while (cap < floats)
		cap *= 2;
	grown = realloc(r->points, cap * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	r->points = grown;
	r->cap = cap;
	return 0;
}

static int reserve_raw(struct tractogram_reader *r, size_t bytes)
{
	unsigned char *grown;

	if (bytes <= r->raw_cap)
		return 0;
	grown = realloc(r->raw, bytes);
	if (!grown)
		return -ENOMEM;
	r->raw = grown;
	r->raw_cap = bytes;
	return 0;
}

/* RAS+ mm back to voxel coordinates, in double as the writers went forward. */
static void ras_to_voxel(const struct tractogram_reader *r, const float ras[3], float *vox)
{
	double in[3] = { ras[0], ras[1], ras[2] }, out[3];

	affine_apply(r->to_voxel, in, out);
	for (int c = 0; c < 3; c++)
		vox[c] = (float)out[c];
}

/* ---- TRK ------------------------------------------------------------------- */

/* The "seeds" property as trk.c declares it: first, named "seeds", NUL,
 * "3" (nibabel's encoding of a 3-valued property). Properties after it
 * (seed_index, direction_getter) are skipped: conversion keeps the seeds
 * only. */
static bool trk_has_seeds(const unsigned char *h, uint16_t n_properties)
{
	return n_properties >= SEED_VALUES &&
	       memcmp(h + TRK_OFF_PROPERTY_NAME, "seeds\0" "3", 8) == 0;
}

static int trk_open(struct tractogram_reader *r, const struct tractogram_grid *grid,
		    struct errbuf *err)
{
	unsigned char h[TRK_HEADER_SIZE];
	int16_t ns, np;
	int32_t count;

	if (fread(h, 1, sizeof(h), r->in) != sizeof(h))
		return errbuf_set(err, -EINVAL, "", "not a TrackVis file: the header is short");
	if (memcmp(h, "TRACK", 5) != 0 || binio_get_u32(h + TRK_OFF_HDR_SIZE) != TRK_HEADER_SIZE)
		return errbuf_set(err, -EINVAL, "", "not a little-endian TrackVis v2 file");
	ns = binio_get_i16(h + TRK_OFF_N_SCALARS);
	np = binio_get_i16(h + TRK_OFF_N_PROPERTIES);
	count = (int32_t)binio_get_u32(h + TRK_OFF_N_COUNT);
	if (ns < 0 || np < 0 || count < 0)
		return errbuf_set(err, -EINVAL, "", "malformed TrackVis header");
	r->n_scalars = (uint16_t)ns;
	r->n_properties = (uint16_t)np;
	r->count = (uint64_t)count;
	r->has_seeds = trk_has_seeds(h, r->n_properties);
	for (int i = 0; i < 3; i++) {
		r->grid.dim[i] = binio_get_i16(h + TRK_OFF_DIM + 2 * i);
		r->voxel_size[i] = binio_get_f32(h + TRK_OFF_VOXEL_SIZE + 4 * i);
		if (!(r->voxel_size[i] > 0.0f) || !isfinite(r->voxel_size[i]))
			return errbuf_set(err, -EINVAL, "", "TrackVis voxel size %d is not positive", i);
	}
	for (int row = 0; row < 4; row++)
		for (int c = 0; c < 4; c++)
			r->grid.affine[row][c] = binio_get_f32(h + TRK_OFF_VOX_TO_RAS + 4 * (4 * row + c));
	if (grid)
		r->grid = *grid;
	return 0;
}

/* Reads exactly len bytes; 0 bytes at a record boundary is the clean end. */
static int read_exact(FILE *in, void *buf, size_t len, bool *at_end)
{
	size_t got = fread(buf, 1, len, in);

	if (at_end)
		*at_end = got == 0 && feof(in);
	if (got == len)
		return 0;
	return ferror(in) ? -EIO : -EINVAL;
}

/* voxmm = (p + 0.5) * voxel_size, undone in float as trk.c did it. */
static int trk_next(struct tractogram_reader *r, uint32_t *n)
{
	unsigned char len_field[4];
	size_t per_point = 3u + r->n_scalars, bytes;
	int32_t np;
	bool at_end;
	int rc;

	if (r->count && r->read == r->count)
		return 0;
	rc = read_exact(r->in, len_field, sizeof(len_field), &at_end);
	if (rc)
		return at_end && !r->count ? 0 : rc;
	np = (int32_t)binio_get_u32(len_field);
	if (np <= 0 || (uint32_t)np > MAX_RECORD_POINTS)
		return -EINVAL;
	bytes = 4u * ((size_t)np * per_point + r->n_properties);
	if (reserve_raw(r, bytes) || reserve_points(r, 3u * (size_t)np))
		return -ENOMEM;
	if ((rc = read_exact(r->in, r->raw, bytes, NULL)) != 0)
		return rc;
	for (size_t i = 0; i < (size_t)np; i++)
		for (int c = 0; c < 3; c++)
			r->points[3 * i + c] = binio_get_f32(r->raw + 4 * (i * per_point + c)) /
					       r->voxel_size[c] - 0.5f;
	if (r->has_seeds)
		for (int c = 0; c < SEED_VALUES; c++)
			r->seed[c] = binio_get_f32(r->raw + 4 * ((size_t)np * per_point + c));
	*n = (uint32_t)np;
	return 1;
}

/* ---- TCK ------------------------------------------------------------------- */

/* Parses the text header up to END: the data must be Float32LE and its
 * offset given as "file: . N". */
static int tck_open(struct tractogram_reader *r, struct errbuf *err)
{
	char line[512];
	long offset = -1;
	bool float32le = false;
	size_t total = 0;

	if (!fgets(line, sizeof(line), r->in) || strcmp(line, "mrtrix tracks\n") != 0)
		return errbuf_set(err, -EINVAL, "", "not an MRtrix .tck file");
	for (;;) {
		unsigned long long v;
		if (!fgets(line, sizeof(line), r->in) || (total += strlen(line)) > TCK_HEADER_MAX)
			return errbuf_set(err, -EINVAL, "", "the TCK header has no END");
		if (strcmp(line, "END\n") == 0)
			break;
		if (sscanf(line, "count: %llu", &v) == 1)
			r->count = v;
		else if (sscanf(line, "file: . %llu", &v) == 1 && v <= TCK_HEADER_MAX)
			offset = (long)v;
		else if (strcmp(line, "datatype: Float32LE\n") == 0)
			float32le = true;
	}
	if (offset < 0 || !float32le)
		return errbuf_set(err, -EINVAL, "", "the TCK header lacks 'file: . N' or is not "
				  "Float32LE");
	if (fseek(r->in, offset, SEEK_SET) != 0)
		return errbuf_set(err, -EIO, "", "cannot seek to the TCK data");
	return 0;
}

/* Triplets up to a NaN one (end of streamline) or an Inf one (end of file);
 * a NaN right after another ends an empty streamline, which is skipped. */
static int tck_next(struct tractogram_reader *r, uint32_t *n)
{
	size_t k = 0;

	for (;;) {
		unsigned char t[12];
		float ras[3];
		int rc = read_exact(r->in, t, sizeof(t), NULL);

		if (rc)
			return rc;   /* tractd always ends the data with the Inf triplet */
		for (int c = 0; c < 3; c++)
			ras[c] = binio_get_f32(t + 4 * c);
		if (isinf(ras[0]))
			return k ? -EINVAL : 0;
		if (isnan(ras[0])) {
			if (k == 0)
				continue;
			*n = (uint32_t)k;
			return 1;
		}
		if (k == MAX_RECORD_POINTS)
			return -EINVAL;
		if (reserve_points(r, 3 * (k + 1)))
			return -ENOMEM;
		ras_to_voxel(r, ras, r->points + 3 * k);
		k++;
	}
}

/* ---- TRX ------------------------------------------------------------------- */

/* Reads a whole archive entry into a malloc'd buffer (NUL-terminated). */
static int trx_slurp(zip_t *za, const char *name, unsigned char **buf, size_t *len)
{
	zip_stat_t st;
	zip_file_t *zf;
	zip_int64_t got;

	*buf = NULL;
	if (zip_stat(za, name, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
		return -ENOENT;
	if (st.size > SIZE_MAX - 1 || !(*buf = malloc((size_t)st.size + 1)))
		return -ENOMEM;
	zf = zip_fopen(za, name, 0);
	got = zf ? zip_fread(zf, *buf, st.size) : -1;
	if (zf)
		zip_fclose(zf);
	if (got < 0 || (zip_uint64_t)got != st.size) {
		free(*buf);
		*buf = NULL;
		return -EIO;
	}
	(*buf)[st.size] = '\0';
	*len = (size_t)st.size;
	return 0;
}

static int trx_header(struct tractogram_reader *r, const char *text, struct errbuf *err)
{
	json_t *root = json_loads(text, 0, NULL), *m, *d;
	json_int_t ns = -1, nv = -1;
	int rc = 0;

	m = json_object_get(root, "VOXEL_TO_RASMM");
	d = json_object_get(root, "DIMENSIONS");
	if (json_unpack(root, "{s:I, s:I}", "NB_STREAMLINES", &ns, "NB_VERTICES", &nv) != 0 ||
	    ns < 0 || nv < 0 || json_array_size(m) != 4 || json_array_size(d) != 3)
		rc = errbuf_set(err, -EINVAL, "", "the TRX header.json lacks the counts or the grid");
	for (size_t i = 0; !rc && i < 3; i++)
		r->grid.dim[i] = json_integer_value(json_array_get(d, i));
	for (size_t row = 0; !rc && row < 4; row++)
		for (size_t c = 0; c < 4; c++)
			r->grid.affine[row][c] = json_number_value(json_array_get(json_array_get(m, row), c));
	r->trx.nb_streamlines = (uint64_t)ns;
	r->trx.nb_vertices = (uint64_t)nv;
	json_decref(root);
	return rc;
}

/* offsets.uint64 as trx.c writes it: ascending, with or without the closing
 * NB_VERTICES entry (added here when absent). */
static int trx_offsets(struct tractogram_reader *r, struct errbuf *err)
{
	struct trx_state *t = &r->trx;
	unsigned char *raw;
	size_t len, n;
	int rc = trx_slurp(t->za, "offsets.uint64", &raw, &len);

	if (rc)
		return errbuf_set(err, rc == -ENOENT ? -EINVAL : rc, "", "cannot read offsets.uint64");
	n = len / 8;
	if (len % 8 || (n != t->nb_streamlines && n != t->nb_streamlines + 1) ||
	    !(t->offsets = malloc((t->nb_streamlines + 1) * sizeof(*t->offsets)))) {
		free(raw);
		return errbuf_set(err, -EINVAL, "", "offsets.uint64 does not match NB_STREAMLINES");
	}
	for (size_t i = 0; i < t->nb_streamlines; i++)
		t->offsets[i] = binio_get_u64(raw + 8 * i);
	t->offsets[t->nb_streamlines] = t->nb_vertices;
	free(raw);
	for (size_t i = 0; i < t->nb_streamlines; i++)
		if (t->offsets[i] > t->offsets[i + 1])
			return errbuf_set(err, -EINVAL, "", "offsets.uint64 is not ascending");
	return 0;
}

static int trx_seeds(struct tractogram_reader *r, struct errbuf *err)
{
	struct trx_state *t = &r->trx;
	unsigned char *raw;
	size_t len;
	int rc = trx_slurp(t->za, "dps/seeds.3.float32", &raw, &len);

	if (rc == -ENOENT)
		return 0;
	if (rc)
		return errbuf_set(err, rc, "", "cannot read dps/seeds.3.float32");
	if (len != 12 * t->nb_streamlines ||
	    !(t->seeds = malloc((t->nb_streamlines ? len : 1)))) {
		free(raw);
		return errbuf_set(err, -EINVAL, "", "dps/seeds does not match NB_STREAMLINES");
	}
	for (size_t i = 0; i < len / 4; i++)
		t->seeds[i] = binio_get_f32(raw + 4 * i);
	free(raw);
	r->has_seeds = true;
	return 0;
}

static int trx_open(struct tractogram_reader *r, const struct tractogram_grid *grid,
		    struct errbuf *err)
{
	struct trx_state *t = &r->trx;
	unsigned char *text;
	size_t len;
	int zerr = 0, fd = dup(fileno(r->in)), rc;

	/* libzip closes what it opens: give it its own descriptor, not our FILE. */
	if (fd < 0)
		return errbuf_set(err, -errno, "", "cannot duplicate the TRX file: %s", strerror(errno));
	t->za = zip_fdopen(fd, ZIP_RDONLY, &zerr);
	if (!t->za) {
		close(fd);
		return errbuf_set(err, -EINVAL, "", "not a zip (TRX) file (libzip error %d)", zerr);
	}
	rc = trx_slurp(t->za, "header.json", &text, &len);
	if (rc)
		return errbuf_set(err, rc == -ENOENT ? -EINVAL : rc, "", "cannot read header.json");
	rc = trx_header(r, (const char *)text, err);
	free(text);
	if (!rc)
		rc = trx_offsets(r, err);
	if (!rc)
		rc = trx_seeds(r, err);
	if (rc)
		return rc;
	t->half = zip_name_locate(t->za, "positions.3.float16", 0) >= 0;
	t->positions = zip_fopen(t->za, t->half ? "positions.3.float16" : "positions.3.float32", 0);
	if (!t->positions)
		return errbuf_set(err, -EINVAL, "", "the TRX file has no positions.3.float32/16");
	r->count = t->nb_streamlines;
	if (grid)
		r->grid = *grid;
	return 0;
}

static int trx_next(struct tractogram_reader *r, uint32_t *n)
{
	struct trx_state *t = &r->trx;
	size_t width = t->half ? 2 : 4, bytes;
	uint64_t k;

	if (r->read == t->nb_streamlines)
		return 0;
	k = t->offsets[r->read + 1] - t->offsets[r->read];
	if (k == 0 || k > MAX_RECORD_POINTS)
		return -EINVAL;
	bytes = 3 * width * (size_t)k;
	if (reserve_raw(r, bytes) || reserve_points(r, 3 * (size_t)k))
		return -ENOMEM;
	if (zip_fread(t->positions, r->raw, bytes) != (zip_int64_t)bytes)
		return -EIO;
	for (size_t i = 0; i < (size_t)k; i++) {
		float ras[3];
		for (int c = 0; c < 3; c++) {
			const unsigned char *p = r->raw + width * (3 * i + (size_t)c);
			ras[c] = t->half ? half_to_float((uint16_t)(p[0] | p[1] << 8)) : binio_get_f32(p);
		}
		ras_to_voxel(r, ras, r->points + 3 * i);
	}
	if (t->seeds)
		memcpy(r->seed, t->seeds + 3 * r->read, sizeof(r->seed));
	*n = (uint32_t)k;
	return 1;
}

/* ---- the reader --------------------------------------------------------- */

int tractogram_reader_open(FILE *in, enum output_format format,
			   const struct tractogram_grid *grid, struct tractogram_reader **ret,
			   struct errbuf *err)
{
	struct tractogram_reader *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return errbuf_set(err, -ENOMEM, "", "out of memory for the tractogram reader");
	r->format = format;
	r->in = in;
	switch (format) {
	case OUTPUT_TRK:
		rc = trk_open(r, grid, err);
		break;
	case OUTPUT_TCK:
		rc = grid ? tck_open(r, err)
			  : errbuf_set(err, -EINVAL, "", "a TCK file needs its reference grid");
		if (!rc)
			r->grid = *grid;
		break;
	case OUTPUT_TRX:
		rc = trx_open(r, grid, err);
		break;
	default:
		rc = errbuf_set(err, -EINVAL, "", "unknown tractogram format");
	}
	if (!rc && affine_invert(r->grid.affine, r->to_voxel) != 0)
		rc = errbuf_set(err, -EINVAL, "", "the tractogram's voxel-to-RAS affine is singular");
	if (rc) {
		tractogram_reader_close(r);
		return rc;
	}
	*ret = r;
	return 0;
}

void tractogram_reader_grid(const struct tractogram_reader *r, struct tractogram_grid *out)
{
	*out = r->grid;
}

bool tractogram_reader_has_seeds(const struct tractogram_reader *r)
{
	return r->has_seeds;
}

int tractogram_reader_next(struct tractogram_reader *r, const float **points, uint32_t *n,
			   const float **seed_ras)
{
	int rc;

	switch (r->format) {
	case OUTPUT_TRK:
		rc = trk_next(r, n);
		break;
	case OUTPUT_TCK:
		rc = tck_next(r, n);
		break;
	case OUTPUT_TRX:
		rc = trx_next(r, n);
		break;
	default:
		rc = -EINVAL;
	}
	if (rc != 1)
		return rc;
	r->read++;
	*points = r->points;
	*seed_ras = r->has_seeds ? r->seed : NULL;
	return 1;
}

void tractogram_reader_close(struct tractogram_reader *r)
{
	if (!r)
		return;
	if (r->trx.positions)
		zip_fclose(r->trx.positions);
	if (r->trx.za)
		zip_discard(r->trx.za);
	free(r->trx.offsets);
	free(r->trx.seeds);
	free(r->points);
	free(r->raw);
	free(r);
}

/* ---- conversion ------------------------------------------------------------ */

static int copy_records(struct tractogram_reader *r, struct output_writer *w, bool seeds,
			uint64_t *count, struct errbuf *err)
{
	const float *points, *seed;
	uint32_t n;
	int rc;

	while ((rc = tractogram_reader_next(r, &points, &n, &seed)) == 1) {
		int wr = output_write_streamline(w, points, n, seeds ? seed : NULL);
		if (wr < 0)
			return errbuf_set(err, wr, "", "cannot write the converted tractogram: %s",
					  strerror(-wr));
		(*count)++;
	}
	if (rc < 0)
		return errbuf_set(err, rc, "", "cannot read the tractogram: %s",
				  rc == -EINVAL ? "malformed record" : strerror(-rc));
	return 0;
}

int tractogram_convert(FILE *in, enum output_format from, const struct tractogram_grid *grid,
		       FILE *out, enum output_format to, uint64_t *count, struct errbuf *err)
{
	struct tractogram_reader *r = NULL;
	struct output_writer *w = NULL;
	struct output_options opts = { 0 };
	struct tractogram_grid g;
	uint64_t written = 0;
	int rc, fr;

	rc = tractogram_reader_open(in, from, grid, &r, err);
	if (rc)
		return rc;
	tractogram_reader_grid(r, &g);
	/* TCK has no place for seeds: they are dropped rather than refused. */
	opts.with_seeds = tractogram_reader_has_seeds(r) && to != OUTPUT_TCK;
	rc = output_writer_new(to, out, g.dim, g.affine, &opts, &w, err);
	if (!rc)
		rc = copy_records(r, w, opts.with_seeds, &written, err);
	fr = output_writer_finish(w);
	if (!rc && fr < 0)
		rc = errbuf_set(err, fr, "", "cannot finish the converted tractogram: %s",
				strerror(-fr));
	tractogram_reader_close(r);
	if (!rc && count)
		*count = written;
	return rc;
}
