/* SPDX-License-Identifier: MIT */
/*
 * trx: TRX writer, the positions streamed into the output's zip (zipout),
 * the small columns through temporary files (see trx.h).
 */
#include "formats/trx.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "formats/binio.h"
#include "formats/half.h"
#include "formats/zipout.h"

#define TRX_POINTS_PER_CHUNK 1024
#define TRX_COPY_BYTES ((size_t)1 << 16)
#define TRX_MAX_DIM 65535

struct trx_writer {
	FILE *out;
	struct zipout *zip;     /* the archive in out; its positions entry open
				 * until finish */
	FILE *offsets;          /* uint64 first vertex per streamline */
	FILE *seeds;            /* float32 RAS+ seed per streamline; NULL without seeds */
	FILE *seed_index;       /* uint32 per streamline; NULL unless with_seed_index */
	FILE *dg;               /* uint8 per streamline; NULL unless with_direction_getter */
	double affine[4][4];
	int64_t dim[3];
	struct trx_options opts;
	uint64_t nb_streamlines;
	uint64_t nb_vertices;
	int failed;             /* a write failed; later calls report -EIO */
};

static int affine_finite(const double affine[4][4])
{
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			if (!isfinite(affine[r][c]))
				return 0;
	return 1;
}

static void close_file(FILE **f)
{
	if (*f)
		fclose(*f);
	*f = NULL;
}

static void free_writer(struct trx_writer *w)
{
	zipout_discard(w->zip);
	close_file(&w->offsets);
	close_file(&w->seeds);
	close_file(&w->seed_index);
	close_file(&w->dg);
	free(w);
}

static const char *positions_name(const struct trx_options *opts)
{
	return opts->positions == TRX_POSITIONS_FLOAT16 ? "positions.3.float16"
							: "positions.3.float32";
}

static enum zipout_method zip_method(const struct trx_options *opts)
{
	return opts->compression == TRX_COMPRESSION_DEFLATE ? ZIPOUT_DEFLATE : ZIPOUT_STORE;
}

static int open_temporary_files(struct trx_writer *w, struct errbuf *err)
{
	const struct trx_options *opts = &w->opts;

	w->offsets = tmpfile();
	w->seeds = opts->with_seeds ? tmpfile() : NULL;
	w->seed_index = opts->with_seed_index ? tmpfile() : NULL;
	w->dg = opts->with_direction_getter ? tmpfile() : NULL;
	if (!w->offsets || (opts->with_seeds && !w->seeds) ||
	    (opts->with_seed_index && !w->seed_index) || (opts->with_direction_getter && !w->dg))
		return errbuf_set(err, -EIO, NULL, "cannot create a temporary file for TRX: %s",
				  strerror(errno));
	return 0;
}

/* The archive starts with the positions entry, which the records stream
 * into as they come. */
static int open_archive_out(struct trx_writer *w, struct errbuf *err)
{
	int r = zipout_new(w->out, &w->zip);

	if (r)
		return errbuf_set(err, r, NULL, "out of memory for the TRX writer");
	r = zipout_begin(w->zip, positions_name(&w->opts), zip_method(&w->opts));
	return r ? errbuf_set(err, r, NULL, "cannot write the TRX archive: %s", strerror(-r)) : 0;
}

int trx_writer_new(FILE *out, const int64_t dim[3], const double affine[4][4],
		   const struct trx_options *opts, struct trx_writer **ret, struct errbuf *err)
{
	struct trx_writer *w;
	int r;

	if (!affine_finite(affine))
		return errbuf_set(err, -EINVAL, NULL, "the voxel-to-RAS affine has a non-finite entry");
	for (int i = 0; i < 3; i++)
		if (dim[i] < 1 || dim[i] > TRX_MAX_DIM)
			return errbuf_set(err, -EINVAL, NULL,
					  "TRX keeps volume dimensions up to %d, got %lld",
					  TRX_MAX_DIM, (long long)dim[i]);
	w = calloc(1, sizeof(*w));
	if (!w)
		return errbuf_set(err, -ENOMEM, NULL, "out of memory for the TRX writer");
	w->out = out;
	memcpy(w->affine, affine, sizeof(w->affine));
	memcpy(w->dim, dim, sizeof(w->dim));
	w->opts = *opts;
	r = open_temporary_files(w, err);
	if (!r)
		r = open_archive_out(w, err);
	if (r) {
		free_writer(w);
		return r;
	}
	*ret = w;
	return 0;
}

