"""The daemon as a service: /healthz, /v1/device and /metrics on both
sockets; socket activation; sd_notify (READY, STATUS, WATCHDOG, STOPPING);
clean exits on SIGTERM, also in the middle of a job; the Unix socket file."""
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time

import pytest

from .support import (TEST_TOKEN, CurlError, Daemon, Endpoint, daemon_env, free_port, get_metrics,
                      short_tmpdir, submit, upload_phantom, server_job, wait_running,
                      write_tokens)

# proto/API.md, "GET /metrics", with the type each must have.
API_METRICS = {
    "tractd_jobs_total": "counter",
    "tractd_jobs_queued": "gauge",
    "tractd_jobs_running": "gauge",
    "tractd_seeds_total": "counter",
    "tractd_streamlines_total": "counter",
    "tractd_track_seconds_total": "counter",
    "tractd_cache_hits_total": "counter",
    "tractd_cache_misses_total": "counter",
    "tractd_cache_bytes": "gauge",
    "tractd_cache_host_bytes": "gauge",
    "tractd_spool_bytes": "gauge",
    "tractd_connections_refused_total": "counter",
    "tractd_http_requests_total": "counter",
}

# A job long enough to be running for many seconds on lavapipe (~0.45 ms a
# seed: 200000 seeds take about 90 s), so that a signal lands mid-job.
LONG_SEEDS = 200000
# "exits 0 within a few seconds" when a job runs: the job stops within a chunk.
STOP_DURING_JOB_S = 10


def test_health_on_both_sockets(daemon):
    """GET /healthz answers 200 {"status": "ok"} as JSON on the Unix socket and on TCP."""
    for ep in daemon.endpoints:
        r = ep.get("/healthz")
        assert r.status == 200, str(r)
        assert r.headers.get("content-type", "").startswith("application/json"), r.headers
        assert r.json() == {"status": "ok"}


def test_device_on_both_sockets(daemon):
    """GET /v1/device has the documented members with sane values (a fresh
    daemon: empty cache, empty queue), the same on both sockets."""
    docs = []
    for ep in daemon.endpoints:
        r = ep.get("/v1/device")
        assert r.status == 200, str(r)
        assert r.headers.get("content-type", "").startswith("application/json"), r.headers
        docs.append(r.json())
    doc = docs[0]
    assert docs[1] == doc
    assert set(doc) == {"device", "cache", "queue"}, doc
    dev = doc["device"]
    assert set(dev) == {"name", "type", "count", "subgroup_size", "max_binding_bytes",
                        "max_alloc_bytes", "device_local_bytes", "spare_bytes",
                        "gpu_memory_limit_bytes", "gpu_memory_budget_bytes"}, dev
    assert dev["spare_bytes"] == 0, dev   # no job has freed work buffers yet
    # No limit set: a job's budget is half the device (see test_gpu_memory_limit).
    assert dev["gpu_memory_limit_bytes"] is None, dev
    assert dev["gpu_memory_budget_bytes"] == dev["device_local_bytes"] // 2, dev
    assert dev["count"] == 1, dev
    assert isinstance(dev["name"], str) and dev["name"], dev
    assert isinstance(dev["type"], str) and dev["type"], dev
    assert dev["subgroup_size"] >= 1
    for key in ("max_binding_bytes", "max_alloc_bytes", "device_local_bytes"):
        assert isinstance(dev[key], int) and dev[key] > 0, dev
    cache = doc["cache"]
    assert set(cache) == {"budget_bytes", "used_bytes", "host_bytes", "entries", "hits",
                          "misses"}, cache
    assert cache["budget_bytes"] > 0
    assert cache["used_bytes"] == 0 and cache["entries"] == 0, cache
    assert cache["hits"] == 0 and cache["misses"] == 0, cache
    assert doc["queue"] == {"queued": 0, "running": 0}


