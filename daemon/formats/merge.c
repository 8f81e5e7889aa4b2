/* SPDX-License-Identifier: MIT */
/* merge: shard records and the byte-exact join of shard outputs (see merge.h). */
#include "formats/merge.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/binio.h"
#include "formats/output.h"
#include "formats/tck.h"
#include "formats/trk.h"
#include "formats/trx.h"

#define TAG_MAGIC "tractd-shard/2"
#define TAG_FAMILY "tractd-shard/"   /* any version */
#define TCK_HEADER_MAX ((size_t)1 << 16)   /* tractd's TCK headers are far shorter */
#define TCK_MARKER_BYTES 12
#define COPY_BYTES ((size_t)1 << 16)

void shard_tag_format(const struct shard_tag *t, char buf[SHARD_TAG_MAX])
{
	snprintf(buf, SHARD_TAG_MAX, TAG_MAGIC " %" PRIu32 " %" PRIu32 " %" PRIu64 " %" PRIu64
		 " %" PRIu64 " %016" PRIx64 " %016" PRIx64, t->index, t->count, t->first, t->end,
		 t->total, t->job, t->inputs);
}

int shard_tag_parse(const char *text, struct shard_tag *ret)
{
	struct shard_tag t;
	int used = 0;

	if (strncmp(text, TAG_MAGIC " ", sizeof(TAG_MAGIC)) != 0)
		return strncmp(text, TAG_FAMILY, strlen(TAG_FAMILY)) == 0 ? -EPROTO : -EINVAL;
	if (sscanf(text, TAG_MAGIC " %" SCNu32 " %" SCNu32 " %" SCNu64 " %" SCNu64 " %" SCNu64
		   " %16" SCNx64 " %16" SCNx64 "%n", &t.index, &t.count, &t.first, &t.end, &t.total,
		   &t.job, &t.inputs, &used) != 7 || text[used] != '\0')
		return -EINVAL;
	if (t.count == 0 || t.index >= t.count || t.first > t.end || t.end > t.total)
		return -EINVAL;
	*ret = t;
	return 0;
}

/* One part as read: its record and what its format's join needs. */
struct part {
	const char *path;
	enum output_format format;
	struct shard_tag tag;
	uint64_t count;                 /* streamlines */
	long size;                      /* of the file */
	unsigned char trk[TRK_HEADER_SIZE];   /* TRK: header less record and count */
	char *tck_properties;           /* TCK: less the record's line */
	long data_offset;               /* TRK, TCK: where the records start */
	struct trx_archive_info trx;
};

static int not_a_part(const char *path, const char *why, struct errbuf *err)
{
	return errbuf_set(err, -EINVAL, path, "%s", why);
}

/* r: shard_tag_parse's failure. */
static int no_tag(const struct part *p, int r, struct errbuf *err)
{
	if (r == -EPROTO)
		return not_a_part(p->path, "has the shard record of another tractd version ("
				  TAG_MAGIC " expected): run its shard again with this tractd", err);
	return not_a_part(p->path, "has no shard record: not written by a job with seeds.shard "
			  "(tractd run --shard K/N)", err);
}

/* A TRK or TCK written to a pipe keeps 0 in its count: the sum would be
 * wrong, so such a part is refused rather than counted. */
static int check_counted(const struct part *p, long empty_size, struct errbuf *err)
{
	if (p->count == 0 && p->size > empty_size)
		return not_a_part(p->path, "has records but no streamline count in its header "
				  "(written to a pipe?): write parts to files", err);
	return 0;
}

static int read_trk(FILE *f, struct part *p, struct errbuf *err)
{
	char tag[TRK_RESERVED_LEN + 1];
	int32_t count;
	int r;

	if (fread(p->trk, 1, TRK_HEADER_SIZE, f) != TRK_HEADER_SIZE)
		return not_a_part(p->path, "truncated TrackVis header", err);
	memcpy(tag, p->trk + TRK_OFF_RESERVED, TRK_RESERVED_LEN);
	tag[TRK_RESERVED_LEN] = '\0';
	count = (int32_t)binio_get_u32(p->trk + TRK_OFF_N_COUNT);
	r = shard_tag_parse(tag, &p->tag);
	if (r || count < 0)
		return no_tag(p, r, err);
	p->count = (uint64_t)count;
	memset(p->trk + TRK_OFF_RESERVED, 0, TRK_RESERVED_LEN);
	binio_put_i32(p->trk + TRK_OFF_N_COUNT, 0);
	p->data_offset = TRK_HEADER_SIZE;
	return check_counted(p, TRK_HEADER_SIZE, err);
}

