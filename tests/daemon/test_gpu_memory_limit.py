"""gpu_memory_limit (issue 24): the daemon runs as if its device had that much
memory. The defaults of gpu_memory_budget (half) and volume_cache_bytes (a
quarter) come from it, so the phantom's ODF (76.4 MiB as float32, 38.2 MiB as
float16) goes up as float16 under a 160 MiB limit and its job stays within
the budget; a limit whose half holds no storage fails the job naming
gpu_memory_limit. /v1/device and `tractctl device` show the limit and the
budget taken from it. See tests/engine/test_gpu_memory.py for the peak
itself."""
import subprocess

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
    """A budget and a cache whose sum passes the limit: the second job's
    float32 ODF and work do not fit beside the first job's warm float16 one,
    so the first's entry is evicted and the second runs as it would alone (it
    failed naming gpu_memory_limit before). A third job, of auto storage,
    then gets float32 as alone, not float16 for want of room beside warm
    volumes."""
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
    assert run("float32") > 76 * MiB
    assert run("float16") < 40 * MiB
    assert run("auto") > 76 * MiB
