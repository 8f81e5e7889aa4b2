#!/usr/bin/env python3
"""The load test of tests/daemon/test_load.py, larger, for the figures of a
closing note: starts `tractd serve` (Unix socket and TCP on 127.0.0.1, tokens
alice and bob, max_queued_jobs_per_user=4), uploads the phantom as root,
alice and bob, runs a warm-up wave and then TASKS tasks on CLIENTS threads
(valid small jobs checked byte for byte against `tractd run`, streamed jobs,
cancels, malformed requests; tests/daemon/loadgen.py), and prints requests/s,
job latency percentiles, statuses and 4xx by code, and the daemon's RSS
after the warm-up, half-way and at the end. Exits 1 if any check failed or
the daemon did not exit 0 on SIGTERM.

Usage: python3 bench/load.py [--tractd build/tractd] [--clients 32]
       [--tasks 1500] [--warmup 64]
Standard library only; any python3 will do. With --tractd build-asan/tractd
and ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=exitcode=0 it prints what
LeakSanitizer reported at exit.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "daemon"))
import loadgen  # noqa: E402

ALICE = "alice-token-0123456789abcdef0123"
BOB = "bob-token-0123456789abcdef012345"
SETS = ["max_queued_jobs_per_user=4", "max_request_bytes=16K", "max_seeds_per_job=100000"]
KEYS = [(count, rng) for count in (8, 16) for rng in (0, 1, 2)]
INPUTS = {"odf": "odf.nii.gz", "stop_map": "fa.nii.gz", "roi": "seed_roi.nii.gz"}


def job_doc(base, ids, count, rng):
    job = json.loads(json.dumps(base))
    job.pop("output", None)
    job["inputs"] = {"odf": ids["odf"], "stop_map": ids["stop_map"]}
    job["seeds"] = {"roi": ids["roi"], "count": count, "rng_seed": rng}
    return job


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tractd", default="build/tractd")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--tasks", type=int, default=1500)
    ap.add_argument("--warmup", type=int, default=64)
    a = ap.parse_args()
    tractd = str(Path(a.tractd).resolve())
    work = Path(tempfile.mkdtemp(prefix="tractd-load-", dir="/tmp"))
    proc = None
    try:
        ph = work / "phantom"
        subprocess.run([tractd, "phantom", str(ph)], check=True, capture_output=True)
        base = json.loads((ph / "job.json").read_text())
        cache = work / "pipelines.bin"
        local = {k: str(ph / v) for k, v in INPUTS.items()}
        want = {}
        for key in KEYS:
            path = work / f"ref-{key[0]}-{key[1]}.json"
            path.write_text(json.dumps(job_doc(base, local, *key)))
            out = work / f"ref-{key[0]}-{key[1]}.trk"
            subprocess.run([tractd, "run", str(path), "-o", str(out), "-q",
                            "--pipeline-cache", str(cache)], check=True)
            want[key] = out.read_bytes()

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        tokens = work / "tokens"
        tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
        os.chmod(tokens, 0o600)
        sock = work / "tractd.sock"
        argv = [tractd, "serve", "--state-dir", str(work / "state"), "--listen-unix", str(sock),
                "--listen-tcp", f"127.0.0.1:{port}", "--set", f"tokens_file={tokens}",
                "--set", f"pipeline_cache={cache}"]
        for s in SETS:
            argv += ["--set", s]
        log = open(work / "daemon.log", "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        root = loadgen.Ident("root", unix_socket=str(sock), keepalive=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                if loadgen.request(root, "GET", "/healthz", timeout=5).status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"the daemon did not start; see {work}/daemon.log")
            time.sleep(0.1)

        users = [loadgen.Ident("alice", port=port, token=ALICE, keepalive=True),
                 loadgen.Ident("bob", port=port, token=BOB), root]
        ids = {}
        for who in users:
            for key, name in INPUTS.items():
                r = loadgen.request(who, "POST", "/v1/volumes", (ph / name).read_bytes(),
                                    {"Content-Type": "application/octet-stream"})
                assert r.status in (200, 201), str(r)
                ids[key] = r.json()["id"]
        load = loadgen.Load(users=users, strangers=users[:2],
                            job_for=lambda count, rng: job_doc(base, ids, count, rng),
                            want=want, tcp_port=port, oversized=32 * 1024, over_seeds=200000)
        warm = load.run(load.plan(a.warmup), a.clients)
        failures = list(load.stats.failures)
        rss = [("after warm-up", loadgen.rss_kib(proc.pid))]
        load.stats = loadgen.Stats()
        # The RSS half-way, from a thread that watches the checked jobs.
        tasks = load.plan(a.tasks)
        half = []

        def watch():
            while not half and proc.poll() is None:
                time.sleep(0.2)
                if load.stats.jobs_checked >= (a.tasks * 0.4) / 2:
                    half.append(("half-way", loadgen.rss_kib(proc.pid)))

        w = threading.Thread(target=watch, daemon=True)
        w.start()
        wall = load.run(tasks, a.clients)
        half.append(None)   # stops the watcher
        rss += half[:1] if half[0] else []
        rss.append(("end", loadgen.rss_kib(proc.pid)))
        print(f"{a.clients} clients, warm-up {a.warmup} tasks in {warm:.1f} s, then "
              f"{len(tasks)} tasks:")
        print(load.report(wall, rss))
        failures += load.stats.failures
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        print(f"SIGTERM: exit {code}")
        # Under the ASan build (ASAN_OPTIONS=detect_leaks=1, LSAN_OPTIONS=exitcode=0):
        # what LeakSanitizer said at exit.
        text = (work / "daemon.log").read_text(errors="replace")
        for line in text.splitlines():
            if "LeakSanitizer" in line or "leak of" in line or line.startswith("SUMMARY:"):
                print("daemon log: " + line.strip())
        if failures or code != 0:
            print(f"FAILED ({len(failures)} failures); kept {work}", file=sys.stderr)
            for f in failures[:20]:
                print(f, file=sys.stderr)
            work = None
            sys.exit(1)
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        if work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