/* The record is the last property line (output.c writes it so); 0, or
 * shard_tag_parse's failure. */
static int take_tck_tag(struct part *p)
{
	static const char key[] = "\n" TCK_SHARD_KEY ": ";
	char *props = p->tck_properties, *line, *end;
	int r;

	line = strncmp(props, key + 1, sizeof(key) - 2) == 0 ? props : strstr(props, key);
	if (!line)
		return -EINVAL;
	if (line != props)
		line++;
	end = strchr(line, '\n');
	if (!end || end[1] != '\0')
		return -EINVAL;
	*end = '\0';
	r = shard_tag_parse(line + sizeof(key) - 2, &p->tag);
	if (r == 0)
		*line = '\0';
	return r;
}

static int read_tck(FILE *f, struct part *p, struct errbuf *err)
{
	char *text = calloc(1, TCK_HEADER_MAX + 1);
	size_t n;
	int r;

	if (!text)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	n = fread(text, 1, TCK_HEADER_MAX, f);
	text[n] = '\0';
	r = tck_parse_header(text, &p->tck_properties, &p->count, &p->data_offset);
	free(text);
	if (r == -ENOMEM)
		return errbuf_set(err, r, "", "out of memory");
	if (r || p->data_offset > p->size - TCK_MARKER_BYTES)
		return not_a_part(p->path, "is not a TCK file tractd wrote", err);
	r = take_tck_tag(p);
	if (r)
		return no_tag(p, r, err);
	return check_counted(p, p->data_offset + TCK_MARKER_BYTES, err);
}

static int read_trx(struct part *p, struct errbuf *err)
{
	int r = trx_archive_read_info(p->path, &p->trx, err);

	if (r)
		return r;
	r = p->trx.tag[0] ? shard_tag_parse(p->trx.tag, &p->tag) : -EINVAL;
	if (r)
		return no_tag(p, r, err);
	p->count = p->trx.nb_streamlines;
	p->trx.opts.shard_tag = NULL;
	return 0;
}

/* The format a file's first bytes announce; -EINVAL for none of them. */
static int format_of(const unsigned char magic[6], enum output_format *ret)
{
	if (memcmp(magic, "TRACK", 6) == 0)
		*ret = OUTPUT_TRK;
	else if (memcmp(magic, "mrtrix", 6) == 0)
		*ret = OUTPUT_TCK;
	else if (memcmp(magic, "PK", 2) == 0)
		*ret = OUTPUT_TRX;
	else
		return -EINVAL;
	return 0;
}

