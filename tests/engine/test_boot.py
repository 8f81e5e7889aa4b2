"""The bootstrap direction getter end to end on lavapipe: output is a function
of the job alone (same bytes twice, whatever the chunking and however the DWI
is split over storage buffers), the model and rng_seed matter, and bad boot
jobs fail up front naming their field. Agreement with DIPY is
tests/parity/test_boot_dipy.py's.

All runs track the session phantom's raw DWI (48x48x24, 6 b0s + 64
directions, 15.5 MB as float32) from RUN_SEEDS random seeds.
"""
import json

import pytest

from conftest import load_trk, run_cli, run_job, write_job

EXIT_INVALID = 3
RUN_SEEDS = 300
# The DWI is 48*48*24 voxels of 70 volumes (the b0s and the shell), 15 MiB:
# allocations of at most 4 MiB hold 14979 voxels each, so it is uploaded as 4
# pages, and the seeds run in many chunks.
SPLIT_ALLOC = "4M"
SPLIT_PAGES = 4
SMALL_CHUNK_SEEDS = 37


def boot_job(phantom, model="opdt", rng_seed=0, **tracking):
    return phantom.dwi_job_with(
        direction_getter="boot", model=model,
        seeds={"roi": str(phantom.path("seed_roi.nii.gz")), "count": RUN_SEEDS,
               "rng_seed": rng_seed},
        tracking={"sphere": "symmetric362", "pmf_threshold": 0.1, **tracking})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("boot")


@pytest.fixture(scope="module")
def reference(tractd, phantom, workdir):
    """The default OPDT run's TRK bytes."""
    _, trk, stats = run_job(tractd, boot_job(phantom), workdir, name="reference")
    streamlines = load_trk(trk).streamlines
    assert len(streamlines) > RUN_SEEDS // 2, f"only {len(streamlines)} streamlines"
    figures = json.loads(stats.read_text())
    assert figures["seeds"] == RUN_SEEDS
    # A code the kernel never writes on purpose: on lavapipe, a step loop
    # that the device's loop limit ended without a stop (track.glsl).
    assert figures["stop_reasons"]["unknown"] == 0, figures["stop_reasons"]
    return trk.read_bytes()


def test_same_job_twice(tractd, phantom, workdir, reference):
    _, trk, _ = run_job(tractd, boot_job(phantom), workdir, name="again")
    assert trk.read_bytes() == reference


def test_split_dwi_and_small_chunks_change_nothing(tractd, phantom, workdir, reference):
    """The DWI in several pages (allocations) and many seed chunks give the
    same bytes as one page and one chunk."""
    proc, trk, stats = run_job(tractd, boot_job(phantom), workdir, name="split",
                               extra_args=("--max-alloc-bytes", SPLIT_ALLOC,
                                           "--max-chunk-seeds", str(SMALL_CHUNK_SEEDS), "-v"))
    assert f"DWI on the GPU: {SPLIT_PAGES} pages" in proc.stderr, proc.stderr[-2000:]
    assert json.loads(stats.read_text())["chunks"] >= RUN_SEEDS // SMALL_CHUNK_SEEDS
    assert trk.read_bytes() == reference


def test_rng_seed_and_model_matter(tractd, phantom, workdir, reference):
    _, other_seed, _ = run_job(tractd, boot_job(phantom, rng_seed=1), workdir, name="seed1")
    _, csa, _ = run_job(tractd, boot_job(phantom, model="csa"), workdir, name="csa")
    assert other_seed.read_bytes() != reference
    assert csa.read_bytes() != reference
    assert len(load_trk(csa).streamlines) > RUN_SEEDS // 2


@pytest.mark.parametrize("change,field,reason", [
    # 64 directions cannot determine the 91 coefficients of order 12
    ({"model": {"name": "opdt", "sh_order": 12}}, "model.sh_order",
     "needs more diffusion-weighted directions"),
    ({"model": "csd"}, "model", "must be \"opdt\" or \"csa\""),
    ({"tracking": {"max_attempts": 0}}, "tracking.max_attempts", "must be in [1, 100]"),
])
def test_bad_boot_jobs(tractd, phantom, workdir, change, field, reason):
    job = boot_job(phantom)
    for key, value in change.items():
        if key == "tracking":
            job["tracking"].update(value)
        else:
            job[key] = value
    path = write_job(workdir / "bad.json", job)
    proc = run_cli(tractd, ["run", path, "-o", workdir / "bad.trk"])
    assert proc.returncode == EXIT_INVALID, proc.stderr
    assert f"tractd: error: {field}: " in proc.stderr, proc.stderr
    assert reason in proc.stderr, proc.stderr


def test_boot_on_odf_input_is_refused(tractd, phantom, workdir):
    job = phantom.job_with(direction_getter="boot")
    path = write_job(workdir / "odf_boot.json", job)
    proc = run_cli(tractd, ["run", path, "-o", workdir / "x.trk"])
    assert proc.returncode == EXIT_INVALID
    assert "tractd: error: direction_getter: \"boot\" needs inputs.dwi" in proc.stderr


def test_fit_refuses_boot(tractd, phantom, workdir):
    path = write_job(workdir / "fit_boot.json", boot_job(phantom))
    proc = run_cli(tractd, ["fit", path, "-o", workdir / "fitdir"])
    assert proc.returncode == EXIT_INVALID
    assert "tractd: error: direction_getter: " in proc.stderr
