/* SPDX-License-Identifier: MIT */
#include "models/gradients.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/infile.h"

/* Far above any real table (a few thousand volumes take tens of kB), small
 * enough to read whole. */
#define GRADIENTS_MAX_FILE_BYTES (1 << 20)
/* DIPY's gradient_table atol on the norm of diffusion-weighted vectors. */
#define UNIT_NORM_TOL 0.01
/* The six independent elements of a diffusion tensor. */
#define MIN_DWI_VOLUMES 6
/* Longest token echoed in an error or parsed as a number. */
#define MAX_TOKEN 64
#define DEFAULT_FIELD_BVALS "inputs.bvals"
#define DEFAULT_FIELD_BVECS "inputs.bvecs"

/* Numbers of a text file as rows of equal length. */
struct number_table {
	double *values;     /* rows * cols, row-major */
	size_t count, capacity;
	size_t rows, cols;
};

static void number_table_free(struct number_table *t)
{
	free(t->values);
	memset(t, 0, sizeof(*t));
}

static int append_number(struct number_table *t, double v)
{
	if (t->count == t->capacity) {
		size_t capacity = t->capacity ? 2 * t->capacity : 256;
		double *grown = realloc(t->values, capacity * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		t->values = grown;
		t->capacity = capacity;
	}
	t->values[t->count++] = v;
	return 0;
}

/* Reads the whole file, NUL-terminated, into *text (caller frees): from
 * its start, through its descriptor only, and only a regular file (a FIFO
 * would block the reader for as long as its writer likes). */
static int read_small_file(const struct gradients_file *f, char **text, struct errbuf *err)
{
	struct stat st;
	char *buf;
	size_t got = 0;

	if (fstat(f->fd, &st) != 0)
		return errbuf_set(err, -EIO, f->field, "%s: %s", f->path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return errbuf_set(err, -EINVAL, f->field, "%s: not a regular file", f->path);
	if (st.st_size > GRADIENTS_MAX_FILE_BYTES)
		return errbuf_set(err, -EINVAL, f->field, "%s: %lld bytes, larger than the %d a "
				  "gradient table may have", f->path, (long long)st.st_size,
				  GRADIENTS_MAX_FILE_BYTES);
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	while (got < (size_t)st.st_size) {
		ssize_t n = pread(f->fd, buf + got, (size_t)st.st_size - got, (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(buf);
			return errbuf_set(err, -EIO, f->field, "%s: read failed: %s", f->path,
					  n < 0 ? strerror(errno) : "file shrank while being read");
		}
		got += (size_t)n;
	}
	if (memchr(buf, '\0', got)) {
		free(buf);
		return errbuf_set(err, -EINVAL, f->field, "%s: binary data, not a text table",
				  f->path);
	}
	buf[got] = '\0';
	*text = buf;
	return 0;
}

/* Errors say where, never what: the text is the file's, and a message
 * must not carry a file's contents anywhere. */
static int parse_number(const char *token, size_t len, const char *path, const char *field,
			size_t line, size_t column, double *ret, struct errbuf *err)
{
	char buf[MAX_TOKEN + 1];
	char *end;

	if (len > MAX_TOKEN)
		return errbuf_set(err, -EINVAL, field, "%s line %zu, value %zu is not a number "
				  "(over %d characters)", path, line, column, MAX_TOKEN);
	memcpy(buf, token, len);
	buf[len] = '\0';
	*ret = strtod(buf, &end);
	if (end != buf + len)
		return errbuf_set(err, -EINVAL, field, "%s line %zu, value %zu is not a number",
				  path, line, column);
	/* NaN passes here: b0 vectors may be NaN (validate decides). */
	if (isinf(*ret))
		return errbuf_set(err, -EINVAL, field, "%s line %zu, value %zu is not finite",
				  path, line, column);
	return 0;
}

static int parse_table(const char *text, const char *path, const char *field,
		       struct number_table *t, struct errbuf *err)
{
	static const char separators[] = " \t,\r\v\f";
	size_t line = 0, first_line = 0;
	const char *p = text;

	while (*p) {
		size_t line_len = strcspn(p, "\n"), content_len = strcspn(p, "#\n"), column = 0;
		const char *q = p, *content_end = p + content_len;

		line++;
		while (q < content_end) {
			size_t token_len;
			double v = 0;
			int rc;

			q += strspn(q, separators);
			if (q >= content_end)
				break;
			token_len = strcspn(q, separators);
			if (q + token_len > content_end)
				token_len = (size_t)(content_end - q);
			rc = parse_number(q, token_len, path, field, line, ++column, &v, err);
			if (rc)
				return rc;
			if (append_number(t, v))
				return -ENOMEM;
			q += token_len;
		}
		if (column > 0) {
			if (t->rows == 0) {
				t->cols = column;
				first_line = line;
			} else if (column != t->cols) {
				return errbuf_set(err, -EINVAL, field, "%s: line %zu has %zu numbers but "
						  "line %zu has %zu", path, line, column, first_line,
						  t->cols);
			}
			t->rows++;
		}
		p += line_len;
		if (*p == '\n')
			p++;
	}
	if (t->count == 0)
		return errbuf_set(err, -EINVAL, field, "%s: empty file (no numbers)", path);
	return 0;
}

static int load_table(const struct gradients_file *f, struct number_table *t,
		      struct errbuf *err)
{
	char *text = NULL;
	int rc = read_small_file(f, &text, err);

	if (rc)
		return rc;
	rc = parse_table(text, f->path, f->field, t, err);
	free(text);
	if (rc)
		number_table_free(t);
	return rc;
}

static int validate(const double *bvals, const double *bvecs, size_t n,
		    const char *field_bvals, const char *field_bvecs,
		    struct gradients *ret, struct errbuf *err)
{
	struct gradients g = { .n = n };
	size_t n_dwi;

	if (n == 0)
		return errbuf_set(err, -EINVAL, field_bvals, "no volumes");
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(bvals[i]))
			return errbuf_set(err, -EINVAL, field_bvals, "b-value of volume %zu is not "
					  "finite", i);
		if (bvals[i] < 0)
			return errbuf_set(err, -EINVAL, field_bvals, "b-value of volume %zu is "
					  "negative (%g)", i, bvals[i]);
		/* DIPY reads NaN vectors as zero, and some b0 tables (DIPY's own
		 * small_64D) have them; a direction that matters must be a number. */
		for (int c = 0; c < 3; c++)
			if (!isfinite(bvecs[3 * i + (size_t)c]) &&
			    !(isnan(bvecs[3 * i + (size_t)c]) && bvals[i] <= GRADIENTS_B0_THRESHOLD))
				return errbuf_set(err, -EINVAL, field_bvecs, "b-vector of volume %zu "
						  "(b-value %g) is not finite", i, bvals[i]);
	}
	for (size_t i = 0; i < n; i++) {
		const double *v = &bvecs[3 * i];
		double norm = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);

		if (bvals[i] > GRADIENTS_B0_THRESHOLD && fabs(norm - 1.0) > UNIT_NORM_TOL)
			return errbuf_set(err, -EINVAL, field_bvecs, "b-vector of volume %zu (b-value "
					  "%g) has norm %.6g; diffusion-weighted volumes need unit "
					  "vectors (within %g)", i, bvals[i], norm, UNIT_NORM_TOL);
		g.n_b0 += bvals[i] <= GRADIENTS_B0_THRESHOLD;
	}
	if (g.n_b0 == 0)
		return errbuf_set(err, -EINVAL, field_bvals, "no b0 volume (b-value <= %g)",
				  GRADIENTS_B0_THRESHOLD);
	n_dwi = n - g.n_b0;
	if (n_dwi < MIN_DWI_VOLUMES)
		return errbuf_set(err, -EINVAL, field_bvals, "%zu diffusion-weighted volume%s "
				  "(b-value > %g); the tensor fit needs at least %d", n_dwi,
				  n_dwi == 1 ? "" : "s", GRADIENTS_B0_THRESHOLD, MIN_DWI_VOLUMES);

	g.bvals = malloc(n * sizeof(*g.bvals));
	g.bvecs = malloc(3 * n * sizeof(*g.bvecs));
	g.is_b0 = malloc(n * sizeof(*g.is_b0));
	if (!g.bvals || !g.bvecs || !g.is_b0) {
		gradients_free(&g);
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	}
	memcpy(g.bvals, bvals, n * sizeof(*g.bvals));
	memcpy(g.bvecs, bvecs, 3 * n * sizeof(*g.bvecs));
	for (size_t i = 0; i < n; i++) {
		double *v = &g.bvecs[3 * i];

		g.is_b0[i] = bvals[i] <= GRADIENTS_B0_THRESHOLD;
		for (int c = 0; c < 3; c++)
			if (isnan(v[c]))
				v[c] = 0.0;
		if (!g.is_b0[i]) {
			double norm = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);

			for (int c = 0; c < 3; c++)
				v[c] /= norm;
		}
	}
	*ret = g;
	return 0;
}

