"""A daemon job's timing and memory (issue 24): the `timing` object of
GET /v1/jobs/ID gives each moment of the job's life in this daemon, in order;
`memory` its GPU and host memory; and a job on volumes warm in the cache reads
nothing of them again. No timed assertions: the order and presence of the
moments, and bytes read, not how long they took."""
import os

from .support import run_to_completion, server_job, submit, upload_phantom, wait_job

EVENTS = ["submitted", "validated", "queued", "started", "loaded", "output_opened",
          "tracking", "first_output", "tracked", "synced", "done"]


def _bytes_read(pid):
    """The daemon's read()/pread() bytes so far (/proc/PID/io rchar)."""
    for line in open(f"/proc/{pid}/io"):
        key, value = line.split(":")
        if key == "rchar":
            return int(value)
    raise AssertionError(f"no rchar in /proc/{pid}/io")


def test_timing_present_and_monotone(daemon, volumes, phantom):
    """A done job's timing has every event, seconds since `submitted` (0), in
    the order of the job's life; `memory` counts its GPU bytes and the host's
    peak; a queued job's later events are null, and `seconds`/`memory` too."""
    doc, _ = run_to_completion(daemon.api, server_job(phantom, volumes, count=200, rng_seed=7))
    timing = doc["timing"]
    assert list(timing) == EVENTS, timing
    assert timing["submitted"] == 0.0, timing
    values = [timing[e] for e in EVENTS]
    assert all(isinstance(v, float) for v in values), timing
    assert values == sorted(values), timing
    memory = doc["memory"]
    assert set(memory) == {"gpu_input_bytes", "gpu_work_bytes", "host_peak_bytes"}, memory
    assert all(memory[k] > 0 for k in memory), memory


def test_timing_while_queued(daemon, volumes, phantom):
    """Right after the submit, the events before the worker's are there, and
    those not yet reached are null (never a made-up time)."""
    job_id = submit(daemon.api, server_job(phantom, volumes, count=100, rng_seed=8))
    doc = daemon.api.get_json(f"/v1/jobs/{job_id}")
    timing = doc["timing"]
    assert list(timing) == EVENTS, timing
    assert all(timing[e] is not None for e in EVENTS[:3]), timing
    reached = [e for e in EVENTS if timing[e] is not None]
    assert reached == EVENTS[:len(reached)], timing
    if doc["status"] != "done":
        assert timing["done"] is None and doc["memory"] is None, doc
    assert wait_job(daemon.api, job_id)["status"] == "done"


def test_cached_input_not_reread(daemon_factory, phantom):
    """The first job reads the ODF from the store (the daemon's read bytes
    grow by at least its size); a second job on the same volumes finds them
    warm and reads far less than that."""
    d = daemon_factory()
    ids = upload_phantom(d.api, phantom)
    odf_bytes = os.path.getsize(phantom.dir / f"odf{phantom.suffix}")
    before = _bytes_read(d.pid)
    run_to_completion(d.api, server_job(phantom, ids, count=100, rng_seed=1))
    first = _bytes_read(d.pid) - before
    assert first >= odf_bytes, (first, odf_bytes)
    before = _bytes_read(d.pid)
    doc, _ = run_to_completion(d.api, server_job(phantom, ids, count=100, rng_seed=2))
    second = _bytes_read(d.pid) - before
    assert second < odf_bytes // 4, (second, odf_bytes)
    assert doc["seconds"]["load"] == 0.0 and doc["seconds"]["upload"] == 0.0, doc["seconds"]


def test_work_buffers_reused(daemon_factory, phantom):
    """A warm daemon's second job of the same shape allocates no GPU buffer:
    the engine's work buffers of the first come back (gpu_buffer_recycle),
    and the tractogram is the same bytes as the first's (same seeds)."""
    d = daemon_factory()
    ids = upload_phantom(d.api, phantom)
    job = server_job(phantom, ids, count=100, rng_seed=5)
    first, first_trk = run_to_completion(d.api, job)
    second, second_trk = run_to_completion(d.api, job)
    assert second_trk == first_trk
    work = second["memory"]["gpu_work_bytes"]
    assert work == first["memory"]["gpu_work_bytes"] > 0, (first["memory"], second["memory"])
    lines = [l for l in d.log(tail=10000).splitlines() if "work buffers allocated" in l]
    assert len(lines) == 2, lines
    assert "0 of them reused" in lines[0], lines
    assert f"{work} bytes, {work} of them reused" in lines[1], lines
