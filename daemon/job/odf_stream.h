/* SPDX-License-Identifier: MIT */
/*
 * odf_stream: an uncompressed ODF input (inputs.odf, a .nii in the host's
 * byte order) read in z-slabs while the devices upload it (resident.h),
 * instead of whole into host memory first: reading overlaps the upload, and
 * the host holds two slabs, not the ODF.
 *
 * Owns the image's mapping (volume_slabs), two slab buffers and the thread
 * that fills them in turn: slab k + 1 is read, clipped at zero and checked
 * for antipodal symmetry (fit_prepare_odf, as a whole ODF is when loaded)
 * while the consumers (one upload per device) copy slab k out. A buffer is
 * read again once every consumer has released its slab. A consumer may
 * instead read the file's float32 values itself (odf_stream_raw: a GPU
 * that transposes them, engine/odf_transpose.h); the reader reads no slab
 * that no consumer takes. Where two or more consumers read the raw file,
 * the stream also owns host copies of it they share (odf_stream_share_*):
 * two page-aligned chunk buffers and the filler thread that copies the
 * file into them once for all. Does not log; failures reach the consumers
 * through errbuf.
 */
#ifndef TRACTD_ODF_STREAM_H
#define TRACTD_ODF_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "formats/volume.h"
#include "models/fit.h"
#include "models/sphere.h"

struct odf_stream;

/* One slab: z-planes [first_z, first_z + planes) of the grid, in its
 * [x][y][z] order (a run of `planes` voxels of every z-column, column
 * after column), nv values each, clipped at zero. */
struct odf_slab {
	const float *values;
	uint64_t first_z;
	uint64_t planes;
};

/* Maps the ODF image in the open file fd (not kept) and reads its header
 * into header (dim, affine; no data). *ret is NULL (0 returned, header
 * untouched) when the image is not read in place (volume_slabs_open).
 * fit's threads read and check the slabs (fit may be NULL: all CPUs). */
int odf_stream_open(int fd, const char *path, const struct sphere *s,
		    const struct fit_options *fit, struct volume *header, struct odf_stream **ret,
		    struct errbuf *err);

/* How many slabs the ODF takes. */
size_t odf_stream_slabs(const struct odf_stream *s);
/* The grid's z-columns: how many, and their voxels (the grid's z size). */
void odf_stream_columns(const struct odf_stream *s, uint64_t *columns, uint64_t *column_voxels);

/* Starts the reader for consumers, each of which then joins
 * (odf_stream_join) or cancels, and if it takes slabs, takes every slab in
 * order: odf_stream_get, copies it out, odf_stream_release. The reader
 * reads nothing before every consumer has joined. Once only. */
int odf_stream_start(struct odf_stream *s, size_t consumers, struct errbuf *err);

/* A consumer says whether it takes the slabs, or reads the raw file. */
void odf_stream_join(struct odf_stream *s, bool takes_slabs);

/* The file's voxel data where they are float32 as stored (no scaling):
 * dim[3] volumes one after another, each x fastest, then y, then z. */
struct odf_raw {
	const unsigned char *data;
	int64_t dim[4];
};

/* Whether the ODF can be read raw (false: only as slabs). */
bool odf_stream_raw(const struct odf_stream *s, struct odf_raw *ret);
/* Slab k's z-planes [*first_z, *first_z + *planes), which a raw reader
 * follows too (each slab one contiguous run of each volume). */
void odf_stream_slab_span(const struct odf_stream *s, size_t k, uint64_t *first_z,
			  uint64_t *planes);
/* A raw reader is done with a slab: the mapping's pages go, as the
 * reader's do (the host holds one slab of the file, not all of it). */
void odf_stream_raw_done(const struct odf_stream *s);
/* A raw reader found a non-finite value: the error the slabs give, the
 * first in slab order (inputs.odf named). */
int odf_stream_raw_check_finite(const struct odf_stream *s, struct errbuf *err);
/* The symmetry fit_prepare_odf finds, slab by slab on the host, for a raw
 * reader that cannot decide it (a voxel whose values are too small for a
 * GPU that flushes subnormal floats). Errors as the slabs'. */
int odf_stream_raw_host_symmetry(const struct odf_stream *s, struct odf_symmetry *symmetry,
				 struct errbuf *err);
/* A raw reader's symmetry check (fit_prepare_odf's rules): what it did not
 * find, odf_stream_symmetry does not tell. */
void odf_stream_raw_symmetry(struct odf_stream *s, struct odf_symmetry found);

/* A chunk of a raw read: voxels [first, first + voxels) of every volume
 * (the file's voxel order, x fastest), all within slab `slab`. */
struct odf_chunk {
	size_t slab;
	uint64_t first, voxels;
	bool ends_slab;           /* the slab's last chunk */
};

/* The chunk after *c of up to max_voxels (> 0) voxels, the first where c
 * is zeroed; false past the last. Every raw reader walks the same chunks
 * for the same max_voxels. */