static int read_part(struct part *p, struct errbuf *err)
{
	unsigned char magic[6] = { 0 };
	FILE *f = fopen(p->path, "rb");
	int r;

	if (!f)
		return errbuf_set(err, -errno, p->path, "cannot open: %s", strerror(errno));
	if (fseek(f, 0, SEEK_END) != 0 || (p->size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
	    fread(magic, 1, sizeof(magic), f) != sizeof(magic) || fseek(f, 0, SEEK_SET) != 0 ||
	    format_of(magic, &p->format) != 0)
		r = not_a_part(p->path, "is not a tractogram (TRK, TCK or TRX)", err);
	else if (p->format == OUTPUT_TRK)
		r = read_trk(f, p, err);
	else if (p->format == OUTPUT_TCK)
		r = read_tck(f, p, err);
	else
		r = read_trx(p, err);
	fclose(f);
	return r;
}

static bool same_affine(const double a[4][4], const double b[4][4])
{
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			if (a[r][c] != b[r][c])
				return false;
	return true;
}

/* Whether b's header is a's but for the record and the count. */
static bool same_header(const struct part *a, const struct part *b)
{
	const struct trx_options *x = &a->trx.opts, *y = &b->trx.opts;

	switch (a->format) {
	case OUTPUT_TRK:
		return memcmp(a->trk, b->trk, TRK_HEADER_SIZE) == 0;
	case OUTPUT_TCK:
		return strcmp(a->tck_properties, b->tck_properties) == 0;
	case OUTPUT_TRX:
		break;
	}
	return memcmp(a->trx.dim, b->trx.dim, sizeof(a->trx.dim)) == 0 &&
	       same_affine(a->trx.affine, b->trx.affine) &&
	       x->positions == y->positions && x->compression == y->compression &&
	       x->with_seeds == y->with_seeds && x->with_seed_index == y->with_seed_index &&
	       x->with_direction_getter == y->with_direction_getter;
}

/* b belongs with a: one job, one split, one format. */
static int check_same_job(const struct part *a, const struct part *b, struct errbuf *err)
{
	if (b->format != a->format)
		return errbuf_set(err, -EINVAL, b->path, "is %s, but %s is %s",
				  output_format_name(b->format), a->path,
				  output_format_name(a->format));
	if (b->tag.job != a->tag.job || b->tag.total != a->tag.total || !same_header(a, b))
		return errbuf_set(err, -EINVAL, b->path, "is a shard of another job than %s",
				  a->path);
	if (b->tag.inputs != a->tag.inputs)
		return errbuf_set(err, -EINVAL, b->path, "is a shard of the same job as %s, but on "
				  "other input files (another subject's, or changed since)", a->path);
	if (b->tag.count != a->tag.count)
		return errbuf_set(err, -EINVAL, b->path, "is shard %u of %u, but %s is of %u",
				  (unsigned)b->tag.index, (unsigned)b->tag.count, a->path,
				  (unsigned)a->tag.count);
	return 0;
}

/* Puts the parts in shard order into order[] (zeroed, n long); each shard
 * once, none missing, their seed ranges end to end over the job. */
static int order_parts(struct part *parts, size_t n, struct part **order, struct errbuf *err)
{
	uint32_t count = parts[0].tag.count;

	for (size_t i = 1; i < n; i++) {
		int r = check_same_job(&parts[0], &parts[i], err);
		if (r)
			return r;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t k = parts[i].tag.index;

		if (k < n && order[k])
			return errbuf_set(err, -EINVAL, parts[i].path, "is shard %u/%u again (%s is "
					  "too)", (unsigned)k, (unsigned)count, order[k]->path);
		if (k < n)
			order[k] = &parts[i];
	}
	for (uint32_t k = 0; k < count; k++) {
		if (k >= n || !order[k])
			return errbuf_set(err, -EINVAL, "PART", "shard %u/%u of the job of %s is "
					  "missing (%zu of %u parts given)", (unsigned)k,
					  (unsigned)count, parts[0].path, n, (unsigned)count);
		if (order[k]->tag.first != (k ? order[k - 1]->tag.end : 0) ||
		    (k + 1 == count && order[k]->tag.end != order[k]->tag.total))
			return errbuf_set(err, -EINVAL, order[k]->path, "its seeds do not follow "
					  "those of the shard before it");
	}
	return 0;
}

/* Copies bytes [from, to) of path to out. */
static int copy_range(const char *path, long from, long to, FILE *out)
{
	char *buf = malloc(COPY_BYTES);
	FILE *in = fopen(path, "rb");
	long left = to - from;
	int r = buf && in && fseek(in, from, SEEK_SET) == 0 ? 0 : -EIO;

	while (!r && left > 0) {
		size_t want = (size_t)left < COPY_BYTES ? (size_t)left : COPY_BYTES;
		if (fread(buf, 1, want, in) != want || fwrite(buf, 1, want, out) != want)
			r = -EIO;
		left -= (long)want;
	}
	if (in)
		fclose(in);
	free(buf);
	return r;
}

static uint64_t total_count(struct part *const *order, size_t n)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += order[i]->count;
	return sum;
}

static int write_trk(struct part *const *order, size_t n, FILE *out)
{
	unsigned char header[TRK_HEADER_SIZE];
	uint64_t count = total_count(order, n);
	int r = 0;

	if (count > INT32_MAX)
		return -EOVERFLOW;
	memcpy(header, order[0]->trk, sizeof(header));
	binio_put_i32(header + TRK_OFF_N_COUNT, (int32_t)count);
	if (fwrite(header, 1, sizeof(header), out) != sizeof(header))
		return -EIO;
	for (size_t i = 0; i < n && !r; i++)
		r = copy_range(order[i]->path, order[i]->data_offset, order[i]->size, out);
	return r;
}

/* The records of each part without its end marker, the last part's after. */
static int write_tck(struct part *const *order, size_t n, FILE *out)
{
	int r = tck_write_header(out, order[0]->tck_properties, total_count(order, n)) < 0 ? -EIO
											      : 0;

	for (size_t i = 0; i < n && !r; i++)
		r = copy_range(order[i]->path, order[i]->data_offset,
			       order[i]->size - (i + 1 < n ? TCK_MARKER_BYTES : 0), out);
	return r;
}

static int write_trx(struct part *const *order, size_t n, FILE *out, struct errbuf *err)
{
	struct trx_writer *w;
	int r = trx_writer_new(out, order[0]->trx.dim, order[0]->trx.affine, &order[0]->trx.opts,
			       &w, err);

	for (size_t i = 0; i < n && !r; i++)
		r = trx_writer_append_archive(w, order[i]->path, err);
	if (r) {
		trx_writer_finish(w);
		return r;
	}
	return trx_writer_finish(w);
}

