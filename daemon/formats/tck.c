/* SPDX-License-Identifier: MIT */
/* tck: MRtrix3 .tck header encoding and buffered streamline output. */
#include "formats/tck.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/binio.h"

/* The count comes right after the magic line so that its digits sit at a
 * fixed offset, whatever width the data offset later in the header takes.
 * Key order is free in MRtrix and nibabel; this is the order nibabel writes. */
#define TCK_HEAD_TO_COUNT "mrtrix tracks\ncount: "
#define TCK_HEADER_FMT TCK_HEAD_TO_COUNT "%010" PRIu64 "\ndatatype: Float32LE\n%sfile: . %zu\nEND\n"
#define TCK_COUNT_OFFSET (sizeof(TCK_HEAD_TO_COUNT) - 1)
#define TCK_COUNT_DIGITS 10
#define TCK_COUNT_MAX UINT64_C(9999999999)
/* MRtrix aligns the data to 4 bytes; so do we, so float32 reads are aligned. */
#define TCK_DATA_ALIGN 4
#define TCK_TRIPLET_BYTES 12
#define TCK_BUFFER_BYTES ((size_t)1 << 18)

struct tck_writer {
	FILE *out;
	long count_pos;         /* where the count digits can be patched; -1 when not */
	double m[3][4];         /* top rows of the voxel-to-RAS affine */
	uint64_t count;
	int failed;             /* a write failed; later calls report -EIO */
	size_t len;
	unsigned char buf[TCK_BUFFER_BYTES];
};

static int affine_finite(const double affine[4][4])
{
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			if (!isfinite(affine[r][c]))
				return 0;
	return 1;
}

/* The data offset is written inside the header it ends, so its width feeds
 * back into its value: iterate to the fixed point. The offset only grows and
 * settles within a step per added digit. Returns the offset or -1. */
static long header_length(const char *properties)
{
	size_t offset = 0;

	for (;;) {
		int len = snprintf(NULL, 0, TCK_HEADER_FMT, (uint64_t)0, properties, offset);
		size_t want;

		if (len < 0)
			return -1;
		want = ((size_t)len + TCK_DATA_ALIGN - 1) / TCK_DATA_ALIGN * TCK_DATA_ALIGN;
		if (want == offset)
			return (long)offset;
		offset = want;
	}
}

/* Writes the header and its padding (NUL bytes after END, which MRtrix and
 * nibabel never read: both stop at END and seek to the offset). */
long tck_write_header(FILE *out, const char *properties, uint64_t count)
{
	long offset = header_length(properties);
	char *text;
	long rc = -EIO;

	if (offset < 0)
		return -EIO;
	text = calloc(1, (size_t)offset + 1);   /* NUL padding up to the offset */
	if (!text)
		return -ENOMEM;
	if (snprintf(text, (size_t)offset + 1, TCK_HEADER_FMT, count, properties,
		     (size_t)offset) >= 0 &&
	    fwrite(text, 1, (size_t)offset, out) == (size_t)offset)
		rc = offset;
	free(text);
	return rc;
}

int tck_parse_header(const char *text, char **ret, uint64_t *count, long *offset)
{
	static const char datatype[] = "\ndatatype: Float32LE\n";
	const char *props, *file;
	unsigned long long n;
	long off;
	int used = 0;

	if (strncmp(text, TCK_HEAD_TO_COUNT, TCK_COUNT_OFFSET) != 0 ||
	    sscanf(text + TCK_COUNT_OFFSET, "%10llu%n", &n, &used) != 1 || used != TCK_COUNT_DIGITS)
		return -EINVAL;
	props = text + TCK_COUNT_OFFSET + TCK_COUNT_DIGITS;
	if (strncmp(props, datatype, sizeof(datatype) - 1) != 0)
		return -EINVAL;
	props += sizeof(datatype) - 1;
	file = strstr(props, "file: . ");
	if (!file || (file != props && file[-1] != '\n') || sscanf(file, "file: . %ld\nEND\n", &off) != 1)
		return -EINVAL;
	*ret = strndup(props, (size_t)(file - props));
	if (!*ret)
		return -ENOMEM;
	*count = n;
	*offset = off;
	return 0;
}