bool odf_stream_next_chunk(const struct odf_stream *s, uint64_t max_voxels,
			   struct odf_chunk *c);
/* Bytes [offset, offset + size) of chunk c as a raw reader stages it (its
 * run of each volume, volume after volume, 4 * c->voxels bytes each) into
 * dst, from the file. Safe on several threads for disjoint ranges.
 * half: where the sphere is mirrored (sphere_mirrored: vertex j + nv/2 the
 * antipode of j) a raw reader may stage only the first nv/2 volumes, their
 * values being their antipodes'; the copy then also compares each value it
 * copies with its antipode's, both clipped at zero (-0 as 0, on the bits:
 * odf_transpose.comp's mirrored check), and returns whether all are equal
 * (true without half). */
bool odf_stream_copy_chunk(const struct odf_stream *s, const struct odf_chunk *c, bool half,
			   uint64_t offset, uint64_t size, void *dst);
/* The volumes a raw reader stages: every one, or with half the first
 * half's. */
uint64_t odf_stream_staged_volumes(const struct odf_stream *s, bool half);
/* The same check on the middle z-plane of the file, all volumes: a guess,
 * before the upload, at whether the whole ODF is mirrored. Checked once, on
 * the first call (not thread-safe), and remembered. */
bool odf_stream_raw_plane_mirrored(struct odf_stream *s);

/* Host copies of the chunks that two or more raw readers share, so that
 * the file's values are copied once, not once per reader: the stream's
 * filler thread copies chunk j into buffer j % ODF_SHARE_BUFFERS once every
 * reader has released chunk j - ODF_SHARE_BUFFERS, while the readers copy
 * chunk j - 1 out. Each raw reader offers (odf_stream_share_offer), then
 * agrees or not (odf_stream_share_agree); sharing is on where all agree. */
#define ODF_SHARE_BUFFERS 2

struct odf_share {
	size_t readers;           /* raw readers sharing; 0: no sharing */
	const char *why_not;      /* where readers is 0 and more than one reads raw */
	void *buffers[ODF_SHARE_BUFFERS];   /* page-aligned, alignment-aligned */
	uint64_t bytes;           /* each buffer's: a multiple of the alignment */
	uint64_t chunk_voxels;    /* every reader's chunks (odf_stream_next_chunk):
				   * the smallest offered, at most a buffer of
				   * 128 MiB's */
};

/* A raw reader (joined without slabs) that can take chunks of up to
 * max_voxels voxels offers to share; alignment: what its imports of host
 * memory must be a multiple of (0: it cannot import); half: it stages half
 * the sphere (the chunks then hold those volumes, copied with
 * odf_stream_copy_chunk's half; every reader must say the same). Waits for
 * every raw reader's offer; then, where two or more offered, every one can
 * import and the buffers could be allocated, *ret has them for the reader
 * to import. -ECANCELED. */
int odf_stream_share_offer(struct odf_stream *s, uint64_t max_voxels, uint64_t alignment,
			   bool half, struct odf_share *ret, struct errbuf *err);
/* A reader that got buffers says whether it imported them; waits for the
 * others: 1 when sharing is on (every reader agreed; the filler runs),
 * 0 when it is off (each reader reads the file itself; *why_not says
 * why), -ECANCELED. */
int odf_stream_share_agree(struct odf_stream *s, bool imported, const char **why_not,
			   struct errbuf *err);
/* Chunk j (the j-th of the walk), once in its shared buffer: that
 * buffer's index in *buffer, and with half the sphere whether the filler
 * has found a value unequal to its antipode's, in the last chunk it filled
 * (a reader that sees it stops after chunk j: no later chunk comes).
 * Errors as odf_stream_get. */
int odf_stream_share_get(struct odf_stream *s, size_t j, size_t *buffer, bool *unmirrored,
			 struct errbuf *err);
/* The reader has copied chunk j out of its buffer. */
void odf_stream_share_release(struct odf_stream *s, size_t j);
/* Seconds the filler spent copying from the file so far. */
double odf_stream_share_fill_seconds(struct odf_stream *s);

/* Slab k, once read. The reader's error (a bad value: inputs.odf named),
 * or -ECANCELED when a consumer gave up (odf_stream_cancel). */
int odf_stream_get(struct odf_stream *s, size_t k, struct odf_slab *ret, struct errbuf *err);

/* The caller is done with slab k. */
void odf_stream_release(struct odf_stream *s, size_t k);

/* A consumer failed: the reader stops and every get answers -ECANCELED. */
void odf_stream_cancel(struct odf_stream *s);

/* Waits for the reader. After a run whose consumers took every slab,
 * odf_stream_symmetry says how the ODF's antipodal values compare. */
void odf_stream_finish(struct odf_stream *s);
struct odf_symmetry odf_stream_symmetry(const struct odf_stream *s);

/* Accepts NULL; finishes a started stream first. */
void odf_stream_free(struct odf_stream *s);

#endif
