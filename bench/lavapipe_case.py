#!/usr/bin/env python3
"""The lavapipe benchmark's case and its DIPY side (bench/lavapipe.sh).

Usage:
  lavapipe_case.py prepare DIR SEEDS
                                   DIR holds a `tractd phantom` (DWI included);
                                   writes DIR/dipy_odf.nii, DIR/dipy_fa.nii,
                                   DIR/seeds.npy (SEEDS seeds in the phantom's
                                   seed ROI) and DIR/job_lavapipe.json
  lavapipe_case.py dipy DIR THREADS
                                   tracks the case with DIPY's
                                   probabilistic_tracking on THREADS threads and
                                   prints one JSON object: seconds, streamlines,
                                   points, dipy version

The ODF is DIPY's own: CSD (auto_response_ssst, order 8) of the phantom's DWI
where DIPY's FA >= 0.1, sampled on repulsion724 and clipped at zero; DIPY's FA
is the stop map. Both sides track the same seeds (voxel space, identity affine)
with the same parameters (TRACKING), and both track every peak at a seed
(DIPY: peaks_from_positions with tractd's peak parameters, then
seeds_directions_pairs, timed with the tracking as tractd's pass 1 is), so
equal work shows as equal point counts. Needs DIPY >= 1.12 (build/venv-dipy).
"""
import json
import os
import sys
import time
import warnings

warnings.simplefilter("ignore")

import nibabel as nib  # noqa: E402
import numpy as np  # noqa: E402

SEED_PLACEMENT_SEED = 1234
FA_FIT_THRESHOLD = 0.1
TRACKING = {
    "sphere": "repulsion724",
    "step_size": 0.5,
    "max_angle": 30.0,
    "pmf_threshold": 0.1,
    "fa_threshold": 0.1,
    "relative_peak_threshold": 0.25,
    "min_separation_angle": 45.0,
    "max_steps": 500,
}
MAX_PEAKS = 5   # DIPY's npeaks: more than the crossing phantom has


def prepare(d, n_seeds):
    from dipy.core.gradients import gradient_table
    from dipy.data import get_sphere
    from dipy.io import read_bvals_bvecs
    from dipy.reconst.csdeconv import ConstrainedSphericalDeconvModel, auto_response_ssst
    from dipy.reconst.dti import TensorModel
    from dipy.tracking.utils import random_seeds_from_mask

    img = nib.load(os.path.join(d, "dwi.nii"))
    data = img.get_fdata(dtype=np.float32)
    mask = nib.load(os.path.join(d, "mask.nii")).get_fdata() > 0
    bvals, bvecs = read_bvals_bvecs(os.path.join(d, "dwi.bval"), os.path.join(d, "dwi.bvec"))
    gtab = gradient_table(bvals, bvecs=bvecs)
    fa = TensorModel(gtab).fit(data, mask=mask).fa
    fa[np.isnan(fa)] = 0.0
    response, _ = auto_response_ssst(gtab, data, roi_radii=10, fa_thr=0.7)
    fit = ConstrainedSphericalDeconvModel(gtab, response, sh_order_max=8).fit(
        data, mask=mask & (fa >= FA_FIT_THRESHOLD))
    odf = np.clip(fit.odf(get_sphere(name=TRACKING["sphere"])), 0, None).astype(np.float32)
    eye = np.eye(4)
    nib.save(nib.Nifti1Image(odf, eye), os.path.join(d, "dipy_odf.nii"))
    nib.save(nib.Nifti1Image(fa.astype(np.float32), eye), os.path.join(d, "dipy_fa.nii"))
    roi = nib.load(os.path.join(d, "seed_roi.nii")).get_fdata() > 0
    seeds = random_seeds_from_mask(roi, eye, seeds_count=n_seeds, seed_count_per_voxel=False,
                                   random_seed=SEED_PLACEMENT_SEED)
    np.save(os.path.join(d, "seeds.npy"), seeds)
    job = {"inputs": {"odf": "dipy_odf.nii", "stop_map": "dipy_fa.nii"},
           "direction_getter": "prob",
           "seeds": {"points": seeds.tolist(), "space": "voxel"},
           "tracking": TRACKING,
           "output": {"format": "trk", "path": "tracks_lavapipe.trk"}}
    with open(os.path.join(d, "job_lavapipe.json"), "w") as f:
        json.dump(job, f)


def track_dipy(d, threads):
    import dipy
    from dipy.data import get_sphere
    from dipy.direction.peaks import peaks_from_positions
    from dipy.direction.pmf import SimplePmfGen
    from dipy.tracking.stopping_criterion import ThresholdStoppingCriterion
    from dipy.tracking.tracker import probabilistic_tracking
    from dipy.tracking.utils import seeds_directions_pairs

    sphere = get_sphere(name=TRACKING["sphere"])
    odf = np.asarray(nib.load(os.path.join(d, "dipy_odf.nii")).dataobj, dtype=np.float64)
    fa = np.asarray(nib.load(os.path.join(d, "dipy_fa.nii")).dataobj, dtype=np.float64)
    seeds = np.load(os.path.join(d, "seeds.npy"))
    eye = np.eye(4)
    start = time.perf_counter()
    peaks = peaks_from_positions(seeds, None, None, npeaks=MAX_PEAKS, affine=eye,
                                 pmf_gen=SimplePmfGen(odf, sphere),
                                 relative_peak_threshold=TRACKING["relative_peak_threshold"],
                                 min_separation_angle=TRACKING["min_separation_angle"])
    positions, directions = seeds_directions_pairs(seeds, peaks)
    lines = probabilistic_tracking(
        positions, ThresholdStoppingCriterion(fa, TRACKING["fa_threshold"]), eye,
        seed_directions=directions, sf=odf, sphere=sphere, step_size=TRACKING["step_size"],
        max_angle=TRACKING["max_angle"], pmf_threshold=TRACKING["pmf_threshold"],
        max_len=2 * TRACKING["max_steps"] * TRACKING["step_size"], min_len=0,
        nbr_threads=threads, random_seed=1, return_all=True)
    lines = list(lines)
    seconds = time.perf_counter() - start
    json.dump({"seconds": seconds, "streamlines": len(lines),
               "points": int(sum(len(s) for s in lines)), "dipy": dipy.__version__}, sys.stdout)
    sys.stdout.write("\n")


def main(argv):
    if len(argv) == 4 and argv[1] == "prepare":
        prepare(argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[1] == "dipy":
        track_dipy(argv[2], int(argv[3]))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
