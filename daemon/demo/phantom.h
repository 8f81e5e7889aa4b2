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
 *   include.nii.gz   ACT include map: 1 in the end zones (grey matter there)
 *   exclude.nii.gz   ACT exclude map: 1 outside the bundles and end zones
 *   wm.nii.gz, gm.nii.gz, csf.nii.gz  partial volumes for CMC: gm is
 *                    include's, csf exclude's, wm 1 where neither is
 *   bundles.json     bundle names, labels and geometry (ground truth)
 *   job.json         a ready prob tracking job on the files above
 *   job_ptt.json     the same with the PTT getter at max_angle 20
 *   job_act.json     job.json stopped by ACT on include and exclude, with
 *                    return_all false (only streamlines valid at both ends)
 * and, unless write_dwi is 0, the raw data the ODF and FA stand for:
 *   dwi.nii.gz       4D DWI series (float32) of the same multi-tensor model:
 *                    equal-fraction tensors (1.7, 0.3, 0.3)e-3 mm^2/s along the
 *                    bundles, isotropic tissue (0.8e-3 mm^2/s, FA 0) everywhere
 *                    else, S0 100, Rician noise of sigma S0 / snr (deterministic)
 *   dwi.bval         FSL b-values (one row): b0_count b0s (default 6) spread
 *                    through directions volumes (default 64) at bvalue (default
 *                    1000), and with two shells as many more at 2 * bvalue
 *                    (Stanford HARDI's scheme: 10 b0s, 150 directions, b=2000)
 *   dwi.bvec         gradient directions (three rows), unit, 0 for b0s, along
 *                    the voxel axes as DIPY (and tractd) read bvecs; FSL and
 *                    MRtrix3's -fslgrad flip x for this RAS grid, so negate
 *                    the first row before giving the file to them
 *   mask.nii.gz      brain mask: 1 except a one-voxel border of 0
 *   job_dwi.json     job.json's tracking on the raw DWI (DTI FA stop map, CSD ODF)
 *   job_boot.json    the same with the bootstrap getter (OPDT, order 4)
 * Owns nothing after it returns. Does not log.
 */
#ifndef TRACTD_PHANTOM_H
#define TRACTD_PHANTOM_H

#include <stdint.h>

#include "base/errbuf.h"

struct phantom_params {
	int64_t dim[3];        /* grid size; geometry scales with it (min 16 per axis) */
	double voxel_mm;       /* isotropic voxel size */
	const char *sphere;    /* built-in sphere name the ODF is sampled on */
	uint64_t seed_count;   /* seeds.count written into job.json */
	int compress;          /* write .nii.gz (1) or .nii (0) */
	double snr;            /* DWI: S0 / Rician sigma; 0 or infinity: noise-free */
	int shells;            /* DWI: 1 (bvalue) or 2 (bvalue and 2 * bvalue) */
	int b0_count;          /* DWI: b=0 volumes, 1..100 */
	int directions;        /* DWI: gradient directions per shell, 6..1000 */
	double bvalue;         /* DWI: first shell's b-value in s/mm^2, (50, 20000] */
	int write_dwi;         /* write the DWI series, its tables, mask and job (1) or not (0) */
};

/* Defaults: 48x48x24, 1 mm, symmetric362, 2000 seeds, compressed; DWI written
 * with 6 b0s and one shell of 64 directions at b=1000, SNR 30. */
void phantom_default_params(struct phantom_params *p);

/* Writes the files above into outdir (created if missing). Returns 0 or a
 * negative errno with err filled. */
int phantom_generate(const struct phantom_params *p, const char *outdir, struct errbuf *err);

#endif
