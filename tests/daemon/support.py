"""Helpers of the `tractd serve` tests: a daemon process, HTTP through curl,
phantom volumes and jobs, reference runs of `tractd run`, Prometheus text.

HTTP goes through the curl command line (`curl --unix-socket SOCK
http://localhost/...` and `curl http://127.0.0.1:PORT/...`), as a user would
talk to the daemon; Python's sockets are used only where curl cannot do the
job (the sd_notify datagram socket, a recording proxy).
"""
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CURL = shutil.which("curl") or "/usr/bin/curl"

# How long a daemon may take to answer /healthz after it was started (Vulkan
# instance, device and the worker thread; about a second on lavapipe).
READY_TIMEOUT_S = 60
# SIGTERM to exit: the brief's bound for a clean stop.
STOP_TIMEOUT_S = 30
# A job on the default phantom of at most a few thousand seeds.
JOB_TIMEOUT_S = 120

JOB_ENDED = ("done", "failed", "cancelled")
TRK_N_COUNT = slice(988, 992)

# Environment variables that would make the daemon believe it runs under
# systemd; the tests set them explicitly where they mean to.
SYSTEMD_VARS = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
                "WATCHDOG_USEC", "WATCHDOG_PID")


# --------------------------------------------------------------------------- HTTP via curl

@dataclass
class Response:
    """One HTTP answer: status, headers (names lower-cased) and body."""
    status: int
    headers: dict
    body: bytes
    request: str = ""

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise AssertionError(f"{self.request}: the body is not JSON ({e}): "
                                 f"{self.body[:300]!r}") from None

    @property
    def error(self):
        """The `error` object of an error body."""
        doc = self.json()
        assert isinstance(doc, dict) and isinstance(doc.get("error"), dict), (
            f"{self.request}: not an error body: {doc}")
        return doc["error"]

    def __str__(self):
        return f"{self.request} -> {self.status} {self.body[:400]!r}"


