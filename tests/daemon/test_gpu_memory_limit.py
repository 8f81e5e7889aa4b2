"""gpu_memory_limit (issue 24): the daemon runs as if its device had that much
memory. The defaults of gpu_memory_budget (half) and volume_cache_bytes (a
quarter) come from it, so the phantom's ODF (76.4 MiB as float32, 38.2 MiB as
float16) goes up as float16 under a 160 MiB limit and its job stays within
the budget; a limit whose half holds no storage fails the job naming
gpu_memory_limit. /v1/device and `tractctl device` show the limit and the
budget taken from it. See tests/engine/test_gpu_memory.py for the peak
itself."""
import subprocess

import pytest

from conftest import Phantom, run_cli
from .support import daemon_env, server_job, submit, upload_phantom, wait_job

MiB = 1 << 20
LIMIT = 160 * MiB


def test_defaults_come_from_the_limit(daemon_factory, phantom, tractctl):
    d = daemon_factory(sets=[f"gpu_memory_limit={LIMIT // MiB}M"])
    device = d.api.get_json("/v1/device")
    assert device["cache"]["budget_bytes"] == LIMIT // 4
    assert device["device"]["gpu_memory_limit_bytes"] == LIMIT, device
    assert device["device"]["gpu_memory_budget_bytes"] == LIMIT // 2, device
    shown = subprocess.run([tractctl, *d.api.tractctl_args(), "device"], capture_output=True,
                           text=True, timeout=60, env=daemon_env(), check=True).stdout
    assert "limit     160.0 MiB (gpu_memory_limit); a job's budget 80.0 MiB" in shown, shown
    ids = upload_phantom(d.api, phantom)
    for rng_seed in (1, 2):   # the second on warm volumes and spare buffers
        doc = wait_job(d.api, submit(d.api, server_job(phantom, ids, count=200,
                                                       rng_seed=rng_seed)))
        assert doc["status"] == "done", doc
        memory = doc["memory"]
        assert memory["gpu_input_bytes"] < 40 * MiB, memory   # float16, not float32
        assert memory["gpu_input_bytes"] + memory["gpu_work_bytes"] <= LIMIT // 2, memory


def test_limit_too_small_fails_the_job_naming_it(daemon_factory, phantom):
    d = daemon_factory(sets=["gpu_memory_limit=40M"])
    ids = upload_phantom(d.api, phantom)
    doc = wait_job(d.api, submit(d.api, server_job(phantom, ids, count=10)))
    assert doc["status"] == "failed", doc
    assert doc["error"]["code"] == "too_large_for_device", doc
    assert doc["error"]["field"] == "gpu_memory_limit", doc
    assert "38.2 MiB as float16" in doc["error"]["message"], doc


def test_warm_volumes_give_way_under_the_limit(daemon_factory, phantom):
    """A budget and a cache whose sum passes the limit. Beside the first
    job's warm float16 ODF, a job of auto storage would have room for float16
    only: the warm entry is evicted, and it gets float32, as alone. Beside
    that warm float32 ODF, a job asking for float32 would not fit at all (it
    failed naming gpu_memory_limit before): it is evicted again, and the job
    runs."""
    limit = 120 * MiB
    d = daemon_factory(sets=[f"gpu_memory_limit={limit // MiB}M", "gpu_memory_budget=110M",
                             f"volume_cache_bytes={limit // MiB}M"])
    ids = upload_phantom(d.api, phantom)

    def run(storage):
        doc = wait_job(d.api, submit(d.api, server_job(phantom, ids, count=200,
                                                       tracking={"odf_storage": storage})))
        assert doc["status"] == "done", doc
        cache = d.api.get_json("/v1/device")["cache"]
        # Only this job's volumes stay warm.
        assert cache["entries"] == 1, cache
        assert cache["used_bytes"] == doc["memory"]["gpu_input_bytes"], (cache, doc["memory"])
        return doc["memory"]["gpu_input_bytes"]

    assert run("float16") < 40 * MiB
    assert run("auto") > 76 * MiB
    assert run("float32") > 76 * MiB


@pytest.fixture(scope="module")
def small_phantom(tractd, tmp_path_factory):
    """24x24x16: its ODF is 13 MiB as float32."""
    outdir = tmp_path_factory.mktemp("small_phantom")
    run_cli(tractd, ["phantom", outdir, "--dim", "24,24,16", "-q"], check=True)
    return Phantom.from_dir(outdir)


def test_warm_volumes_give_way_to_a_warm_job(daemon_factory, phantom, small_phantom):
    """A job on warm volumes gets its budget too. The large phantom's float16
    upload finds its budget left beside the small phantom's warm inputs, so
    both stay warm; when the small phantom's job runs again (a hit), the
    limit would leave it less than its budget beside both, so the other
    job's entry is evicted and the hit keeps its own."""
    d = daemon_factory(sets=["gpu_memory_limit=120M", "gpu_memory_budget=90M",
                             "volume_cache_bytes=120M"])
    small, large = upload_phantom(d.api, small_phantom), upload_phantom(d.api, phantom)

    def run(ph, ids, storage):
        doc = wait_job(d.api, submit(d.api, server_job(ph, ids, count=200,
                                                       tracking={"odf_storage": storage})))
        assert doc["status"] == "done", doc
        return doc["memory"]["gpu_input_bytes"], d.api.get_json("/v1/device")["cache"]

    small_bytes, _ = run(small_phantom, small, "float32")
    large_bytes, cache = run(phantom, large, "float16")
    assert cache["entries"] == 2, cache
    assert cache["used_bytes"] == small_bytes + large_bytes, cache
    _, cache = run(small_phantom, small, "float32")
    assert (cache["entries"], cache["used_bytes"], cache["hits"]) == (1, small_bytes, 1), cache
