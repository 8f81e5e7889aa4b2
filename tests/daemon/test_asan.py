"""The ASan/UBSan build of the daemon ($TRACTD_ASAN, as `make check` builds it)
under hostile and broken requests: odd methods, long and odd URLs, bodies
that are not JSON or nest deeply, garbage and truncated uploads, clients that
leave mid-upload and mid-stream, failing and cancelled jobs. The daemon must
answer each with a JSON error or its normal answer, stay up, and exit 0 on
SIGTERM with no sanitizer report in its log. Skipped when TRACTD_ASAN does
not name an executable (as the engine's ASan cases are)."""
import gzip
import json
import signal
import subprocess
import time

import pytest

from conftest import tractd_asan_path

from .support import (CurlError, server_job, start_daemon, submit, upload_phantom, wait_job,
                      wait_running)

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "SUMMARY: UndefinedBehaviorSanitizer")
# Leak checking is off: the Vulkan driver's own allocations at exit are not
# the daemon's to free. Memory errors and undefined behaviour abort.
ASAN_ENV = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:halt_on_error=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}

pytestmark = pytest.mark.skipif(tractd_asan_path() is None,
                                reason="TRACTD_ASAN does not name the ASan/UBSan build")

ROUTES = ["/healthz", "/metrics", "/v1/device", "/v1/volumes", "/v1/volumes/sha256:" + "a" * 64,
          "/v1/jobs", "/v1/jobs/j-0000000000000000", "/v1/jobs/j-0000000000000000/tractogram"]
# Real methods and pieces of them (a method that is a substring of an
# allowed one must not be taken for it, nor read outside the list).
METHODS = ["PUT", "PATCH", "OPTIONS", "ET", "GE", "T", "EAD", "HEA", "OST", "POS", "ELETE",
           "DELET", "GETX", "get"]


@pytest.fixture
def asan_daemon(pipeline_cache):
    """An ASan daemon per test (a memory error aborts it)."""
    d = start_daemon(tractd_asan_path(), env=ASAN_ENV, pipeline_cache=pipeline_cache)
    yield d
    if not d.stopped:
        d.stop()
    log = d.log_path.read_text(errors="replace")
    found = [m for m in SANITIZER_MARKERS if m in log]
    assert not found, f"sanitizer report in the daemon's log:\n{log[-6000:]}"


def _alive(d, what):
    if d.proc.poll() is not None:
        pytest.fail(f"the ASan daemon died ({d.proc.returncode}) after {what}\n{d.log(40)}",
                    pytrace=False)
    try:
        r = d.api.get("/healthz", timeout=10)
    except CurlError as e:
        pytest.fail(f"the ASan daemon does not answer after {what}: {e}\n{d.log(40)}",
                    pytrace=False)
    assert r.status == 200, f"after {what}: {r}"


def _json_error(r, what):
    assert 400 <= r.status < 600, f"{what}: {r}"
    if r.status != 404 or r.body:
        doc = r.json()
        assert set(doc["error"]) == {"code", "field", "message"}, f"{what}: {doc}"


def test_odd_methods_and_urls(asan_daemon):
    """Every route with odd methods (pieces of allowed ones, lower case) and
    odd URLs (long, empty ids, double slashes, percent escapes): JSON errors
    (404/405 or 400), no memory error."""
    d = asan_daemon
    for path in ROUTES:
        for method in METHODS:
            try:
                r = d.api.request(method, path, timeout=10)
            except CurlError as e:
                pytest.fail(f"{method} {path}: {e}\n{d.log(40)}", pytrace=False)
            assert r.status in (400, 404, 405, 501), f"{method} {path}: {r}"
            _alive(d, f"{method} {path}")
    for path in ["/v1/jobs/", "/v1/volumes/", "/v1/jobs//tractogram", "//healthz",
                 "/v1/jobs/" + "j" * 300, "/v1/volumes/" + "s" * 300, "/" + "x" * 4000,
                 "/v1/jobs/%00", "/v1/volumes/sha256:%2e%2e%2f", "/v1/jobs/j-1/tractogram/x",
                 "/healthz?x=" + "y" * 2000, "/v1/jobs?wait=" + "s" * 500]:
        r = d.api.get(path, timeout=10)
        assert r.status in (200, 400, 404, 414, 431), f"GET {path[:80]}: {r}"
        if r.status == 404:
            _json_error(r, path[:80])
        _alive(d, f"GET {path[:80]}")


def test_bodies_that_are_not_jobs(asan_daemon):
    """Job bodies that are not JSON, nest 20000 levels, hold NUL bytes or
    invalid UTF-8, numbers out of any range, duplicate keys: 400 with a JSON
    error each."""
    d = asan_daemon
    bodies = [b"", b"{", b"[" * 20000 + b"]" * 20000, b'{"a":' * 5000 + b"1" + b"}" * 5000,
              b'{"inputs": "\x00"}', b'{"inputs": {"odf": "\xff\xfe"}}', b"\x00" * 100,
              b'{"seeds": {"count": 1e400}}', b'{"seeds": {"count": -1}}',
              b'{"inputs": {}, "inputs": {}}', b'"just a string"', b"[1, 2, 3]", b"null",
              json.dumps({"inputs": {"odf": "x" * 5000, "stop_map": "y"},
                          "seeds": {"roi": "z"}}).encode()]
    for body in bodies:
        r = d.api.request("POST", "/v1/jobs", body=body, content_type="application/json",
                          timeout=30)
        assert r.status in (400, 413, 422), f"{body[:40]!r}: {r}"
        _json_error(r, repr(body[:40]))
        _alive(d, f"POST /v1/jobs {body[:40]!r}")


