"""tracking.pft on a loop-limited device (lavapipe ends an invocation's loops
past 65535 iterations; shaders/track.glsl suspends and resumes the lines it
would cut): a retry that needs more iterations than one dispatch runs was
run again whole on every pass, and the job never ended. Now the line stalls
(resumed and suspended again at the same step and retry) and the job fails
naming tracking.pft (exit 3) within seconds; pft's defaults still track.
On a tiny phantom with repulsion724 (a step's loops grow with the sphere).
"""
import json

import pytest

from conftest import run_cli, write_job

DIM = "24,24,16"
N_SEEDS = 20
# The job must end well before this (a hang ran until killed).
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def small(tractd, tmp_path_factory):
    d = tmp_path_factory.mktemp("pft_loop_limit")
    run_cli(tractd, ["phantom", "--dim", DIM, "--sphere", "repulsion724", "--seeds",
                     str(N_SEEDS), d], check=True)
    return d


def _run(tractd, small, name, pft):
    job = json.loads((small / "job_act.json").read_text())
    job["tracking"]["pft"] = pft
    path = write_job(small / f"{name}.json", job)
    return run_cli(tractd, ["run", path, "-o", small / f"{name}.trk", "--force", "-q"],
                   timeout=TIMEOUT_S)


def test_retry_too_long_for_one_dispatch_fails(tractd, small):
    proc = _run(tractd, small, "large", {"particles": 64, "back_mm": 10, "front_mm": 10})
    assert proc.returncode == 3, proc.stderr
    assert "tracking.pft" in proc.stderr, proc.stderr
    assert "fewer particles or a shorter back_mm/front_mm" in proc.stderr, proc.stderr


def test_defaults_track(tractd, small):
    proc = _run(tractd, small, "defaults", {})
    assert proc.returncode == 0, proc.stderr
    assert (small / "defaults.trk").stat().st_size > 1000
