"""Issue 8, "Load": a bounded load test on loopback. 32 client threads at once
(tests/daemon/loadgen.py), three identities (alice and bob by token on TCP,
root on the Unix socket), a per-user queue limit of 4 so that 429 queue_full
happens and round robin between users is exercised: several hundred
requests of valid small jobs (each TRK equal byte for byte to `tractd run` of
the same job), ?wait=stream jobs, cancels and deletes, status polling, and
malformed requests, each with its 4xx and JSON error code. The daemon stays
healthy, its RSS stays flat from a warm-up wave to the end, and it exits 0
on SIGTERM. A smaller run under the ASan build checks for leaks at exit
(LeakSanitizer)."""
import pytest

from conftest import tractd_asan_path

from . import loadgen
from .support import Endpoint, TEST_TOKEN, local_job, server_job, start_daemon, upload_phantom

ALICE = "alice-token-0123456789abcdef0123"
BOB = "bob-token-0123456789abcdef012345"
TOKENS = (f"tests {TEST_TOKEN} admin\nalice {ALICE}\nbob {BOB}\n")
# A limit small enough that 32 clients hit it (429, retried), and the
# limits the malformed requests go over.
SETS = ["max_queued_jobs_per_user=4", "max_request_bytes=16K", "max_seeds_per_job=100000"]
OVERSIZED = 32 * 1024
OVER_SEEDS = 200000
# Distinct valid jobs: seed counts and rng_seeds, each computed once by `tractd
# run`; results that went to the wrong job or client would show.
KEYS = [(count, rng) for count in (8, 16) for rng in (0, 1, 2)]
N_CLIENTS = 32
WARMUP_TASKS = 64
TASKS = 320
# RSS growth allowed from after the warm-up wave to after the last one. The
# warm-up fills what is allocated once (pipelines, the GPU cache's volumes,
# the malloc arenas of libmicrohttpd's threads, lavapipe's JIT); every job
# is deleted after its check, so what stays is a leak. 16 MiB is far below
# what the ~200 jobs and ~2000 requests after the warm-up would hold if each
# leaked its request body, job record or a TRK (8-200 KiB each), and above
# the noise of glibc arenas that we measured as 0-3 MiB.
RSS_GROWTH_KIB = 16 * 1024

ASAN_CLIENTS = 8
ASAN_TASKS = 60
ASAN_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                "SUMMARY: UndefinedBehaviorSanitizer")
# Leak detection on, but what lavapipe/LLVM and the Vulkan loader keep at
# exit is theirs (their frames are suppressed); every other leak reports.
ASAN_SUPPRESSIONS = "leak:libvulkan\nleak:libvulkan_lvp\nleak:libLLVM\nleak:libdl\n"


def _load(d, phantom, ids, want):
    users = [loadgen.Ident("alice", port=d.port, token=ALICE),
             loadgen.Ident("bob", port=d.port, token=BOB),
             loadgen.Ident("root", unix_socket=str(d.sock))]
    return loadgen.Load(users=users, strangers=users[:2],
                        job_for=lambda count, rng: server_job(phantom, ids, count=count,
                                                              rng_seed=rng),
                        want=want, tcp_port=d.port, oversized=OVERSIZED, over_seeds=OVER_SEEDS)


def _references(phantom, references):
    return {k: references.trk(local_job(phantom, count=k[0], rng_seed=k[1])) for k in KEYS}


def _healthy(d):
    ident = loadgen.Ident("root", unix_socket=str(d.sock))
    r = loadgen.request(ident, "GET", "/v1/device")
    assert r.status == 200, str(r)
    assert r.json()["queue"] == {"queued": 0, "running": 0}, r.json()
    r = loadgen.request(ident, "GET", "/v1/jobs")
    assert r.status == 200 and r.json() == {"jobs": []}, str(r)


def test_load(daemon_factory, phantom, references, tmp_path):
    """32 clients, 64 warm-up tasks then 320 (about 2000 requests): every
    check passes, RSS grows less than 16 MiB after the warm-up, the daemon
    is healthy and idle at the end, exit 0 on SIGTERM (daemon_factory)."""
    want = _references(phantom, references)
    d = daemon_factory(sets=SETS, tokens=TOKENS)
    alice = loadgen.Ident("alice", port=d.port, token=ALICE)
    ids = upload_phantom(d.api, phantom)
    # alice's and bob's uploads of the same bytes (201 each: new to them).
    for token in (ALICE, BOB):
        assert upload_phantom(Endpoint(port=d.port, token=token), phantom) == ids

    load = _load(d, phantom, ids, want)
    warm = load.run(load.plan(WARMUP_TASKS), N_CLIENTS)
    assert not load.stats.failures, "\n".join(load.stats.failures[:20])
    rss_warm = loadgen.rss_kib(d.pid)
    load.stats = loadgen.Stats()
    wall = load.run(load.plan(TASKS), N_CLIENTS)
    rss_end = loadgen.rss_kib(d.pid)
    print(f"\nwarm-up {WARMUP_TASKS} tasks in {warm:.1f} s\n"
          + load.report(wall, [("after warm-up", rss_warm), ("end", rss_end)]))
    assert not load.stats.failures, "\n".join(load.stats.failures[:20])
    s = load.stats
    assert s.jobs_checked + s.streams_checked >= 0.45 * TASKS, s
    assert len(s.bad_by_code) >= 8, s.bad_by_code
    _healthy(d)
    assert loadgen.request(alice, "GET", "/healthz").status == 200
    assert rss_end - rss_warm < RSS_GROWTH_KIB, (
        f"RSS grew {(rss_end - rss_warm) / 1024:.1f} MiB after the warm-up "
        f"({rss_warm} -> {rss_end} KiB)")
    d.stop()


@pytest.mark.skipif(tractd_asan_path() is None,
                    reason="TRACTD_ASAN does not name the ASan/UBSan build (make SANITIZE=1)")
def test_load_asan_no_leaks(phantom, references, pipeline_cache, tmp_path):
    """The same mix, smaller (8 clients, 60 tasks), against the ASan build with
    LeakSanitizer on: every check passes, exit 0 on SIGTERM, and no
    AddressSanitizer, LeakSanitizer or UBSan report in the daemon's log."""
    want = _references(phantom, references)
    supp = tmp_path / "lsan.supp"
    supp.write_text(ASAN_SUPPRESSIONS)
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1",
           "LSAN_OPTIONS": f"suppressions={supp}:print_suppressions=0",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    d = start_daemon(tractd_asan_path(), sets=SETS, tokens=TOKENS, env=env,
                     pipeline_cache=pipeline_cache)
    try:
        _asan_load(d, phantom, want)
    finally:
        if not d.stopped:
            d.stop(check=False)
    log = d.log_path.read_text(errors="replace")
    found = [m for m in ASAN_MARKERS if m in log]
    assert not found, f"sanitizer report in the daemon's log:\n{log[-8000:]}"


def _asan_load(d, phantom, want):
    ids = upload_phantom(d.api, phantom)
    for token in (ALICE, BOB):
        upload_phantom(Endpoint(port=d.port, token=token), phantom)
    load = _load(d, phantom, ids, want)
    wall = load.run(load.plan(ASAN_TASKS), ASAN_CLIENTS)
    print("\n" + load.report(wall))
    assert not load.stats.failures, "\n".join(load.stats.failures[:20])
    _healthy(d)
    d.stop()
