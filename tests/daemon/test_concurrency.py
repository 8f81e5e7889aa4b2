"""Many clients at once, and clients that go away: 8 clients in parallel each
upload, submit and fetch, and each gets exactly the result of `tractd run`
of its job; a client killed in the middle of a streamed tractogram leaves the
job, the daemon and the result intact."""
import gzip
import signal
import subprocess
import threading
import time

import nibabel as nib

from .support import (PHANTOM_INPUTS, assert_same_trk, fetch_tractogram, local_job,
                      server_job, sha256_id, submit, trk_n_count, wait_job)

N_CLIENTS = 8
CLIENT_SEEDS = 300
# Distinct jobs among the clients (rng_seed = client % N_JOBS): results that
# went to the wrong client would show.
N_JOBS = 4
# About 5 s of tracking on lavapipe: long enough to kill a client mid-stream.
KILL_SEEDS = 10000


def test_parallel_clients(daemon, phantom, references, tmp_path):
    """8 threads, half on the Unix socket and half on TCP, each uploads the
    phantom's odf and fa (the same bytes: exactly one 201 per file and
    uploader, root or the TCP token, if it lacked it; 200 for the others) and a seed ROI of its own (the same
    image, gzip'd with another mtime: new bytes, 201), submits a job and
    fetches its tractogram; every result is byte-identical to `tractd run`
    of that client's job."""
    shared = {key: phantom.path(PHANTOM_INPUTS[key]) for key in ("odf", "stop_map")}
    # Uploads answer 201 once per uploader: root on the socket, the token
    # "tests" on TCP. What each had is in the store's owner records (root, an
    # admin, would see every volume with HEAD).
    owners = daemon.state_dir / "volumes" / ".owners"
    had = {(who, key): (owners / who / sha256_id(p)[7:]).exists()
           for who in ("root", "tests") for key, p in shared.items()}
    roi_raw = gzip.decompress(phantom.path(PHANTOM_INPUTS["roi"]).read_bytes())
    rois = []
    for i in range(N_CLIENTS):
        path = tmp_path / f"roi{i}.nii.gz"
        path.write_bytes(gzip.compress(roi_raw, mtime=1000 + i))
        rois.append(path)
    assert len({sha256_id(p) for p in rois}) == N_CLIENTS

    results = [None] * N_CLIENTS
    errors = []
    start = threading.Barrier(N_CLIENTS)

    def client(i):
        try:
            ep = daemon.unix if i % 2 == 0 else daemon.tcp
            start.wait(timeout=30)
            statuses, ids = {}, {}
            for key, path in (*shared.items(), ("roi", rois[i])):
                r = ep.upload(path)
                assert r.status in (200, 201), str(r)
                assert r.json()["id"] == sha256_id(path), r.json()
                statuses[key], ids[key] = r.status, r.json()["id"]
            job_id = submit(ep, server_job(phantom, ids, count=CLIENT_SEEDS,
                                           rng_seed=i % N_JOBS))
            doc = wait_job(ep, job_id)
            assert doc["status"] == "done", doc
            results[i] = (statuses, job_id, fetch_tractogram(ep, job_id))
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(N_CLIENTS)]
    for t in threads:
        t.start()
    # The references run meanwhile (the CLI, on the local files).
    want = [references.trk(local_job(phantom, count=CLIENT_SEEDS, rng_seed=k))
            for k in range(N_JOBS)]
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert not errors, "\n".join(errors)

    assert len({job_id for _, job_id, _ in results}) == N_CLIENTS
    for (who, key), present in had.items():
        mine = [s[key] for i, (s, _, _) in enumerate(results)
                if (i % 2 == 0) == (who == "root")]
        created = mine.count(201)
        assert created == (0 if present else 1), (
            f"{key} by {who}: {created} uploads answered 201 (the daemon "
            f"{'had' if present else 'lacked'} it): {mine}")
    for i, (statuses, job_id, data) in enumerate(results):
        assert statuses["roi"] == 201, statuses
        assert_same_trk(data, want[i % N_JOBS], f"client {i} (job {job_id})")
    assert daemon.api.get_json("/v1/device")["queue"] == {"queued": 0, "running": 0}


def test_client_killed_mid_stream(daemon, volumes, phantom, tmp_path):
    """curl follows a long job's tractogram and is killed (SIGKILL) once the
    first bytes arrived, while the job runs: the job still completes, the
    daemon stays healthy, and a later fetch returns the whole TRK (nibabel
    loads it; its n_count and streamline count equal result.streamlines)."""
    job_id = submit(daemon.api, server_job(phantom, volumes, count=KILL_SEEDS, rng_seed=31))
    partial = tmp_path / "partial.trk"
    curl = subprocess.Popen([*daemon.api.curl_args(f"/v1/jobs/{job_id}/tractogram"), "-N",
                             "-o", str(partial)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (partial.exists() and partial.stat().st_size > 0):
            assert curl.poll() is None, f"curl ended (code {curl.returncode}) before any byte"
            assert time.monotonic() < deadline, "no byte of the tractogram within 120 s"
            time.sleep(0.01)
        status_at_kill = daemon.api.get_json(f"/v1/jobs/{job_id}")["status"]
        curl.send_signal(signal.SIGKILL)
        curl.wait(timeout=10)
    finally:
        if curl.poll() is None:
            curl.kill()
            curl.wait()
    got_before_kill = partial.stat().st_size

    doc = wait_job(daemon.api, job_id)
    assert doc["status"] == "done", doc
    assert daemon.api.get("/healthz").status == 200
    data = fetch_tractogram(daemon.api, job_id)
    assert len(data) == doc["result"]["bytes"]
    assert trk_n_count(data) == doc["result"]["streamlines"]
    out = tmp_path / "full.trk"
    out.write_bytes(data)
    assert len(nib.streamlines.load(str(out)).streamlines) == doc["result"]["streamlines"]
    # The test means something only if the bytes came while the job ran:
    # the daemon streams a job's tractogram as its chunks are written.
    assert status_at_kill == "running", (
        f"the first bytes of the tractogram ({got_before_kill} B) came only when the job "
        f"was {status_at_kill}: nothing was streamed while it ran "
        f"({doc['progress']['seeds_total']} seeds, {doc['seconds']['track']:.1f} s of tracking)")