/* tckgen's seeds file of each part (PART.seeds.txt, output.c's layout):
 * the first part's two header lines, each part's rows with Track_index
 * counted on from the parts before, and the closing empty line. */
static int join_seed_rows(FILE *in, uint64_t shift, bool keep_header, FILE *out)
{
	char line[512];
	int header = 2;

	while (fgets(line, sizeof(line), in)) {
		unsigned long long track;
		int used = 0;

		if (header > 0) {
			header--;
			if (keep_header && fputs(line, out) == EOF)
				return -EIO;
			continue;
		}
		if (line[0] == '\n')
			break;
		if (sscanf(line, "%llu%n", &track, &used) != 1 ||
		    fprintf(out, "%llu%s", track + shift, line + used) < 0)
			return -EIO;
	}
	return ferror(in) ? -EIO : 0;
}

/* path.seeds.txt into buf; false when it does not fit. */
static bool seeds_path(const char *path, char buf[PATH_MAX])
{
	return snprintf(buf, PATH_MAX, "%s.seeds.txt", path) < PATH_MAX;
}

static int join_seeds(struct part *const *order, size_t n, const char *out_path,
		      struct errbuf *err)
{
	char path[PATH_MAX], part[PATH_MAX];
	uint64_t shift = 0;
	FILE *out;
	int r = 0;

	if (!seeds_path(order[0]->path, part) || access(part, F_OK) != 0)
		return 0;
	if (!seeds_path(out_path, path))
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -ENAMETOOLONG, out_path,
				       "name too long");
	out = fopen(path, "w");
	if (!out)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -errno, path, "cannot create: %s",
				       strerror(errno));
	for (size_t i = 0; i < n && !r; i++) {
		FILE *in = seeds_path(order[i]->path, part) ? fopen(part, "r") : NULL;

		if (!in) {
			r = errbuf_set(err, -EINVAL, part, "is missing (the first part has a "
				       "seeds file)");
			break;
		}
		r = join_seed_rows(in, shift, i == 0, out);
		shift += order[i]->count;
		fclose(in);
	}
	if (fputc('\n', out) == EOF)
		r = r ? r : -EIO;
	if (fclose(out) != 0)
		r = r ? r : -EIO;
	if (r == -EIO)
		errbuf_set_kind(err, ERR_KIND_OUTPUT, r, path, "cannot write the seeds file");
	if (r)
		remove(path);
	return r;
}

static int write_merged(struct part *const *order, size_t n, const char *out_path,
			struct errbuf *err)
{
	FILE *out = fopen(out_path, "wb");
	int r;

	if (!out)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -errno, out_path, "cannot create: %s",
				       strerror(errno));
	switch (order[0]->format) {
	case OUTPUT_TRK:
		r = write_trk(order, n, out);
		break;
	case OUTPUT_TCK:
		r = write_tck(order, n, out);
		break;
	default:
		r = write_trx(order, n, out, err);
		break;
	}
	if (fclose(out) != 0 && !r)
		r = -EIO;
	if (r == -EOVERFLOW)
		errbuf_set(err, -EINVAL, out_path, "the parts hold more streamlines than TrackVis "
			   "counts");
	else if (r && !err->message[0])
		errbuf_set_kind(err, ERR_KIND_OUTPUT, r, out_path, "cannot write: %s", strerror(-r));
	if (!r && order[0]->format == OUTPUT_TCK)
		r = join_seeds(order, n, out_path, err);
	if (r)
		remove(out_path);
	return r;
}

int merge_parts(const char *out_path, const char *const *parts_in, size_t n,
		struct merge_result *res, struct errbuf *err)
{
	struct part *parts = calloc(n ? n : 1, sizeof(*parts));
	struct part **order = calloc(n ? n : 1, sizeof(*order));
	int r = parts && order ? 0 : errbuf_set(err, -ENOMEM, "", "out of memory");

	for (size_t i = 0; i < n && !r; i++) {
		parts[i].path = parts_in[i];
		r = read_part(&parts[i], err);
	}
	if (!r && n == 0)
		r = errbuf_set(err, -EINVAL, "PART", "no parts given");
	if (!r)
		r = order_parts(parts, n, order, err);
	if (!r)
		r = write_merged(order, n, out_path, err);
	if (!r) {
		res->shards = parts[0].tag.count;
		res->seeds = parts[0].tag.total;
		res->streamlines = total_count(order, n);
		res->format = output_format_name(parts[0].format);
	}
	for (size_t i = 0; parts && i < n; i++)
		free(parts[i].tck_properties);
	free(parts);
	free(order);
	return r;
}