def test_metrics_on_both_sockets(daemon):
    """GET /metrics is Prometheus text (0.0.4): every metric of API.md has HELP
    and TYPE lines of the right type and a sample; jobs_total has the three
    final states; http_requests_total counts answers by status and grows."""
    for ep in daemon.endpoints:
        r = ep.get("/metrics")
        assert r.status == 200, str(r)
        assert r.headers.get("content-type", "").startswith("text/plain"), r.headers
        first = get_metrics(ep)
        for name, kind in API_METRICS.items():
            assert name in first.help and first.help[name], f"no # HELP for {name}"
            assert first.type.get(name) == kind, f"# TYPE of {name}: {first.type.get(name)}"
            assert any(s == name or s.startswith(name + "{") for s in first.samples), (
                f"no sample of {name}: {sorted(first.samples)}")
        for status in ("done", "failed", "cancelled"):
            assert first.value(f'tractd_jobs_total{{status="{status}"}}') == 0
        assert first.value("tractd_jobs_queued") == 0
        assert first.value("tractd_jobs_running") == 0
        ok_before = first.value('tractd_http_requests_total{code="200"}')
        assert ok_before and ok_before >= 1, first.samples
        second = get_metrics(ep)
        assert second.value('tractd_http_requests_total{code="200"}') >= ok_before + 1
    # A 404 shows up under its own code.
    assert daemon.api.get("/no/such/route").status == 404
    assert get_metrics(daemon.api).value('tractd_http_requests_total{code="404"}') >= 1


def test_socket_activation(tractd, pipeline_cache):
    """Under `systemd-socket-activate -l SOCK -l 127.0.0.1:PORT tractd serve`
    the daemon uses the inherited sockets: /healthz answers on both, and it
    exits 0 on SIGTERM."""
    if not shutil.which("systemd-socket-activate"):
        pytest.fail("systemd-socket-activate is not installed (Debian package systemd)",
                    pytrace=False)
    tmp = short_tmpdir()
    sock = tmp / "activated.sock"
    port = free_port()
    argv = ["systemd-socket-activate", "-l", str(sock), "-l", f"127.0.0.1:{port}",
            tractd, "serve", "--state-dir", str(tmp / "state"), "--set", "log_level=debug",
            "--set", f"pipeline_cache={pipeline_cache}",
            "--set", f"tokens_file={write_tokens(tmp / 'tokens')}"]
    log_path = tmp / "daemon.log"
    with open(log_path, "ab") as log:
        # XDG_RUNTIME_DIR keeps the default socket path (unused here) in tmp.
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                env=daemon_env({"XDG_RUNTIME_DIR": str(tmp)}))
    d = Daemon(argv, proc, log_path, tmp / "state", None, port)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert proc.poll() is None, f"systemd-socket-activate exited:\n{d.log()}"
            assert time.monotonic() < deadline, f"{sock} never appeared:\n{d.log()}"
            time.sleep(0.02)
        unix = Endpoint(unix_socket=sock)
        # The first connection starts the daemon; it answers once it is up.
        r = unix.request("GET", "/healthz", timeout=60)
        assert r.status == 200 and r.json() == {"status": "ok"}, f"{r}\n{d.log()}"
        r = Endpoint(port=port, token=TEST_TOKEN).get("/healthz")
        assert r.status == 200 and r.json() == {"status": "ok"}, f"{r}\n{d.log()}"
        assert unix.get("/v1/device").status == 200
    finally:
        code = d.stop(check=False)
    assert code == 0, f"exit code {code} after SIGTERM\n{d.log()}"


def _notifications(sock, until, timeout):
    """Datagrams from sock split into lines, until a line equal to `until`
    arrives or timeout s pass. Returns the lines."""
    lines = []
    deadline = time.monotonic() + timeout
    while until not in lines:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            break
        lines += data.decode(errors="replace").splitlines()
    return lines


