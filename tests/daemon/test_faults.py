"""Faults on a shared server (issue 8): the daemon killed mid-job and
restarted on its spool, a full disk under the spool, clients killed
mid-upload and mid-stream, a lost GPU device.

The behaviour under test is documented in proto/API.md ("Faults") and the
README ("Faults and restarts"); the device-lost test uses the fault-injection
hook TRACTD_FAULT_DEVICE_LOST_AFTER (README, "Testing").
"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .support import (CURL, JOB_TIMEOUT_S, assert_same_trk, fetch_tractogram, job_status,
                      local_job,
                      run_to_completion, server_job, short_tmpdir, submit, trk_n_count,
                      upload_phantom, wait_job, wait_running)

# A job that runs for many chunks on lavapipe: long enough to be caught running.
LONG_SEEDS = 200000
# How long the daemon may take to notice a client gone and clean up.
CLEANUP_TIMEOUT_S = 15


def spool(d):
    return d.state_dir / "spool"


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.05)


def kill_daemon(d):
    """SIGKILL: no handler runs, nothing is flushed or recorded at exit."""
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(timeout=30)
    d.stopped = True


# --------------------------------------------------------------------------- restart

def test_sigkill_mid_job_and_restart(daemon_factory, phantom):
    """SIGKILL while a job runs, restart on the same state_dir: the finished
    job is listed and its TRK served byte-identical, the interrupted one
    failed ("interrupted") with its partial result removed, junk in the
    spool skipped with a warning, and new jobs run."""
    state = short_tmpdir() / "state"
    d = daemon_factory(state_dir=state)
    ids = upload_phantom(d.api, phantom)
    job = server_job(phantom, ids, count=500, rng_seed=3)
    done_doc, done_trk = run_to_completion(d.api, job)
    done_id = done_doc["id"]
    long_id = submit(d.api, server_job(phantom, ids, count=LONG_SEEDS, rng_seed=4))
    wait_running(d.api, long_id, min_seeds_done=1)
    assert (spool(d) / f"{long_id}.tractogram").exists()
    kill_daemon(d)

    # What a crash or another program may leave in the spool.
    (spool(d) / "j-0123456789abcdef.job").write_text("{not json")
    (spool(d) / "j-00000000000000aa.job").write_text(json.dumps({"tractd_job": 1}))
    (spool(d) / "j-fedcba9876543210.tractogram").write_bytes(b"orphan")
    (spool(d) / ".rec-XyZ123").write_text("half a record")
    (spool(d) / "notes.txt").write_text("not ours")
    (d.state_dir / "volumes" / ".tmp-AbC123").write_bytes(b"an upload cut off by the kill")

    d2 = daemon_factory(state_dir=state)
    doc = job_status(d2.api, done_id)
    assert doc["status"] == "done", doc
    assert doc["result"]["bytes"] == len(done_trk), doc
    assert doc["result"]["streamlines"] == done_doc["result"]["streamlines"], doc
    assert doc["result"]["stop_reasons"] == done_doc["result"]["stop_reasons"], doc
    assert sum(doc["result"]["stop_reasons"].values()) > 0, doc
    assert_same_trk(fetch_tractogram(d2.api, done_id), done_trk, "the TRK served after restart")
    # Conversion needs the grid kept in the record.
    r = d2.api.get(f"/v1/jobs/{done_id}/tractogram?format=tck")
    assert r.status == 200 and r.body.startswith(b"mrtrix tracks"), str(r)

    doc = job_status(d2.api, long_id)
    assert doc["status"] == "failed", doc
    assert doc["error"]["code"] == "interrupted", doc
    assert "interrupted" in doc["error"]["message"], doc
    assert "running" in doc["error"]["message"], doc
    assert not (spool(d2) / f"{long_id}.tractogram").exists(), "partial result kept"
    r = d2.api.get(f"/v1/jobs/{long_id}/tractogram")
    assert r.status == 409, str(r)

    listed = [j["id"] for j in d2.api.get_json("/v1/jobs")["jobs"]]
    assert set(listed) == {done_id, long_id}, listed
    log = d2.log(400)
    assert "j-0123456789abcdef.job is not a valid job record" in log, log
    assert "j-00000000000000aa.job is not a valid job record" in log, log
    assert "notes.txt is not a file of tractd" in log, log
    assert (spool(d2) / "notes.txt").exists(), "a foreign file was removed"
    assert not (spool(d2) / ".rec-XyZ123").exists(), "a stale temporary record was kept"
    assert not (spool(d2) / "j-fedcba9876543210.tractogram").exists(), "an orphan was kept"
    assert not list((d2.state_dir / "volumes").glob(".tmp-*")), "a stale upload was kept"

    # New jobs run; the same job gives the same bytes.
    doc, trk = run_to_completion(d2.api, job)
    assert_same_trk(trk, done_trk, "the same job after restart")
    # A deleted job stays deleted across a restart.
    assert d2.api.request("DELETE", f"/v1/jobs/{done_id}").status == 204
    d2.stop()
    d3 = daemon_factory(state_dir=state)
    assert d3.api.get(f"/v1/jobs/{done_id}").status == 404
    assert job_status(d3.api, doc["id"])["status"] == "done"


def test_sigterm_mid_job_is_recorded(daemon_factory, phantom):
    """SIGTERM while a job runs: it reads failed ("interrupted") after the
    restart too, not cancelled."""
    state = short_tmpdir() / "state"
    d = daemon_factory(state_dir=state)
    ids = upload_phantom(d.api, phantom)
    long_id = submit(d.api, server_job(phantom, ids, count=LONG_SEEDS, rng_seed=5))
    wait_running(d.api, long_id, min_seeds_done=1)
    d.stop()
    d2 = daemon_factory(state_dir=state)
    doc = job_status(d2.api, long_id)
    assert doc["status"] == "failed" and doc["error"]["code"] == "interrupted", doc
    assert not (spool(d2) / f"{long_id}.tractogram").exists()


def test_restart_applies_spool_limits(daemon_factory, phantom):
    """Reloaded results count against spool_max_bytes: restarted with a spool
    smaller than a finished result, the daemon expires it (410), and the job
    stays listed as done with `expired` true."""
    state = short_tmpdir() / "state"
    d = daemon_factory(state_dir=state)
    ids = upload_phantom(d.api, phantom)
    doc, trk = run_to_completion(d.api, server_job(phantom, ids, count=4000, rng_seed=10))
    assert len(trk) > (1 << 20), f"the result ({len(trk)} bytes) must outgrow a 1M spool"
    d.stop()
    d2 = daemon_factory(state_dir=state, sets=["spool_max_bytes=1M"])
    after = job_status(d2.api, doc["id"])
    assert after["status"] == "done" and after["result"]["expired"] is True, after
    assert d2.api.get(f"/v1/jobs/{doc['id']}/tractogram").status == 410
    assert not (spool(d2) / f"{doc['id']}.tractogram").exists()


# --------------------------------------------------------------------------- disk full

@pytest.fixture
def small_tmpfs():
    """A 48 MiB tmpfs (unmounted at the end); skipped only when mounting is
    not permitted."""
    where = short_tmpdir("fs-")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs",
                           str(where)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root/CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path, leave_bytes):
    """Writes a file until the file system has at most leave_bytes free."""
    st = os.statvfs(path.parent)
    free = st.f_bavail * st.f_frsize
    with open(path, "wb") as f:
        block = b"\0" * (1 << 20)
        want = max(free - leave_bytes, 0)
        try:
            while want > 0:
                n = f.write(block[:min(len(block), want)])
                want -= n
            f.flush()
        except OSError:
            pass


def test_disk_full(daemon_factory, phantom, small_tmpfs):
    """A result that does not fit fails the job (insufficient_storage, field
    output) and leaves no partial file; an upload or a job record that does
    not fit gets 507 and leaves no temporary file; once space returns, jobs
    run."""
    d = daemon_factory(state_dir=small_tmpfs / "state")
    ids = upload_phantom(d.api, phantom)
    filler = small_tmpfs / "filler"

    # Room for the records, not for the tractogram.
    fill(filler, 256 << 10)
    job_id = submit(d.api, server_job(phantom, ids, count=4000, rng_seed=6))
    doc = wait_job(d.api, job_id)
    assert doc["status"] == "failed", doc
    assert doc["error"]["code"] == "insufficient_storage", doc
    assert doc["error"]["field"] == "output", doc
    assert "spool is full" in doc["error"]["message"], doc
    assert not (spool(d) / f"{job_id}.tractogram").exists(), "partial result kept"

    # No room at all: uploads and submissions are refused.
    filler.unlink()
    fill(filler, 0)
    big = short_tmpdir() / "upload.bin"
    big.write_bytes(os.urandom(2 << 20))
    r = d.api.upload(big)
    assert r.status == 507, str(r)
    assert r.error["code"] == "insufficient_storage", str(r)
    assert not list((d.state_dir / "volumes").glob(".tmp-*")), "upload temp file left"
    r = d.api.post_json("/v1/jobs", server_job(phantom, ids, count=10, rng_seed=7))
    assert r.status == 507, str(r)
    assert r.error["code"] == "insufficient_storage", str(r)
    assert not list(spool(d).glob(".rec-*")), "record temp file left"
    assert d.api.get("/healthz").status == 200

    # Space returns: the same job runs.
    filler.unlink()
    doc, trk = run_to_completion(d.api, server_job(phantom, ids, count=4000, rng_seed=6))
    assert trk_n_count(trk) == doc["result"]["streamlines"] > 0
    d.stop()


# --------------------------------------------------------------------------- clients killed

def test_client_killed_mid_upload(daemon_factory, phantom):
    """curl killed while it streams a large upload: the temporary file goes,
    the daemon stays healthy, later uploads work."""
    d = daemon_factory()
    big = short_tmpdir() / "big.bin"
    with open(big, "wb") as f:
        f.truncate(256 << 20)
    volumes = d.state_dir / "volumes"
    curl = subprocess.Popen([CURL, "-sS", "--unix-socket", str(d.sock), "--limit-rate", "4M",
                             "--data-binary", f"@{big}", "-H",
                             "Content-Type: application/octet-stream",
                             "http://localhost/v1/volumes"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: any(p.stat().st_size > (1 << 20) for p in volumes.glob(".tmp-*")),
                 30, "the upload's temporary file growing")
    finally:
        curl.kill()
        curl.wait()
    wait_for(lambda: not list(volumes.glob(".tmp-*")), CLEANUP_TIMEOUT_S,
             "the temporary file of the killed upload removed")
    assert d.api.get("/healthz").status == 200
    ids = upload_phantom(d.api, phantom)
    assert all(i.startswith("sha256:") for i in ids.values())


def test_client_killed_mid_stream(daemon_factory, phantom):
    """A client following ?wait=stream killed mid-way: the job completes and
    its result is fetchable whole; what the client got is a prefix of it."""
    d = daemon_factory()
    ids = upload_phantom(d.api, phantom)
    out = short_tmpdir() / "stream.trk"
    body = json.dumps(server_job(phantom, ids, count=12000, rng_seed=8))
    curl = subprocess.Popen([CURL, "-sS", "--unix-socket", str(d.sock), "-o", str(out),
                             "-H", "Content-Type: application/json", "--data-binary", body,
                             "http://localhost/v1/jobs?wait=stream"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: out.exists() and out.stat().st_size > 4096, JOB_TIMEOUT_S,
                 "streamed bytes arriving")
        jobs = d.api.get_json("/v1/jobs")["jobs"]
        assert len(jobs) == 1 and jobs[0]["status"] == "running", jobs
    finally:
        curl.kill()
        curl.wait()
    got = out.read_bytes()
    doc = wait_job(d.api, jobs[0]["id"])
    assert doc["status"] == "done", doc
    trk = fetch_tractogram(d.api, doc["id"])
    assert len(trk) == doc["result"]["bytes"]
    assert trk_n_count(trk) == doc["result"]["streamlines"] > 0
    assert len(got) < len(trk), "the client was not killed mid-stream"
    # n_count (bytes 988..991) is patched at the end; the rest is a prefix.
    assert got[:988] == trk[:988] and got[992:] == trk[992:len(got)]


# --------------------------------------------------------------------------- device lost

def test_device_lost(daemon_factory, phantom, references):
    """VK_ERROR_DEVICE_LOST (injected) fails the running job with a device
    error; the context is recreated and later jobs run, byte-identical to
    `tractd run`."""
    d = daemon_factory(env={"TRACTD_FAULT_DEVICE_LOST_AFTER": "1"})
    ids = upload_phantom(d.api, phantom)
    job = server_job(phantom, ids, count=500, rng_seed=9)
    lost_id = submit(d.api, job)
    doc = wait_job(d.api, lost_id)
    assert doc["status"] == "failed", doc
    assert doc["error"]["field"] == "device", doc
    assert "VK_ERROR_DEVICE_LOST" in doc["error"]["message"], doc
    assert not (spool(d) / f"{lost_id}.tractogram").exists()
    _, trk = run_to_completion(d.api, job)
    assert_same_trk(trk, references.trk(local_job(phantom, count=500, rng_seed=9)),
                    "a job on the recreated context")
    log = d.log(400)
    assert "the GPU device was lost" in log and "Vulkan context was recreated" in log, log
