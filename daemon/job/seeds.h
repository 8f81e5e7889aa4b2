/* SPDX-License-Identifier: MIT */
/*
 * seeds: where streamlines start.
 *
 * Owns a seed generator that produces seed i on demand (so 10-million-seed jobs
 * never hold all seeds). Two kinds:
 *  - from a mask, with DIPY random_seeds_from_mask semantics: the mask voxels
 *    are put in a random order once; seeds are emitted in rounds, each round
 *    visiting every voxel once in that order, at ijk + U[0,1)^3 - 0.5; with a
 *    total count the number of rounds is count/nvox + 1 and the sequence is
 *    truncated to count; per voxel it is count rounds. Randomness comes from
 *    Philox keyed by rng_seed (not numpy's generator, so positions differ from
 *    DIPY's while the distribution is the same);
 *  - on the white/grey-matter interface, as the mask's rounds over its
 *    faces: a face joins a voxel of white matter (wm > 0.5) and one of its
 *    6 neighbours of grey matter (gm > 0.5); its seeds lie on the face
 *    (half-way between the two centres along its axis), uniform across it;
 *  - from an explicit list of points in voxel or RAS+ mm coordinates, whose
 *    global indices may start past 0 (seeds_number_from: a client's part of a
 *    larger list, drawn as a shard of it would be).
 * Coordinates produced are voxel coordinates (centres at integers). Does not log.
 */
#ifndef TRACTD_SEEDS_H
#define TRACTD_SEEDS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "formats/volume.h"

struct seeds;

/* mask: voxels with value > 0 (t ignored, 3D expected). count > 0.
 * Errors: empty mask (-EINVAL, field "seeds.roi"), overflow of count*nvox. */
int seeds_from_mask(const struct volume *mask, uint64_t count, bool per_voxel,
		    uint64_t rng_seed, struct seeds **ret, struct errbuf *err);

/* Where a tissue's partial volume is the voxel's majority. */
#define SEEDS_TISSUE_MAJORITY 0.5f

/* wm, gm: 3D partial volumes on one grid. count seeds in total (rounds over
 * the faces, as seeds_from_mask's over voxels). Errors: no face (-EINVAL,
 * field "seeds.interface"), count 0. */
int seeds_from_interface(const struct volume *wm, const struct volume *gm, uint64_t count,
			 uint64_t rng_seed, struct seeds **ret, struct errbuf *err);

/* pts: n points (xyz interleaved). ras_mm: pts are world coordinates mapped
 * through inverse(affine); else voxel coordinates. Points outside
 * [-0.5, dim-0.5) on any axis or non-finite are rejected (-EINVAL, field
 * "<field>[i]", field being where the points came from: "seeds.points"). */
int seeds_from_points(const char *field, const double *pts, uint64_t n, bool ras_mm,
		      const double affine[4][4], const int64_t dim[3], struct seeds **ret,
		      struct errbuf *err);

/* Numbers the seeds from first (seeds.first_index): seed i's draws and
 * its index in the output are global seed first + i's, so that seeds_range
 * gives [first, first + count), as for a shard whose first seed is first.
 * Call before seeds_restrict. */
void seeds_number_from(struct seeds *s, uint64_t first);

/* One past the largest global index the job's seeds have: seeds_count
 * plus seeds_number_from's first. */
uint64_t seeds_index_end(const struct seeds *s);

/* Total number of seeds of the job (a shard's whole job's). */
uint64_t seeds_count(const struct seeds *s);

/* Serves only seeds [first, end) of the job's (clamped to the count; their
 * global indices are these plus seeds_number_from's first): a shard of the
 * job (shard.h). Each seed stays what it is in the whole job: its position
 * and draws depend on its global index alone. */
void seeds_restrict(struct seeds *s, uint64_t first, uint64_t end);

/* The global indices served, [*first, *end): [0, count) unless restricted
 * or numbered from another first. */
void seeds_range(const struct seeds *s, uint64_t *first, uint64_t *end);

/* Keeps the first max seeds of s at most; they stay where they were. */
void seeds_limit(struct seeds *s, uint64_t max);

/* Writes seeds of global index [first, first+n) as voxel coordinates (3
 * floats each) to out. Returns 0 or -EINVAL when the range leaves seeds_range. */
int seeds_fill(struct seeds *s, uint64_t first, uint64_t n, float *out);

/* Accepts NULL. */
void seeds_free(struct seeds *s);

#endif
