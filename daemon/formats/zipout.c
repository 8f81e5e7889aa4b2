/* SPDX-License-Identifier: MIT */
/*
 * zipout: a front-to-back zip64 writer (see zipout.h). Field layouts follow
 * PKWARE's APPNOTE 6.3 (4.3.7 local header, 4.3.9 data descriptor, 4.3.12
 * central header, 4.3.14-16 end records, 4.5.3 zip64 extra field).
 */
#include "formats/zipout.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "formats/binio.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_DESCRIPTOR 0x08074b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define SIG_END 0x06054b50u

#define LOCAL_BYTES 30
#define DESCRIPTOR_BYTES 24     /* with 8-byte sizes: the local header has zip64 */
#define CENTRAL_BYTES 46
#define END64_BYTES 56
#define LOCATOR64_BYTES 20
#define END_BYTES 22
#define ZIP64_TAG 0x0001
#define LOCAL_EXTRA_BYTES 20    /* the zip64 tag, its length, both sizes */

#define VERSION_ZIP64 45        /* 4.5: what the zip64 extra needs to extract */
#define MADE_BY_UNIX (3u << 8 | VERSION_ZIP64)
#define FLAG_DESCRIPTOR 0x0008u /* CRC and sizes follow the data */
#define METHOD_STORE 0
#define METHOD_DEFLATE 8
/* 1980-01-02 00:00:00 in DOS date bits (year - 1980, month, day) and time
 * 0: the entry time tractd has always written, now free of the time zone. */
#define DOS_DATE ((1u << 5) | 2u)
#define DOS_TIME 0u
#define UNIX_FILE_0644 (0100644u << 16)

#define MAX16 0xffffu
#define MAX32 0xffffffffu
#define DEFLATE_OUT_BYTES ((size_t)1 << 16)
/* libzip's deflate parameters: level 9, memLevel 9, raw (no zlib header). */
#define DEFLATE_LEVEL Z_BEST_COMPRESSION
#define DEFLATE_MEM_LEVEL 9

struct zipout_entry {
	char *name;
	uint64_t offset;        /* of the local header */
	uint64_t csize, usize;
	uint32_t crc;
	uint16_t method;
};

struct zipout {
	FILE *out;
	uint64_t written;       /* bytes put in the FILE: the next offset */
	struct zipout_entry *entries;
	size_t n, cap;
	bool open;              /* entries[n - 1] is being written */
	bool failed;            /* a write failed: nothing more is written */
	z_stream zs;            /* the open entry's, when it deflates */
	unsigned char *zbuf;    /* DEFLATE_OUT_BYTES of deflate output */
};

int zipout_new(FILE *out, struct zipout **ret)
{
	struct zipout *z = calloc(1, sizeof(*z));

	if (!z)
		return -ENOMEM;
	z->out = out;
	*ret = z;
	return 0;
}

static int put(struct zipout *z, const void *data, size_t len)
{
	if (z->failed || (len && fwrite(data, 1, len, z->out) != len)) {
		z->failed = true;
		return -EIO;
	}
	z->written += len;
	return 0;
}

static struct zipout_entry *current(struct zipout *z)
{
	return &z->entries[z->n - 1];
}

