"""A running job's progress in the daemon's job document: seeds_done moves
within a seed chunk, not only when a chunk is written (a daemon of its own:
a small max_dispatch_steps splits the chunk into many GPU submits)."""
import time

from .support import job_status, server_job, submit, upload_phantom

# The daemon's first chunk of a job is 256 seeds (engine.c,
# FIRST_TIMED_CHUNK_SEEDS): a job of that many is one chunk.
ONE_CHUNK_SEEDS = 256


def poll_progress(endpoint, job_id, timeout=120):
    """The (status, seeds_done, seeds_total, stage) seen while polling until
    the job ends, and its last document."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        doc = job_status(endpoint, job_id)
        p = doc["progress"]
        seen.append((doc["status"], p["seeds_done"], p["seeds_total"], p["stage"]))
        if doc["status"] not in ("queued", "running"):
            return seen, doc
        assert time.monotonic() < deadline, f"job {job_id} still running: {doc}"
        time.sleep(0.02)


def test_seeds_done_moves_within_a_chunk(daemon_factory, phantom):
    d = daemon_factory(sets=["max_dispatch_steps=20000"])
    ids = upload_phantom(d.api, phantom)
    job_id = submit(d.api, server_job(phantom, ids, count=ONE_CHUNK_SEEDS, rng_seed=5))
    seen, doc = poll_progress(d.api, job_id)
    assert doc["status"] == "done", doc
    done = [s[1] for s in seen]
    assert done == sorted(done), f"seeds_done went back: {seen}"
    within = [s for s in seen if s[0] == "running" and 0 < s[1] < ONE_CHUNK_SEEDS]
    assert within, f"no progress within the chunk: {seen}"
    assert all(s[3] == "track" for s in within), within


def test_first_job_shows_the_compile_stage(daemon_factory, phantom, tmp_path):
    """A daemon on an empty pipeline cache: its first job passes through the
    stage "compile", and the log says so naming the job and the cache; a
    second job of the same configuration compiles nothing."""
    cache = tmp_path / "cold" / "pipelines.bin"
    d = daemon_factory(pipeline_cache=cache)
    ids = upload_phantom(d.api, phantom)
    first = submit(d.api, server_job(phantom, ids, count=50, rng_seed=1))
    seen, doc = poll_progress(d.api, first)
    assert doc["status"] == "done", doc
    assert "compile" in [s[3] for s in seen], seen
    second = submit(d.api, server_job(phantom, ids, count=50, rng_seed=2))
    seen, doc = poll_progress(d.api, second)
    assert doc["status"] == "done", doc
    assert "compile" not in [s[3] for s in seen], seen
    said = [line for line in d.log(400).splitlines() if "compiling the GPU kernels" in line]
    assert len(said) == 1 and f"job={first}" in said[0] and str(cache) in said[0], said
