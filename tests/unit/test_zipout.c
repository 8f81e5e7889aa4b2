/* SPDX-License-Identifier: MIT */
/*
 * zipout: archives read back with libzip (ZIP_CHECKCONS: local headers
 * against the central directory) and walked front to back as a streaming
 * reader would, through each local header and data descriptor: stored and
 * deflated entries written in odd pieces, with the CRC computed here or
 * handed in by the caller; the zip64 fields of an entry over 4 GiB (a
 * sparse file, so that the test writes almost nothing) and the zip64 end
 * records of more than 65535 entries.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include "formats/binio.h"
#include "formats/zipout.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_DESCRIPTOR 0x08074b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END64 0x06064b50u
#define SIG_END 0x06054b50u
#define BLOCK ((size_t)1 << 20)
#define MAX32 0xffffffffu

struct file {
	char path[64];
	FILE *f;
};

static void open_file(struct file *t)
{
	int fd;

	snprintf(t->path, sizeof(t->path), "/tmp/test-zipout-XXXXXX");
	fd = mkstemp(t->path);
	assert_true(fd >= 0);
	t->f = fdopen(fd, "w+b");
	assert_non_null(t->f);
}

static void close_file(struct file *t)
{
	fclose(t->f);
	unlink(t->path);
}

/* The bytes of name as libzip reads them, to the end, where it checks the
 * CRC: a wrong one fails the read. */
static unsigned char *read_entry(zip_t *za, const char *name, zip_stat_t *st)
{
	zip_file_t *zf;
	unsigned char *buf, extra;

	assert_int_equal(zip_stat(za, name, 0, st), 0);
	buf = malloc(st->size + 1);
	assert_non_null(buf);
	zf = zip_fopen(za, name, 0);
	assert_non_null(zf);
	assert_int_equal(zip_fread(zf, buf, st->size), (zip_int64_t)st->size);
	assert_int_equal(zip_fread(zf, &extra, 1), 0);
	zip_fclose(zf);
	return buf;
}

static uint16_t get_u16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void read_at(FILE *f, uint64_t offset, unsigned char *buf, size_t len)
{
	assert_int_equal(fseeko(f, (off_t)offset, SEEK_SET), 0);
	assert_int_equal(fread(buf, 1, len, f), len);
}

/* Walks the archive from its first byte as a streaming reader does: each
 * local header (data descriptor flag, zip64 extra, the name), then, past
 * the data, the descriptor, whose CRC and sizes must be libzip's (from the
 * central directory). Returns where the central directory starts. */
static uint64_t walk_entries(FILE *f, zip_t *za)
{
	uint64_t at = 0;

	for (zip_int64_t i = 0; i < zip_get_num_entries(za, 0); i++) {
		unsigned char h[30], name[64], d[24];
		zip_stat_t st;
		uint16_t name_len, extra_len;

		assert_int_equal(zip_stat_index(za, (zip_uint64_t)i, 0, &st), 0);
		read_at(f, at, h, sizeof(h));
		assert_int_equal(binio_get_u32(h), SIG_LOCAL);
		assert_int_equal(get_u16(h + 6) & 0x0008, 0x0008);
		name_len = get_u16(h + 26);
		extra_len = get_u16(h + 28);
		assert_true(name_len < sizeof(name));
		assert_int_equal(extra_len, 20);
		read_at(f, at + 30, name, name_len);
		assert_memory_equal(name, st.name, name_len);
		at += 30u + name_len + extra_len + st.comp_size;
		read_at(f, at, d, sizeof(d));
		assert_int_equal(binio_get_u32(d), SIG_DESCRIPTOR);
		assert_int_equal(binio_get_u32(d + 4), st.crc);
		assert_int_equal(binio_get_u64(d + 8), st.comp_size);
		assert_int_equal(binio_get_u64(d + 16), st.size);
		at += sizeof(d);
	}
	{
		unsigned char sig[4];

		read_at(f, at, sig, sizeof(sig));
		assert_int_equal(binio_get_u32(sig), SIG_CENTRAL);
	}
	return at;
}

static zip_t *open_checked(const char *path)
{
	int zerr = 0;
	zip_t *za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);

	if (!za)
		fail_msg("libzip refuses the archive: error %d", zerr);
	return za;
}

/* Stored and deflated entries, written in odd pieces, some with the CRC
 * computed by the caller; an empty one. */
