"""A daemon job's timing and memory (issue 24): the `timing` object of
GET /v1/jobs/ID gives each moment of the job's life in this daemon, in order;
`memory` its GPU and host memory; and a job on volumes warm in the cache reads
nothing of them again. No timed assertions: the order and presence of the
moments, and bytes read, not how long they took."""
import math
import os
import shutil
import signal
import subprocess
import time

import pytest

from .support import run_to_completion, server_job, submit, upload_phantom, wait_job

MEMORY_KEYS = {"gpu_input_bytes", "gpu_work_bytes", "gpu_work_reused_bytes", "host_peak_bytes"}
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
    assert set(memory) == MEMORY_KEYS, memory
    assert all(memory[k] > 0 for k in memory if k != "gpu_work_reused_bytes"), memory


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


def _memory(doc):
    memory = doc["memory"]
    assert set(memory) == MEMORY_KEYS, memory
    return memory


def test_work_buffers_reused(daemon_factory, phantom):
    """A warm daemon's second job of the same shape allocates no GPU buffer:
    the engine's work buffers of the first come back (gpu_buffer_recycle), the
    job's memory says so, /v1/device counts them as spares between the jobs,
    and the tractogram is the same bytes as the first's (same seeds)."""
    d = daemon_factory()
    ids = upload_phantom(d.api, phantom)
    job = server_job(phantom, ids, count=100, rng_seed=5)
    first, first_trk = run_to_completion(d.api, job)
    work = _memory(first)["gpu_work_bytes"]
    assert work > 0 and first["memory"]["gpu_work_reused_bytes"] == 0, first["memory"]
    assert d.api.get_json("/v1/device")["device"]["spare_bytes"] >= work
    second, second_trk = run_to_completion(d.api, job)
    assert second_trk == first_trk
    assert _memory(second)["gpu_work_bytes"] == work, (first["memory"], second["memory"])
    assert second["memory"]["gpu_work_reused_bytes"] == work, second["memory"]


def test_work_buffers_sized_by_lines(daemon, volumes, phantom):
    """The work buffers hold the streamlines the job's seeds really start,
    not the plan's bound of every seed with the most initial directions its
    min_separation_angle allows: 13 at the default 45 degrees, each a slot of
    2 * max_steps + 1 points of 12 bytes (a 100,000-seed job's 4.6 GiB on an
    H100). The phantom's seeds start one to three each."""
    seeds, max_steps, angle = 200, 500, 45.0
    doc, _ = run_to_completion(daemon.api, server_job(
        phantom, volumes, count=seeds, rng_seed=11,
        tracking={"max_steps": max_steps, "min_separation_angle": angle}))
    peak_bound = math.floor(1.0 / (1.0 - math.cos(math.radians(angle / 2))))
    bound_points = 12 * (2 * max_steps + 1) * seeds * peak_bound
    assert _memory(doc)["gpu_work_bytes"] < bound_points / 2, (doc["memory"], bound_points)


def test_spares_freed_when_idle(daemon_factory, phantom):
    """Spare work buffers go back to the driver once the daemon has been idle
    gpu_spare_idle_seconds (a GPU shared by a lab): /v1/device's spare_bytes
    falls to 0, and the next job allocates its buffers anew."""
    d = daemon_factory(sets=["gpu_spare_idle_seconds=1"])
    ids = upload_phantom(d.api, phantom)
    job = server_job(phantom, ids, count=100, rng_seed=6)
    run_to_completion(d.api, job)
    deadline = time.monotonic() + 30
    while d.api.get_json("/v1/device")["device"]["spare_bytes"] > 0:
        assert time.monotonic() < deadline, "the spares were not given back when idle"
        time.sleep(0.2)
    again, _ = run_to_completion(d.api, job)
    assert _memory(again)["gpu_work_reused_bytes"] == 0, again["memory"]


def test_spares_make_room_for_the_latest_shape(daemon_factory, phantom):
    """Spares are kept up to an eighth of the device memory; past it the
    oldest go, so that after jobs of two shapes that do not fit together the
    latest shape's next job still finds all its buffers (max_steps sizes the
    point slots, so two values are two shapes)."""
    d = daemon_factory()
    ids = upload_phantom(d.api, phantom)
    cap = d.api.get_json("/v1/device")["device"]["device_local_bytes"] // 8

    def job(max_steps):
        doc, _ = run_to_completion(d.api, server_job(
            phantom, ids, count=200, rng_seed=9, tracking={"max_steps": max_steps}))
        return _memory(doc)

    probe = job(500)["gpu_work_bytes"]
    max_steps = min(10000, math.ceil(500 * 0.6 * cap / probe))
    first = job(max_steps)["gpu_work_bytes"]
    second = job(max_steps - 1)["gpu_work_bytes"]
    assert first + second > cap > max(first, second), (first, second, cap)
    again = job(max_steps - 1)
    assert again["gpu_work_reused_bytes"] == again["gpu_work_bytes"] == second, again


def test_result_written_back_while_written(daemon_factory, phantom, tmp_path):
    """The spool file goes to the kernel's writeback as its records are
    written (sync_file_range(SYNC_FILE_RANGE_WRITE) on the engine's writer
    thread), before the result's fsync, so that the fsync before `synced`
    finds little left to write. strace, attached to the running daemon,
    sees the calls."""
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("no strace")
    d = daemon_factory()
    ids = upload_phantom(d.api, phantom)
    log = tmp_path / "strace.log"
    tracer = subprocess.Popen([strace, "-f", "-qq", "-e", "trace=sync_file_range,fsync",
                               "-o", str(log), "-p", str(d.pid)], stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)   # attached to every thread (nothing to wait on)
        if tracer.poll() is not None:
            pytest.skip(f"strace cannot attach: {tracer.stderr.read()[:300]!r}")
        run_to_completion(d.api, server_job(phantom, ids, count=300, rng_seed=4))
    finally:
        tracer.send_signal(signal.SIGINT)   # detaches; the daemon goes on
        tracer.wait(timeout=30)
    calls = [l for l in log.read_text().splitlines() if "sync_file_range(" in l or "fsync(" in l]
    ranges = [i for i, l in enumerate(calls) if "SYNC_FILE_RANGE_WRITE" in l]
    assert ranges, calls
    assert any("fsync(" in l for l in calls[ranges[0]:]), calls
