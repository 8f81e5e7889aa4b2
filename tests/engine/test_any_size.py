"""Any size (volumes past the binding and allocation limits, compact storage).

The phantom's ODF is 48*48*24 voxels x 362 vertices x 4 B = 76 MiB. Forcing a
storage-buffer range of 8 MiB and allocations of 4 MiB puts it ~10 times over
one binding and splits it into 20 pages (paged_volume.h): the output must be
byte-identical to the unsplit run. tracking.odf_storage "float16" halves the
ODF's memory and "auto" falls back to it when float32 does not fit the job's
GPU memory budget; "sh" keeps a dwi job's CSD coefficients (45 a voxel at
order 8 instead of 362 values) and samples them at every step. A job that fits
in no storage fails before tracking, saying what each storage needs. The
tracking statistics of float16 and SH storage against DIPY are in
tests/parity (test_prob_dipy.py, test_sh_storage_dipy.py).
"""
import json

import pytest

from conftest import load_trk, run_cli, run_job, write_job

N_SEEDS = 500
SMALL_BINDING = "8M"
SMALL_ALLOC = "4M"
ODF_PAGES = 20            # ceil(55296 voxels / (4 MiB // (362 * 4 B)) = 2896)
# Budgets around the phantom's needs: float32 76.4 MiB, float16 38.2 MiB, plus
# ~8.3 MiB for the stop map, sphere and the engine's minimum work space.
BUDGET_FLOAT16_ONLY = "60M"
BUDGET_NOTHING = "30M"
EXIT_RUNTIME = 1
EXIT_INVALID = 3


def _odf_job(phantom, **tracking):
    seeds = dict(phantom.job["seeds"])
    seeds["roi"] = str(phantom.dir / seeds["roi"])
    seeds["count"] = N_SEEDS
    return phantom.job_with(seeds=seeds, tracking={"sphere": "symmetric362", **tracking})


def _dwi_job(phantom, **tracking):
    return phantom.dwi_job_with(
        seeds={"roi": str(phantom.path("seed_roi.nii.gz")), "count": N_SEEDS},
        tracking={"sphere": "symmetric362", **tracking})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("any_size")


@pytest.fixture(scope="module")
def reference(tractd, phantom, workdir):
    _, trk, stats = run_job(tractd, _odf_job(phantom), workdir, name="reference")
    stats = json.loads(stats.read_text())
    assert stats["odf_storage"] == "float32"
    assert len(load_trk(trk)) > N_SEEDS // 2
    return trk.read_bytes(), stats


def test_odf_past_binding_and_allocation_limits(tractd, phantom, workdir, reference):
    proc, trk, _ = run_job(tractd, _odf_job(phantom), workdir, name="paged",
                           extra_args=("--max-binding-bytes", SMALL_BINDING,
                                       "--max-alloc-bytes", SMALL_ALLOC, "-v"))
    assert f"ODF on the GPU as float32: {ODF_PAGES} pages" in proc.stderr, proc.stderr[-2000:]
    assert trk.read_bytes() == reference[0]


def test_float16_halves_the_odf(tractd, phantom, workdir, reference):
    _, trk, stats = run_job(tractd, _odf_job(phantom, odf_storage="float16"), workdir,
                            name="float16")
    stats = json.loads(stats.read_text())
    assert stats["odf_storage"] == "float16"
    odf32 = reference[1]["gpu_input_bytes"]
    assert stats["gpu_input_bytes"] < 0.55 * odf32, (stats["gpu_input_bytes"], odf32)
    # Rounding to 11 bits moves some random draws: close, not equal.
    assert trk.read_bytes() != reference[0]
    n16, n32 = stats["streamlines"], reference[1]["streamlines"]
    assert abs(n16 - n32) <= 0.02 * n32, (n16, n32)


def test_auto_falls_back_to_float16(tractd, phantom, workdir):
    _, trk, stats = run_job(tractd, _odf_job(phantom), workdir, name="auto_tight",
                            extra_args=("--gpu-memory-budget", BUDGET_FLOAT16_ONLY))
    assert json.loads(stats.read_text())["odf_storage"] == "float16"
    _, explicit, _ = run_job(tractd, _odf_job(phantom, odf_storage="float16"), workdir,
                             name="float16_again")
    assert trk.read_bytes() == explicit.read_bytes()


def test_float32_over_budget_is_refused(tractd, phantom, workdir):
    proc, trk, _ = run_job(tractd, _odf_job(phantom, odf_storage="float32"), workdir,
                           name="float32_tight", check=False,
                           extra_args=("--gpu-memory-budget", BUDGET_FLOAT16_ONLY))
    assert proc.returncode == EXIT_RUNTIME, proc.stderr
    assert "tracking.odf_storage" in proc.stderr, proc.stderr
    assert "76.4 MiB as float32, 38.2 MiB as float16" in proc.stderr, proc.stderr
    assert not trk.exists()


