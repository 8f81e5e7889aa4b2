/* SPDX-License-Identifier: MIT */
/* trk: TrackVis v2 header encoding and buffered streamline output. */
#include "formats/trk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "formats/affine.h"
#include "formats/binio.h"

#define TRK_VERSION 2
#define TRK_POINT_BYTES 12
#define TRK_BUFFER_BYTES ((size_t)1 << 18)

struct trk_writer {
	FILE *out;
	long header_pos;        /* where n_count can be patched; -1 when not seekable */
	float voxel_size[3];
	uint64_t count;
	int failed;             /* a write failed; finish reports -EIO */
	uint16_t n_properties;  /* floats after each record's points */
	size_t len;
	unsigned char buf[TRK_BUFFER_BYTES];
};

/* The affine as TrackVis stores it (float32), so that voxel sizes and voxel
 * order are derived from exactly what readers will see. */
static void stored_affine(const double affine[4][4], double out[4][4])
{
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			out[r][c] = (float)affine[r][c];
}

static int header_geometry(const int64_t dim[3], const double affine[4][4], float voxel_size[3],
			   char axcodes[4], struct errbuf *err)
{
	double stored[4][4], sizes[3];

	for (int i = 0; i < 3; i++)
		if (dim[i] <= 0 || dim[i] > INT16_MAX)
			return errbuf_set(err, -EINVAL, NULL,
					  "grid dimension %d is %lld; TrackVis allows 1..%d", i,
					  (long long)dim[i], INT16_MAX);
	stored_affine(affine, stored);
	if (affine_axcodes(stored, axcodes) != 0)
		return errbuf_set(err, -EINVAL, NULL, "degenerate voxel-to-RAS affine");
	affine_voxel_sizes(stored, sizes);
	for (int i = 0; i < 3; i++)
		voxel_size[i] = (float)sizes[i];
	return 0;
}

static void encode_header(unsigned char buf[TRK_HEADER_SIZE], const int64_t dim[3],
			  const double affine[4][4], const float voxel_size[3],
			  const char axcodes[4], int32_t n_count)
{
	memset(buf, 0, TRK_HEADER_SIZE);
	memcpy(buf + TRK_OFF_ID_STRING, "TRACK", 6);
	for (int i = 0; i < 3; i++) {
		binio_put_i16(buf + TRK_OFF_DIM + 2 * i, (int16_t)dim[i]);
		binio_put_f32(buf + TRK_OFF_VOXEL_SIZE + 4 * i, voxel_size[i]);
	}
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			binio_put_f32(buf + TRK_OFF_VOX_TO_RAS + 4 * (4 * r + c), (float)affine[r][c]);
	memcpy(buf + TRK_OFF_VOXEL_ORDER, axcodes, 4);
	binio_put_i32(buf + TRK_OFF_N_COUNT, n_count);
	binio_put_i32(buf + TRK_OFF_VERSION, TRK_VERSION);
	binio_put_i32(buf + TRK_OFF_HDR_SIZE, TRK_HEADER_SIZE);
}

int trk_header_fill(unsigned char buf[TRK_HEADER_SIZE], const int64_t dim[3],
		    const double affine[4][4], uint32_t n_count, struct errbuf *err)
{
	float voxel_size[3];
	char axcodes[4];
	int rc;

	if (n_count > INT32_MAX)
		return errbuf_set(err, -EINVAL, NULL, "%u streamlines exceed the TrackVis count field",
				  (unsigned)n_count);
	rc = header_geometry(dim, affine, voxel_size, axcodes, err);
	if (rc)
		return rc;
	encode_header(buf, dim, affine, voxel_size, axcodes, (int32_t)n_count);
	return 0;
}

/* One property of n values in name slot slot, named as nibabel encodes
 * multi-valued data_per_streamline: "name", a NUL and the count when n > 1.
 * nibabel reads the slots in order, each taking the next n floats. */
static int encode_property(unsigned char buf[TRK_HEADER_SIZE], size_t slot,
			   const struct trk_property *p, struct errbuf *err)
{
	char encoded[TRK_PROPERTY_NAME_LEN + 8];
	int len = p->n_values > 1
			  ? snprintf(encoded, sizeof(encoded), "%s%c%u", p->name, '\0',
				     (unsigned)p->n_values)
			  : snprintf(encoded, sizeof(encoded), "%s", p->name);

	if (len < 0 || len > TRK_PROPERTY_NAME_LEN || p->n_values == 0)
		return errbuf_set(err, -EINVAL, NULL, "property name '%s' is too long for TrackVis",
				  p->name);
	memcpy(buf + TRK_OFF_PROPERTY_NAME + TRK_PROPERTY_NAME_LEN * slot, encoded, (size_t)len);
	return 0;
}