/* RAS+ mm = affine * (p, 1), in double, rounded to float once (as TCK). For
 * float16 that float is rounded again: the double rounding can only move a
 * result by a float ulp, far below a half's resolution. */
static unsigned char *encode_point(unsigned char *dst, const struct trx_writer *w,
				   const float *p)
{
	double x = p[0], y = p[1], z = p[2];

	for (int r = 0; r < 3; r++) {
		float v = (float)(w->affine[r][0] * x + w->affine[r][1] * y +
				  w->affine[r][2] * z + w->affine[r][3]);
		if (w->opts.positions == TRX_POSITIONS_FLOAT16) {
			uint16_t h = half_from_float(v);
			dst[0] = (unsigned char)h;
			dst[1] = (unsigned char)(h >> 8);
			dst += 2;
		} else {
			binio_put_f32(dst, v);
			dst += 4;
		}
	}
	return dst;
}

size_t trx_positions_bytes(const struct trx_writer *w, uint32_t n)
{
	return (size_t)n * (w->opts.positions == TRX_POSITIONS_FLOAT16 ? 6 : 12);
}

void trx_positions_encode(const struct trx_writer *w, unsigned char *dst, const float *points_vox,
			  uint32_t n)
{
	for (uint32_t i = 0; i < n; i++, points_vox += 3)
		dst = encode_point(dst, w, points_vox);
}

/* Encodes in chunks on the stack: a streamline of any length needs no heap. */
static int append_points(struct trx_writer *w, const float *p, uint32_t n)
{
	unsigned char buf[TRX_POINTS_PER_CHUNK * 12];

	while (n > 0) {
		uint32_t k = n < TRX_POINTS_PER_CHUNK ? n : TRX_POINTS_PER_CHUNK;
		size_t bytes = trx_positions_bytes(w, k);

		trx_positions_encode(w, buf, p, k);
		if (zipout_write(w->zip, buf, bytes))
			return -EIO;
		p += 3 * (size_t)k;
		n -= k;
	}
	return 0;
}

static int append_u64(FILE *f, uint64_t v)
{
	unsigned char b[8];

	binio_put_u64(b, v);
	return fwrite(b, 1, sizeof(b), f) == sizeof(b) ? 0 : -EIO;
}

void trx_dps_encode(const struct trx_dps *dps, unsigned char seed[TRX_SEED_BYTES],
		    unsigned char seed_index[TRX_SEED_INDEX_BYTES], unsigned char *direction_getter)
{
	static const struct trx_dps none = { 0 };

	if (!dps)
		dps = &none;
	for (int c = 0; c < 3; c++)
		binio_put_f32(seed + 4 * c, dps->seed_ras ? dps->seed_ras[c] : NAN);
	binio_put_u32(seed_index, dps->seed_index);
	*direction_getter = dps->direction_getter;
}

static int append_column(FILE *f, const unsigned char *bytes, size_t len)
{
	return !f || len == 0 || fwrite(bytes, 1, len, f) == len ? 0 : -EIO;
}

static int append_dps(struct trx_writer *w, const struct trx_dps *dps)
{
	unsigned char seed[TRX_SEED_BYTES], seed_index[TRX_SEED_INDEX_BYTES], dg;

	trx_dps_encode(dps, seed, seed_index, &dg);
	if (append_column(w->seeds, seed, sizeof(seed)) ||
	    append_column(w->seed_index, seed_index, sizeof(seed_index)) ||
	    append_column(w->dg, &dg, 1))
		return -EIO;
	return 0;
}