static void test_entries_read_back(void **state)
{
	static const char *names[] = { "a.bin", "dir/b.deflated", "empty", "c.bin" };
	unsigned char data[100000];
	struct zipout *z;
	struct file t;
	zip_t *za;

	(void)state;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(i * 7 % 251 + (i / 1000));
	open_file(&t);
	assert_int_equal(zipout_new(t.f, &z), 0);
	for (int e = 0; e < 4; e++) {
		size_t len = e == 2 ? 0 : sizeof(data) - (size_t)e;

		assert_int_equal(zipout_begin(z, names[e], e == 1 ? ZIPOUT_DEFLATE : ZIPOUT_STORE), 0);
		for (size_t at = 0, piece = 1; at < len; at += piece, piece = piece * 3 + 1) {
			size_t k = piece < len - at ? piece : len - at;

			if (e == 3)   /* the caller's CRC, combined in */
				assert_int_equal(zipout_write_crc(z, data + at, k,
								  (uint32_t)crc32_z(0, data + at, k)), 0);
			else
				assert_int_equal(zipout_write(z, data + at, k), 0);
		}
		assert_int_equal(zipout_end(z), 0);
	}
	assert_int_equal(zipout_finish(z), 0);

	za = open_checked(t.path);
	assert_int_equal(zip_get_num_entries(za, 0), 4);
	for (int e = 0; e < 4; e++) {
		zip_stat_t st;
		unsigned char *got = read_entry(za, names[e], &st);
		size_t len = e == 2 ? 0 : sizeof(data) - (size_t)e;

		assert_int_equal(st.size, len);
		assert_int_equal(st.crc, (uint32_t)crc32_z(0, data, len));
		assert_int_equal(st.comp_method, e == 1 ? ZIP_CM_DEFLATE : ZIP_CM_STORE);
		assert_true(e != 1 || st.comp_size < len);
		assert_memory_equal(got, data, len);
		free(got);
	}
	walk_entries(t.f, za);
	zip_discard(za);
	close_file(&t);
}

/* A FILE over a descriptor that leaves a hole for each block of zeros, so
 * that an entry of more than 4 GiB costs no disk. */
static ssize_t sparse_write(void *cookie, const char *buf, size_t len)
{
	static const char zeros[BLOCK];
	int fd = *(int *)cookie;
	size_t done = 0;

	while (done < len) {
		size_t k = len - done < BLOCK ? len - done : BLOCK;

		if (memcmp(buf + done, zeros, k) == 0) {
			if (lseek(fd, (off_t)k, SEEK_CUR) < 0)
				return -1;
		} else if (write(fd, buf + done, k) != (ssize_t)k) {
			return -1;
		}
		done += k;
	}
	return (ssize_t)len;
}

/* The central directory of test_entry_over_4gib, at dir: "big", then
 * "small", whose local header is at small_offset. */
static void check_big_central_header(FILE *f, uint64_t dir, uint64_t size, uint64_t small_offset)
{
	unsigned char h[46 + 8 + 28];

	/* The first entry, "big": both sizes in the zip64 extra. */
	read_at(f, dir, h, 46 + 3 + 20);
	assert_int_equal(binio_get_u32(h), SIG_CENTRAL);
	assert_int_equal(binio_get_u32(h + 20), MAX32);
	assert_int_equal(binio_get_u32(h + 24), MAX32);
	assert_int_equal(binio_get_u32(h + 42), 0);
	assert_int_equal(get_u16(h + 30), 20);
	assert_int_equal(get_u16(h + 49), 1);
	assert_int_equal(get_u16(h + 51), 16);
	assert_int_equal(binio_get_u64(h + 53), size);
	assert_int_equal(binio_get_u64(h + 61), size);
	/* The second, "small": its sizes there too, then its offset. */
	read_at(f, dir + 46 + 3 + 20, h, 46 + 5 + 28);
	assert_int_equal(binio_get_u32(h), SIG_CENTRAL);
	assert_int_equal(binio_get_u32(h + 20), MAX32);
	assert_int_equal(binio_get_u32(h + 42), MAX32);
	assert_int_equal(get_u16(h + 30), 28);
	assert_int_equal(get_u16(h + 51), 1);
	assert_int_equal(get_u16(h + 53), 24);
	assert_int_equal(binio_get_u64(h + 55), 5);
	assert_int_equal(binio_get_u64(h + 63), 5);
	assert_int_equal(binio_get_u64(h + 71), small_offset);
}

