"""DIPY's ParticleFilteringTracking (and, for comparison, LocalTracking) with
CmcStoppingCriterion or ActStoppingCriterion on given seeds, run by
test_pft_dipy.py with the interpreter of build/venv-dipy (DIPY 1.12.1 from
tests/requirements-dipy.txt).

    dipy_pft_reference.py IN.npz OUT.npz

IN.npz: pmf (x, y, z, NV float64: the ODF as tractd's prob samples it),
vertices (NV x 3), seeds (n x 3, voxel coordinates), the criterion's maps
(include and exclude for act; wm, gm and csf for cmc), params (a JSON string:
criterion, pft (true: ParticleFilteringTracking, false: LocalTracking),
step_size, max_angle, pmf_threshold, relative_peak_threshold,
min_separation_angle, max_steps, random_seed, and with pft back_mm, front_mm,
particles, max_trials and optionally min_wm_pve_before_stopping). DIPY tracks in voxel coordinates (identity affine,
1 mm voxels), return_all false. OUT.npz: points (all streamlines' points)
and counts (points per streamline).
"""
import json
import sys

import numpy as np
from dipy.core.sphere import Sphere
from dipy.direction import ProbabilisticDirectionGetter
from dipy.tracking.local_tracking import LocalTracking, ParticleFilteringTracking
from dipy.tracking.stopping_criterion import ActStoppingCriterion, CmcStoppingCriterion


def criterion(data, p):
    if p["criterion"] == "act":
        return ActStoppingCriterion(data["include"], data["exclude"])
    return CmcStoppingCriterion.from_pve(data["wm"], data["gm"], data["csf"],
                                         step_size=p["step_size"], average_voxel_size=1.0)


def main(src, dst):
    data = np.load(src)
    p = json.loads(str(data["params"]))
    dg = ProbabilisticDirectionGetter.from_pmf(
        np.ascontiguousarray(data["pmf"], dtype=float), max_angle=p["max_angle"],
        sphere=Sphere(xyz=np.asarray(data["vertices"], dtype=float)),
        pmf_threshold=p["pmf_threshold"], relative_peak_threshold=p["relative_peak_threshold"],
        min_separation_angle=p["min_separation_angle"])
    common = dict(affine=np.eye(4), step_size=p["step_size"], maxlen=p["max_steps"],
                  return_all=False, random_seed=p["random_seed"])
    seeds = np.asarray(data["seeds"], dtype=float)
    if p["pft"]:
        tracker = ParticleFilteringTracking(
            dg, criterion(data, p), seeds, pft_back_tracking_dist=p["back_mm"],
            pft_front_tracking_dist=p["front_mm"], particle_count=p["particles"],
            pft_max_trial=p["max_trials"],
            min_wm_pve_before_stopping=p.get("min_wm_pve_before_stopping", 0), **common)
    else:
        tracker = LocalTracking(dg, criterion(data, p), seeds, **common)
    lines = [np.asarray(s, dtype=np.float64) for s in tracker]
    counts = np.array([len(s) for s in lines], dtype=np.int64)
    points = np.concatenate(lines) if lines else np.zeros((0, 3))
    np.savez(dst, points=points, counts=counts)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
