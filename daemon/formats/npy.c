/* SPDX-License-Identifier: MIT */
/* npy: seed point files as NumPy .npy arrays (see npy.h). */
#include "formats/npy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/infile.h"
#include "formats/binio.h"

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6
#define MAX_WORD 16             /* longest descr or True/False accepted */
#define SHAPE "must be an (N, 3) array of points"

/* The header: a Python dict literal, e.g.
 * {'descr': '<f8', 'fortran_order': False, 'shape': (1000, 3), } */
struct header {
	const unsigned char *p, *end;
	size_t item_size;           /* 4 (float32) or 8 (float64) */
	bool fortran;
	uint64_t shape[2];
	int dims;
	unsigned seen;              /* keys given, by bit: descr, fortran_order, shape */
};

struct place {
	const char *path, *field;
	struct errbuf *err;
};

static int bad(const struct place *at, const char *why)
{
	return errbuf_set(at->err, -EINVAL, at->field, "%s: %s", at->path, why);
}

static void skip_space(struct header *h)
{
	while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
		h->p++;
}

static bool take(struct header *h, char c)
{
	skip_space(h);
	if (h->p == h->end || *h->p != (unsigned char)c)
		return false;
	h->p++;
	return true;
}

/* A quoted string (no escapes) or a bare word, at most MAX_WORD bytes, NUL-terminated. */
static bool word(struct header *h, bool quoted, char out[MAX_WORD + 1])
{
	unsigned char quote = 0;
	size_t n = 0;

	skip_space(h);
	if (quoted) {
		if (h->p == h->end || (*h->p != '\'' && *h->p != '"'))
			return false;
		quote = *h->p++;
	}
	while (h->p < h->end && n < MAX_WORD &&
	       (quoted ? *h->p != quote && *h->p != '\\'
		       : (*h->p >= 'A' && *h->p <= 'Z') || (*h->p >= 'a' && *h->p <= 'z')))
		out[n++] = (char)*h->p++;
	out[n] = '\0';
	if (quoted && (h->p == h->end || *h->p++ != quote))
		return false;
	return n > 0;
}

/* (d0, d1, ...) of decimal dimensions, a trailing comma allowed; at most two. */
static bool shape(struct header *h)
{
	if (!take(h, '('))
		return false;
	h->dims = 0;
	for (;;) {
		uint64_t v = 0;
		const unsigned char *start;

		if (take(h, ')'))
			return true;
		if (h->dims == 2)
			return false;
		start = h->p;
		while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
			if (v > (UINT64_MAX - 9) / 10)
				return false;
			v = v * 10 + (uint64_t)(*h->p++ - '0');
		}
		if (h->p == start)
			return false;
		h->shape[h->dims++] = v;
		if (!take(h, ','))
			return take(h, ')');
	}
}

static bool same(const char *a, const char *b)
{
	return strcmp(a, b) == 0;
}

static bool value(struct header *h, const char *key)
{
	char w[MAX_WORD + 1];

	if (same(key, "descr")) {
		if (!word(h, true, w))
			return false;
		h->item_size = same(w, "<f4") ? 4 : same(w, "<f8") ? 8 : 0;
		h->seen |= 1;
		return true;
	}
	if (same(key, "fortran_order")) {
		if (!word(h, false, w) || (!same(w, "True") && !same(w, "False")))
			return false;
		h->fortran = same(w, "True");
		h->seen |= 2;
		return true;
	}
	if (same(key, "shape")) {
		h->seen |= 4;
		return shape(h);
	}
	return false;
}

/* The dict: each of the three keys once, nothing else, pairs separated
 * by commas (a trailing one allowed), then padding only. */
static bool dict(struct header *h)
{
	char key[MAX_WORD + 1];
	bool closed;

	if (!take(h, '{'))
		return false;
	while (!(closed = take(h, '}'))) {
		unsigned before = h->seen;

		if (!word(h, true, key) || !take(h, ':') || !value(h, key) || h->seen == before)
			return false;
		if (!take(h, ',')) {
			closed = take(h, '}');
			break;
		}
	}
	skip_space(h);
	return closed && h->p == h->end && h->seen == 7;
}

/* The header's length and where the data start, by format version. */
static int preamble(const unsigned char *buf, size_t len, size_t *start, size_t *header_len,
		    const struct place *at)
{
	if (len < MAGIC_LEN + 4 || memcmp(buf, MAGIC, MAGIC_LEN) != 0)
		return bad(at, "not a NumPy .npy file (np.save of an (N, 3) array)");
	if (buf[6] == 1 && buf[7] == 0) {
		*header_len = (size_t)buf[8] | (size_t)buf[9] << 8;
		*start = MAGIC_LEN + 4;
	} else if ((buf[6] == 2 || buf[6] == 3) && buf[7] == 0 && len >= MAGIC_LEN + 6) {
		*header_len = binio_get_u32(buf + 8);
		*start = MAGIC_LEN + 6;
	} else {
		return errbuf_set(at->err, -EINVAL, at->field, "%s: .npy format version %u.%u is "
				  "not supported (1.0, 2.0 or 3.0)", at->path, buf[6], buf[7]);
	}
	if (*header_len > NPY_MAX_HEADER || *header_len > len - *start)
		return bad(at, "the .npy header runs past the end of the file");
	return 0;
}