int trx_write_streamline_dps(struct trx_writer *w, const float *points_vox, uint32_t n,
			     const struct trx_dps *dps)
{
	if (w->failed)
		return -EIO;
	if (n == 0)
		return 0;
	if (append_u64(w->offsets, w->nb_vertices) || append_points(w, points_vox, n) ||
	    append_dps(w, dps)) {
		w->failed = 1;
		return -EIO;
	}
	w->nb_streamlines++;
	w->nb_vertices += n;
	return 0;
}

/* The offsets of the run's streamlines, from the vertices written so far. */
static int append_offsets(struct trx_writer *w, const uint32_t *counts, uint64_t n)
{
	unsigned char buf[TRX_POINTS_PER_CHUNK * 8];
	uint64_t vertices = w->nb_vertices;

	for (uint64_t first = 0; first < n; first += TRX_POINTS_PER_CHUNK) {
		uint64_t k = n - first < TRX_POINTS_PER_CHUNK ? n - first : TRX_POINTS_PER_CHUNK;

		for (uint64_t i = 0; i < k; i++) {
			binio_put_u64(buf + 8 * i, vertices);
			vertices += counts[first + i];
		}
		if (fwrite(buf, 1, 8 * k, w->offsets) != 8 * k)
			return -EIO;
	}
	return 0;
}

int trx_write_records(struct trx_writer *w, const struct trx_records *rec)
{
	uint64_t vertices = 0;

	if (w->failed)
		return -EIO;
	for (uint64_t i = 0; i < rec->n; i++)
		vertices += rec->counts[i];
	if (append_offsets(w, rec->counts, rec->n) ||
	    zipout_write_crc(w->zip, rec->positions, rec->positions_bytes, rec->positions_crc) ||
	    append_column(w->seeds, rec->seeds, TRX_SEED_BYTES * rec->n) ||
	    append_column(w->seed_index, rec->seed_index, TRX_SEED_INDEX_BYTES * rec->n) ||
	    append_column(w->dg, rec->direction_getter, rec->n)) {
		w->failed = 1;
		return -EIO;
	}
	w->nb_streamlines += rec->n;
	w->nb_vertices += vertices;
	return 0;
}

int trx_write_streamline(struct trx_writer *w, const float *points_vox, uint32_t n,
			 const float seed_ras[3])
{
	struct trx_dps dps = { .seed_ras = seed_ras };

	return trx_write_streamline_dps(w, points_vox, n, &dps);
}

static int flush_file(FILE *f)
{
	return !f || (fflush(f) == 0 && !ferror(f)) ? 0 : -EIO;
}

int trx_flush(struct trx_writer *w)
{
	if (w->failed || flush_file(w->out) || flush_file(w->offsets) ||
	    flush_file(w->seeds) || flush_file(w->seed_index) || flush_file(w->dg))
		w->failed = 1;
	return w->failed ? -EIO : 0;
}

/* header.json as text (the caller frees it), or NULL. */
static char *header_json(const struct trx_writer *w)
{
	json_t *m = json_array(), *root;
	char *text;

	if (!m)
		return NULL;
	for (int r = 0; r < 4; r++) {
		json_t *row = json_pack("[ffff]", w->affine[r][0], w->affine[r][1],
					w->affine[r][2], w->affine[r][3]);
		if (!row || json_array_append_new(m, row)) {
			json_decref(m);
			return NULL;
		}
	}
	root = json_pack("{s:o, s:[III], s:I, s:I}", "VOXEL_TO_RASMM", m, "DIMENSIONS",
			 (json_int_t)w->dim[0], (json_int_t)w->dim[1], (json_int_t)w->dim[2],
			 "NB_STREAMLINES", (json_int_t)w->nb_streamlines, "NB_VERTICES",
			 (json_int_t)w->nb_vertices);
	if (!root)
		return NULL;
	if (w->opts.shard_tag &&
	    json_object_set_new(root, TRX_SHARD_KEY, json_string(w->opts.shard_tag))) {
		json_decref(root);
		return NULL;
	}
	text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	return text;
}