int gradients_from_arrays(const double *bvals, const double *bvecs, size_t n,
			  struct gradients *ret, struct errbuf *err)
{
	return validate(bvals, bvecs, n, DEFAULT_FIELD_BVALS, DEFAULT_FIELD_BVECS, ret, err);
}

/* Volume-major x, y, z of each vector, from either accepted layout. */
static int bvecs_volume_major(const struct number_table *t, const char *path,
			      const char *field, double **ret, size_t *n, struct errbuf *err)
{
	double *v;

	if (t->cols != 3 && t->rows != 3)
		return errbuf_set(err, -EINVAL, field, "%s: %zu rows of %zu numbers; b-vectors must "
				  "be 3 rows of one number per volume (or one row of 3 per volume)",
				  path, t->rows, t->cols);
	v = malloc(t->count * sizeof(*v));
	if (!v)
		return -ENOMEM;
	*n = t->cols == 3 ? t->rows : t->cols;
	for (size_t i = 0; i < *n; i++)
		for (size_t c = 0; c < 3; c++)
			v[3 * i + c] = t->cols == 3 ? t->values[3 * i + c] : t->values[c * *n + i];
	*ret = v;
	return 0;
}

int gradients_read(const struct gradients_file *bvals_file,
		   const struct gradients_file *bvecs_file, int64_t n_volumes,
		   struct gradients *ret, struct errbuf *err)
{
	const char *bvals_path = bvals_file->path, *bvecs_path = bvecs_file->path;
	const char *field_bvals = bvals_file->field, *field_bvecs = bvecs_file->field;
	struct number_table bvals = { 0 }, bvecs = { 0 };
	double *vectors = NULL;
	size_t n_vectors = 0;
	int rc;

