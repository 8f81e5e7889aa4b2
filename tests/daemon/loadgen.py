"""A load generator for `tractd serve` (issue 8, "Load"): many client threads
at once over the Unix socket and TCP, mixing valid small jobs (each result
checked byte for byte against `tractd run` of the same job), jobs streamed
with ?wait=stream, cancels and deletes of one's own jobs, status polling,
clients that leave mid-request, and malformed requests that must each get their 4xx status and JSON error
code (proto/errors.def, proto/API.md).

Standard library only (http.client), so that tests/daemon/test_load.py and
bench/load.py share it; a request is one connection (Connection: close), as
curl makes them. Per-user queue limits answer 429 queue_full, which a client
takes as "retry after a short sleep" and counts.
"""
import http.client
import json
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

UNKNOWN_JOB = "j-0000000000000000"
UNKNOWN_VOLUME = "sha256:" + "0" * 64
JOB_ENDED = ("done", "failed", "cancelled")
TRK_N_COUNT = slice(988, 992)
# A 429 is retried after this long, at most this many times per submission.
RETRY_SLEEP_S = 0.05
RETRY_MAX = 2000
POLL_S = 0.05
JOB_TIMEOUT_S = 120


@dataclass
class Ident:
    """Who asks, and where: a Unix socket (the peer's uid is the identity)
    or 127.0.0.1:port with a bearer token (None: none is sent)."""
    name: str
    unix_socket: str = None
    port: int = None
    token: str = None
    keepalive: bool = False     # reuse one connection per client thread


@dataclass
class Resp:
    status: int
    headers: dict
    body: bytes
    what: str

    def json(self):
        return json.loads(self.body)

    def __str__(self):
        return f"{self.what} -> {self.status} {self.body[:300]!r}"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


_conns = threading.local()


def _connect(ident, timeout):
    if ident.unix_socket:
        return _UnixConnection(ident.unix_socket, timeout)
    return http.client.HTTPConnection("127.0.0.1", ident.port, timeout=timeout)


def request(ident, method, path, body=None, headers=None, timeout=JOB_TIMEOUT_S):
    """One request; returns a Resp (raises OSError / http.client errors when
    the daemon does not answer). A fresh connection closed after the answer,
    or with ident.keepalive the calling thread's open connection to that
    address, kept while the daemon keeps it (HTTP/1.1 persistent)."""
    where = (ident.unix_socket, ident.port)
    cache = _conns.__dict__.setdefault("by_addr", {}) if ident.keepalive else {}
    conn = cache.pop(where, None) or _connect(ident, timeout)
    hdrs = {} if ident.keepalive else {"Connection": "close"}
    if ident.token:
        hdrs["Authorization"] = f"Bearer {ident.token}"
    if body is not None:
        if isinstance(body, str):
            body = body.encode()
        hdrs["Content-Type"] = "application/json"
    hdrs.update(headers or {})
    keep = False
    try:
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        keep = ident.keepalive and not r.will_close
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data,
                    f"{method} {path} ({ident.name})")
    finally:
        if keep:
            cache[where] = conn
        else:
            conn.close()