static int check_array(const struct header *h, size_t data_len, uint64_t max_points,
		       const struct place *at)
{
	if (!h->item_size)
		return bad(at, "the array's dtype must be float32 or float64, little-endian "
			   "('<f4' or '<f8')");
	if (h->dims != 2 || h->shape[1] != 3)
		return bad(at, SHAPE);
	if (h->shape[0] == 0)
		return bad(at, "the array holds no point");
	if (h->shape[0] > max_points)
		return errbuf_set(at->err, -EINVAL, at->field, "%s: %llu points, more than the "
				  "%llu a job may have", at->path, (unsigned long long)h->shape[0],
				  (unsigned long long)max_points);
	if (data_len / h->item_size / 3 != h->shape[0] || data_len % (3 * h->item_size))
		return errbuf_set(at->err, -EINVAL, at->field, "%s: %zu bytes of data for %llu "
				  "points of %zu bytes", at->path, data_len,
				  (unsigned long long)h->shape[0], 3 * h->item_size);
	return 0;
}

static double element(const unsigned char *data, size_t item_size, uint64_t index)
{
	uint64_t u;
	double d;

	if (item_size == 4)
		return binio_get_f32(data + 4 * index);
	u = binio_get_u64(data + 8 * index);
	memcpy(&d, &u, sizeof(d));
	return d;
}

int npy_points_parse(const unsigned char *buf, size_t len, const char *path, const char *field,
		     uint64_t max_points, double **ret, uint64_t *n, struct errbuf *err)
{
	const struct place at = { path, field, err };
	struct header h = { 0 };
	size_t start = 0, header_len = 0;   /* set when preamble succeeds */
	const unsigned char *data;
	uint64_t count;
	double *pts;
	int rc = preamble(buf, len, &start, &header_len, &at);

	if (rc)
		return rc;
	h.p = buf + start;
	h.end = h.p + header_len;
	if (!dict(&h))
		return bad(&at, "the .npy header is not the dict np.save writes ('descr', "
			   "'fortran_order', 'shape')");
	rc = check_array(&h, len - start - header_len, max_points, &at);
	if (rc)
		return rc;
	count = h.shape[0];
	data = buf + start + header_len;
	pts = malloc((size_t)count * 3 * sizeof(*pts));
	if (!pts)
		return errbuf_set(err, -ENOMEM, field, "out of memory for %llu points",
				  (unsigned long long)count);
	for (uint64_t i = 0; i < count; i++)
		for (uint64_t k = 0; k < 3; k++)
			pts[3 * i + k] = element(data, h.item_size,
						 h.fortran ? k * count + i : 3 * i + k);
	*ret = pts;
	*n = count;
	return 0;
}

/* The whole file from its start, at most max bytes, into *buf (caller frees). */
static int read_file(int fd, size_t max, unsigned char **buf, size_t *len,
		     const struct place *at)
{
	struct stat st;
	unsigned char *data;
	size_t got = 0;

	if (fstat(fd, &st) != 0)
		return errbuf_set(at->err, -EIO, at->field, "%s: %s", at->path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return bad(at, "not a regular file");
	if ((uint64_t)st.st_size > max)
		return errbuf_set(at->err, -EINVAL, at->field, "%s: %lld bytes, more than the "
				  "points a job may have take", at->path, (long long)st.st_size);
	data = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!data)
		return errbuf_set(at->err, -ENOMEM, at->field, "out of memory");
	while (got < (size_t)st.st_size) {
		ssize_t r = pread(fd, data + got, (size_t)st.st_size - got, (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			free(data);
			return errbuf_set(at->err, -EIO, at->field, "%s: read failed: %s", at->path,
					  r < 0 ? strerror(errno) : "file shrank while being read");
		}
		got += (size_t)r;
	}
	*buf = data;
	*len = got;
	return 0;
}

int npy_points_load(int fd, const char *path, const char *field, uint64_t max_points,
		    double **ret, uint64_t *n, struct errbuf *err)
{
	const struct place at = { path, field, err };
	size_t max = MAGIC_LEN + 6 + NPY_MAX_HEADER + (size_t)max_points * 3 * sizeof(double);
	int own = -1, rc = 0;
	unsigned char *buf = NULL;
	size_t len = 0;

	if (fd < 0) {
		rc = infile_open(path, &own);
		if (rc == -ENOENT)
			return bad(&at, "not found or not permitted");
		if (rc == -EINVAL)
			return bad(&at, "not a regular file");
		if (rc)
			return errbuf_set(err, -EIO, field, "%s: cannot open: %s", path, strerror(-rc));
		fd = own;
	}
	rc = read_file(fd, max, &buf, &len, &at);
	if (rc == 0)
		rc = npy_points_parse(buf, len, path, field, max_points, ret, n, err);
	free(buf);
	if (own >= 0)
		close(own);
	return rc;
}
