"""tracking.min_length / max_length (mm) are applied before read-back and keep
exactly the streamlines that filtering the unfiltered output afterwards with
DIPY's length() keeps, on a phantom of 2 mm voxels (so that voxel steps and
mm differ)."""
import json

import nibabel as nib
import numpy as np
import pytest
from dipy.tracking.streamline import length

from conftest import run_cli, write_job

N_SEEDS = 600
VOXEL_MM = 2.0
# Every step is 0.5 voxel = 1 mm here: lengths are whole mm, limits lie between.
MIN_MM, MAX_MM = 40.5, 90.5
# The GPU sums float32 step lengths; DIPY sums float64 distances between
# float32 points: streamlines this close to a limit may fall either side.
BORDER_MM = 1e-3


@pytest.fixture(scope="module")
def coarse_phantom(tractd, tmp_path_factory):
    d = tmp_path_factory.mktemp("coarse")
    run_cli(tractd, ["phantom", "--voxel-size", str(VOXEL_MM), "-q", d], check=True)
    return d


def _run(tractd, phantom_dir, tmp_path, name, **tracking):
    job = json.loads((phantom_dir / "job.json").read_text())
    for key in ("odf", "stop_map"):
        job["inputs"][key] = str(phantom_dir / job["inputs"][key])
    job["seeds"].update(roi=str(phantom_dir / job["seeds"]["roi"]), count=N_SEEDS, rng_seed=3)
    job["tracking"].update(tracking)
    job.pop("output")
    out = tmp_path / f"{name}.trk"
    run_cli(tractd, ["run", write_job(tmp_path / f"{name}.json", job), "-o", out, "-q"],
            check=True)
    return nib.streamlines.load(out).streamlines


def test_length_limits_match_dipy(tractd, coarse_phantom, tmp_path):
    every = _run(tractd, coarse_phantom, tmp_path, "all")
    kept = _run(tractd, coarse_phantom, tmp_path, "limited", min_length=MIN_MM,
                max_length=MAX_MM)
    lengths = np.asarray(length(every))
    inside = (lengths >= MIN_MM) & (lengths <= MAX_MM)
    near = (np.abs(lengths - MIN_MM) < BORDER_MM) | (np.abs(lengths - MAX_MM) < BORDER_MM)
    assert near.sum() == 0, "a streamline sits on a limit: pick other limits"
    want = [s for s, keep in zip(every, inside) if keep]
    assert 0 < len(want) < len(every), (len(want), len(every))
    assert len(kept) == len(want), f"{len(kept)} kept, DIPY keeps {len(want)}"
    for i, (a, b) in enumerate(zip(kept, want)):
        assert a.shape == b.shape and np.array_equal(a, b), f"streamline {i} differs"
    got = np.asarray(length(kept))
    assert got.min() >= MIN_MM and got.max() <= MAX_MM, (got.min(), got.max())
