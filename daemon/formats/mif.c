/* SPDX-License-Identifier: MIT */
/*
 * mif: MRtrix3 image reading (see mif.h). The header is text ("key: value"
 * lines from "mrtrix image" to "END"), read a chunk at a time until its END
 * line; the voxel data follow at the offset it gives, in the order of its
 * layout, and are copied to [x][y][z][t] in one pass. A .mif.gz is the
 * same stream deflated: it is read through zlib from the same descriptor.
 * The rules follow MRtrix3's core/formats/mrtrix_utils.{h,cpp}
 * (read_mrtrix_header, parse_axes, get_mrtrix_file_path) and, for the axes
 * a NIfTI conversion has, core/file/nifti_utils.cpp (axes_on_write).
 */
#include "formats/mif.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <zlib.h>

#define MAGIC "mrtrix image"
#define HEADER_CHUNK ((size_t)64 << 10)
/* A .mif.gz's voxel data are inflated into a buffer grown by this much. */
#define READ_BLOCK ((size_t)64 << 20)

enum value_kind { KIND_BIT, KIND_INT, KIND_UINT, KIND_FLOAT };

struct datatype {
	const char *name;      /* MRtrix3's specifier, compared without case */
	size_t size;           /* bytes (1 for Bit, whose values are bits) */
	enum value_kind kind;
	bool big_endian;
};

/* What MRtrix3's DataType::parse accepts, less the complex types; a
 * multi-byte name without LE/BE is the host's order (little-endian here). */
static const struct datatype datatypes[] = {
	{ "Bit", 1, KIND_BIT, false },
	{ "Int8", 1, KIND_INT, false }, { "UInt8", 1, KIND_UINT, false },
	{ "Int16", 2, KIND_INT, false }, { "Int16LE", 2, KIND_INT, false },
	{ "Int16BE", 2, KIND_INT, true },
	{ "UInt16", 2, KIND_UINT, false }, { "UInt16LE", 2, KIND_UINT, false },
	{ "UInt16BE", 2, KIND_UINT, true },
	{ "Int32", 4, KIND_INT, false }, { "Int32LE", 4, KIND_INT, false },
	{ "Int32BE", 4, KIND_INT, true },
	{ "UInt32", 4, KIND_UINT, false }, { "UInt32LE", 4, KIND_UINT, false },
	{ "UInt32BE", 4, KIND_UINT, true },
	{ "Int64", 8, KIND_INT, false }, { "Int64LE", 8, KIND_INT, false },
	{ "Int64BE", 8, KIND_INT, true },
	{ "UInt64", 8, KIND_UINT, false }, { "UInt64LE", 8, KIND_UINT, false },
	{ "UInt64BE", 8, KIND_UINT, true },
	{ "Float32", 4, KIND_FLOAT, false }, { "Float32LE", 4, KIND_FLOAT, false },
	{ "Float32BE", 4, KIND_FLOAT, true },
	{ "Float64", 8, KIND_FLOAT, false }, { "Float64LE", 8, KIND_FLOAT, false },
	{ "Float64BE", 8, KIND_FLOAT, true },
};

#define N_DATATYPES (sizeof(datatypes) / sizeof(datatypes[0]))

/* The open file an image is read from. */
struct mif_file {
	int fd;
	gzFile gz;        /* a stream over its own descriptor when the file is gzip */
	int64_t bytes;    /* the file's size (compressed) */
};

/* ---- the file ---- */

static int file_open(int fd, struct mif_file *f)
{
	bool gz;
	int r;

	*f = (struct mif_file){ .fd = fd };
	r = volume_describe_fd(fd, &f->bytes, &gz);
	if (r == 0 && gz) {
		f->gz = volume_gz_reopen(fd);
		if (!f->gz)
			return -EIO;
	}
	return r;
}

static void file_close(struct mif_file *f)
{
	if (f->gz)
		gzclose(f->gz);
	f->gz = NULL;
}

/* Up to len bytes at offset of the (inflated) content into buf; *got says
 * how many: fewer only at its end. */