/* Declares the properties; n_properties counts floats, not names. */
static int encode_properties(unsigned char buf[TRK_HEADER_SIZE], const struct trk_property *props,
			     size_t n, uint16_t *n_floats, struct errbuf *err)
{
	unsigned total = 0;

	if (n > TRK_MAX_PROPERTIES)
		return errbuf_set(err, -EINVAL, NULL, "TrackVis keeps at most %d properties",
				  TRK_MAX_PROPERTIES);
	for (size_t i = 0; i < n; i++) {
		int rc = encode_property(buf, i, &props[i], err);
		if (rc < 0)
			return rc;
		total += props[i].n_values;
	}
	if (total > INT16_MAX)
		return errbuf_set(err, -EINVAL, NULL, "too many property values for TrackVis");
	binio_put_i16(buf + TRK_OFF_N_PROPERTIES, (int16_t)total);
	*n_floats = (uint16_t)total;
	return 0;
}

int trk_writer_new_with_properties(FILE *out, const int64_t dim[3], const double affine[4][4],
				   const struct trk_property *props, size_t n_props,
				   struct trk_writer **ret, struct errbuf *err)
{
	return trk_writer_new_tagged(out, dim, affine, props, n_props, NULL, ret, err);
}

int trk_writer_new_tagged(FILE *out, const int64_t dim[3], const double affine[4][4],
			  const struct trk_property *props, size_t n_props, const char *tag,
			  struct trk_writer **ret, struct errbuf *err)
{
	unsigned char header[TRK_HEADER_SIZE];
	struct trk_writer *w;
	char axcodes[4];
	int rc;

	w = malloc(sizeof(*w));
	if (!w)
		return errbuf_set(err, -ENOMEM, NULL, "out of memory for the TrackVis writer");
	rc = header_geometry(dim, affine, w->voxel_size, axcodes, err);
	if (rc)
		goto fail;
	encode_header(header, dim, affine, w->voxel_size, axcodes, 0);
	w->n_properties = 0;
	rc = encode_properties(header, props, n_props, &w->n_properties, err);
	if (rc)
		goto fail;
	/* NUL-terminated within the reserved bytes (zero as encoded). */
	if (tag && strlen(tag) >= TRK_RESERVED_LEN) {
		rc = errbuf_set(err, -EINVAL, NULL, "the shard record is too long for TrackVis");
		goto fail;
	}
	if (tag)
		memcpy(header + TRK_OFF_RESERVED, tag, strlen(tag) + 1);
	w->out = out;
	w->header_pos = binio_patch_position(out);
	w->count = 0;
	w->failed = 0;
	w->len = 0;
	if (fwrite(header, 1, sizeof(header), out) != sizeof(header)) {
		rc = errbuf_set(err, -EIO, NULL, "cannot write the TrackVis header");
		goto fail;
	}
	*ret = w;
	return 0;
fail:
	free(w);
	return rc;
}

int trk_writer_new_with_property(FILE *out, const int64_t dim[3], const double affine[4][4],
				 const char *property, uint16_t n_values, struct trk_writer **ret,
				 struct errbuf *err)
{
	struct trk_property p = { .name = property, .n_values = n_values };

	return trk_writer_new_with_properties(out, dim, affine, &p, property ? 1 : 0, ret, err);
}

int trk_writer_new(FILE *out, const int64_t dim[3], const double affine[4][4],
		   struct trk_writer **ret, struct errbuf *err)
{
	return trk_writer_new_with_property(out, dim, affine, NULL, 0, ret, err);
}

static int flush_buffer(struct trk_writer *w)
{
	if (w->len > 0 && fwrite(w->buf, 1, w->len, w->out) != w->len)
		w->failed = 1;
	w->len = 0;
	return w->failed ? -EIO : 0;
}

/* TrackVis voxmm: (p + 0.5) * voxel_size, k points from p into dst. */
static void encode_points(const struct trk_writer *w, unsigned char *dst, const float *p, size_t k)
{
	for (size_t i = 0; i < k; i++, p += 3, dst += TRK_POINT_BYTES)
		for (int c = 0; c < 3; c++)
			binio_put_f32(dst + 4 * c, (p[c] + 0.5f) * w->voxel_size[c]);
}