static void test_entry_over_4gib(void **state)
{
	static const unsigned char zeros[BLOCK];
	const uint64_t size = 4ull * 1024 * BLOCK + BLOCK;   /* 4 GiB + 1 MiB */
	uint32_t block_crc = (uint32_t)crc32_z(0, zeros, BLOCK), want = 0;
	cookie_io_functions_t io = { .write = sparse_write };
	struct file t;
	struct zipout *z;
	zip_stat_t st;
	unsigned char *small;
	uint64_t dir;
	FILE *out;
	zip_t *za;
	int fd;

	(void)state;
	open_file(&t);
	fd = fileno(t.f);
	out = fopencookie(&fd, "w", io);
	assert_non_null(out);
	assert_int_equal(zipout_new(out, &z), 0);
	assert_int_equal(zipout_begin(z, "big", ZIPOUT_STORE), 0);
	for (uint64_t at = 0; at < size; at += BLOCK) {
		assert_int_equal(zipout_write_crc(z, zeros, BLOCK, block_crc), 0);
		want = (uint32_t)crc32_combine(want, block_crc, (z_off_t)BLOCK);
	}
	assert_int_equal(zipout_end(z), 0);
	assert_int_equal(zipout_begin(z, "small", ZIPOUT_STORE), 0);
	assert_int_equal(zipout_write(z, "tail!", 5), 0);
	assert_int_equal(zipout_end(z), 0);
	assert_int_equal(zipout_finish(z), 0);
	assert_int_equal(fclose(out), 0);

	za = open_checked(t.path);
	assert_int_equal(zip_stat(za, "big", 0, &st), 0);
	assert_int_equal(st.size, size);
	assert_int_equal(st.comp_size, size);
	assert_int_equal(st.crc, want);
	small = read_entry(za, "small", &st);
	assert_memory_equal(small, "tail!", 5);
	free(small);
	dir = walk_entries(t.f, za);
	/* big's local header, name and extra, its data and descriptor. */
	check_big_central_header(t.f, dir, size, 30 + 3 + 20 + size + 24);
	zip_discard(za);
	close_file(&t);
}

/* More entries than the classic end record counts: it says 0xffff, the
 * zip64 end record the number. */
static void test_many_entries(void **state)
{
	const unsigned n = 70000;
	unsigned char end[22], end64[56];
	struct zipout *z;
	struct file t;
	zip_t *za;
	long size;

	(void)state;
	open_file(&t);
	assert_int_equal(zipout_new(t.f, &z), 0);
	for (unsigned i = 0; i < n; i++) {
		char name[16];

		snprintf(name, sizeof(name), "e%u", i);
		assert_int_equal(zipout_begin(z, name, ZIPOUT_STORE), 0);
		assert_int_equal(zipout_write(z, &i, sizeof(i)), 0);
		assert_int_equal(zipout_end(z), 0);
	}
	assert_int_equal(zipout_finish(z), 0);
	za = open_checked(t.path);
	assert_int_equal(zip_get_num_entries(za, 0), n);
	{
		zip_stat_t st;
		unsigned char *b = read_entry(za, "e69999", &st);
		unsigned last = n - 1;

		assert_memory_equal(b, &last, sizeof(last));
		free(b);
	}
	zip_discard(za);
	assert_int_equal(fseek(t.f, 0, SEEK_END), 0);
	size = ftell(t.f);
	read_at(t.f, (uint64_t)size - 22, end, sizeof(end));
	assert_int_equal(binio_get_u32(end), SIG_END);
	assert_int_equal(get_u16(end + 8), 0xffff);
	read_at(t.f, (uint64_t)size - 22 - 20 - 56, end64, sizeof(end64));
	assert_int_equal(binio_get_u32(end64), SIG_END64);
	assert_int_equal(binio_get_u64(end64 + 32), n);
	close_file(&t);
}

static void test_misuse(void **state)
{
	struct zipout *z;
	struct file t;

	(void)state;
	open_file(&t);
	assert_int_equal(zipout_new(t.f, &z), 0);
	assert_int_equal(zipout_end(z), -EINVAL);
	assert_int_equal(zipout_write(z, "x", 1), -EIO);
	assert_int_equal(zipout_begin(z, "a", ZIPOUT_DEFLATE), 0);
	assert_int_equal(zipout_begin(z, "b", ZIPOUT_STORE), -EINVAL);
	/* An entry left open: no directory, and the deflate state freed. */
	assert_int_equal(zipout_finish(z), -EIO);
	assert_int_equal(zipout_finish(NULL), 0);
	zipout_discard(NULL);
	close_file(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_entries_read_back),
		cmocka_unit_test(test_entry_over_4gib),
		cmocka_unit_test(test_many_entries),
		cmocka_unit_test(test_misuse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