def _parse_headers(text):
    """The last header block of curl's -D output (after 100 Continue etc.)."""
    blocks = [b for b in re.split(r"\r?\n\r?\n", text) if b.strip()]
    if not blocks:
        return {}
    headers = {}
    for line in blocks[-1].splitlines()[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return headers


class Endpoint:
    """Where a daemon listens: a Unix socket or a TCP port on 127.0.0.1, and
    how to ask: the bearer token sent on every request (TCP), and the uid
    that curl runs as (Unix sockets identify their peer by uid)."""

    def __init__(self, unix_socket=None, port=None, token=None, uid=None):
        assert (unix_socket is None) != (port is None)
        self.unix_socket = str(unix_socket) if unix_socket else None
        self.port = port
        self.token = token
        self.uid = uid

    def auth_args(self):
        """curl's -H for the token, if any."""
        return ["-H", f"Authorization: Bearer {self.token}"] if self.token else []

    def as_user(self, uid):
        """The same endpoint, with curl run as uid."""
        return Endpoint(self.unix_socket, self.port, self.token, uid)

    def with_token(self, token):
        """The same endpoint with another token (None: none)."""
        return Endpoint(self.unix_socket, self.port, token, self.uid)

    def __repr__(self):
        return f"unix:{self.unix_socket}" if self.unix_socket else f"tcp:127.0.0.1:{self.port}"

    def tractctl_args(self):
        """tractctl's options to reach this endpoint."""
        if self.unix_socket:
            return ["--socket", self.unix_socket]
        return ["--server", f"http://127.0.0.1:{self.port}",
                *(["--token", self.token] if self.token else [])]

    def url(self, path):
        host = "http://localhost" if self.unix_socket else f"http://127.0.0.1:{self.port}"
        return host + path

    def curl_args(self, path):
        """curl's arguments to reach path (without -o etc.)."""
        where = ["--unix-socket", self.unix_socket] if self.unix_socket else []
        return [CURL, "-sS", *where, *self.auth_args(), self.url(path)]

    def request(self, method, path, body=None, body_file=None, content_type=None,
                headers=(), timeout=JOB_TIMEOUT_S):
        """Sends one request with curl; returns a Response. Fails the test when
        curl cannot talk to the daemon at all."""
        with tempfile.TemporaryDirectory(prefix="tractd-curl-") as tmp:
            head_path = Path(tmp) / "headers"
            body_path = Path(tmp) / "body"
            args = [CURL, "-sS", "--max-time", str(timeout), "-D", str(head_path),
                    "-o", str(body_path), "-w", "%{http_code}"]
            if self.unix_socket:
                args += ["--unix-socket", self.unix_socket]
            has_body = body is not None or body_file is not None
            if method == "HEAD":
                args.append("--head")
            elif not (method == "GET" and not has_body) and not (method == "POST" and has_body):
                args += ["-X", method]
            stdin = None
            if body_file is not None:
                args += ["--data-binary", f"@{body_file}"]
            elif body is not None:
                args += ["--data-binary", "@-"]
                stdin = body.encode() if isinstance(body, str) else bytes(body)
            if content_type:
                args += ["-H", f"Content-Type: {content_type}"]
            args += self.auth_args()
            for h in headers:
                args += ["-H", h]
            args.append(self.url(path))
            what = f"{method} {path} ({self})"
            kw = {}
            if self.uid is not None:
                # curl writes its files as that user: the directory is theirs.
                os.chown(tmp, self.uid, -1)
                if body_file is not None:
                    stdin = Path(body_file).read_bytes()
                    args[args.index(f"@{body_file}")] = "@-"
                kw["user"] = self.uid
                kw["group"] = self.uid
                kw["extra_groups"] = []
                what += f" as uid {self.uid}"
            try:
                proc = subprocess.run(args, input=stdin, capture_output=True,
                                      timeout=timeout + 10, **kw)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{what}: curl did not finish in {timeout + 10} s", pytrace=False)
            if proc.returncode != 0:
                raise CurlError(what, proc.returncode, proc.stderr.decode(errors="replace"))
            status = int(proc.stdout.decode().strip() or 0)
            headers_out = _parse_headers(head_path.read_text(errors="replace")
                                         if head_path.exists() else "")
            # curl --head writes the headers to -o: a HEAD answer has no body.
            data = body_path.read_bytes() if body_path.exists() and method != "HEAD" else b""
            return Response(status, headers_out, data, what)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def get_json(self, path, status=200):
        r = self.get(path)
        assert r.status == status, str(r)
        return r.json()

    def post_json(self, path, doc, **kw):
        body = doc if isinstance(doc, (str, bytes)) else json.dumps(doc)
        return self.request("POST", path, body=body, content_type="application/json", **kw)

    def upload(self, path):
        """POST /v1/volumes with the bytes of path."""
        return self.request("POST", "/v1/volumes", body_file=path,
                            content_type="application/octet-stream")


class CurlError(AssertionError):
    def __init__(self, what, code, stderr):
        super().__init__(f"{what}: curl exited with {code}: {stderr.strip()}")
        self.code = code


# --------------------------------------------------------------------------- the daemon

def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Set for the session by conftest (removed at its end); /tmp when unset.
SHORT_BASE = None


def short_tmpdir(prefix="t-"):
    """A directory with a short path under /tmp: a Unix socket path must fit
    108 bytes, which pytest's tmp_path does not promise."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=SHORT_BASE or "/tmp"))


def daemon_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in SYSTEMD_VARS}
    if extra:
        env.update(extra)
    return env


# The tests' tokens file, written next to each daemon that listens on TCP:
# an admin token, so that the TCP endpoint sees the jobs the Unix socket's
# root submits (as the tests before identities expected).
TEST_TOKEN = "test-admin-token-0123456789abcdef"
TEST_TOKENS = f"# the tests' tokens\ntests {TEST_TOKEN} admin\n"


def write_tokens(path, text=TEST_TOKENS, mode=0o600):
    """A tokens file (mode 0600 unless told)."""
    path = Path(path)
    path.write_text(text)
    os.chmod(path, mode)
    return path


class Daemon:
    """A `tractd serve` process started by a test, and how to reach it."""

    def __init__(self, argv, proc, log_path, state_dir, sock, port, token=TEST_TOKEN):
        self.argv = argv
        self.proc = proc
        self.log_path = Path(log_path)
        self.state_dir = Path(state_dir)
        self.sock = Path(sock) if sock else None
        self.port = port
        self.token = token
        self.unix = Endpoint(unix_socket=sock) if sock else None
        self.tcp = Endpoint(port=port, token=token) if port else None
        self.stopped = False

    @property
    def endpoints(self):
        return [e for e in (self.unix, self.tcp) if e]

    @property
    def api(self):
        """The endpoint tests use by default: the Unix socket."""
        return self.unix or self.tcp

    @property
    def pid(self):
        return self.proc.pid

    def log(self, tail=60):
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-tail:])

    def wait_ready(self, timeout=READY_TIMEOUT_S):
        """Polls /healthz over the Unix socket (or TCP) until it answers 200."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"tractd serve exited with {self.proc.returncode} before it was "
                            f"ready\n$ {' '.join(self.argv)}\nlog:\n{self.log()}", pytrace=False)
            if self.sock is None or self.sock.exists():
                try:
                    r = self.api.request("GET", "/healthz", timeout=5)
                    if r.status == 200:
                        return
                    last = str(r)
                except CurlError as e:
                    last = str(e)
            time.sleep(0.05)
        pytest.fail(f"tractd serve did not answer /healthz within {timeout} s ({last})\n"
                    f"log:\n{self.log()}", pytrace=False)

    def signal(self, signo=signal.SIGTERM):
        self.proc.send_signal(signo)

    def wait_exit(self, timeout):
        """Exit code, or None when the process still runs after timeout s."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=STOP_TIMEOUT_S, check=True):
        """SIGTERM, then asserts exit code 0 within timeout s and that the
        socket file the daemon created is gone (SIGKILL when it hangs)."""
        if self.stopped:
            return self.proc.returncode
        self.stopped = True
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        t0 = time.monotonic()
        code = self.wait_exit(timeout)
        took = time.monotonic() - t0
        if code is None:
            self.proc.kill()
            self.proc.wait()
        if check:
            assert code is not None, (f"tractd serve did not exit within {timeout} s of "
                                      f"SIGTERM\nlog:\n{self.log()}")
            assert code == 0, (f"tractd serve exited with {code} after SIGTERM "
                               f"({took:.1f} s)\nlog:\n{self.log()}")
            if self.sock is not None:
                assert not self.sock.exists(), (
                    f"the socket file {self.sock} is still there after the daemon exited\n"
                    f"log:\n{self.log()}")
        return code


def start_daemon(tractd, *, state_dir=None, sets=(), tcp=True, unix=True, env=None,
                 pipeline_cache=None, extra_args=(), wait=True, sock_dir=None, argv_prefix=(),
                 tokens=TEST_TOKENS):
    """Starts `tractd serve` with a temporary state dir, Unix socket and TCP
    port, `--set log_level=debug`, stdout and stderr in DIR/daemon.log, and
    waits until /healthz answers. With TCP, tokens (the file's text; None:
    no tokens_file) go to DIR/tokens. The caller stops it (Daemon.stop)."""
    sock_dir = Path(sock_dir) if sock_dir else short_tmpdir()
    state_dir = Path(state_dir) if state_dir else sock_dir / "state"
    sock = sock_dir / "tractd.sock" if unix else None
    port = free_port() if tcp else None
    argv = [*argv_prefix, tractd, "serve", "--state-dir", str(state_dir),
            "--set", "log_level=debug"]
    if unix:
        argv += ["--listen-unix", str(sock)]
    if tcp:
        argv += ["--listen-tcp", f"127.0.0.1:{port}"]
    if tcp and tokens is not None:
        argv += ["--set", f"tokens_file={write_tokens(sock_dir / 'tokens', tokens)}"]
    if pipeline_cache:
        argv += ["--set", f"pipeline_cache={pipeline_cache}"]
    for s in sets:
        argv += ["--set", s]
    argv += list(extra_args)
    log_path = sock_dir / "daemon.log"
    log = open(log_path, "ab")
    try:
        proc = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=daemon_env(env))
    finally:
        log.close()
    d = Daemon([str(a) for a in argv], proc, log_path, state_dir, sock, port)
    if wait:
        try:
            d.wait_ready()
        except BaseException:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            raise
    return d


@contextlib.contextmanager
def running_daemon(tractd, **kw):
    """start_daemon as a context: stopped (and checked) at the end."""
    d = start_daemon(tractd, **kw)
    try:
        yield d
    finally:
        if not d.stopped:
            d.stop()


# --------------------------------------------------------------------------- volumes and jobs

def sha256_id(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


# The phantom's files a job needs, by their place in the job.
PHANTOM_INPUTS = {"odf": "odf.nii.gz", "stop_map": "fa.nii.gz", "roi": "seed_roi.nii.gz"}


def upload_phantom(endpoint, phantom):
    """Uploads odf, fa and seed ROI; returns {"odf": id, "stop_map": id, "roi": id}."""
    ids = {}
    for key, name in PHANTOM_INPUTS.items():
        r = endpoint.upload(phantom.path(name))
        assert r.status in (200, 201), str(r)
        ids[key] = r.json()["id"]
    return ids


def base_job(phantom):
    """The phantom's job.json without inputs, seeds' roi or output."""
    job = json.loads(json.dumps(phantom.job))
    job.pop("output", None)
    return job


def make_job(phantom, odf, stop_map, roi, count=2000, rng_seed=0, tracking=None, **seeds):
    """A job on the phantom's parameters with the given inputs (volume ids or
    paths), seed count and rng_seed."""
    job = base_job(phantom)
    job["inputs"] = {"odf": str(odf), "stop_map": str(stop_map)}
    job["seeds"] = {"roi": str(roi), "count": count, "rng_seed": rng_seed, **seeds}
    if tracking:
        job.setdefault("tracking", {}).update(tracking)
    return job


def server_job(phantom, ids, **kw):
    return make_job(phantom, ids["odf"], ids["stop_map"], ids["roi"], **kw)


def local_job(phantom, **kw):
    return make_job(phantom, phantom.path(PHANTOM_INPUTS["odf"]),
                    phantom.path(PHANTOM_INPUTS["stop_map"]),
                    phantom.path(PHANTOM_INPUTS["roi"]), **kw)


def submit(endpoint, job, query=""):
    """POST /v1/jobs; asserts 202 and the Location header; returns the id."""
    r = endpoint.post_json("/v1/jobs" + query, job)
    assert r.status == 202, str(r)
    doc = r.json()
    assert re.fullmatch(r"j-[0-9a-f]{16}", doc["id"]), doc
    assert doc["location"] == f"/v1/jobs/{doc['id']}", doc
    assert r.headers.get("location") == doc["location"], (r.headers, doc)
    return doc["id"]


def job_status(endpoint, job_id):
    r = endpoint.get(f"/v1/jobs/{job_id}")
    assert r.status == 200, str(r)
    return r.json()


def wait_job(endpoint, job_id, states=JOB_ENDED, timeout=JOB_TIMEOUT_S, poll=0.05):
    """Polls GET /v1/jobs/ID until its status is in states; returns the JOB."""
    deadline = time.monotonic() + timeout
    while True:
        doc = job_status(endpoint, job_id)
        if doc["status"] in states:
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still {doc['status']} after {timeout} s: {doc}")
        time.sleep(poll)


def wait_running(endpoint, job_id, min_seeds_done=0, timeout=JOB_TIMEOUT_S):
    """Waits until the job runs (and has done min_seeds_done seeds); fails
    when it ends first."""
    deadline = time.monotonic() + timeout
    while True:
        doc = job_status(endpoint, job_id)
        assert doc["status"] in ("queued", "running"), f"the job ended early: {doc}"
        if doc["status"] == "running" and doc["progress"]["seeds_done"] >= min_seeds_done:
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} not running after {timeout} s: {doc}")
        time.sleep(0.05)


def fetch_tractogram(endpoint, job_id):
    r = endpoint.get(f"/v1/jobs/{job_id}/tractogram")
    assert r.status == 200, str(r)
    assert r.headers.get("content-type", "").startswith("application/octet-stream"), r.headers
    return r.body


def run_to_completion(endpoint, job, timeout=JOB_TIMEOUT_S):
    """Submits, waits for done, returns (JOB, TRK bytes)."""
    job_id = submit(endpoint, job)
    doc = wait_job(endpoint, job_id, timeout=timeout)
    assert doc["status"] == "done", f"job {job_id}: {doc}"
    return doc, fetch_tractogram(endpoint, job_id)


def assert_same_trk(got, want, what="tractogram", allow_zero_n_count=False):
    """Byte equality, naming the first difference. allow_zero_n_count: a copy
    streamed before the job ended may have 0 in n_count (bytes 988..991), and
    only there."""
    if allow_zero_n_count and len(got) == len(want) and len(got) >= 1000:
        n_count = got[TRK_N_COUNT]
        if n_count == b"\0\0\0\0":
            got = got[:988] + want[TRK_N_COUNT] + got[992:]
    if got == want:
        return
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    raise AssertionError(f"{what} differs from the reference: {len(got)} vs {len(want)} bytes, "
                         f"first difference at byte {first}")


def trk_n_count(data):
    return int.from_bytes(data[TRK_N_COUNT], "little", signed=True)


# --------------------------------------------------------------------------- references

class References:
    """`tractd run` of jobs on local paths, each run once per session."""

    def __init__(self, tractd, workdir, pipeline_cache):
        self.tractd = tractd
        self.workdir = Path(workdir)
        self.pipeline_cache = pipeline_cache
        self._done = {}
        self._lock = threading.Lock()
        self._locks = {}

    def trk(self, job):
        """The TRK bytes `tractd run` writes for job (local paths)."""
        return self._run(job)[0]

    def stats(self, job):
        """The statistics (--stats-json) of `tractd run` of job (local paths)."""
        return self._run(job)[1]

    def _run(self, job):
        key = json.dumps(job, sort_keys=True)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._done:
                name = f"ref{len(self._locks)}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"
                job_path = self.workdir / f"{name}.json"
                job_path.write_text(json.dumps(job, indent=1))
                out = self.workdir / f"{name}.trk"
                stats = self.workdir / f"{name}.stats.json"
                proc = subprocess.run([self.tractd, "run", str(job_path), "-o", str(out), "-q",
                                       "--stats-json", str(stats),
                                       "--pipeline-cache", str(self.pipeline_cache)],
                                      capture_output=True, text=True, timeout=600)
                assert proc.returncode == 0, (f"reference run failed ({proc.returncode}):\n"
                                              f"{proc.stderr}")
                self._done[key] = (out.read_bytes(), json.loads(stats.read_text()))
            return self._done[key]


# --------------------------------------------------------------------------- metrics

METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


@dataclass
class Metrics:
    help: dict = field(default_factory=dict)     # name -> text
    type: dict = field(default_factory=dict)     # name -> counter/gauge/...
    samples: dict = field(default_factory=dict)  # 'name{labels}' -> float

    def value(self, name, default=None):
        return self.samples.get(name, default)


def parse_metrics(text):
    """Prometheus text format 0.0.4; asserts every line is well formed."""
    m = Metrics()
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            m.help[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            m.type[name] = kind
        elif line.startswith("#"):
            continue
        else:
            match = METRIC_LINE.match(line)
            assert match, f"malformed metrics line: {line!r}"
            m.samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return m


def get_metrics(endpoint):
    r = endpoint.get("/metrics")
    assert r.status == 200, str(r)
    return parse_metrics(r.body.decode())


# --------------------------------------------------------------------------- recording proxy

class RecordingProxy:
    """A Unix-socket proxy in front of a daemon's socket that records the
    request lines ("POST /v1/volumes") that pass through it: what a client
    asked, whatever the daemon answered."""

    REQUEST_LINE = re.compile(rb"(GET|HEAD|POST|PUT|DELETE|PATCH) (/[^ \r\n]*) HTTP/1\.[01]\r\n")

    def __init__(self, listen_path, target_path):
        self.listen_path = str(listen_path)
        self.target_path = str(target_path)
        self.requests = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.listen_path)
        self._server.listen(64)
        self._closing = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._closing:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target_path)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False),
                             daemon=True).start()

    def _pump(self, src, dst, record):
        pending = b""
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if record:
                    pending += data
                    last = 0
                    for m in self.REQUEST_LINE.finditer(pending):
                        with self._lock:
                            self.requests.append(f"{m.group(1).decode()} {m.group(2).decode()}")
                        last = m.end()
                    pending = pending[max(last, len(pending) - 4096):]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def clear(self):
        with self._lock:
            self.requests.clear()

    def recorded(self):
        with self._lock:
            return list(self.requests)

    def close(self):
        self._closing = True
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.listen_path)