static void encode_values(const struct trk_writer *w, unsigned char *dst, const float *values)
{
	for (uint16_t i = 0; i < w->n_properties; i++)
		/* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): given with n_properties */
		binio_put_f32(dst + 4u * i, values[i]);
}

/* Converts points to voxmm straight into the output buffer, flushing whenever
 * it fills, so a streamline of any length needs no extra memory. */
static int append_points(struct trk_writer *w, const float *p, size_t n)
{
	while (n > 0) {
		size_t room = (TRK_BUFFER_BYTES - w->len) / TRK_POINT_BYTES;
		size_t k = n < room ? n : room;
		unsigned char *dst = w->buf + w->len;

		if (k == 0) {
			if (flush_buffer(w))
				return -EIO;
			continue;
		}
		encode_points(w, dst, p, k);
		w->len += k * TRK_POINT_BYTES;
		p += 3 * k;
		n -= k;
	}
	return 0;
}

static int append_properties(struct trk_writer *w, const float *values)
{
	size_t bytes = 4u * w->n_properties;

	if (TRK_BUFFER_BYTES - w->len < bytes && flush_buffer(w))
		return -EIO;
	encode_values(w, w->buf + w->len, values);
	w->len += bytes;
	return 0;
}

/* Empty streamlines are dropped: nibabel and DIPY skip such records, so
 * writing one would make n_count disagree with what readers load. */
int trk_write_streamline_with(struct trk_writer *w, const float *points_vox, uint32_t n,
			      const float *properties)
{
	if (w->failed)
		return -EIO;
	if (n > INT32_MAX || (w->n_properties && !properties))
		return -EINVAL;
	if (n == 0)
		return 0;
	if (TRK_BUFFER_BYTES - w->len < 4 && flush_buffer(w))
		return -EIO;
	binio_put_i32(w->buf + w->len, (int32_t)n);
	w->len += 4;
	if (append_points(w, points_vox, n))
		return -EIO;
	if (w->n_properties && append_properties(w, properties))
		return -EIO;
	w->count++;
	return 0;
}

int trk_write_streamline(struct trk_writer *w, const float *points_vox, uint32_t n)
{
	return trk_write_streamline_with(w, points_vox, n, NULL);
}

size_t trk_record_bytes(const struct trk_writer *w, uint32_t n)
{
	return n == 0 ? 0 : 4 + (size_t)n * TRK_POINT_BYTES + 4u * w->n_properties;
}

void trk_record_encode(const struct trk_writer *w, unsigned char *dst, const float *points_vox,
		       uint32_t n, const float *properties)
{
	if (n == 0)
		return;
	binio_put_i32(dst, (int32_t)n);
	encode_points(w, dst + 4, points_vox, n);
	if (w->n_properties)
		encode_values(w, dst + 4 + (size_t)n * TRK_POINT_BYTES, properties);
}

int trk_write_records(struct trk_writer *w, const unsigned char *records, size_t len,
		      uint64_t n_records)
{
	if (w->failed)
		return -EIO;
	if (binio_buffered_write(w->out, w->buf, TRK_BUFFER_BYTES, &w->len, records, len) < 0) {
		w->failed = 1;
		return -EIO;
	}
	w->count += n_records;
	return 0;
}

int trk_flush(struct trk_writer *w)
{
	if (flush_buffer(w) || fflush(w->out) != 0)
		return -EIO;
	return 0;
}

/* Writes the final count into the header and returns to the end of the file.
 * A count too large for the int32 field stays 0, which readers take as
 * "read until end of file". */
static int patch_count(struct trk_writer *w)
{
	unsigned char field[4];

	if (w->header_pos < 0 || w->count > INT32_MAX)
		return 0;
	binio_put_i32(field, (int32_t)w->count);
	if (fseek(w->out, w->header_pos + TRK_OFF_N_COUNT, SEEK_SET) != 0 ||
	    fwrite(field, 1, sizeof(field), w->out) != sizeof(field) ||
	    fseek(w->out, 0, SEEK_END) != 0 || fflush(w->out) != 0)
		return -EIO;
	return 0;
}

int trk_writer_finish(struct trk_writer *w)
{
	int rc;

	if (!w)
		return 0;
	rc = flush_buffer(w);
	if (!rc && fflush(w->out) != 0)
		rc = -EIO;
	if (!rc)
		rc = patch_count(w);
	free(w);
	return rc;
}
