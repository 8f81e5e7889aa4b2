"""The GPU memory limit (issue 24): `tractd run --gpu-memory SIZE` runs as if
the device had SIZE bytes. Everything tractd allocates on it (inputs, work
and read-back buffers, staging) stays within the limit, so the statistics'
gpu_peak_bytes never exceeds it; the job's default budget is half the limit,
which picks the storage (float16 or SH where float32 does not fit); a limit
too small for any storage fails up front naming gpu_memory_limit.

A 24x24x16 phantom on symmetric362: the ODF takes 12.7 MiB as float32, 6.4
MiB as float16 and 1.7 MiB as SH coefficients with their sampling matrix;
with ~8.1 MiB for the stop map, sphere and the least room to track. On
lavapipe the staging buffers that a limit counts as still to come (1/64 of
it each) are never made: every buffer is mapped.
"""
import json

import pytest

from conftest import run_cli, run_job

MiB = 1 << 20
N_SEEDS = 300
DWI_SEEDS = 100
BUDGET_SEEDS = 3000
LIMIT_FLOAT16 = 40 * MiB      # budget 20 MiB: float32 needs 20.8, float16 14.5
LIMIT_SH = 24 * MiB           # budget 12 MiB: only SH (9.8 MiB) fits
# 12M: a budget of 6 MiB, where nothing fits
EXIT_RUNTIME = 1
EXIT_USAGE = 2


@pytest.fixture(scope="module")
def small(tractd, tmp_path_factory):
    """A small phantom with its DWI: (directory, ODF job, DWI job)."""
    d = tmp_path_factory.mktemp("gpu_memory")
    run_cli(tractd, ["-q", "phantom", d / "ph", "--dim", "24,24,16", "--seeds", str(N_SEEDS)],
            check=True)

    def job(name, **tracking):
        doc = json.loads((d / "ph" / name).read_text())
        for key, value in doc["inputs"].items():
            doc["inputs"][key] = str(d / "ph" / value)
        doc["seeds"]["roi"] = str(d / "ph" / doc["seeds"]["roi"])
        doc["tracking"].update(tracking)
        doc["output"].pop("path", None)
        return doc

    return d, job


def _run(tractd, job, workdir, name, *args, check=True):
    proc, trk, stats = run_job(tractd, job, workdir, name=name, extra_args=args, check=check)
    return proc, trk, (json.loads(stats.read_text()) if proc.returncode == 0 else None)


def test_limit_picks_float16_and_holds(tractd, small):
    d, job = small
    _, trk, stats = _run(tractd, job("job.json"), d, "f16_limit", "--gpu-memory", "40M")
    assert stats["odf_storage"] == "float16", stats
    assert 0 < stats["gpu_peak_bytes"] <= LIMIT_FLOAT16, stats
    _, explicit, _ = _run(tractd, job("job.json", odf_storage="float16"), d, "f16")
    assert trk.read_bytes() == explicit.read_bytes()


def test_budget_up_to_the_limit_keeps_float32(tractd, small):
    """A budget as large as the limit: float32 fits, and the work and
    read-back buffers take what the limit leaves beside it, not what the
    budget would allow, so the run stays within the limit; same bytes as
    the run without a limit."""
    d, job = small
    doc = job("job.json")
    # Work buffers are sized by the lines a chunk has: enough seeds that
    # the unlimited run's exceed what the limit leaves.
    doc["seeds"]["count"] = BUDGET_SEEDS
    _, reference, free_stats = _run(tractd, doc, d, "f32")
    assert free_stats["gpu_peak_bytes"] > LIMIT_FLOAT16, "the unlimited run should take more"
    _, trk, stats = _run(tractd, doc, d, "f32_limit", "--gpu-memory", "40M",
                         "--gpu-memory-budget", "40M")
    assert stats["odf_storage"] == "float32", stats
    assert stats["gpu_peak_bytes"] <= LIMIT_FLOAT16, stats
    assert trk.read_bytes() == reference.read_bytes()


def test_limit_picks_sh(tractd, small):
    d, job = small
    seeds = {"count": DWI_SEEDS}
    dwi = job("job_dwi.json")
    dwi["seeds"].update(seeds)
    _, trk, stats = _run(tractd, dwi, d, "sh_limit", "--gpu-memory", "24M")
    assert stats["odf_storage"] == "sh", stats
    assert stats["gpu_peak_bytes"] <= LIMIT_SH, stats
    explicit = job("job_dwi.json", odf_storage="sh")
    explicit["seeds"].update(seeds)
    _, sh, _ = _run(tractd, explicit, d, "sh")
    assert trk.read_bytes() == sh.read_bytes()


def test_two_devices_each_within_the_limit(tractd, small):
    """Each device's context has the limit: two logical devices on the one
    lavapipe GPU give the one-device bytes, each within it."""
    d, job = small
    _, one, _ = _run(tractd, job("job.json"), d, "one_device", "--gpu-memory", "40M")
    _, two, stats = _run(tractd, job("job.json"), d, "two_devices", "--gpu-memory", "40M",
                         "--device", "0,0", "--max-chunk-seeds", "50")
    assert stats["devices"] == 2 and stats["gpu_peak_bytes"] <= LIMIT_FLOAT16, stats
    assert two.read_bytes() == one.read_bytes()


def test_each_device_frees_its_inputs_once_it_tracks_no_more(tractd, small):
    """tractd run frees a device's inputs and spare buffers as soon as that
    device tracks no more, while the writers finish the file (the driver's
    0.15-0.2 s for an HCP-sized ODF then overlaps the last writes and TRX's
    closing entries): with two devices, the one done first frees its own
    while the other still tracks, and the output is the one-device output."""
    d, job = small
    doc = job("job.json")
    _, one, _ = _run(tractd, doc, d, "free_one")
    proc, two, stats = _run(tractd, doc, d, "free_two", "-v", "--device", "0,0",
                            "--max-chunk-seeds", "50")
    assert stats["devices"] == 2, stats
    for device in (0, 1):
        assert (f"device {device}: its inputs and spare buffers freed in "
                in proc.stderr), proc.stderr
    assert two.read_bytes() == one.read_bytes()


def test_limit_too_small_names_it(tractd, small):
    d, job = small
    proc, trk, _ = _run(tractd, job("job.json"), d, "nothing", "--gpu-memory", "12M",
                        check=False)
    assert proc.returncode == EXIT_RUNTIME, proc.stderr
    assert "tractd: error: gpu_memory_limit: " in proc.stderr, proc.stderr
    assert "6.4 MiB as float16" in proc.stderr and "--gpu-memory" in proc.stderr, proc.stderr
    assert not trk.exists()


@pytest.mark.parametrize("value", ["0", "x", "-1M", "16T"])
def test_bad_limit_is_usage_error(tractd, tmp_path, value):
    proc = run_cli(tractd, ["run", str(tmp_path / "none.json"), "--gpu-memory", value])
    assert proc.returncode == EXIT_USAGE and "--gpu-memory" in proc.stderr, proc.stderr