/* Whether properties is "key: value" lines, each ended by a newline, whose
 * keys are not the header's own (count, datatype, file) and none is END. */
static bool valid_properties(const char *p)
{
	static const char *const own[] = { "count:", "datatype:", "file:", "END\n" };

	while (*p) {
		const char *end = strchr(p, '\n'), *colon = strchr(p, ':');

		if (!end || !colon || colon > end || colon == p || colon[1] != ' ')
			return false;
		for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
			if (strncmp(p, own[i], strlen(own[i])) == 0)
				return false;
		p = end + 1;
	}
	return true;
}

int tck_writer_new(FILE *out, const double affine[4][4], const char *properties,
		   struct tck_writer **ret, struct errbuf *err)
{
	struct tck_writer *w;
	long pos;
	int rc;

	if (!affine_finite(affine))
		return errbuf_set(err, -EINVAL, NULL, "the voxel-to-RAS affine has a non-finite entry");
	if (!properties)
		properties = "";
	if (!valid_properties(properties))
		return errbuf_set(err, -EINVAL, NULL, "TCK header properties must be \"key: value\" "
				  "lines other than count, datatype, file and END");
	w = malloc(sizeof(*w));
	if (!w)
		return errbuf_set(err, -ENOMEM, NULL, "out of memory for the TCK writer");
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 4; c++)
			w->m[r][c] = affine[r][c];
	/* Readers take the data offset as absolute, so the header must begin the
	 * file; the count digits are patched relative to where it was written. */
	pos = binio_patch_position(out);
	w->out = out;
	w->count_pos = pos < 0 ? -1 : pos + (long)TCK_COUNT_OFFSET;
	w->count = 0;
	w->failed = 0;
	w->len = 0;
	rc = tck_write_header(out, properties, 0) < 0 ? -EIO : 0;
	if (rc < 0) {
		free(w);
		return errbuf_set(err, rc, NULL, rc == -ENOMEM ? "out of memory for the TCK header"
							       : "cannot write the TCK header");
	}
	*ret = w;
	return 0;
}

static int flush_buffer(struct tck_writer *w)
{
	if (w->len > 0 && fwrite(w->buf, 1, w->len, w->out) != w->len)
		w->failed = 1;
	w->len = 0;
	return w->failed ? -EIO : 0;
}

/* RAS+ mm = affine * (p, 1), in double: the affine is given in double and the
 * products cost nothing next to the I/O; the result is rounded to float once. */
static void encode_point(unsigned char *dst, const struct tck_writer *w, const float *p)
{
	double x = p[0], y = p[1], z = p[2];

	for (int r = 0; r < 3; r++)
		binio_put_f32(dst + 4 * r,
			(float)(w->m[r][0] * x + w->m[r][1] * y + w->m[r][2] * z + w->m[r][3]));
}

/* Converts points straight into the output buffer, flushing whenever it
 * fills, so a streamline of any length needs no extra memory. */
static int append_points(struct tck_writer *w, const float *p, size_t n)
{
	while (n > 0) {
		size_t room = (TCK_BUFFER_BYTES - w->len) / TCK_TRIPLET_BYTES;
		size_t k = n < room ? n : room;
		unsigned char *dst = w->buf + w->len;

		if (k == 0) {
			if (flush_buffer(w))
				return -EIO;
			continue;
		}
		for (size_t i = 0; i < k; i++, p += 3, dst += TCK_TRIPLET_BYTES)
			encode_point(dst, w, p);
		w->len += k * TCK_TRIPLET_BYTES;
		n -= k;
	}
	return 0;
}

static void encode_marker(unsigned char *dst, float v)
{
	for (int c = 0; c < 3; c++)
		binio_put_f32(dst + 4 * c, v);
}

