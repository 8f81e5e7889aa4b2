"""TCK output (output.format "tck"): MRtrix3's own tools read it, and it holds
the same streamlines as the TRK of the same job, in RAS+ mm."""
import json
import re
import subprocess

import nibabel as nib
import numpy as np
import pytest

from conftest import run_cli, write_job

N_SEEDS = 300
# TRK stores voxel-mm and TCK RAS mm, both float32: converting either way
# costs at most a few float32 ulps at these coordinates (< 50 mm).
TOL_MM = 1e-4


def _job(phantom, fmt):
    seeds = dict(phantom.job["seeds"], roi=str(phantom.dir / phantom.job["seeds"]["roi"]),
                 count=N_SEEDS, rng_seed=5)
    return phantom.job_with(seeds=seeds, output={"format": fmt})


def _track(tractd, phantom, tmp_path, fmt):
    out = tmp_path / f"out.{fmt}"
    job = write_job(tmp_path / f"{fmt}.json", _job(phantom, fmt))
    run_cli(tractd, ["run", job, "-o", out, "-q"], check=True)
    return out


def test_tck_matches_trk(tractd, phantom, tmp_path):
    """Same job, two formats: the same streamlines, point for point, in RAS mm."""
    trk = nib.streamlines.load(_track(tractd, phantom, tmp_path, "trk")).streamlines
    tck = nib.streamlines.load(_track(tractd, phantom, tmp_path, "tck")).streamlines
    assert len(trk) == len(tck) > 0
    for i, (a, b) in enumerate(zip(trk, tck)):
        assert a.shape == b.shape, f"streamline {i}: {a.shape} vs {b.shape}"
        assert np.allclose(a, b, atol=TOL_MM), f"streamline {i} differs by {np.abs(a - b).max()}"


def test_mrtrix_reads_tck(tractd, phantom, tmp_path):
    """tckinfo reports the header count and the records in the file alike, and
    tckconvert rewrites it without complaint."""
    tck = _track(tractd, phantom, tmp_path, "tck")
    n = len(nib.streamlines.load(tck).streamlines)
    info = subprocess.run(["tckinfo", "-count", str(tck)], capture_output=True, text=True,
                          check=True)
    assert f"count:                {n:010d}" in info.stdout, info.stdout
    assert f"actual count in file: {n}" in info.stdout + info.stderr, info.stdout + info.stderr
    # The job's parameters, under tckgen's names where they mean the same.
    job = _job(phantom, "tck")
    voxel_mm = float(np.cbrt(abs(np.linalg.det(nib.load(str(phantom.path("odf.nii.gz"))).affine))))
    props = dict(re.findall(r"^\s+(\w+):\s+(.*?)\s*$", info.stdout, re.M))
    assert float(props["step_size"]) == pytest.approx(
        job.get("tracking", {}).get("step_size", 0.5) * voxel_mm, rel=1e-5), props
    assert float(props["max_angle"]) == job.get("tracking", {}).get("max_angle", 60), props
    assert int(props["max_num_seeds"]) == N_SEEDS and props["method"] == "tractd prob", props
    copy = tmp_path / "copy.tck"
    subprocess.run(["tckconvert", str(tck), str(copy)], capture_output=True, check=True)
    assert len(nib.streamlines.load(copy).streamlines) == n


def test_select_without_count(tractd, phantom, tmp_path):
    """seeds.select without seeds.count: tckgen's default of 1000 seeds per
    streamline selected (max_num_seeds), of which only the first few are
    tracked; the header counts the N streamlines and names N
    (max_num_tracks), as tckgen's does."""
    select = 20
    job = phantom.job_with(seeds={"roi": str(phantom.dir / phantom.job["seeds"]["roi"]),
                                  "select": select}, output={"format": "tck"})
    out, stats = tmp_path / "selected.tck", tmp_path / "stats.json"
    run_cli(tractd, ["run", write_job(tmp_path / "job.json", job), "-o", out, "-q",
                     "--stats-json", stats], check=True)
    assert len(nib.streamlines.load(out).streamlines) == select
    header = out.read_bytes().split(b"\nEND\n", 1)[0].decode()
    assert f"\ncount: {select:010d}\n" in header, header
    assert f"\nmax_num_tracks: {select}\n" in header, header
    assert f"\nmax_num_seeds: {1000 * select}\n" in header, header
    assert json.loads(stats.read_text())["seeds"] < 1000, "tracked far past the selection"