def test_uploads_and_jobs(asan_daemon, phantom, tmp_path):
    """Garbage, empty and text uploads; gzip magic followed by junk; a
    truncated gzip'd NIfTI (accepted, then each job using it fails
    invalid_input); a client that
    leaves mid-upload (no temporary file stays); a good job done and fetched,
    a job followed by a client that leaves; a queued and a running job
    cancelled; finished jobs deleted."""
    d = asan_daemon
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 4)
    assert d.api.upload(garbage).status == 415
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    r = d.api.upload(empty)
    assert 400 <= r.status < 500, str(r)
    text = tmp_path / "bvals"
    text.write_text("0 1000\n")
    assert d.api.upload(text).status in (200, 201)
    fake_gz = tmp_path / "fake.nii.gz"
    fake_gz.write_bytes(b"\x1f\x8b" + b"junk" * 100)
    r = d.api.upload(fake_gz)
    assert r.status in (201, 415), str(r)   # 415 per API.md: test_volumes checks that
    truncated = tmp_path / "truncated.nii.gz"
    truncated.write_bytes(gzip.compress(gzip.decompress(
        phantom.path("fa.nii.gz").read_bytes())[:600]))
    trunc_id = d.api.upload(truncated).json()["id"]
    _alive(d, "uploads")

    # A client leaving mid-upload.
    big = tmp_path / "big.nii.gz"
    big.write_bytes(phantom.path("odf.nii.gz").read_bytes() * 4)
    curl = subprocess.Popen([*d.api.curl_args("/v1/volumes"), "--limit-rate", "200K",
                             "--data-binary", f"@{big}", "-o", "/dev/null"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    curl.send_signal(signal.SIGKILL)
    curl.wait()
    _alive(d, "a client leaving mid-upload")

    ids = upload_phantom(d.api, phantom)
    for bad in (dict(ids, odf=trunc_id), dict(ids, stop_map=trunc_id), dict(ids, roi=trunc_id)):
        job_id = submit(d.api, server_job(phantom, bad, count=10))
        doc = wait_job(d.api, job_id)
        assert doc["status"] == "failed", doc
        assert doc["error"]["code"] == "invalid_input", doc
        assert d.api.get(f"/v1/jobs/{job_id}/tractogram").status == 409
        assert d.api.request("DELETE", f"/v1/jobs/{job_id}").status == 204
    _alive(d, "failing jobs")

    job_id = submit(d.api, server_job(phantom, ids, count=100))
    assert wait_job(d.api, job_id)["status"] == "done"
    assert len(d.api.get(f"/v1/jobs/{job_id}/tractogram").body) > 1000
    r = d.api.post_json("/v1/jobs?wait=stream", server_job(phantom, ids, count=100))
    assert r.status == 200 and len(r.body) > 1000, str(r)

    # A follower that leaves, a queued job cancelled, a running job cancelled.
    running = submit(d.api, server_job(phantom, ids, count=3000, rng_seed=1))
    queued = submit(d.api, server_job(phantom, ids, count=10, rng_seed=2))
    curl = subprocess.Popen([*d.api.curl_args(f"/v1/jobs/{running}/tractogram"), "-N",
                             "-o", "/dev/null"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_running(d.api, running)
    time.sleep(0.3)
    curl.send_signal(signal.SIGKILL)
    curl.wait()
    assert d.api.request("DELETE", f"/v1/jobs/{queued}").status == 202
    assert d.api.request("DELETE", f"/v1/jobs/{running}").status == 202
    assert wait_job(d.api, running)["status"] in ("cancelled", "done")
    for job in d.api.get_json("/v1/jobs")["jobs"]:
        assert d.api.request("DELETE", f"/v1/jobs/{job['id']}").status == 204
    assert d.api.get_json("/v1/jobs") == {"jobs": []}
    _alive(d, "jobs")
    leftovers = [p.name for p in (d.state_dir / "volumes").iterdir()
                 if p.name.startswith(".") and p.name != ".owners"]
    assert leftovers == [], leftovers


def test_sigterm_under_asan(asan_daemon, phantom):
    """SIGTERM with a job running and a client following it: exit 0, socket
    removed, no sanitizer report (checked at teardown)."""
    d = asan_daemon
    ids = upload_phantom(d.api, phantom)
    job_id = submit(d.api, server_job(phantom, ids, count=3000, rng_seed=3))
    curl = subprocess.Popen([*d.api.curl_args(f"/v1/jobs/{job_id}/tractogram"), "-N",
                             "-o", "/dev/null"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_running(d.api, job_id)
        time.sleep(0.3)
        d.stop()
    finally:
        if curl.poll() is None:
            curl.kill()
        curl.wait()