/* A triplet of one value: NaN ends a streamline, Inf ends the file. */
static int append_marker(struct tck_writer *w, float v)
{
	if (TCK_BUFFER_BYTES - w->len < TCK_TRIPLET_BYTES && flush_buffer(w))
		return -EIO;
	encode_marker(w->buf + w->len, v);
	w->len += TCK_TRIPLET_BYTES;
	return 0;
}

/* Empty streamlines are dropped: a lone NaN triplet is skipped by nibabel and
 * MRtrix would count it, so writing one would make the count disagree. */
int tck_write_streamline(struct tck_writer *w, const float *points_vox, uint32_t n)
{
	if (w->failed)
		return -EIO;
	if (n == 0)
		return 0;
	if (append_points(w, points_vox, n) || append_marker(w, NAN))
		return -EIO;
	w->count++;
	return 0;
}

size_t tck_record_bytes(uint32_t n)
{
	return n == 0 ? 0 : ((size_t)n + 1) * TCK_TRIPLET_BYTES;
}

void tck_record_encode(const struct tck_writer *w, unsigned char *dst, const float *points_vox,
		       uint32_t n)
{
	if (n == 0)
		return;
	for (uint32_t i = 0; i < n; i++, points_vox += 3, dst += TCK_TRIPLET_BYTES)
		encode_point(dst, w, points_vox);
	encode_marker(dst, NAN);
}

int tck_write_records(struct tck_writer *w, const unsigned char *records, size_t len,
		      uint64_t n_records)
{
	if (w->failed)
		return -EIO;
	if (binio_buffered_write(w->out, w->buf, TCK_BUFFER_BYTES, &w->len, records, len) < 0) {
		w->failed = 1;
		return -EIO;
	}
	w->count += n_records;
	return 0;
}

static int push(struct tck_writer *w)
{
	if (flush_buffer(w) || fflush(w->out) != 0)
		return -EIO;
	return 0;
}

/* Ends the data with the Inf marker and pushes everything to the FILE. */
static int push_end(struct tck_writer *w)
{
	if (append_marker(w, INFINITY) || push(w))
		return -EIO;
	return 0;
}

/* On a patchable stream, flushing also ends the file with the marker, as
 * MRtrix's own writer does, so that whoever opens it now, or after a crash,
 * reads a complete tractogram (nibabel rejects data without the marker). The
 * stream is left before the marker: the next record overwrites it and ftell()
 * counts whole records only. The count waits for finish: a reader following
 * the growing file has its header early, and 0 ("unknown") misleads it less
 * than a stale count. A pipe cannot be rewound and gets whole records only. */
int tck_flush(struct tck_writer *w)
{
	if (w->failed)
		return -EIO;
	if (w->count_pos < 0)
		return push(w);
	if (push_end(w) || fseek(w->out, -TCK_TRIPLET_BYTES, SEEK_CUR) != 0)
		w->failed = 1;
	return w->failed ? -EIO : 0;
}

/* Writes the count digits into the header and returns to the end. A count
 * too wide for the field stays 0, which readers take as "unknown" (they read
 * to the end marker). */
static int patch_count(struct tck_writer *w)
{
	char digits[TCK_COUNT_DIGITS + 1];

	if (w->count_pos < 0 || w->count > TCK_COUNT_MAX)
		return 0;
	if (snprintf(digits, sizeof(digits), "%010" PRIu64, w->count) != TCK_COUNT_DIGITS ||
	    fseek(w->out, w->count_pos, SEEK_SET) != 0 ||
	    fwrite(digits, 1, TCK_COUNT_DIGITS, w->out) != TCK_COUNT_DIGITS ||
	    fseek(w->out, 0, SEEK_END) != 0 || fflush(w->out) != 0)
		return -EIO;
	return 0;
}

int tck_writer_finish(struct tck_writer *w)
{
	int rc;

	if (!w)
		return 0;
	rc = w->failed ? -EIO : push_end(w);
	if (!rc)
		rc = patch_count(w);
	free(w);
	return rc;
}
