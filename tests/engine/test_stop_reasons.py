"""Why streamlines stop: the stop reasons of `tractd run --stats-json` and its
log line, on a straight tube 100 voxels long along x (8x8 across) whose ODF
is one sharp lobe along the tube everywhere, 16 seeds at its middle, prob at
max_angle 30 on repulsion100. Each streamline has two ends, one per half:

- the uniform tube (stop map 1 everywhere) runs out of the image at both
  ends: all 32 ends `outside`, none `no_direction` or `stop_map`;
- a stop map of 0 beyond x in [20, 80]: all ends `stop_map`;
- max_steps 10: all ends `max_steps`;
- no ODF for x < 10: the halves along -x end `no_direction` there, and a
  seed in that part has no initial direction;
- streamlines the length limits drop still count.
"""
import json

import nibabel as nib
import numpy as np
import pytest
from dipy.data import get_sphere

from conftest import load_trk, run_cli, run_job, write_job

SHAPE = (100, 8, 8)
N_SEEDS = 16
SEED = [50.0, 3.5, 3.5]
ENDS = 2 * N_SEEDS
REASONS = ("stop_map", "outside", "no_direction", "max_steps", "include", "exclude",
           "exclude_region", "unknown")


def _counts(**nonzero):
    counts = dict.fromkeys(REASONS, 0)
    counts.update(nonzero)
    return counts


@pytest.fixture(scope="module")
def tube(tmp_path_factory):
    """The tube's volumes: odf.nii (uniform), odf_from10.nii (zero for x < 10),
    fa.nii (1 everywhere), fa_20_80.nii (1 for x in [20, 80], else 0)."""
    d = tmp_path_factory.mktemp("tube")
    v = get_sphere("repulsion100").vertices
    lobe = np.exp(-((1 - np.abs(v[:, 0])) / 0.02)).astype(np.float32)
    odf = np.broadcast_to(lobe, SHAPE + (len(v),)).copy()
    nib.save(nib.Nifti1Image(odf, np.eye(4)), str(d / "odf.nii"))
    odf[:10] = 0
    nib.save(nib.Nifti1Image(odf, np.eye(4)), str(d / "odf_from10.nii"))
    fa = np.ones(SHAPE, np.float32)
    nib.save(nib.Nifti1Image(fa, np.eye(4)), str(d / "fa.nii"))
    fa[:20] = 0
    fa[81:] = 0
    nib.save(nib.Nifti1Image(fa, np.eye(4)), str(d / "fa_20_80.nii"))
    return d


def _job(tube, odf="odf.nii", stop_map="fa.nii", seeds=None, **tracking):
    return {"inputs": {"odf": str(tube / odf), "stop_map": str(tube / stop_map)},
            "direction_getter": "prob",
            "seeds": {"points": seeds or [SEED] * N_SEEDS, "space": "voxel"},
            "tracking": dict({"max_angle": 30, "sphere": "repulsion100"}, **tracking)}


def _stats(tractd, tube, name, job, extra_args=()):
    _, trk, stats = run_job(tractd, job, tube, name=name, extra_args=extra_args)
    return json.loads(stats.read_text()), load_trk(trk).streamlines


def test_uniform_tube_ends_outside(tractd, tube):
    stats, lines = _stats(tractd, tube, "uniform", _job(tube))
    assert len(lines) == N_SEEDS
    assert stats["stop_reasons"] == _counts(outside=ENDS), stats["stop_reasons"]
    assert stats["seeds_without_direction"] == 0


def test_stop_map_ends(tractd, tube):
    stats, lines = _stats(tractd, tube, "cut", _job(tube, stop_map="fa_20_80.nii"))
    assert len(lines) == N_SEEDS
    assert all(19 < line[:, 0].min() and line[:, 0].max() < 81 for line in lines)
    assert stats["stop_reasons"] == _counts(stop_map=ENDS), stats["stop_reasons"]


def test_max_steps_ends(tractd, tube):
    stats, lines = _stats(tractd, tube, "steps", _job(tube, max_steps=10))
    assert [len(line) for line in lines] == [21] * N_SEEDS
    assert stats["stop_reasons"] == _counts(max_steps=ENDS), stats["stop_reasons"]


def test_no_direction_ends_and_seed_without_direction(tractd, tube):
    """The halves along -x find an empty PMF once the ODF is 0 (x < 10); the
    seed at x = 3 has no peak, hence no streamline."""
    job = _job(tube, odf="odf_from10.nii", seeds=[SEED] * N_SEEDS + [[3.0, 3.5, 3.5]])
    stats, lines = _stats(tractd, tube, "no_direction", job)
    assert len(lines) == N_SEEDS
    assert stats["stop_reasons"] == _counts(outside=N_SEEDS, no_direction=N_SEEDS), (
        stats["stop_reasons"])
    assert stats["seeds_without_direction"] == 1


def test_dropped_streamlines_count(tractd, tube):
    """min_length over the tube's length drops every streamline from the
    output, not from the counts."""
    stats, lines = _stats(tractd, tube, "dropped", _job(tube, min_length=1000))
    assert len(lines) == 0 and stats["streamlines"] == 0
    assert stats["stop_reasons"] == _counts(outside=ENDS), stats["stop_reasons"]


def test_chunking_does_not_change_counts(tractd, tube):
    stats, _ = _stats(tractd, tube, "chunks",
                      _job(tube, odf="odf_from10.nii", seeds=[SEED] * N_SEEDS + [[3.0, 3.5, 3.5]]),
                      extra_args=["--max-chunk-seeds", "3", "--readback-bytes", "4K"])
    assert stats["chunks"] >= 6
    assert stats["stop_reasons"] == _counts(outside=N_SEEDS, no_direction=N_SEEDS)
    assert stats["seeds_without_direction"] == 1


def test_log_line(tractd, tube):
    """`tractd run` logs the reasons at info level, in words, with shares."""
    job = write_job(tube / "log.json", _job(tube))
    proc = run_cli(tractd, ["run", job, "-o", tube / "log.trk"], check=True)
    assert ("stop reasons of 32 streamline ends: stop map at or below fa_threshold 0 (0.0%), "
            "left the image 32 (100.0%), no direction within max_angle 0 (0.0%), "
            "max_steps reached 0 (0.0%); 0 seed(s) without an initial direction"
            in proc.stderr), proc.stderr