def test_sd_notify(daemon_factory):
    """With NOTIFY_SOCKET (and WATCHDOG_USEC) set, the daemon sends READY=1
    and a STATUS= line naming the device, pings the watchdog, and on SIGTERM
    sends STOPPING=1 before exiting 0."""
    tmp = short_tmpdir()
    path = tmp / "notify"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(path))
    try:
        d = daemon_factory(env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000"})
        device = d.api.get_json("/v1/device")["device"]["name"]
        lines = _notifications(notify, "READY=1", timeout=10)
        assert "READY=1" in lines, f"no READY=1: {lines}\n{d.log()}"
        # Watchdog pings come every half period (200 ms here).
        lines += _notifications(notify, "WATCHDOG=1", timeout=5)
        assert "WATCHDOG=1" in lines, f"no WATCHDOG=1 within 5 s: {lines}"
        status = [ln[len("STATUS="):] for ln in lines if ln.startswith("STATUS=")]
        assert status, f"no STATUS= line: {lines}"
        assert any(device in s for s in status), f"STATUS does not name {device!r}: {status}"
        d.signal(signal.SIGTERM)
        lines = _notifications(notify, "STOPPING=1", timeout=30)
        assert "STOPPING=1" in lines, f"no STOPPING=1 after SIGTERM: {lines}\n{d.log()}"
        d.stop()
    finally:
        notify.close()


def _stop_mid_job(d, phantom, follow):
    ids = upload_phantom(d.api, phantom)
    job_id = submit(d.api, server_job(phantom, ids, count=LONG_SEEDS, rng_seed=11))
    submit(d.api, server_job(phantom, ids, count=100, rng_seed=12))   # left queued
    wait_running(d.api, job_id)
    curl = None
    if follow:
        curl = subprocess.Popen([*d.api.curl_args(f"/v1/jobs/{job_id}/tractogram"), "-N",
                                 "-o", "/dev/null"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(0.5)   # the request reaches its handler and waits for data
        assert curl.poll() is None, "the tractogram request ended before the job did"
    time.sleep(0.5)
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    code = d.wait_exit(STOP_DURING_JOB_S)
    took = time.monotonic() - t0
    try:
        if code is None:
            d.proc.kill()
            d.proc.wait()
            d.stopped = True
            pytest.fail(f"the daemon still ran {STOP_DURING_JOB_S} s after SIGTERM with job "
                        f"{job_id} ({LONG_SEEDS} seeds) running (killed)\nlog:\n{d.log(15)}",
                        pytrace=False)
        assert code == 0, f"exit code {code} ({took:.1f} s after SIGTERM)\nlog:\n{d.log()}"
        d.stop()   # the socket file is gone
        log = d.log(200)
        assert re.search(rf"job={job_id} (cancelled|failed)", log), log
        if curl is not None:
            assert curl.wait(timeout=10) is not None
    finally:
        if curl is not None and curl.poll() is None:
            curl.kill()
            curl.wait()


def test_sigterm_during_running_job(daemon_factory, phantom):
    """SIGTERM while a long job runs (and another is queued): the daemon
    stops the job within a chunk and exits 0 within a few seconds, removing
    its socket."""
    _stop_mid_job(daemon_factory(), phantom, follow=False)


def test_sigterm_with_client_following_job(daemon_factory, phantom):
    """SIGTERM while a client streams the running job's tractogram: the
    daemon still exits 0 within a few seconds (the follower's connection is
    closed, nothing crashes) and the client's transfer ends."""
    _stop_mid_job(daemon_factory(), phantom, follow=True)


def test_live_socket_is_not_replaced(daemon_factory, tractd):
    """A second daemon on the socket path of a live one refuses to start
    (non-zero exit) and leaves the first one's socket working."""
    first = daemon_factory(tcp=False)
    second = subprocess.run([tractd, "serve", "--listen-unix", str(first.sock),
                             "--state-dir", str(first.sock.parent / "state2")],
                            capture_output=True, text=True, timeout=60, env=daemon_env())
    assert second.returncode != 0, f"a second daemon started on a live socket:\n{second.stderr}"
    assert "error" in second.stderr, second.stderr
    assert first.sock.exists(), "the second daemon removed the first one's socket"
    assert first.api.get("/healthz").status == 200


def test_stale_socket_is_replaced(daemon_factory):
    """A socket file left by a dead process (nobody listening) is replaced."""
    tmp = short_tmpdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp / "tractd.sock"))
    stale.close()
    assert (tmp / "tractd.sock").exists()
    d = daemon_factory(sock_dir=tmp, tcp=False)
    assert d.api.get("/healthz").status == 200


def test_configuration_errors(tractd, tmp_path):
    """`tractd serve` refuses an unknown --set key or a bad value with exit 3
    and the key in the message, before it opens anything; --print-config
    prints the effective configuration and exits 0."""
    state = tmp_path / "state"
    for pair, key in (("no_such_key=1", "no_such_key"), ("max_upload_bytes=lots",
                                                         "max_upload_bytes")):
        p = subprocess.run([tractd, "serve", "--state-dir", str(state), "--listen-unix",
                            str(tmp_path / "s.sock"), "--set", pair],
                           capture_output=True, text=True, timeout=30, env=daemon_env())
        assert p.returncode == 3, f"--set {pair}: exit {p.returncode}\n{p.stderr}"
        assert key in p.stderr, p.stderr
    assert not (tmp_path / "s.sock").exists()
    p = subprocess.run([tractd, "serve", "--state-dir", str(state), "--set",
                        "max_upload_bytes=2M", "--print-config"],
                       capture_output=True, text=True, timeout=30, env=daemon_env())
    assert p.returncode == 0, p.stderr
    assert re.search(r"^max_upload_bytes\s*=\s*(2M|2097152)\s*$", p.stdout, re.M), p.stdout
    assert re.search(rf"^state_dir\s*=\s*{re.escape(str(state))}\s*$", p.stdout, re.M), p.stdout


def test_socket_file(daemon):
    """The daemon's Unix socket is a socket file of mode 0660 (service.h)."""
    st = os.stat(daemon.sock)
    assert stat.S_ISSOCK(st.st_mode), oct(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o660, oct(stat.S_IMODE(st.st_mode))


NOGROUP = 65534   # Debian's nogroup, the primary group of nobody (uid 65534)


def test_socket_group_and_mode(daemon_factory, tractd, tmp_path):
    """socket_group and socket_mode share the daemon with a group without
    systemd (a chmod was lost at each restart): with socket_group=nogroup
    the socket is root:nogroup 0660, so nobody (in nogroup) may connect and
    uid 23456 may not; socket_mode=0666 lets everyone in. A group that does
    not exist stops the daemon at start, naming socket_group."""
    d = daemon_factory(tcp=False, sets=["socket_group=nogroup"])
    for parent in (d.sock.parent, d.sock.parent.parent):
        if str(parent).startswith("/tmp/"):
            os.chmod(parent, 0o755)
    st = os.stat(d.sock)
    assert (st.st_gid, stat.S_IMODE(st.st_mode)) == (NOGROUP, 0o660), (st.st_gid, oct(st.st_mode))
    assert d.unix.as_user(65534).get("/healthz").status == 200
    with pytest.raises(CurlError):
        d.unix.as_user(23456).get("/healthz")
    d.stop()
    d = daemon_factory(tcp=False, sets=["socket_mode=0666"])
    for parent in (d.sock.parent, d.sock.parent.parent):
        if str(parent).startswith("/tmp/"):
            os.chmod(parent, 0o755)
    assert stat.S_IMODE(os.stat(d.sock).st_mode) == 0o666
    assert d.unix.as_user(23456).get("/healthz").status == 200
    p = subprocess.run([tractd, "serve", "--state-dir", str(tmp_path / "state"), "--listen-unix",
                        str(tmp_path / "s.sock"), "--set", "socket_group=no-such-group-here"],
                       capture_output=True, text=True, timeout=30, env=daemon_env())
    assert p.returncode != 0 and "socket_group" in p.stderr, (p.returncode, p.stderr)
    assert not (tmp_path / "s.sock").exists()
