"""What one client may learn of, or do to, the others (the security review's
findings 8 and 9).

TCP: clients without a valid token hold at most
max_unauthenticated_connections connections between them (at the cap the
oldest goes), each for at most header_timeout_seconds from its accept
however it trickles, so token holders always get in. A request with both
Content-Length and Transfer-Encoding is refused (400) and its connection
closed. The warm volume cache tells a user only of its own earlier jobs;
log lines carry client strings escaped; errors never name the store.
"""
import json
import socket
import subprocess
import time

from .support import TEST_TOKENS, Endpoint, daemon_env, server_job, upload_phantom

HALF = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n"
# CONNECTION_LIMIT of api.c: what the review's 64 addresses x 8 filled.
CONNECTION_LIMIT = 512
UNAUTHENTICATED_CAP = 128   # max_unauthenticated_connections's default
ALICE = "alice-token-0123456789abcdef0123456789"
BOB = "bob-token-0123456789abcdef0123456789ab"
TWO_USERS = TEST_TOKENS + f"alice {ALICE}\nbob {BOB}\n"


def _closed_within(s, seconds):
    """Whether the daemon closes s (EOF or reset) within seconds."""
    s.settimeout(seconds)
    try:
        return s.recv(4096) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def test_unauthenticated_connections_leave_room_for_tokens(daemon_factory):
    """As many half-sent connections without a token as the daemon has
    connections (one address allowed them all): a client with a token still
    gets /healthz within seconds, and the daemon counts those it closed."""
    d = daemon_factory(sets=[f"max_connections_per_address={CONNECTION_LIMIT}"])
    held = []
    try:
        for _ in range(CONNECTION_LIMIT):
            try:
                s = socket.create_connection(("127.0.0.1", d.port), timeout=3)
            except OSError:
                break
            held.append(s)
            try:
                s.sendall(HALF)
            except OSError:   # closed by the daemon already
                pass
        start = time.monotonic()
        r = d.tcp.get("/healthz", timeout=5)
        assert r.status == 200, str(r)
        assert time.monotonic() - start < 3, f"took {time.monotonic() - start:.1f} s"
        closed = int(d.tcp.get("/metrics").body.decode().split(
            "\ntractd_tcp_unauthenticated_closed_total ")[1].split()[0])
        assert closed >= len(held) - UNAUTHENTICATED_CAP, closed
    finally:
        for s in held:
            s.close()


def test_trickled_headers_do_not_extend_the_deadline(daemon_factory):
    """header_timeout_seconds=2: a client sending one byte of its headers
    every 0.5 s is closed about 2 s after it connected, not kept for ever;
    a token holder's keep-alive request on TCP is still answered."""
    d = daemon_factory(sets=["header_timeout_seconds=2"])
    s = socket.create_connection(("127.0.0.1", d.port), timeout=3)
    start, closed = time.monotonic(), False
    try:
        for b in HALF * 4:   # 8 s of bytes at most
            try:
                s.sendall(bytes([b]))
            except OSError:
                closed = True
                break
            if _closed_within(s, 0.5):
                closed = True
                break
        took = time.monotonic() - start
        assert closed, f"still open after trickling for {took:.1f} s"
        assert took < 4, f"closed only after {took:.1f} s"
    finally:
        s.close()
    assert d.tcp.get("/healthz").status == 200