static int add_entry(struct zipout *z, const char *name, uint16_t method)
{
	struct zipout_entry *e;

	if (z->n == z->cap) {
		size_t cap = z->cap ? 2 * z->cap : 8;
		e = realloc(z->entries, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		z->entries = e;
		z->cap = cap;
	}
	e = &z->entries[z->n];
	*e = (struct zipout_entry){ .name = strdup(name), .offset = z->written, .method = method };
	if (!e->name)
		return -ENOMEM;
	z->n++;
	return 0;
}

static int start_deflate(struct zipout *z)
{
	if (!z->zbuf) {
		z->zbuf = malloc(DEFLATE_OUT_BYTES);
		if (!z->zbuf)
			return -ENOMEM;
	}
	memset(&z->zs, 0, sizeof(z->zs));
	return deflateInit2(&z->zs, DEFLATE_LEVEL, Z_DEFLATED, -MAX_WBITS, DEFLATE_MEM_LEVEL,
			    Z_DEFAULT_STRATEGY) == Z_OK ? 0 : -ENOMEM;
}

/* The local header: sizes unknown (0xffffffff, zip64 extra of zeros), the
 * data descriptor after the data says them. */
static int put_local_header(struct zipout *z, const struct zipout_entry *e, size_t name_len)
{
	unsigned char h[LOCAL_BYTES + LOCAL_EXTRA_BYTES];
	unsigned char *x = h + LOCAL_BYTES;

	binio_put_u32(h, SIG_LOCAL);
	binio_put_u16(h + 4, VERSION_ZIP64);
	binio_put_u16(h + 6, FLAG_DESCRIPTOR);
	binio_put_u16(h + 8, e->method);
	binio_put_u16(h + 10, DOS_TIME);
	binio_put_u16(h + 12, DOS_DATE);
	binio_put_u32(h + 14, 0);
	binio_put_u32(h + 18, MAX32);
	binio_put_u32(h + 22, MAX32);
	binio_put_u16(h + 26, (uint16_t)name_len);
	binio_put_u16(h + 28, LOCAL_EXTRA_BYTES);
	binio_put_u16(x, ZIP64_TAG);
	binio_put_u16(x + 2, LOCAL_EXTRA_BYTES - 4);
	binio_put_u64(x + 4, 0);
	binio_put_u64(x + 12, 0);
	if (put(z, h, LOCAL_BYTES) || put(z, e->name, name_len) ||
	    put(z, x, LOCAL_EXTRA_BYTES))
		return -EIO;
	return 0;
}

int zipout_begin(struct zipout *z, const char *name, enum zipout_method method)
{
	size_t name_len = strlen(name);
	uint16_t m = method == ZIPOUT_DEFLATE ? METHOD_DEFLATE : METHOD_STORE;
	int r;

	if (z->open || name_len > MAX16)
		return -EINVAL;
	if (z->failed)
		return -EIO;
	r = add_entry(z, name, m);
	if (!r && m == METHOD_DEFLATE)
		r = start_deflate(z);
	if (!r) {
		z->open = true;   /* from here on, discard ends the deflate stream */
		r = put_local_header(z, current(z), name_len);
	}
	if (r)
		z->failed = true;
	return r;
}

/* Runs deflate over what zs holds with flush, writing each full output
 * buffer; Z_FINISH runs to the end of the stream. */
static int run_deflate(struct zipout *z, int flush)
{
	int zr;

	do {
		z->zs.next_out = z->zbuf;
		z->zs.avail_out = (uInt)DEFLATE_OUT_BYTES;
		zr = deflate(&z->zs, flush);
		if (zr == Z_STREAM_ERROR)
			return -ENOMEM;
		if (put(z, z->zbuf, DEFLATE_OUT_BYTES - z->zs.avail_out))
			return -EIO;
		current(z)->csize += DEFLATE_OUT_BYTES - z->zs.avail_out;
	} while (flush == Z_FINISH ? zr != Z_STREAM_END : z->zs.avail_out == 0);
	return 0;
}

/* deflate takes at most a uInt at a time. */
static int deflate_data(struct zipout *z, const unsigned char *data, size_t len)
{
	while (len) {
		size_t k = len < (size_t)UINT32_MAX ? len : (size_t)UINT32_MAX;
		int r;

		z->zs.next_in = (Bytef *)(uintptr_t)data;
		z->zs.avail_in = (uInt)k;
		r = run_deflate(z, Z_NO_FLUSH);
		if (r)
			return r;
		data += k;
		len -= k;
	}
	return 0;
}

int zipout_write_crc(struct zipout *z, const void *data, size_t len, uint32_t crc)
{
	struct zipout_entry *e;
	int r;

	if (!z->open || z->failed)
		return -EIO;
	e = current(z);
	if (e->method == METHOD_DEFLATE)
		r = deflate_data(z, data, len);
	else
		r = put(z, data, len);
	if (r) {
		z->failed = true;
		return r;
	}
	if (e->method == METHOD_STORE)
		e->csize += len;
	e->usize += len;
	e->crc = (uint32_t)crc32_combine(e->crc, crc, (z_off_t)len);
	return 0;
}

int zipout_write(struct zipout *z, const void *data, size_t len)
{
	return zipout_write_crc(z, data, len, (uint32_t)crc32_z(0, data, len));
}

static int put_descriptor(struct zipout *z, const struct zipout_entry *e)
{
	unsigned char d[DESCRIPTOR_BYTES];

	binio_put_u32(d, SIG_DESCRIPTOR);
	binio_put_u32(d + 4, e->crc);
	binio_put_u64(d + 8, e->csize);
	binio_put_u64(d + 16, e->usize);
	return put(z, d, sizeof(d));
}

int zipout_end(struct zipout *z)
{
	int r = 0;

	if (!z->open)
		return -EINVAL;
	if (current(z)->method == METHOD_DEFLATE) {
		r = z->failed ? -EIO : run_deflate(z, Z_FINISH);
		deflateEnd(&z->zs);
	}
	z->open = false;
	if (!r)
		r = put_descriptor(z, current(z));
	if (r)
		z->failed = true;
	return r;
}

/* A classic field, or its zip64 marker when the value outgrows it. */
static uint32_t field32(uint64_t v)
{
	return v >= MAX32 ? MAX32 : (uint32_t)v;
}

/* The central header's zip64 extra, in APPNOTE's order: both sizes always
 * (their classic fields say 0xffffffff), so that it is as long as the local
 * header's, and the offset once it outgrows its field. Readers that place an
 * entry's data at the central extra's length past its local header, as
 * trx-python before 0.6 does (ZipInfo.FileHeader()), then find it. Returns
 * its length. */
static size_t zip64_extra(unsigned char *x, const struct zipout_entry *e)
{
	size_t len = LOCAL_EXTRA_BYTES;

	binio_put_u64(x + 4, e->usize);
	binio_put_u64(x + 12, e->csize);
	if (e->offset >= MAX32) {
		binio_put_u64(x + len, e->offset);
		len += 8;
	}
	binio_put_u16(x, ZIP64_TAG);
	binio_put_u16(x + 2, (uint16_t)(len - 4));
	return len;
}

static int put_central_header(struct zipout *z, const struct zipout_entry *e)
{
	unsigned char h[CENTRAL_BYTES], x[4 + 3 * 8];
	size_t name_len = strlen(e->name), extra = zip64_extra(x, e);

	binio_put_u32(h, SIG_CENTRAL);
	binio_put_u16(h + 4, MADE_BY_UNIX);
	binio_put_u16(h + 6, VERSION_ZIP64);
	binio_put_u16(h + 8, FLAG_DESCRIPTOR);
	binio_put_u16(h + 10, e->method);
	binio_put_u16(h + 12, DOS_TIME);
	binio_put_u16(h + 14, DOS_DATE);
	binio_put_u32(h + 16, e->crc);
	binio_put_u32(h + 20, MAX32);   /* both sizes in the zip64 extra */
	binio_put_u32(h + 24, MAX32);
	binio_put_u16(h + 28, (uint16_t)name_len);
	binio_put_u16(h + 30, (uint16_t)extra);
	binio_put_u16(h + 32, 0);       /* comment */
	binio_put_u16(h + 34, 0);       /* disk */
	binio_put_u16(h + 36, 0);       /* internal attributes */
	binio_put_u32(h + 38, UNIX_FILE_0644);
	binio_put_u32(h + 42, field32(e->offset));
	return put(z, h, sizeof(h)) || put(z, e->name, name_len) || put(z, x, extra) ? -EIO : 0;
}

/* The zip64 end record and its locator: the entries, the directory's size
 * and its offset in 8 bytes each. */
static int put_end64(struct zipout *z, uint64_t dir_offset, uint64_t dir_bytes)
{
	unsigned char h[END64_BYTES + LOCATOR64_BYTES], *l = h + END64_BYTES;
	uint64_t end64_offset = z->written;

	binio_put_u32(h, SIG_END64);
	binio_put_u64(h + 4, END64_BYTES - 12);   /* the record after this field */
	binio_put_u16(h + 12, MADE_BY_UNIX);
	binio_put_u16(h + 14, VERSION_ZIP64);
	binio_put_u32(h + 16, 0);                 /* this disk */
	binio_put_u32(h + 20, 0);                 /* the directory's disk */
	binio_put_u64(h + 24, z->n);
	binio_put_u64(h + 32, z->n);
	binio_put_u64(h + 40, dir_bytes);
	binio_put_u64(h + 48, dir_offset);
	binio_put_u32(l, SIG_LOCATOR64);
	binio_put_u32(l + 4, 0);                  /* the zip64 end record's disk */
	binio_put_u64(l + 8, end64_offset);
	binio_put_u32(l + 16, 1);                 /* disks */
	return put(z, h, sizeof(h));
}

static int put_end(struct zipout *z, uint64_t dir_offset, uint64_t dir_bytes)
{
	unsigned char h[END_BYTES];
	uint16_t count = z->n >= MAX16 ? MAX16 : (uint16_t)z->n;

	if ((count == MAX16 || dir_offset >= MAX32 || dir_bytes >= MAX32) &&
	    put_end64(z, dir_offset, dir_bytes))
		return -EIO;
	binio_put_u32(h, SIG_END);
	binio_put_u16(h + 4, 0);        /* this disk */
	binio_put_u16(h + 6, 0);        /* the directory's disk */
	binio_put_u16(h + 8, count);
	binio_put_u16(h + 10, count);
	binio_put_u32(h + 12, field32(dir_bytes));
	binio_put_u32(h + 16, field32(dir_offset));
	binio_put_u16(h + 20, 0);       /* comment */
	return put(z, h, sizeof(h));
}

static int put_directory(struct zipout *z)
{
	uint64_t dir_offset = z->written;

	for (size_t i = 0; i < z->n; i++)
		if (put_central_header(z, &z->entries[i]))
			return -EIO;
	if (put_end(z, dir_offset, z->written - dir_offset) || fflush(z->out) != 0)
		return -EIO;
	return 0;
}

void zipout_discard(struct zipout *z)
{
	if (!z)
		return;
	if (z->open && current(z)->method == METHOD_DEFLATE)
		deflateEnd(&z->zs);
	for (size_t i = 0; i < z->n; i++)
		free(z->entries[i].name);
	free(z->entries);
	free(z->zbuf);
	free(z);
}

int zipout_finish(struct zipout *z)
{
	int r;

	if (!z)
		return 0;
	r = z->open || z->failed ? -EIO : put_directory(z);
	zipout_discard(z);
	return r;
}
