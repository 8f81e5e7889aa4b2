# SPDX-License-Identifier: MIT
"""output.compress: the written streamlines are DIPY's compress_streamlines of
the uncompressed ones (in RAS mm), point for point, in every format; the
length filter still judges the uncompressed streamlines (same count), and the
statistics count the points written."""
import json

import nibabel as nib
import numpy as np
import pytest
from dipy.tracking.streamlinespeed import compress_streamlines
from trx.trx_file_memmap import load as trx_load

from conftest import run_cli, write_job

N_SEEDS = 300
# Every kept point is one of the uncompressed points, written by the same
# float32 conversion; only reading TRK voxel-mm back to RAS costs a few ulps.
TOL_MM = 1e-4


def _job(phantom, output):
    seeds = dict(phantom.job["seeds"], roi=str(phantom.dir / phantom.job["seeds"]["roi"]),
                 count=N_SEEDS, rng_seed=11)
    return phantom.job_with(seeds=seeds, tracking={"min_length": 5}, output=output)


def _track(tractd, phantom, tmp_path, name, output):
    fmt = output.get("format", "trk")
    out = tmp_path / f"{name}.{fmt}"
    stats = tmp_path / f"{name}.stats.json"
    job = write_job(tmp_path / f"{name}.json", _job(phantom, output))
    run_cli(tractd, ["run", job, "-o", out, "--stats-json", stats, "-q"], check=True)
    return out, json.loads(stats.read_text())


def _lines(path):
    if str(path).endswith(".trx"):
        trx = trx_load(str(path))
        try:
            return [np.array(s, dtype=np.float32) for s in trx.streamlines]
        finally:
            trx.close()
    return [np.asarray(s, dtype=np.float32) for s in nib.streamlines.load(str(path)).streamlines]


def _compare(full, compressed, tol, max_seg):
    want = compress_streamlines(full, tol_error=tol, max_segment_length=max_seg)
    assert len(compressed) == len(want) > 0
    for i, (a, b) in enumerate(zip(compressed, want)):
        assert a.shape == b.shape, f"streamline {i}: {len(a)} points, DIPY keeps {len(b)}"
        assert np.allclose(a, b, atol=TOL_MM), f"streamline {i} differs by {np.abs(a - b).max()}"


@pytest.mark.parametrize("fmt", ["trk", "tck", "trx"])
@pytest.mark.parametrize("compress,tol,max_seg", [
    (True, 0.01, 10.0),
    ({"tolerance_mm": 0.1, "max_segment_mm": 4}, 0.1, 4.0),
])
def test_compress_matches_dipy(tractd, phantom, tmp_path, fmt, compress, tol, max_seg):
    full_path, full_stats = _track(tractd, phantom, tmp_path, "full", {"format": fmt})
    comp_path, comp_stats = _track(tractd, phantom, tmp_path, "comp",
                                   {"format": fmt, "compress": compress})
    full, comp = _lines(full_path), _lines(comp_path)
    _compare(full, comp, tol, max_seg)
    n_full, n_comp = sum(len(s) for s in full), sum(len(s) for s in comp)
    assert n_comp < n_full, (n_comp, n_full)
    assert comp_stats["streamlines"] == full_stats["streamlines"] == len(comp)
    assert comp_stats["points"] == n_comp
    assert full_stats["points"] == n_full
    # Every segment within the limit (a segment that was already longer is kept).
    longest_step = max(np.linalg.norm(np.diff(s, axis=0), axis=1).max() for s in full)
    for s in comp:
        assert np.linalg.norm(np.diff(s, axis=0), axis=1).max() <= max(max_seg, longest_step) + 1e-4


def test_compress_null_is_off(tractd, phantom, tmp_path):
    full_path, _ = _track(tractd, phantom, tmp_path, "full", {"format": "tck"})
    null_path, _ = _track(tractd, phantom, tmp_path, "null", {"format": "tck", "compress": None})
    assert full_path.read_bytes() == null_path.read_bytes()


@pytest.mark.parametrize("compress,field", [
    ({"tolerance_mm": 0}, "output.compress.tolerance_mm"),
    ({"tolerance_mm": 11}, "output.compress.tolerance_mm"),
    ({"max_segment_mm": -2}, "output.compress.max_segment_mm"),
    ({"max_segment_mm": 1e4}, "output.compress.max_segment_mm"),
    ({"tol_error": 0.1}, "output.compress.tol_error"),
    (0.01, "output.compress"),
    ("yes", "output.compress"),
])
def test_compress_refused(tractd, phantom, tmp_path, compress, field):
    job = write_job(tmp_path / "bad.json", _job(phantom, {"compress": compress}))
    proc = run_cli(tractd, ["run", job, "-o", tmp_path / "bad.trk", "-q"])
    assert proc.returncode == 3, proc.stderr
    assert field in proc.stderr, proc.stderr