/* An entry holding all of a temporary file. */
static int add_file_entry(struct trx_writer *w, const char *name, FILE *f)
{
	unsigned char *buf = malloc(TRX_COPY_BYTES);
	int r = buf ? zipout_begin(w->zip, name, zip_method(&w->opts)) : -ENOMEM;
	size_t n;

	if (!r && fseek(f, 0, SEEK_SET) != 0)
		r = -EIO;
	while (!r && (n = fread(buf, 1, TRX_COPY_BYTES, f)) > 0)
		r = zipout_write(w->zip, buf, n);
	if (!r && ferror(f))
		r = -EIO;
	if (!r)
		r = zipout_end(w->zip);
	free(buf);
	return r;
}

/* Ends the positions entry and adds the others, which needed the counts
 * (header.json) or are columns of their own (temporary files). */
static int add_other_entries(struct trx_writer *w)
{
	char *header = header_json(w);
	int r = header ? zipout_end(w->zip) : -ENOMEM;

	if (!r)
		r = zipout_begin(w->zip, "header.json", zip_method(&w->opts));
	if (!r)
		r = zipout_write(w->zip, header, strlen(header));
	if (!r)
		r = zipout_end(w->zip);
	if (!r)
		r = add_file_entry(w, "offsets.uint64", w->offsets);
	if (!r && w->seeds)
		r = add_file_entry(w, "dps/seeds.3.float32", w->seeds);
	if (!r && w->seed_index)
		r = add_file_entry(w, "dps/seed_index.uint32", w->seed_index);
	if (!r && w->dg)
		r = add_file_entry(w, "dps/direction_getter.uint8", w->dg);
	free(header);
	return r;
}

int trx_writer_finish(struct trx_writer *w)
{
	int r;

	if (!w)
		return 0;
	r = w->failed ? -EIO : 0;
	if (!r && (append_u64(w->offsets, w->nb_vertices) || trx_flush(w)))
		r = -EIO;
	if (!r)
		r = add_other_entries(w);
	if (!r) {
		r = zipout_finish(w->zip);
		w->zip = NULL;
	}
	free_writer(w);
	return r;
}

/* ---- reading back what the writer wrote (merge) ------------------------- */

static int open_archive(const char *path, zip_t **za, struct errbuf *err)
{
	int zerr = 0;

	*za = zip_open(path, ZIP_RDONLY, &zerr);
	return *za ? 0 : errbuf_set(err, -EINVAL, NULL, "%s is not a zip archive", path);
}

/* The whole entry name of za as text (NUL-terminated; the caller frees it). */
static char *read_entry_text(zip_t *za, const char *name)
{
	zip_stat_t st;
	zip_file_t *f;
	char *text = NULL;

	if (zip_stat(za, name, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) || st.size > (1u << 20))
		return NULL;
	f = zip_fopen(za, name, 0);
	text = f ? calloc(1, (size_t)st.size + 1) : NULL;
	if (text && zip_fread(f, text, st.size) != (zip_int64_t)st.size) {
		free(text);
		text = NULL;
	}
	if (f)
		zip_fclose(f);
	return text;
}

static bool has_entry(zip_t *za, const char *name)
{
	return zip_name_locate(za, name, 0) >= 0;
}

static int header_info(json_t *h, struct trx_archive_info *info)
{
	json_t *m = json_object_get(h, "VOXEL_TO_RASMM"), *d = json_object_get(h, "DIMENSIONS");
	json_t *tag = json_object_get(h, TRX_SHARD_KEY);

	if (json_array_size(m) != 4 || json_array_size(d) != 3)
		return -EINVAL;
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			info->affine[r][c] = json_number_value(json_array_get(json_array_get(m, (size_t)r),
									      (size_t)c));
	for (int i = 0; i < 3; i++)
		info->dim[i] = (int64_t)json_integer_value(json_array_get(d, (size_t)i));
	info->nb_streamlines = (uint64_t)json_integer_value(json_object_get(h, "NB_STREAMLINES"));
	info->nb_vertices = (uint64_t)json_integer_value(json_object_get(h, "NB_VERTICES"));
	if (json_is_string(tag))
		snprintf(info->tag, sizeof(info->tag), "%s", json_string_value(tag));
	return 0;
}