def test_nothing_fits_says_what_would(tractd, phantom, workdir):
    proc, trk, _ = run_job(tractd, _odf_job(phantom), workdir, name="nothing", check=False,
                           extra_args=("--gpu-memory-budget", BUDGET_NOTHING))
    assert proc.returncode == EXIT_RUNTIME, proc.stderr
    assert "inputs.odf" in proc.stderr and "38.2 MiB as float16" in proc.stderr, proc.stderr
    assert "inputs.sh" in proc.stderr, "the message should point to SH input"
    assert not trk.exists()


def test_sh_storage_needs_coefficients(tractd, phantom, workdir):
    job = write_job(workdir / "sh_on_odf.json", _odf_job(phantom, odf_storage="sh"))
    proc = run_cli(tractd, ["run", str(job), "-o", str(workdir / "sh_on_odf.trk")])
    assert proc.returncode == EXIT_INVALID, proc.stderr
    assert "tracking.odf_storage" in proc.stderr and "inputs.sh" in proc.stderr, proc.stderr


def test_sh_storage_is_small_and_page_independent(tractd, phantom, workdir):
    _, f32, f32_stats = run_job(tractd, _dwi_job(phantom, odf_storage="float32"), workdir,
                                name="dwi_float32")
    _, sh, sh_stats = run_job(tractd, _dwi_job(phantom, odf_storage="sh"), workdir,
                              name="dwi_sh")
    proc, paged, _ = run_job(tractd, _dwi_job(phantom, odf_storage="sh"), workdir,
                             name="dwi_sh_paged", extra_args=("--max-alloc-bytes", "1M", "-v"))
    f32_stats, sh_stats = (json.loads(p.read_text()) for p in (f32_stats, sh_stats))
    assert sh_stats["odf_storage"] == "sh"
    # 45 coefficients a voxel instead of 362 values, plus the sampling matrix.
    assert sh_stats["gpu_input_bytes"] < 0.2 * f32_stats["gpu_input_bytes"]
    assert "ODF on the GPU as sh: 10 pages" in proc.stderr, proc.stderr[-2000:]
    assert paged.read_bytes() == sh.read_bytes()
    n_sh, n32 = sh_stats["streamlines"], f32_stats["streamlines"]
    assert abs(n_sh - n32) <= 0.03 * n32, (n_sh, n32)
    pts_sh, pts32 = sh_stats["points"], f32_stats["points"]
    assert abs(pts_sh - pts32) <= 0.05 * pts32, (pts_sh, pts32)


def test_two_devices_give_the_same_bytes(tractd, phantom, workdir, reference):
    """Two logical devices on the one lavapipe GPU (the same as two GPUs to
    the engine: a context and an upload each) share the chunks; the output is
    the one-device run's, byte for byte."""
    _, trk, stats = run_job(tractd, _odf_job(phantom), workdir, name="two_devices",
                            extra_args=("--device", "0,0", "--max-chunk-seeds", "50"))
    stats = json.loads(stats.read_text())
    assert stats["devices"] == 2 and stats["chunks"] >= N_SEEDS // 50
    assert trk.read_bytes() == reference[0]


def _first_device_uuid(tractd):
    line = run_cli(tractd, ["devices"], check=True).stdout.splitlines()[0]
    uuid = line.split("\t")[3]
    assert len(uuid) == 36 and uuid.count("-") == 4, line
    return uuid


def test_device_by_uuid(tractd, phantom, workdir, reference):
    uuid = _first_device_uuid(tractd)
    _, trk, _ = run_job(tractd, _odf_job(phantom), workdir, name="by_uuid",
                        extra_args=("--device", uuid.upper()))
    assert trk.read_bytes() == reference[0]
    proc, trk, _ = run_job(tractd, _odf_job(phantom), workdir, name="no_such_uuid",
                           check=False, extra_args=("--device", "0" * 8 + "-0000-0000-0000-" + "0" * 12))
    assert proc.returncode == EXIT_RUNTIME and "no device has UUID" in proc.stderr, proc.stderr
    assert not trk.exists()


@pytest.mark.parametrize("value", ["0,", "x", "0,,1", "1-2", ",".join(["0"] * 17)])
def test_bad_device_lists_are_usage_errors(tractd, workdir, value):
    proc = run_cli(tractd, ["run", str(workdir / "none.json"), "--device", value])
    assert proc.returncode == 2 and "--device" in proc.stderr, proc.stderr
