/* SPDX-License-Identifier: MIT */
/*
 * phantom: a synthetic white-matter phantom with fibre bundles of known
 * geometry, used by the demo, the tests and the benchmark.
 *
 * Bundles (tubes scaled to the grid): a straight one, a curved (arc) one, a
 * pair crossing at 90 degrees, a pair crossing at about 45 degrees, and a
 * kissing pair (two arcs touching tangentially). For every voxel the generator
 * knows which bundles pass and in which direction, and from that writes:
 *   odf.nii.gz       4D ODF sampled on the chosen sphere (one volume per vertex),
 *                    a sum of sharp axially symmetric lobes, >= 0
 *   fa.nii.gz        FA of the matching multi-tensor model (0 outside bundles)
 *   seed_roi.nii.gz  1 inside any bundle (uint8)
 *   labels.nii.gz    end zones: bundle b's two ends are labels 2b+1 and 2b+2
 *   bundles.json     bundle names, labels and geometry (ground truth)
 *   job.json         a ready prob tracking job on the files above
 * Owns nothing after it returns. Does not log.
 */
#ifndef TRACTD_PHANTOM_H
#define TRACTD_PHANTOM_H

#include <stdint.h>

#include "errbuf.h"

struct phantom_params {
	int64_t dim[3];        /* grid size; geometry scales with it (min 16 per axis) */
	double voxel_mm;       /* isotropic voxel size */
	const char *sphere;    /* built-in sphere name the ODF is sampled on */
	uint64_t seed_count;   /* seeds.count written into job.json */
	int compress;          /* write .nii.gz (1) or .nii (0) */
};

/* Defaults: 48x48x24, 1 mm, symmetric362, 2000 seeds, compressed. */
void phantom_default_params(struct phantom_params *p);

/* Writes the files above into outdir (created if missing). Returns 0 or a
 * negative errno with err filled. */
int phantom_generate(const struct phantom_params *p, const char *outdir, struct errbuf *err);

#endif