	rc = load_table(bvals_file, &bvals, err);
	if (rc)
		return rc;
	rc = load_table(bvecs_file, &bvecs, err);
	if (rc)
		goto out;
	if (bvals.rows > 1 && bvals.cols > 1) {
		rc = errbuf_set(err, -EINVAL, field_bvals, "%s: %zu rows of %zu numbers; b-values "
				"must be one row (or one column) of one number per volume",
				bvals_path, bvals.rows, bvals.cols);
		goto out;
	}
	if (n_volumes < 0 || (uint64_t)n_volumes != bvals.count) {
		rc = errbuf_set(err, -EINVAL, field_bvals, "bvals has %zu values but the DWI has "
				"%lld volumes", bvals.count, (long long)n_volumes);
		goto out;
	}
	rc = bvecs_volume_major(&bvecs, bvecs_path, field_bvecs, &vectors, &n_vectors, err);
	if (rc)
		goto out;
	if (n_vectors != bvals.count) {
		rc = errbuf_set(err, -EINVAL, field_bvecs, "bvecs has %zu vectors but bvals has %zu "
				"values and the DWI %lld volumes", n_vectors, bvals.count,
				(long long)n_volumes);
		goto out;
	}
	rc = validate(bvals.values, vectors, bvals.count, field_bvals, field_bvecs, ret, err);
out:
	free(vectors);
	number_table_free(&bvecs);
	number_table_free(&bvals);
	return rc;
}

