#!/usr/bin/env python3
"""What the anatomical constraints and tracking.angular_weight do on a phantom
with known fibres and tissue maps (issue 22's measurement): for each direction
getter (prob and ptt on the ODF, boot on the DWI), each stopping criterion
(CRITERIA below) and each angular weight, the streamlines kept, the valid and
invalid connections among them and the bundle coverage.

Scoring (tests/scoring.py, the parity tests' own): each line is taken one step
further at both ends (the stopping point is not kept, as in DIPY), then a
connection is valid when its two ends lie in the two end zones of one bundle,
invalid when both lie in end zones but not one bundle's; coverage is the
fraction of the bundle voxels (wm.nii.gz > 0.5) that a point falls in.

Usage: build/venv/bin/python bench/constraints.py [--tractd build/tractd]
       [--dim 24,24,16] [--seeds 1000] [--weights 0,0.3,0.5] [--workdir DIR]
(`make bench-constraints`). Needs numpy and nibabel (the tests' venv); no
timings, so lavapipe will do. Prints a Markdown table.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import nibabel as nib
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from scoring import connection_stats, coverage, load_trk, one_step_further  # noqa: E402

# The phantom's job per getter.
GETTERS = {"prob": "job.json", "boot": "job_boot.json", "ptt": "job_ptt.json"}


def threshold(job, phantom):
    """Today's default: the stop map and fa_threshold (ptt and prob: fa.nii.gz;
    boot: the FA of its own fit), every streamline kept."""


def act(job, phantom):
    """DIPY's ActStoppingCriterion on include and exclude, return_all false."""
    job["stopping"] = {"criterion": "act", "include": str(phantom / "include.nii.gz"),
                       "exclude": str(phantom / "exclude.nii.gz")}
    job["tracking"]["return_all"] = False


def cmc(job, phantom):
    """DIPY's CmcStoppingCriterion on wm, gm and csf, return_all false."""
    job["stopping"] = {"criterion": "cmc", **{m: str(phantom / f"{m}.nii.gz")
                                              for m in ("wm", "gm", "csf")}}
    job["tracking"]["return_all"] = False


# Rows per getter and weight, in order: a criterion edits the getter's job.
# ACT+PFT and 5TT are added here as they land.
CRITERIA = {"threshold": threshold, "act": act, "cmc": cmc}


def make_phantom(tractd, dim, seeds, workdir):
    phantom = workdir / "phantom"
    subprocess.run([tractd, "-q", "phantom", str(phantom), "--dim", dim, "--seeds", str(seeds)],
                   check=True)
    return phantom


def job_for(phantom, getter, criterion, weight):
    job = json.loads((phantom / GETTERS[getter]).read_text())
    job["inputs"] = {k: str(phantom / v) for k, v in job["inputs"].items()}
    job["seeds"]["roi"] = str(phantom / job["seeds"]["roi"])
    job.pop("output")
    job["tracking"]["angular_weight"] = weight
    CRITERIA[criterion](job, phantom)
    return job


def run(tractd, job, path):
    path.with_suffix(".json").write_text(json.dumps(job, indent=1))
    subprocess.run([tractd, "-q", "run", str(path.with_suffix(".json")), "-o", str(path)],
                   check=True)
    return load_trk(path).streamlines


def score(lines, phantom, n_seeds):
    labels = np.rint(np.asarray(nib.load(str(phantom / "labels.nii.gz")).dataobj)).astype(int)
    bundles = json.loads((phantom / "bundles.json").read_text())
    bundles = bundles["bundles"] if isinstance(bundles, dict) else bundles
    wm = np.asarray(nib.load(str(phantom / "wm.nii.gz")).dataobj) > 0.5
    c = connection_stats(one_step_further(lines), labels, bundles)
    return {"streamlines": c["n"], "per_seed": c["n"] / n_seeds,
            "valid": c["valid_fraction"], "invalid": c["invalid_fraction"],
            "coverage": coverage(lines, wm)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tractd", default="build/tractd")
    ap.add_argument("--dim", default="24,24,16", help="phantom grid (tractd phantom --dim)")
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--weights", default="0,0.3,0.5", help="tracking.angular_weight values")
    ap.add_argument("--getters", default=",".join(GETTERS))
    ap.add_argument("--workdir", type=Path, help="kept afterwards (default: a temporary one)")
    a = ap.parse_args()
    weights = [float(w) for w in a.weights.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = a.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        phantom = make_phantom(str(Path(a.tractd).resolve()), a.dim, a.seeds, workdir)
        print(f"phantom --dim {a.dim}, {a.seeds} seeds; valid/invalid: fraction of the "
              f"streamlines kept; coverage: of the bundle voxels\n")
        print("| getter | stopping | angular_weight | streamlines | per seed | valid | "
              "invalid | coverage |")
        print("|---|---|---|---|---|---|---|---|")
        for getter in a.getters.split(","):
            for criterion in CRITERIA:
                for w in weights:
                    job = job_for(phantom, getter, criterion, w)
                    lines = run(a.tractd, job, workdir / f"{getter}_{criterion}_{w}.trk")
                    s = score(lines, phantom, a.seeds)
                    print(f"| {getter} | {criterion} | {w:g} | {s['streamlines']} | "
                          f"{s['per_seed']:.2f} | {100 * s['valid']:.1f} % | "
                          f"{100 * s['invalid']:.1f} % | {100 * s['coverage']:.1f} % |",
                          flush=True)


if __name__ == "__main__":
    main()