static int file_read_at(struct mif_file *f, uint64_t offset, void *buf, size_t len, size_t *got)
{
	unsigned char *p = buf;
	size_t done = 0;

	if (f->gz) {
		if (offset > (uint64_t)INT64_MAX || gzseek(f->gz, (z_off_t)offset, SEEK_SET) < 0)
			return -EIO;
		*got = gzfread(buf, 1, len, f->gz);
		return *got < len && !gzeof(f->gz) ? -EIO : 0;
	}
	while (done < len) {
		ssize_t n = pread(f->fd, p + done, len - done, (off_t)(offset + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	*got = done;
	return 0;
}

/* ---- the header text ---- */

/* Length of text[0..len) up to and including its "END" line, or 0 when
 * no complete line says END. */
static size_t header_end(const char *text, size_t len)
{
	for (size_t start = 0; start < len;) {
		const char *nl = memchr(text + start, '\n', len - start);
		size_t end;

		if (!nl)
			return 0;
		end = (size_t)(nl - text);
		while (end > start && isspace((unsigned char)text[end - 1]))
			end--;
		if (end - start == 3 && memcmp(text + start, "END", 3) == 0)
			return (size_t)(nl - text) + 1;
		start = (size_t)(nl - text) + 1;
	}
	return 0;
}

/* The header, read a chunk at a time until its END line, into a malloc'd
 * *text (NUL-terminated) of *len bytes. */
static int read_header_text(struct mif_file *f, const char *path, const char *field,
			    char **text, size_t *len, struct errbuf *err)
{
	char *buf = NULL;
	size_t have = 0, end = 0;

	while (!end) {
		size_t got = 0;
		char *grown;
		int r;

		if (have >= MIF_MAX_HEADER_BYTES) {
			free(buf);
			return errbuf_set(err, -EINVAL, field, "%s: no END line in the first %zu "
					  "bytes of the MRtrix header", path, MIF_MAX_HEADER_BYTES);
		}
		grown = realloc(buf, have + HEADER_CHUNK + 1);
		if (!grown) {
			free(buf);
			return errbuf_set(err, -ENOMEM, field, "%s: out of memory", path);
		}
		buf = grown;
		r = file_read_at(f, have, buf + have, HEADER_CHUNK, &got);
		if (r < 0) {
			free(buf);
			return errbuf_set(err, -EIO, field, "%s: cannot read: %s", path, strerror(-r));
		}
		have += got;
		end = header_end(buf, have);
		if (!end && got < HEADER_CHUNK) {
			free(buf);
			return errbuf_set(err, -EINVAL, field, "%s: the MRtrix header has no END "
					  "line: file is truncated or not an MRtrix image", path);
		}
	}
	buf[end] = '\0';
	*text = buf;
	*len = end;
	return 0;
}

bool mif_detect_fd(int fd)
{
	char head[sizeof(MAGIC)];
	struct mif_file f;
	size_t got = 0;
	bool is = false;

	if (file_open(fd, &f) < 0)
		return false;
	if (file_read_at(&f, 0, head, sizeof(head), &got) == 0 && got == sizeof(head))
		is = memcmp(head, MAGIC "\n", sizeof(head)) == 0;
	file_close(&f);
	return is;
}

/* ---- parsing ---- */

/* One "key: value" line, trimmed, its comment (from '#') cut. */
struct line {
	char key[64];
	const char *value;   /* into the parser's copy, NUL-terminated */
};

static char *trim(char *s)
{
	size_t n = strlen(s);

	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	while (isspace((unsigned char)*s))
		s++;
	return s;
}

/* Splits one header line (NUL-terminated, modified in place) into *out.
 * false for a line without a key or value, which MRtrix3 ignores. */
static bool split_line(char *s, struct line *out)
{
	char *hash = strchr(s, '#'), *colon, *key;
	size_t len;

	if (hash)
		*hash = '\0';
	colon = strchr(s, ':');
	if (!colon)
		return false;
	*colon = '\0';
	key = trim(s);
	out->value = trim(colon + 1);
	len = strlen(key);
	if (!*key || !*out->value || len >= sizeof(out->key))
		return false;
	memcpy(out->key, key, len + 1);
	return true;
}

/* Parses a comma-separated list of at most max numbers into v; returns
 * their count, or -1 for something that is not a number, or not a finite
 * one when finite. */
static int parse_list(const char *s, double *v, int max, bool finite)
{
	int n = 0;

	for (;;) {
		char *end;
		double d;

		while (isspace((unsigned char)*s))
			s++;
		errno = 0;
		d = strtod(s, &end);
		if (end == s || errno == ERANGE || (finite && !isfinite(d)) || n == max)
			return -1;
		v[n++] = d;
		s = end;
		while (isspace((unsigned char)*s))
			s++;
		if (*s == '\0')
			return n;
		if (*s++ != ',')
			return -1;
	}
}

/* Parser state: what was seen, for the checks after the END line. */
struct parse {
	const char *path, *field;
	struct errbuf *err;
	struct mif_header *h;
	const char *layout, *datatype, *file;
	int n_vox, n_transform;
	bool has_scaling;
	size_t scheme_cap;
};

static int bad(const struct parse *p, const char *what, const char *value)
{
	return errbuf_set(p->err, -EINVAL, p->field, "%s: MRtrix header: %s (\"%.60s\")", p->path,
			  what, value);
}

static int parse_numbers(const char *s, double *v, int max)
{
	return parse_list(s, v, max, true);
}

static int parse_dim(struct parse *p, const char *value)
{
	double d[MIF_MAX_AXES];
	int n = parse_numbers(value, d, MIF_MAX_AXES);

	if (n < 3)
		return bad(p, "dim must list 3 to 16 sizes", value);
	for (int i = 0; i < n; i++) {
		if (!(d[i] >= 1 && d[i] <= (double)INT32_MAX) || d[i] != floor(d[i]))
			return bad(p, "dim must be whole numbers of at least 1", value);
		p->h->dim[i] = (int64_t)d[i];
	}
	p->h->ndim = n;
	return 0;
}

static int parse_vox(struct parse *p, const char *value)
{
	/* MRtrix3 writes nan for the size of a volume axis. */
	int n = parse_list(value, p->h->vox, MIF_MAX_AXES, false);

	if (n < 0)
		return bad(p, "vox must be a list of numbers", value);
	p->n_vox = n;
	return 0;
}

static int parse_transform(struct parse *p, const char *value)
{
	double row[4];

	if (parse_numbers(value, row, 4) != 4)
		return bad(p, "a transform row must have 4 numbers", value);
	if (p->n_transform < 3)
		memcpy(p->h->transform[p->n_transform], row, sizeof(row));
	p->n_transform++;
	return 0;
}

static int parse_scaling(struct parse *p, const char *value)
{
	double s[2];

	if (parse_numbers(value, s, 2) != 2)
		return bad(p, "scaling must be \"offset,scale\"", value);
	p->h->offset = s[0];
	p->h->scale = s[1];
	return 0;
}

static int parse_scheme_row(struct parse *p, const char *value)
{
	struct mif_scheme *s = &p->h->scheme;
	double row[4];

	if (parse_numbers(value, row, 4) != 4)
		return bad(p, "a dw_scheme row must be 4 numbers \"gx,gy,gz,b\"", value);
	if (s->n == p->scheme_cap) {
		size_t cap = p->scheme_cap ? 2 * p->scheme_cap : 64;
		double *grown = realloc(s->rows, sizeof(*grown) * 4 * cap);
		if (!grown)
			return errbuf_set(p->err, -ENOMEM, p->field, "%s: out of memory", p->path);
		s->rows = grown;
		p->scheme_cap = cap;
	}
	memcpy(&s->rows[4 * s->n++], row, sizeof(row));
	return 0;
}

/* One key; the keys MRtrix3 requires are matched without case, as it does. */
static int parse_key(struct parse *p, const struct line *l)
{
	if (!strcasecmp(l->key, "dim"))
		return parse_dim(p, l->value);
	if (!strcasecmp(l->key, "vox"))
		return parse_vox(p, l->value);
	if (!strcasecmp(l->key, "transform"))
		return parse_transform(p, l->value);
	if (!strcasecmp(l->key, "scaling"))
		return parse_scaling(p, l->value);
	if (!strcmp(l->key, "dw_scheme"))
		return parse_scheme_row(p, l->value);
	if (!strcasecmp(l->key, "layout"))
		p->layout = l->value;
	else if (!strcasecmp(l->key, "datatype"))
		p->datatype = l->value;
	else if (!strcasecmp(l->key, "file"))
		p->file = l->value;
	return 0;   /* other keys (comments, command_history...) are not needed */
}

/* layout: "+2,-0,+1,+3", one signed rank per axis, each once. */
static int check_layout(struct parse *p)
{
	const char *s = p->layout;
	bool seen[MIF_MAX_AXES] = { false };
	int n = 0;

	if (!s)
		return bad(p, "layout is missing", "");
	while (*s) {
		bool minus = *s == '-';
		char *end;
		long rank;

		if (*s == '+' || *s == '-')
			s++;
		if (!isdigit((unsigned char)*s))
			return bad(p, "layout must be signed axis ranks such as \"+0,+1,+2\"", p->layout);
		rank = strtol(s, &end, 10);
		if (n == p->h->ndim || rank >= p->h->ndim || seen[rank])
			return bad(p, "layout must rank each axis of dim once", p->layout);
		seen[rank] = true;
		p->h->order[n] = (int)rank;
		p->h->reversed[n++] = minus;
		s = end;
		if (*s == ',')
			s++;
		else if (*s)
			return bad(p, "layout must be signed axis ranks such as \"+0,+1,+2\"", p->layout);
	}
	if (n != p->h->ndim)
		return bad(p, "layout must rank each axis of dim once", p->layout);
	return 0;
}

static int check_datatype(struct parse *p)
{
	if (!p->datatype)
		return bad(p, "datatype is missing", "");
	for (size_t i = 0; i < N_DATATYPES; i++)
		if (!strcasecmp(p->datatype, datatypes[i].name)) {
			p->h->type = (int)i;
			return 0;
		}
	return bad(p, "datatype is not supported (Bit, Int8, UInt8, (U)Int16/32/64 or "
		   "Float32/64, LE or BE; not complex)", p->datatype);
}

/* "file: . OFFSET": the data follow the header in this file. */
static int check_file(struct parse *p)
{
	const char *s = p->file;
	char *end;
	unsigned long long offset;

	if (!s)
		return bad(p, "file is missing", "");
	if (s[0] != '.' || !isspace((unsigned char)s[1]))
		return bad(p, "the voxel data are in a separate file (a .mih header or a "
			   "detached .mif), which is not read: give a single-file .mif or "
			   ".mif.gz (mrconvert IN OUT.mif)", s);
	errno = 0;
	offset = strtoull(s + 1, &end, 10);
	while (isspace((unsigned char)*end))
		end++;
	if (errno || *end || offset == 0 || strchr(s + 1, '-'))
		return bad(p, "file must be \". OFFSET\" with a positive byte offset", s);
	p->h->data_offset = offset;
	return 0;
}

/* MRtrix3's checks after the last key, then tractd's: at most 4 axes that
 * are not of size 1, positive finite voxel sizes, a full transform. */
static int check_header(struct parse *p)
{
	struct mif_header *h = p->h;
	int r;

	if (!h->ndim)
		return bad(p, "dim is missing", "");
	for (int i = 4; i < h->ndim; i++)
		if (h->dim[i] != 1)
			return bad(p, "more than 4 axes (only 3D images and 4D series are read)", "");
	if (p->n_vox < 3)
		return bad(p, "vox must give at least the 3 voxel sizes", "");
	for (int i = 0; i < 3; i++)
		if (!(h->vox[i] > 0) || !isfinite(h->vox[i]))
			return bad(p, "the voxel sizes (vox) must be positive", "");
	if (p->n_transform != 0 && p->n_transform != 3)
		return bad(p, "transform must have 3 rows", "");
	r = check_layout(p);
	if (!r)
		r = check_datatype(p);
	if (!r)
		r = check_file(p);
	if (!r && h->scheme.n && h->scheme.n != (size_t)(h->ndim > 3 ? h->dim[3] : 1))
		r = errbuf_set(p->err, -EINVAL, p->field, "%s: MRtrix header: dw_scheme has %zu "
			       "rows for %lld volumes", p->path, h->scheme.n,
			       (long long)(h->ndim > 3 ? h->dim[3] : 1));
	return r;
}

/* MRtrix3's transform for a header without one (Transform::get_default):
 * axes along scanner x, y, z and the grid centred at the origin. */
static void default_transform(struct mif_header *h)
{
	memset(h->transform, 0, sizeof(h->transform));
	for (int i = 0; i < 3; i++) {
		h->transform[i][i] = 1;
		h->transform[i][3] = -0.5 * (double)(h->dim[i] - 1) * h->vox[i];
	}
}

/* The lines of s (modified in place): the "mrtrix image" line, then keys
 * up to the END line. */
static int parse_lines(struct parse *p, char *s)
{
	bool first = true;
	int r = 0;

	for (char *next; r == 0 && (next = strchr(s, '\n')) != NULL; s = next + 1) {
		struct line l;
		char *t;

		*next = '\0';
		t = trim(s);
		if (first && strcmp(t, MAGIC) != 0)
			return errbuf_set(p->err, -EINVAL, p->field, "%s: not an MRtrix image (no \""
					  MAGIC "\" line)", p->path);
		if (!first && !strcmp(t, "END"))
			return 0;
		if (!first && split_line(t, &l))
			r = parse_key(p, &l);
		first = false;
	}
	return r ? r : errbuf_set(p->err, -EINVAL, p->field, "%s: the MRtrix header has no END "
				  "line", p->path);
}

int mif_parse_header(const char *text, size_t len, const char *path, const char *field,
		     struct mif_header *ret, struct errbuf *err)
{
	struct mif_header h = { .scale = 1 };
	struct parse p = { .path = path, .field = field, .err = err, .h = &h };
	char *copy = malloc(len + 1);
	int r;

	if (!copy)
		return errbuf_set(err, -ENOMEM, field, "%s: out of memory", path);
	memcpy(copy, text, len);
	copy[len] = '\0';
	if (memchr(copy, '\0', len))
		r = errbuf_set(err, -EINVAL, field, "%s: the MRtrix header has a NUL byte", path);
	else
		r = parse_lines(&p, copy);
	if (r == 0)
		r = check_header(&p);
	free(copy);
	if (r) {
		mif_scheme_free(&h.scheme);
		return r;
	}
	if (!p.n_transform)
		default_transform(&h);
	*ret = h;
	return 0;
}

void mif_scheme_free(struct mif_scheme *s)
{
	free(s->rows);
	memset(s, 0, sizeof(*s));
}

/* ---- the volume's axes ---- */

/* The spatial axes in memory order: axes[a] is the header axis that
 * becomes voxel axis a (as mrconvert to NIfTI orders them). */
static void spatial_axes(const struct mif_header *h, int axes[3])
{
	for (int a = 0; a < 3; a++)
		axes[a] = a;
	for (int i = 1; i < 3; i++)
		for (int j = i; j > 0 && h->order[axes[j]] < h->order[axes[j - 1]]; j--) {
			int t = axes[j];
			axes[j] = axes[j - 1];
			axes[j - 1] = t;
		}
}

static void volume_shape(const struct mif_header *h, const int axes[3], int64_t dim[4])
{
	for (int a = 0; a < 3; a++)
		dim[a] = h->dim[axes[a]];
	dim[3] = h->ndim > 3 ? h->dim[3] : 1;
}

/* Voxel axis a is header axis axes[a] taken the way it is stored: a
 * reversed axis starts at its last index, i.e. at that end of the grid. */
static void volume_affine(const struct mif_header *h, const int axes[3], double affine[4][4])
{
	memset(affine, 0, sizeof(double) * 16);
	for (int r = 0; r < 3; r++)
		affine[r][3] = h->transform[r][3];
	for (int a = 0; a < 3; a++) {
		int k = axes[a];
		double sign = h->reversed[k] ? -1.0 : 1.0;
		for (int r = 0; r < 3; r++) {
			double step = h->transform[r][k] * h->vox[k];
			affine[r][a] = sign * step;
			if (h->reversed[k])
				affine[r][3] += step * (double)(h->dim[k] - 1);
		}
	}
	affine[3][3] = 1;
}

/* ---- the voxel data ---- */

static bool host_big_endian(void)
{
	const uint16_t one = 1;
	unsigned char first;

	memcpy(&first, &one, 1);
	return first == 0;
}

/* Stored value i (in memory order) of raw. */
static double stored_value(const unsigned char *raw, size_t i, const struct datatype *t,
			   bool swap)
{
	unsigned char b[8];

	if (t->kind == KIND_BIT)
		return (raw[i / 8] >> (7 - i % 8)) & 1;   /* MRtrix3: the high bit first */
	for (size_t k = 0; k < t->size; k++)
		b[k] = raw[i * t->size + (swap ? t->size - 1 - k : k)];
#define AS(ctype) do { ctype v; memcpy(&v, b, sizeof(v)); return (double)v; } while (0)
	switch (t->kind * 16 + (int)t->size) {
	case KIND_INT * 16 + 1: AS(int8_t);
	case KIND_INT * 16 + 2: AS(int16_t);
	case KIND_INT * 16 + 4: AS(int32_t);
	case KIND_INT * 16 + 8: AS(int64_t);
	case KIND_UINT * 16 + 1: AS(uint8_t);
	case KIND_UINT * 16 + 2: AS(uint16_t);
	case KIND_UINT * 16 + 4: AS(uint32_t);
	case KIND_UINT * 16 + 8: AS(uint64_t);
	case KIND_FLOAT * 16 + 4: AS(float);
	default: AS(double);
	}
#undef AS
}

/* Bytes the values take in the file, or -EINVAL on overflow. */
static int stored_bytes(const struct mif_header *h, size_t *count, size_t *bytes)
{
	const struct datatype *t = &datatypes[h->type];
	size_t n = 1;

	for (int i = 0; i < h->ndim; i++)
		if (__builtin_mul_overflow(n, (size_t)h->dim[i], &n))
			return -EINVAL;
	*count = n;
	if (t->kind == KIND_BIT) {
		*bytes = n / 8 + (n % 8 != 0);
		return 0;
	}
	return __builtin_mul_overflow(n, t->size, bytes) ? -EINVAL : 0;
}

/* Memory stride (in values) of each header axis: the product of the sizes
 * of the axes ranked before it. */
static void memory_strides(const struct mif_header *h, size_t stride[MIF_MAX_AXES])
{
	for (int k = 0; k < h->ndim; k++) {
		stride[k] = 1;
		for (int j = 0; j < h->ndim; j++)
			if (h->order[j] < h->order[k])
				stride[k] *= (size_t)h->dim[j];
	}
}

/* Copies raw (memory order) to v->data ([x][y][z][t]) with scaling; the
 * first non-finite value is an error naming its voxel. */
static int convert(const struct mif_header *h, const int axes[3], const unsigned char *raw,
		   struct volume *v, const char *path, const char *field, struct errbuf *err)
{
	const struct datatype *t = &datatypes[h->type];
	bool swap = t->size > 1 && t->big_endian != host_big_endian();
	size_t stride[MIF_MAX_AXES], nt = (size_t)v->dim[3], o = 0, st;

	memory_strides(h, stride);
	st = h->ndim > 3 ? stride[3] : 0;
	for (int64_t x = 0; x < v->dim[0]; x++)
		for (int64_t y = 0; y < v->dim[1]; y++)
			for (int64_t z = 0; z < v->dim[2]; z++) {
				size_t base = (size_t)x * stride[axes[0]] + (size_t)y * stride[axes[1]] +
					      (size_t)z * stride[axes[2]];
				for (size_t k = 0; k < nt; k++, o++) {
					size_t m = h->ndim > 3 && h->reversed[3] ? nt - 1 - k : k;
					float f = (float)(h->offset +
							  h->scale * stored_value(raw, base + m * st, t, swap));
					if (!isfinite(f))
						return errbuf_set(err, -EINVAL, field, "%s: non-finite value at "
								  "voxel (%lld, %lld, %lld), volume %zu",
								  path, (long long)x, (long long)y,
								  (long long)z, k);
					v->data[o] = f;
				}
			}
	return 0;
}

/* bytes of stored values at the data offset into a malloc'd *raw. A plain
 * file's size is checked first; a .mif.gz, whose inflated size is known
 * only by inflating it, grows *raw a block at a time as data arrive, so
 * that a few bytes declaring a huge image allocate nothing large. */
static int read_raw(struct mif_file *f, const struct mif_header *h, size_t bytes,
		    unsigned char **raw, const char *path, const char *field, struct errbuf *err)
{
	size_t block = f->gz ? READ_BLOCK : bytes, have = 0;
	unsigned char *buf = NULL;

	if (!f->gz && (uint64_t)f->bytes < h->data_offset + bytes)
		return errbuf_set(err, -EIO, field, "%s: file is truncated or corrupt: %zu bytes "
				  "of voxel data at offset %llu, the file has %lld bytes", path, bytes,
				  (unsigned long long)h->data_offset, (long long)f->bytes);
	do {
		size_t want = bytes - have < block ? bytes - have : block, got = 0;
		unsigned char *grown = realloc(buf, have + want + 1);
		int r;

		if (!grown) {
			free(buf);
			return errbuf_set(err, -ENOMEM, field, "%s: out of memory for %zu bytes of "
					  "voxel data", path, bytes);
		}
		buf = grown;
		r = file_read_at(f, h->data_offset + have, buf + have, want, &got);
		if (r < 0 || got < want) {
			free(buf);
			return errbuf_set(err, -EIO, field, "%s: file is truncated or corrupt: voxel "
					  "data ended early", path);
		}
		have += got;
	} while (have < bytes);
	*raw = buf;
	return 0;
}

/* The values, read whole (inflated for .mif.gz), converted into v. */
static int read_data(struct mif_file *f, const struct mif_header *h, const int axes[3],
		     struct volume *v, const char *path, const char *field, struct errbuf *err)
{
	size_t count, bytes;
	unsigned char *raw = NULL;
	int r;

	if (stored_bytes(h, &count, &bytes) < 0 || count > SIZE_MAX / sizeof(float))
		return errbuf_set(err, -EINVAL, field, "%s: the image is too large", path);
	r = read_raw(f, h, bytes, &raw, path, field, err);
	if (r)
		return r;
	v->data = malloc(count * sizeof(float));
	if (!v->data)
		r = errbuf_set(err, -ENOMEM, field, "%s: out of memory for %zu voxel values", path,
			       count);
	else
		r = convert(h, axes, raw, v, path, field, err);
	free(raw);
	return r;
}

/* The header of the open file fd, parsed; f stays open for the data. */
static int read_header(int fd, const char *path, const char *field, struct mif_file *f,
		       struct mif_header *h, struct errbuf *err)
{
	char *text = NULL;
	size_t len = 0;
	int r = file_open(fd, f);

	if (r == -EINVAL)
		return errbuf_set(err, -EINVAL, field, "%s: not a regular file", path);
	if (r)
		return errbuf_set(err, -EIO, field, "%s: cannot read: %s", path, strerror(-r));
	r = read_header_text(f, path, field, &text, &len, err);
	if (r == 0)
		r = mif_parse_header(text, len, path, field, h, err);
	free(text);
	if (r)
		file_close(f);
	return r;
}

int mif_load_fd(int fd, const char *path, const char *field, struct volume *ret,
		struct mif_scheme *scheme, struct errbuf *err)
{
	struct mif_file f;
	struct mif_header h;
	struct volume v = { 0 };
	int axes[3];
	int r = read_header(fd, path, field, &f, &h, err);

	if (r)
		return r;
	spatial_axes(&h, axes);
	volume_shape(&h, axes, v.dim);
	volume_affine(&h, axes, v.affine);
	r = read_data(&f, &h, axes, &v, path, field, err);
	file_close(&f);
	if (r) {
		volume_free(&v);
		mif_scheme_free(&h.scheme);
		return r;
	}
	*ret = v;
	if (scheme)
		*scheme = h.scheme;
	else
		mif_scheme_free(&h.scheme);
	return 0;
}

int mif_probe_fd(int fd, const char *path, const char *field, int64_t dim[4],
		 size_t *stored_size, struct errbuf *err)
{
	struct mif_file f;
	struct mif_header h;
	int axes[3];
	int r = read_header(fd, path, field, &f, &h, err);

	if (r)
		return r;
	file_close(&f);
	spatial_axes(&h, axes);
	volume_shape(&h, axes, dim);
	*stored_size = datatypes[h.type].size;
	mif_scheme_free(&h.scheme);
	return 0;
}