/* Opens f->path into f->fd (close it), with the message every caller of a
 * file it may not read gets. */
static int open_table(struct gradients_file *f, struct errbuf *err)
{
	int rc = infile_open(f->path, &f->fd);

	if (rc == -ENOENT)
		return errbuf_set(err, -ENOENT, f->field, "%s: not found or not permitted", f->path);
	if (rc == -EINVAL)
		return errbuf_set(err, -EINVAL, f->field, "%s: not a regular file", f->path);
	if (rc)
		return errbuf_set(err, -EIO, f->field, "%s: cannot open: %s", f->path, strerror(-rc));
	return 0;
}

int gradients_load(const char *bvals_path, const char *bvecs_path, int64_t n_volumes,
		   const char *field_bvals, const char *field_bvecs,
		   struct gradients *ret, struct errbuf *err)
{
	struct gradients_file bvals = { -1, bvals_path, field_bvals };
	struct gradients_file bvecs = { -1, bvecs_path, field_bvecs };
	int rc = open_table(&bvals, err);

	if (rc == 0)
		rc = open_table(&bvecs, err);
	if (rc == 0)
		rc = gradients_read(&bvals, &bvecs, n_volumes, ret, err);
	if (bvals.fd >= 0)
		close(bvals.fd);
	if (bvecs.fd >= 0)
		close(bvecs.fd);
	return rc;
}

/* The unit DIPY's round_bvals rounds to: one order of magnitude below the
 * largest b-value (int() truncates toward zero, as does the cast). */
static double shell_rounding_unit(const struct gradients *g)
{
	double largest = 0;

	for (size_t i = 0; i < g->n; i++)
		largest = fmax(largest, g->bvals[i]);
	return pow(10.0, (int)log10(largest) - 1);
}

/* numpy's round is round-half-to-even, as rint is in the default rounding mode. */
static double shell_of(const struct gradients *g, double unit, size_t i)
{
	return rint(g->bvals[i] / unit) * unit;
}

size_t gradients_lowest_shell(const struct gradients *g, size_t *out)
{
	double unit = shell_rounding_unit(g), lowest = INFINITY;
	size_t count = 0;

	for (size_t i = 0; i < g->n; i++)
		if (!g->is_b0[i])
			lowest = fmin(lowest, shell_of(g, unit, i));
	for (size_t i = 0; i < g->n; i++)
		if (g->is_b0[i] || shell_of(g, unit, i) == lowest)
			out[count++] = i;
	return count;
}

/* Shells are multiples of a unit at most 100 times smaller than the largest
 * b-value, so there are few of them: counting them one by one, in ascending
 * order, stays linear in the number of volumes. */
size_t gradients_shell_count(const struct gradients *g)
{
	double unit = shell_rounding_unit(g), previous = -INFINITY;
	size_t count = 0;

	for (;;) {
		double next = INFINITY;

		for (size_t i = 0; i < g->n; i++) {
			double shell = g->is_b0[i] ? INFINITY : shell_of(g, unit, i);

			if (shell > previous)
				next = fmin(next, shell);
		}
		if (next == INFINITY)
			return count;
		count++;
		previous = next;
	}
}

void gradients_free(struct gradients *g)
{
	free(g->bvals);
	free(g->bvecs);
	free(g->is_b0);
	memset(g, 0, sizeof(*g));
}
