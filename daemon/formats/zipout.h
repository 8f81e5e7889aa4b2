/* SPDX-License-Identifier: MIT */
/*
 * zipout: a zip archive written front to back to a FILE that never seeks
 * (a pipe will do), so that an entry can be streamed while it is produced
 * and its bytes cross the FILE once. Each entry is its local header (zip64
 * extra, sizes unknown), its data, stored or deflated, and a zip64 data
 * descriptor with its CRC-32 and sizes; zipout_finish appends the central
 * directory, each entry's sizes in a zip64 extra as long as its local
 * header's (readers that take the one for the other find the data), its
 * offset there too and zip64 end records only where an offset or the entry
 * count outgrows the classic fields.
 * Deflate is libzip's (level 9, memLevel 9), so the compressed data are
 * those libzip would write. Every entry has the same fixed DOS time: the
 * same entries give the same bytes, whatever the clock or the time zone.
 *
 * Owns the entry list and the deflate stream, not the FILE, which must be
 * empty: offsets count from where it stands. Does not log.
 */
#ifndef TRACTD_ZIPOUT_H
#define TRACTD_ZIPOUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum zipout_method { ZIPOUT_STORE, ZIPOUT_DEFLATE };

struct zipout;

/* Returns 0 or -ENOMEM. */
int zipout_new(FILE *out, struct zipout **ret);

/* Writes the local header of the next entry. Returns 0, -EINVAL (an entry
 * still open, a name of more than 65535 bytes), -ENOMEM or -EIO. */
int zipout_begin(struct zipout *z, const char *name, enum zipout_method method);

/* Appends data to the open entry, its CRC-32 computed here. Returns 0, -EIO
 * or -ENOMEM (deflate's state). */
int zipout_write(struct zipout *z, const void *data, size_t len);

/* As zipout_write, with crc = zlib's crc32(0, data, len) already computed by
 * the caller (on its own threads): it is combined into the entry's, not
 * recomputed. */
int zipout_write_crc(struct zipout *z, const void *data, size_t len, uint32_t crc);

/* Ends the open entry: the rest of its deflate stream and its data
 * descriptor. Returns 0, -EINVAL (none open), -EIO or -ENOMEM. */
int zipout_end(struct zipout *z);

/* Writes the central directory and the end records, flushes the FILE and
 * frees z. An entry still open, or any earlier failure, gives -EIO and
 * writes nothing more. Returns 0, -EIO or -ENOMEM; z is freed either way.
 * Accepts NULL. */
int zipout_finish(struct zipout *z);

/* Frees z without ending the archive (a failed job). Accepts NULL. */
void zipout_discard(struct zipout *z);

#endif
