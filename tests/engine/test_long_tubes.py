"""Whole streamlines on long bundles, for every direction getter, on the
default sphere (repulsion724) and on a job-given sphere of 2,000 vertices.

A straight tube along x, 100 x 8 x 8 voxels, stop map 1 everywhere: every
streamline from seeds at its middle must run to both ends (about 200 points
at step 0.5). lavapipe ends every loop of a shader invocation after 65,535
iterations in all; before the track kernels suspended and resumed the
streamlines it would cut, prob stopped after about 60 steps on repulsion724
and ptt and boot fared no better. The 2,000-vertex sphere with prob's cone
widened to the whole sphere (max_angle 90: lavapipe's cone lists then hold
every vertex) makes prob's steps long enough to be suspended at least once
on lavapipe: the test checks that it was, so that the resume path, and a
resumed step that no longer knows the vertex it stands on, are exercised
wherever the suite runs there.
Every end of a streamline in the uniform tube must count as having left the
image, none as finding no direction.
"""
import json

import numpy as np
import nibabel as nib
import pytest
from dipy.data import get_sphere

from conftest import load_trk, run_job

TUBE = (100, 8, 8)
SEEDS = [[50.0, 3.5, 3.5]] * 16
# Both halves reach the tube's ends at x = -0.5 and 99.5: 50 voxels each at
# step 0.5 is 100 steps, so about 201 points. ptt stops where its probe (2
# voxels past the next step) leaves the image, 2.5 voxels short of each end:
# 190 points; a few more are lost to the random wander across the tube, which
# can also take ptt's probe out through a side a few voxels before the end.
WHOLE_POINTS = 185
END_MARGIN = 5.0
# A lobe along +-x (amplitude 1/e at 11 degrees) leaves prob one direction
# within max_angle. ptt draws arcs whose probes must find support along their
# whole length: at 5 degrees (arcs of at most 0.17 rad per voxel) it always
# finds one; at 10 (DIPY's default for ptt) about one end in 30 on this lobe
# finds none, on a GPU alike, and at 30 one in three.
LOBE_WIDTH = {"prob": 0.02, "ptt": 0.02}
MAX_ANGLE = {"prob": 30, "ptt": 5, "boot": 30}


def fibonacci_sphere(n):
    """n unit vectors, antipodal pairs, spread evenly (a Fibonacci lattice on
    one hemisphere and its mirror)."""
    half = n // 2
    i = np.arange(half) + 0.5
    z = i / half
    r = np.sqrt(1 - z * z)
    phi = np.pi * (1 + 5 ** 0.5) * i
    v = np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)
    return np.vstack([v, -v])


def sphere_case(name):
    """(job's tracking.sphere, vertices) for a case name."""
    if name == "repulsion724":
        return name, get_sphere(name).vertices
    v = fibonacci_sphere(2000)
    return {"vertices": v.tolist()}, v


def save(img_data, path):
    nib.save(nib.Nifti1Image(np.asarray(img_data, np.float32), np.eye(4)), str(path))


def odf_tube(workdir, vertices, lobe_width):
    amp = np.exp(-(1 - np.abs(vertices[:, 0])) / lobe_width).astype(np.float32)
    save(np.broadcast_to(amp, TUBE + (len(vertices),)), workdir / "odf.nii.gz")
    save(np.ones(TUBE), workdir / "fa.nii.gz")
    return {"odf": str(workdir / "odf.nii.gz"), "stop_map": str(workdir / "fa.nii.gz")}


def dwi_tube(workdir):
    """A noise-free single-tensor signal along x: one b0 and 32 directions at
    b = 1000 (bvecs along the voxel axes, as tractd reads them)."""
    dirs = fibonacci_sphere(64)[:32]
    bvals = np.concatenate([[0.0], np.full(32, 1000.0)])
    bvecs = np.vstack([[0, 0, 0], dirs])
    evals = np.array([1.7e-3, 0.3e-3, 0.3e-3])
    signal = 100 * np.exp(-bvals * (bvecs ** 2 @ evals))
    save(np.broadcast_to(signal, TUBE + (len(bvals),)), workdir / "dwi.nii.gz")
    np.savetxt(workdir / "dwi.bval", bvals[None], fmt="%g")
    np.savetxt(workdir / "dwi.bvec", bvecs.T, fmt="%.8f")
    save(np.ones(TUBE), workdir / "fa.nii.gz")
    return {"dwi": str(workdir / "dwi.nii.gz"), "bvals": str(workdir / "dwi.bval"),
            "bvecs": str(workdir / "dwi.bvec"), "stop_map": str(workdir / "fa.nii.gz")}


def tube_job(getter, sphere, inputs):
    job = {"inputs": inputs, "direction_getter": getter,
           "seeds": {"points": SEEDS, "space": "voxel"},
           "tracking": {"max_angle": MAX_ANGLE[getter], "sphere": sphere}}
    if getter == "boot":
        job["model"] = {"name": "opdt", "sh_order": 4}
    return job


@pytest.mark.parametrize("sphere_name", ["repulsion724", "fibonacci2000"])
@pytest.mark.parametrize("getter", ["prob", "ptt", "boot"])
def test_every_streamline_runs_the_whole_tube(tractd, tmp_path, getter, sphere_name):
    sphere, vertices = sphere_case(sphere_name)
    inputs = (dwi_tube(tmp_path) if getter == "boot" else
              odf_tube(tmp_path, vertices, LOBE_WIDTH[getter]))
    job = tube_job(getter, sphere, inputs)
    resumes = getter == "prob" and sphere_name == "fibonacci2000"
    if resumes:
        job["tracking"]["max_angle"] = 90
    proc, trk, stats = run_job(tractd, job, tmp_path, extra_args=("-v",))
    tract = load_trk(trk)
    points = [len(s) for s in tract.streamlines]
    assert len(points) == len(SEEDS), proc.stderr[-2000:]
    assert min(points) >= WHOLE_POINTS, f"points per streamline {sorted(points)}"
    ends = np.array([[s[0][0], s[-1][0]] for s in tract.streamlines])
    assert np.all(ends.min(axis=1) < END_MARGIN - 0.5), ends
    assert np.all(ends.max(axis=1) > TUBE[0] - 0.5 - END_MARGIN), ends
    # The tube is uniform: every end leaves the image, none lacks a direction.
    stops = json.loads(stats.read_text())["stop_reasons"]
    assert stops["outside"] == 2 * len(SEEDS) and stops["no_direction"] == 0, stops
    if resumes and "llvmpipe" in proc.stderr:
        assert "suspended" in proc.stderr, "the resume path did not run on lavapipe"


def test_sphere_past_the_shared_memory_is_refused(tractd, tmp_path):
    """ptt keeps the sphere in shared memory, 16 bytes a vertex: 4,096
    vertices are over every device's 48 KiB (lavapipe has 32)."""
    v = fibonacci_sphere(4096)
    job = tube_job("ptt", {"vertices": v.tolist()}, odf_tube(tmp_path, v, LOBE_WIDTH["ptt"]))
    proc, _, _ = run_job(tractd, job, tmp_path, check=False)
    # A device's limit, not an invalid job: exit 1, as for a job over the
    # GPU memory budget.
    assert proc.returncode == 1, proc.stderr
    assert "tracking.sphere" in proc.stderr and "shared memory" in proc.stderr, proc.stderr