def _raw(port, request, timeout=3):
    """Sends request on a fresh TCP connection; returns all the daemon
    answers until it closes or goes quiet."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    data = b""
    try:
        s.sendall(request)
        while True:
            try:
                got = s.recv(65536)
            except (socket.timeout, OSError):
                break
            if not got:
                break
            data += got
    finally:
        s.close()
    return data


def test_content_length_with_chunked_refused(daemon_factory):
    """A POST with both Content-Length and Transfer-Encoding: chunked, whose
    body hides a second request, is one 400 answer and a closed connection,
    not two answers."""
    d = daemon_factory()
    smuggled = (f"GET /v1/device HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {d.token}\r\n\r\n").encode()
    body = b"0\r\n\r\n" + smuggled
    request = (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {d.token}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
               f"Transfer-Encoding: chunked\r\n\r\n").encode() + body
    data = _raw(d.port, request)
    statuses = [int(line.split()[1]) for line in data.split(b"\r\n")
                if line.startswith(b"HTTP/1.")]
    assert statuses == [400], data[:600]
    head, _, rest = data.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower(), head
    doc = json.loads(rest[:rest.index(b"}}") + 2])
    assert doc["error"]["code"] == "invalid_parameter", doc
    assert doc["error"]["field"] == "Transfer-Encoding", doc
    # Not only for bodies the API reads: any route, before its answer.
    request = (f"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {d.token}\r\n"
               f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n\r\n"
               ).encode() + body
    data = _raw(d.port, request)
    assert data.startswith(b"HTTP/1.1 400 "), data[:300]


def test_stream_error_names_no_server_path(daemon_factory, phantom):
    """A job that fails on its inputs, asked with ?wait=stream: the error
    names the volume by its id, like GET /v1/jobs/ID, never the store."""
    d = daemon_factory(tcp=False)
    ids = upload_phantom(d.unix, phantom)
    job = server_job(phantom, ids, count=100)
    job["inputs"]["odf"] = ids["stop_map"]   # a 3-D map is no ODF
    r = d.unix.post_json("/v1/jobs?wait=stream", job)
    assert 400 <= r.status < 500, str(r)
    message = r.json()["error"]["message"]
    assert str(d.state_dir) not in message, message
    assert "/volumes/" not in message, message


def test_log_lines_cannot_be_forged(daemon_factory):
    """A file name and a URL with newlines and an escape sequence: the
    daemon's log has them escaped (\\x0a) on one line, and no line of
    their making."""
    d = daemon_factory(tcp=False)
    forged = "tractd: error: FORGED by a client"
    job = {"inputs": {"odf": f"x\n{forged}\x1b[2J", "stop_map": "y"},
           "seeds": {"roi": "z", "count": 1}}
    r = d.unix.post_json("/v1/jobs", job)
    assert 400 <= r.status < 500, str(r)
    assert d.unix.get("/v1/nothing%0a" + forged.replace(" ", "%20")).status == 404
    lines = d.log_path.read_text(errors="replace").splitlines()
    assert not [l for l in lines if l.startswith(forged)], "\n".join(lines[-20:])
    assert not [l for l in lines if "\x1b" in l], "\n".join(lines[-20:])
    assert [l for l in lines if "\\x0a" + forged in l], "\n".join(lines[-20:])


def test_cache_tells_only_of_ones_own_jobs(daemon_factory, phantom, tractctl):
    """Alice runs a job; Bob uploads the same files and runs the same job
    on the warm cache: his job reports a load time, as if he had loaded
    them, and his /v1/device shows his own miss and none of Alice's hits;
    his second run is his own hit; /metrics shows him no cache counters.
    An admin sees the whole cache."""
    d = daemon_factory(tokens=TWO_USERS)
    alice = Endpoint(port=d.port, token=ALICE)
    bob = Endpoint(port=d.port, token=BOB)

    def run(who):
        ids = upload_phantom(who, phantom)
        r = who.post_json("/v1/jobs", server_job(phantom, ids, count=200))
        assert r.status == 202, str(r)
        job_id = r.json()["id"]
        deadline = time.monotonic() + 120
        while True:
            doc = who.get_json(f"/v1/jobs/{job_id}")
            if doc["status"] not in ("queued", "running"):
                break
            assert time.monotonic() < deadline, doc
            time.sleep(0.05)
        assert doc["status"] == "done", doc
        return doc

    first = run(alice)
    assert first["seconds"]["load"] > 0, first
    assert alice.get_json("/v1/device")["cache"]["misses"] == 1
    again = run(alice)
    assert again["seconds"]["load"] == 0, again
    bobs = run(bob)
    assert bobs["seconds"]["load"] > 0, f"Bob's job tells that it found the cache warm: {bobs}"
    assert bobs["seconds"]["load"] == first["seconds"]["load"], (bobs, first)
    cache = bob.get_json("/v1/device")["cache"]
    assert (cache["hits"], cache["misses"]) == (0, 1), cache
    assert "entries" not in cache and "used_bytes" not in cache, cache
    assert run(bob)["seconds"]["load"] == 0
    assert bob.get_json("/v1/device")["cache"]["hits"] == 1
    p = subprocess.run([tractctl, "--server", f"http://127.0.0.1:{d.port}", "--token", BOB,
                        "device"], capture_output=True, text=True, timeout=60, env=daemon_env())
    assert p.returncode == 0, p.stderr
    assert "your jobs' hits 1, misses 1" in p.stdout, p.stdout
    bobs_metrics = bob.get("/metrics").body.decode()
    assert "tractd_cache" not in bobs_metrics, "/metrics tells Bob of the whole cache"
    admin = d.tcp.get_json("/v1/device")["cache"]
    assert (admin["hits"], admin["misses"], admin["entries"]) == (2, 2, 1), admin
    assert "tractd_cache_hits_total 2" in d.tcp.get("/metrics").body.decode()
