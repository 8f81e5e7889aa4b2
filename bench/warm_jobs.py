#!/usr/bin/env python3
"""Warm small-job latency of a daemon (issue 24): starts `tractd serve` on a
Unix socket, uploads a phantom's odf, fa and seed ROI, runs one job to warm
the volume cache and the pipelines, then RUNS times the same job with SEEDS
seeds (new rng_seed each time), each submitted with ?wait=stream and read to
the end as a waiting client that saves it does (what has come, up to 1 MiB
at a time, none kept: http.client's read() of the whole body into one
object costs the client more than the daemon takes to send it). Prints the median and p90 of the
client's wall time, of the tracking (the job's `timing`: tracking ->
tracked), of the overhead (wall less tracking) and of each step of the
job's `timing` (proto/API.md): output_opened -> tracking is preparing the work
buffers, tracked -> synced the result's fsync, done -> client has it the read
of what was not streamed yet; then when the client's first byte came, and
how much of the result it had by `tracked` and by `done` (the result
streams while it is tracked when the daemon writes it in several chunks:
proto/API.md's `first_output`). Then the result's size and the job's memory
(work buffers, how much of them were spares of the job before, and the spares
the daemon holds after the runs).

Usage: python3 bench/warm_jobs.py TRACTD PHANTOM_DIR [--seeds 1000]
       [--runs 20] [--device D] [--max-steps N]
Standard library only; any python3 will do.
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

READ_BYTES = 1 << 20
EVENTS = ["submitted", "validated", "queued", "started", "loaded", "output_opened",
          "tracking", "first_output", "tracked", "synced", "done"]


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=600)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def request(sock, method, url, body=None):
    conn = UnixConnection(sock)
    conn.request(method, url, body=body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp, data


def upload(sock, path):
    with open(path, "rb") as f:
        resp, data = request(sock, "POST", "/v1/volumes", f.read())
    if resp.status not in (200, 201):
        sys.exit(f"uploading {path}: {resp.status} {data[:200]!r}")
    return json.loads(data)["id"]


def volume(phantom, stem):
    for suffix in (".nii", ".nii.gz"):
        if os.path.exists(os.path.join(phantom, stem + suffix)):
            return os.path.join(phantom, stem + suffix)
    sys.exit(f"no {stem}.nii(.gz) in {phantom}")


def run_job(sock, job):
    """One ?wait=stream job, read as a download is: in pieces of what has
    come, up to READ_BYTES, none kept. Returns the client's seconds and the job's
    status document, with the bytes the client read as "client_bytes" and,
    as "client_arrivals", (seconds since the request, bytes by then) after
    each piece."""
    t0 = time.monotonic()
    conn = UnixConnection(sock)
    conn.request("POST", "/v1/jobs?wait=stream", body=json.dumps(job))
    resp = conn.getresponse()
    job_id = resp.getheader("X-Tractd-Job")
    if resp.status != 200 or not job_id:
        sys.exit(f"job: {resp.status} {resp.read()[:300]!r}")
    got, arrivals = 0, []
    while True:
        n = len(resp.read1(READ_BYTES))   # what has come, up to READ_BYTES
        if not n:
            break
        got += n
        arrivals.append((time.monotonic() - t0, got))
    wall = time.monotonic() - t0
    conn.close()
    _, doc = request(sock, "GET", f"/v1/jobs/{job_id}")
    doc = json.loads(doc)
    doc["client_bytes"] = got
    doc["client_arrivals"] = arrivals
    return wall, doc


def share_by(doc, moment):
    """The share of the result the client had when the job reached moment
    (the job's clock starts as the request arrives, the client's as it is
    sent: the same instant within a fraction of a millisecond)."""
    at = doc["timing"][moment]
    had = max([b for t, b in doc["client_arrivals"] if t <= at], default=0)
    return had / max(doc["client_bytes"], 1)


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def line(name, values):
    ms = [v * 1e3 for v in values]
    print(f"  {name:<28} {statistics.median(ms):9.2f} {pct(ms, 90):9.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tractd")
    ap.add_argument("phantom")
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--device")
    ap.add_argument("--max-steps", type=int,
                    help="tracking.max_steps: short streamlines track a job on lavapipe in "
                    "less than the daemon's half-second chunk, as a GPU tracks 100,000 seeds")
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="tractd-warm-")
    sock = os.path.join(state, "s")
    argv = [args.tractd, "serve", "--listen-unix", sock, "--state-dir", state + "/state",
            "--set", "log_level=warning"]
    if args.device:
        argv += ["--set", f"device={args.device}"]
    daemon = subprocess.Popen(argv)
    try:
        for _ in range(300):
            if os.path.exists(sock):
                try:
                    if request(sock, "GET", "/healthz")[0].status == 200:
                        break
                except OSError:
                    pass
            time.sleep(0.1)
        with open(os.path.join(args.phantom, "job.json")) as f:
            sphere = json.load(f)["tracking"]["sphere"]
        job = {"inputs": {"odf": upload(sock, volume(args.phantom, "odf")),
                          "stop_map": upload(sock, volume(args.phantom, "fa"))},
               "seeds": {"roi": upload(sock, volume(args.phantom, "seed_roi")),
                         "count": args.seeds, "rng_seed": 0},
               "tracking": {"sphere": sphere}}
        if args.max_steps:
            job["tracking"]["max_steps"] = args.max_steps
        run_job(sock, job)   # loads, uploads and compiles: not counted
        walls, docs = [], []
        for i in range(args.runs):
            job["seeds"]["rng_seed"] = i + 1
            wall, doc = run_job(sock, job)
            walls.append(wall)
            docs.append(doc)
        device = json.loads(request(sock, "GET", "/v1/device")[1])["device"]
        spare = device.get("spare_bytes")
        device = device["name"]
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(state, ignore_errors=True)
    timings = [d["timing"] for d in docs]
    tracking = [t["tracked"] - t["tracking"] for t in timings]
    print(f"warm daemon, {args.seeds} seeds, {args.runs} jobs (?wait=stream) on {device}, "
          f"milliseconds:")
    print(f"  {'':<28} {'median':>9} {'p90':>9}")
    line("client wall time", walls)
    line("tracking (engine)", tracking)
    line("overhead (wall - tracking)", [w - t for w, t in zip(walls, tracking)])
    for a, b in zip(EVENTS, EVENTS[1:]):
        line(f"{a} -> {b}", [t[b] - t[a] for t in timings])
    line("done -> client has it", [w - t["done"] for w, t in zip(walls, timings)])
    line("request -> client's first byte", [d["client_arrivals"][0][0] if d["client_arrivals"]
                                            else w for w, d in zip(walls, docs)])
    print(f"  {'':<28} {'median':>9} {'p90':>9}  (% of the result the client had)")
    for moment in ("tracked", "done"):
        shares = [100 * share_by(d, moment) for d in docs]
        print(f"  {'by ' + moment:<28} {statistics.median(shares):9.1f} {pct(shares, 90):9.1f}")
    mib = statistics.median(d["client_bytes"] for d in docs) / 2**20
    print(f"  result: {mib:.1f} MiB read by the client ({args.seeds} seeds), "
          f"{statistics.median(d['result']['streamlines'] for d in docs)} streamlines")
    m = docs[-1]["memory"]
    reused = m.get("gpu_work_reused_bytes")
    print(f"  memory: inputs {m['gpu_input_bytes'] / 2**20:.1f} MiB and work buffers "
          f"{m['gpu_work_bytes'] / 2**20:.1f} MiB on the GPU"
          + (f" ({reused / 2**20:.1f} MiB of them reused)" if reused is not None else "")
          + f", daemon peak RSS {m['host_peak_bytes'] / 2**20:.1f} MiB"
          + (f"; spares held after the jobs {spare / 2**20:.1f} MiB" if spare is not None
             else ""))


if __name__ == "__main__":
    main()