static int entries_info(zip_t *za, struct trx_archive_info *info)
{
	zip_stat_t st;

	info->opts.positions = has_entry(za, "positions.3.float16") ? TRX_POSITIONS_FLOAT16
								      : TRX_POSITIONS_FLOAT32;
	if (zip_stat(za, "header.json", 0, &st) != 0 || !(st.valid & ZIP_STAT_COMP_METHOD))
		return -EINVAL;
	info->opts.compression = st.comp_method == ZIP_CM_STORE ? TRX_COMPRESSION_STORE
								: TRX_COMPRESSION_DEFLATE;
	info->opts.with_seeds = has_entry(za, "dps/seeds.3.float32");
	info->opts.with_seed_index = has_entry(za, "dps/seed_index.uint32");
	info->opts.with_direction_getter = has_entry(za, "dps/direction_getter.uint8");
	return 0;
}

int trx_archive_read_info(const char *path, struct trx_archive_info *info, struct errbuf *err)
{
	zip_t *za;
	char *text;
	json_t *h = NULL;
	int r = open_archive(path, &za, err);

	if (r)
		return r;
	memset(info, 0, sizeof(*info));
	text = read_entry_text(za, "header.json");
	if (text)
		h = json_loads(text, 0, NULL);
	r = json_is_object(h) ? header_info(h, info) : -EINVAL;
	if (!r)
		r = entries_info(za, info);
	info->opts.shard_tag = info->tag[0] ? info->tag : NULL;
	json_decref(h);
	free(text);
	zip_discard(za);
	return r ? errbuf_set(err, r, NULL, "%s is not a TRX archive tractd wrote", path) : 0;
}

/* Appends bytes to a column of w: its temporary file, or (file NULL) the
 * positions entry of the archive. */
static int put_column(struct trx_writer *w, FILE *file, const unsigned char *bytes, size_t len)
{
	if (!file)
		return zipout_write(w->zip, bytes, len);
	return fwrite(bytes, 1, len, file) == len ? 0 : -EIO;
}

/* Copies entry name of za to the column file of w (put_column), or
 * (offsets) its first n uint64 each plus shift. */
static int copy_entry(zip_t *za, const char *name, struct trx_writer *w, FILE *file,
		      bool offsets, uint64_t n, uint64_t shift)
{
	unsigned char buf[TRX_POINTS_PER_CHUNK * 8];
	zip_file_t *in = zip_fopen(za, name, 0);
	zip_int64_t got;
	uint64_t done = 0;
	int r = in ? 0 : -EINVAL;

	while (!r && (got = zip_fread(in, buf, sizeof(buf))) > 0) {
		size_t len = (size_t)got;

		if (offsets) {
			size_t k = 0;
			for (; k + 8 <= len && done < n; k += 8, done++)
				binio_put_u64(buf + k, binio_get_u64(buf + k) + shift);
			len = k;
		}
		if (len && put_column(w, file, buf, len))
			r = -EIO;
	}
	if (in)
		zip_fclose(in);
	return r;
}

int trx_writer_append_archive(struct trx_writer *w, const char *path, struct errbuf *err)
{
	struct trx_archive_info info;
	zip_t *za;
	int r = trx_archive_read_info(path, &info, err);

	if (!r)
		r = open_archive(path, &za, err);
	if (r)
		return r;
	r = copy_entry(za, positions_name(&w->opts), w, NULL, false, 0, 0);
	if (!r)
		r = copy_entry(za, "offsets.uint64", w, w->offsets, true, info.nb_streamlines,
			       w->nb_vertices);
	if (!r && w->seeds)
		r = copy_entry(za, "dps/seeds.3.float32", w, w->seeds, false, 0, 0);
	if (!r && w->seed_index)
		r = copy_entry(za, "dps/seed_index.uint32", w, w->seed_index, false, 0, 0);
	if (!r && w->dg)
		r = copy_entry(za, "dps/direction_getter.uint8", w, w->dg, false, 0, 0);
	zip_discard(za);
	if (r) {
		w->failed = 1;
		return errbuf_set(err, r, NULL, "cannot copy the streamlines of %s", path);
	}
	w->nb_streamlines += info.nb_streamlines;
	w->nb_vertices += info.nb_vertices;
	return 0;
}