def rss_kib(pid):
    """VmRSS of a process in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100 * (len(v) - 1)))))
    return v[k]


@dataclass
class Stats:
    """What a run saw; merged from every client thread under a lock."""
    requests: int = 0
    by_status: dict = field(default_factory=dict)      # HTTP status -> count
    bad_by_code: dict = field(default_factory=dict)    # "400 malformed_json" -> count
    retries_429: int = 0
    aborted: int = 0
    jobs_checked: int = 0
    streams_checked: int = 0
    cancels: dict = field(default_factory=dict)        # outcome -> count
    latencies: list = field(default_factory=list)      # s, submit to result in hand
    failures: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, r):
        with self.lock:
            self.requests += 1
            self.by_status[r.status] = self.by_status.get(r.status, 0) + 1

    def add(self, name, key, n=1):
        with self.lock:
            d = getattr(self, name)
            d[key] = d.get(key, 0) + n

    def fail(self, msg):
        with self.lock:
            self.failures.append(msg)


class LoadError(AssertionError):
    pass


class Load:
    """One load run against a daemon.

    users: Idents whose jobs are checked; two of them that are not admins
    (others[0], others[1]) check that each other's jobs are 404.
    job_for(count, rng_seed): a job document on the uploaded volumes.
    want: {(count, rng_seed): TRK bytes of `tractd run`}.
    tcp_port: where TCP listens (401 cases). oversized: a body size over the
    daemon's max_request_bytes. over_seeds: a seed count over
    max_seeds_per_job. cancel_seeds: seeds of a job cancelled at once.
    """

    def __init__(self, users, strangers, job_for, want, tcp_port, oversized, over_seeds,
                 cancel_seeds=3000, seed=1):
        self.users = users
        self.strangers = strangers
        self.job_for = job_for
        self.want = want
        self.keys = sorted(want)
        self.tcp_port = tcp_port
        self.oversized = oversized
        self.over_seeds = over_seeds
        self.cancel_seeds = cancel_seeds
        self.rng = random.Random(seed)
        self.stats = Stats()

    # ------------------------------------------------------------------ helpers

    def _req(self, ident, method, path, body=None, headers=None):
        r = request(ident, method, path, body=body, headers=headers)
        self.stats.count(r)
        return r

    def _expect(self, r, status, code=None, field_=None):
        if r.status != status:
            raise LoadError(f"expected {status}: {r}")
        if code is not None:
            if not r.headers.get("content-type", "").startswith("application/json"):
                raise LoadError(f"not JSON: {r} {r.headers}")
            err = r.json().get("error")
            if not isinstance(err, dict) or set(err) != {"code", "field", "message"}:
                raise LoadError(f"not an error body: {r}")
            if err["code"] != code or (field_ is not None and err["field"] != field_):
                raise LoadError(f"expected {status} {code} ({field_}): {r}")
            self.stats.add("bad_by_code", f"{status} {code}")
        return r

    def _submit(self, ident, job, query=""):
        """POST /v1/jobs, retrying 429 queue_full; returns the Resp (202, or
        200 for ?wait=stream)."""
        body = json.dumps(job)
        for _ in range(RETRY_MAX):
            r = self._req(ident, "POST", "/v1/jobs" + query, body)
            if r.status != 429:
                return r
            self._expect(r, 429, "queue_full")
            with self.stats.lock:
                self.stats.retries_429 += 1
            time.sleep(RETRY_SLEEP_S * (1 + self.rng.random()))
        raise LoadError(f"still 429 after {RETRY_MAX} tries: {r}")

    def _wait(self, ident, job_id):
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while True:
            r = self._expect(self._req(ident, "GET", f"/v1/jobs/{job_id}"), 200)
            doc = r.json()
            if doc["status"] in JOB_ENDED:
                return doc
            if time.monotonic() > deadline:
                raise LoadError(f"job {job_id} still {doc['status']} after {JOB_TIMEOUT_S} s")
            time.sleep(POLL_S)

    def _same(self, got, key, what, allow_zero_n_count=False):
        want = self.want[key]
        if allow_zero_n_count and len(got) == len(want) and got[TRK_N_COUNT] == b"\0\0\0\0":
            got = got[:988] + want[TRK_N_COUNT] + got[992:]
        if got != want:
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                         min(len(got), len(want)))
            raise LoadError(f"{what}: {len(got)} bytes vs {len(want)} of `tractd run` "
                            f"{key}, first difference at byte {first}")

    # ------------------------------------------------------------------ tasks

    def task_job(self, i):
        """Submit, poll, fetch, compare; a bad ?format=, the other user's
        404, then delete (204) and the 404 after it."""
        ident = self.users[i % len(self.users)]
        key = self.keys[i % len(self.keys)]
        t0 = time.monotonic()
        r = self._expect(self._submit(ident, self.job_for(*key)), 202)
        job_id = r.json()["id"]
        doc = self._wait(ident, job_id)
        if doc["status"] != "done":
            raise LoadError(f"job {job_id} {key}: {doc}")
        r = self._expect(self._req(ident, "GET", f"/v1/jobs/{job_id}/tractogram"), 200)
        self.stats.latencies.append(time.monotonic() - t0)
        self._same(r.body, key, f"job {job_id} of {ident.name}")
        self._expect(self._req(ident, "GET", f"/v1/jobs/{job_id}/tractogram?format=xyz"),
                     400, "invalid_parameter", "format")
        if ident in self.strangers:
            other = self.strangers[1 - self.strangers.index(ident)]
            self._expect(self._req(other, "GET", f"/v1/jobs/{job_id}"), 404, "not_found")
            self._expect(self._req(other, "DELETE", f"/v1/jobs/{job_id}"), 404, "not_found")
        self._expect(self._req(ident, "DELETE", f"/v1/jobs/{job_id}"), 204)
        self._expect(self._req(ident, "GET", f"/v1/jobs/{job_id}"), 404, "not_found")
        with self.stats.lock:
            self.stats.jobs_checked += 1

    def task_stream(self, i):
        """POST ?wait=stream: the TRK is the answer; then delete the job."""
        ident = self.users[i % len(self.users)]
        key = self.keys[(i // 2) % len(self.keys)]
        t0 = time.monotonic()
        r = self._expect(self._submit(ident, self.job_for(*key), "?wait=stream"), 200)
        self.stats.latencies.append(time.monotonic() - t0)
        job_id = r.headers.get("x-tractd-job")
        self._same(r.body, key, f"streamed job {job_id} of {ident.name}",
                   allow_zero_n_count=True)
        self._expect(self._req(ident, "DELETE", f"/v1/jobs/{job_id}"), 204)
        with self.stats.lock:
            self.stats.streams_checked += 1

    def task_cancel(self, i):
        """Submit a larger job and cancel it at once: 202 cancelled (or 204
        if it had ended); it ends cancelled (or done, if the last chunk
        finished first), its tractogram of a cancelled job is 409; then 204."""
        ident = self.users[i % len(self.users)]
        job = self.job_for(self.cancel_seeds, 7)
        r = self._expect(self._submit(ident, job), 202)
        job_id = r.json()["id"]
        r = self._req(ident, "DELETE", f"/v1/jobs/{job_id}")
        if r.status == 204:
            self.stats.add("cancels", "already ended: deleted")
            return
        self._expect(r, 202)
        if r.json()["status"] != "cancelled":
            raise LoadError(f"cancel answered {r}")
        doc = self._wait(ident, job_id)
        if doc["status"] == "cancelled":
            self._expect(self._req(ident, "GET", f"/v1/jobs/{job_id}/tractogram"), 409,
                         "conflict")
        elif doc["status"] != "done":
            raise LoadError(f"cancelled job {job_id} ended {doc}")
        self.stats.add("cancels", doc["status"])
        self._expect(self._req(ident, "DELETE", f"/v1/jobs/{job_id}"), 204)

    def bad_cases(self):
        """(name, ident, method, path, body, headers, status, code, field)."""
        u = self.users[0]
        tcp = Ident("tcp", port=self.tcp_port)
        good = self.job_for(*self.keys[0])

        def edit(f):
            j = json.loads(json.dumps(good))
            f(j)
            return json.dumps(j)

        return [
            ("not-json", u, "POST", "/v1/jobs", "not json", None, 400, "malformed_json", ""),
            ("truncated", u, "POST", "/v1/jobs", '{"inputs": ', None, 400, "malformed_json", ""),
            ("empty", u, "POST", "/v1/jobs", "", None, 400, "malformed_json", ""),
            ("unknown-key", u, "POST", "/v1/jobs", edit(lambda j: j.update(bogus=1)), None,
             400, "invalid_parameter", "bogus"),
            ("max-angle", u, "POST", "/v1/jobs",
             edit(lambda j: j.setdefault("tracking", {}).update(max_angle=120)), None,
             400, "invalid_parameter", "tracking.max_angle"),
            ("count-0", u, "POST", "/v1/jobs", edit(lambda j: j["seeds"].update(count=0)),
             None, 400, "invalid_parameter", "seeds.count"),
            ("wrong-type", u, "POST", "/v1/jobs",
             edit(lambda j: j["seeds"].update(count="many")), None,
             400, "invalid_parameter", "seeds.count"),
            ("output-path", u, "POST", "/v1/jobs",
             edit(lambda j: j.update(output={"format": "trk", "path": "/tmp/x.trk"})), None,
             400, "invalid_parameter", "output.path"),
            ("unknown-volume", u, "POST", "/v1/jobs",
             edit(lambda j: j["inputs"].update(odf=UNKNOWN_VOLUME)), None,
             422, "unknown_volume", "inputs.odf"),
            ("server-path", u, "POST", "/v1/jobs",
             edit(lambda j: j["inputs"].update(odf="/etc/passwd")), None,
             422, "server_paths_disabled", "inputs.odf"),
            ("over-seeds", u, "POST", "/v1/jobs",
             edit(lambda j: j["seeds"].update(count=self.over_seeds)), None,
             422, "limit_exceeded", "seeds.count"),
            ("oversized", u, "POST", "/v1/jobs",
             json.dumps(good) + " " * self.oversized, None, 413, "payload_too_large", None),
            ("unknown-job", u, "GET", f"/v1/jobs/{UNKNOWN_JOB}", None, None,
             404, "not_found", None),
            ("delete-unknown", u, "DELETE", f"/v1/jobs/{UNKNOWN_JOB}", None, None,
             404, "not_found", None),
            ("trk-unknown", u, "GET", f"/v1/jobs/{UNKNOWN_JOB}/tractogram", None, None,
             404, "not_found", None),
            ("unknown-route", u, "GET", "/v1/nope", None, None, 404, "not_found", None),
            ("unknown-volume-get", u, "GET", f"/v1/volumes/{UNKNOWN_VOLUME}", None, None,
             404, "not_found", None),
            ("put-jobs", u, "PUT", "/v1/jobs", "{}", None, 405, "method_not_allowed", None),
            ("post-metrics", u, "POST", "/metrics", "{}", None, 405, "method_not_allowed", None),
            ("patch-job", u, "PATCH", f"/v1/jobs/{UNKNOWN_JOB}", None, None,
             405, "method_not_allowed", None),
            ("put-volumes", u, "PUT", "/v1/volumes", None, None, 405, "method_not_allowed", None),
            ("no-token", tcp, "POST", "/v1/jobs", json.dumps(good), None,
             401, "unauthorized", None),
            ("bad-token", Ident("tcp-bad", port=self.tcp_port, token="not-a-token-123456"),
             "GET", "/v1/jobs", None, None, 401, "unauthorized", None),
            ("no-token-unknown-route", tcp, "GET", "/v1/nope", None, None,
             401, "unauthorized", None),
        ]

    def task_bad(self, i):
        cases = self.bad_cases()
        name, ident, method, path, body, headers, status, code, field_ = cases[i % len(cases)]
        r = self._req(ident, method, path, body, headers)
        try:
            self._expect(r, status, code, field_)
            if status == 401 and not r.headers.get("www-authenticate", "").startswith("Bearer"):
                raise LoadError(f"401 without WWW-Authenticate: Bearer: {r.headers}")
            if status == 405 and not r.headers.get("allow"):
                raise LoadError(f"405 without Allow: {r.headers}")
        except LoadError as e:
            raise LoadError(f"bad case {name}: {e}") from None

    def task_abort(self, i):
        """A client that leaves mid-request: headers that promise a body, part
        of it, then close (a job document, or a volume upload, whose partial
        file the daemon must drop); then a service read (/metrics,
        /v1/device or /healthz) that must answer 200."""
        ident = self.users[i % len(self.users)]
        path = "/v1/volumes" if i % 2 else "/v1/jobs"
        kind = "application/octet-stream" if i % 2 else "application/json"
        head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {kind}\r\n"
                f"Content-Length: 100000\r\n")
        if ident.token:
            head += f"Authorization: Bearer {ident.token}\r\n"
        part = b"\x1f\x8b" + bytes(range(256)) * 8 if i % 2 else b'{"inputs": {"odf": "sha'
        if ident.unix_socket:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            addr = ident.unix_socket
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            addr = ("127.0.0.1", ident.port)
        with s:
            s.settimeout(10)
            s.connect(addr)
            s.sendall(head.encode() + b"\r\n" + part)
            time.sleep(0.01 * (i % 3))
        with self.stats.lock:
            self.stats.aborted += 1
        read = ("/metrics", "/v1/device", "/healthz")[i % 3]
        self._expect(self._req(ident, "GET", read), 200)

    # ------------------------------------------------------------------ runs

    def plan(self, n, shares=(("job", 40), ("stream", 10), ("cancel", 5), ("abort", 5),
                                ("bad", 40))):
        """About n (kind, index) tasks in a shuffled, seeded order, by their shares
        (percent)."""
        tasks = []
        for kind, share in shares:
            # Numbered within their kind: round robin over users, jobs and
            # bad cases is then even.
            tasks += [(kind, i) for i in range(max(1, round(n * share / 100)))]
        self.rng.shuffle(tasks)
        return tasks

    def run(self, tasks, clients):
        """Runs tasks on `clients` threads; returns the wall time (s).
        Failures are collected in stats.failures (not raised)."""
        fns = {"job": self.task_job, "stream": self.task_stream,
               "cancel": self.task_cancel, "abort": self.task_abort, "bad": self.task_bad}

        def one(task):
            kind, i = task
            try:
                fns[kind](i)
            except Exception as e:   # noqa: BLE001 - collected for the report
                self.stats.fail(f"{kind} #{i}: {type(e).__name__}: {e}")

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            list(pool.map(one, tasks))
        return time.monotonic() - t0

    def report(self, wall_s, rss=None):
        s = self.stats
        lat = s.latencies
        lines = [
            f"requests {s.requests} in {wall_s:.1f} s: {s.requests / wall_s:.1f} requests/s",
            f"jobs checked byte for byte: {s.jobs_checked} polled + {s.streams_checked} "
            f"streamed; cancels {dict(sorted(s.cancels.items()))}; {s.aborted} requests "
            f"abandoned mid-body; 429 retries {s.retries_429}",
            "job latency (submit to TRK in hand) s: "
            + (f"p50 {percentile(lat, 50):.2f} p90 {percentile(lat, 90):.2f} "
               f"p99 {percentile(lat, 99):.2f} max {max(lat):.2f}" if lat else "none"),
            "statuses " + " ".join(f"{k}:{v}" for k, v in sorted(s.by_status.items())),
            "4xx by code " + ", ".join(f"{k}: {v}" for k, v in sorted(s.bad_by_code.items())),
        ]
        if rss:
            lines.append("daemon RSS " + " -> ".join(f"{k} {v / 1024:.1f} MiB"
                                                      for k, v in rss))
        if s.failures:
            lines.append(f"{len(s.failures)} FAILURES, first: " + "; ".join(s.failures[:5]))
        return "\n".join(lines)
