"""Every refusal is a JSON error body with the status of its code and the
field at fault (proto/API.md, "Every error is JSON"): malformed JSON, unknown
fields, wrong types, values out of range, output.path, unknown or malformed
volume ids, server paths while disabled, bodies over max_request_bytes, wrong
methods (405 + Allow), unknown routes and jobs, the tractogram of a failed
job; and a job whose input is on another grid fails with invalid_input."""
import json
import re

import nibabel as nib
import numpy as np
import pytest

from .support import PHANTOM_INPUTS, server_job, submit, upload_phantom, wait_job

UNKNOWN_ID = "sha256:" + "0" * 64
UNKNOWN_JOB = "j-0000000000000000"


def assert_error(r, status, code, field=None):
    """r is status with error.code == code (and error.field == field when
    given), as a JSON body with a message."""
    assert r.status == status, str(r)
    assert r.headers.get("content-type", "").startswith("application/json"), (r.headers, str(r))
    err = r.error
    assert set(err) == {"code", "field", "message"}, err
    assert err["code"] == code, str(r)
    if field is not None:
        assert err["field"] == field, str(r)
    assert isinstance(err["message"], str) and err["message"], err
    return err


@pytest.fixture(scope="module")
def good_job(phantom, volumes):
    return server_job(phantom, volumes, count=100, rng_seed=0)


@pytest.fixture(scope="module")
def other_grid_fa(phantom, tmp_path_factory):
    """The phantom's FA with one x-slice fewer: valid NIfTI, another grid."""
    path = tmp_path_factory.mktemp("grid") / "fa_other_grid.nii.gz"
    fa = phantom.fa.astype(np.float32)
    nib.save(nib.Nifti1Image(np.ascontiguousarray(fa[:-1]), phantom.affine), str(path))
    return path


@pytest.mark.parametrize("body", ['{"inputs": ', "not json", "", '{"inputs": {}} trailing'],
                         ids=["truncated", "text", "empty", "trailing"])
def test_malformed_json(daemon, body):
    """A body that is not JSON: 400 malformed_json, field empty, the message
    says where (line/column)."""
    err = assert_error(daemon.api.post_json("/v1/jobs", body), 400, "malformed_json", "")
    assert "line" in err["message"] or "column" in err["message"] or not body, err


@pytest.mark.parametrize("edit, field", [
    (lambda j: j.update(bogus=1), "bogus"),
    (lambda j: j["tracking"].update(bogus=1), "tracking.bogus"),
    (lambda j: j["seeds"].update(count="many"), "seeds.count"),
    (lambda j: j["tracking"].update(max_angle=120), "tracking.max_angle"),
    (lambda j: j["tracking"].update(step_size=0), "tracking.step_size"),
    (lambda j: j["seeds"].update(count=0), "seeds.count"),
    (lambda j: j["inputs"].pop("stop_map"), "inputs.stop_map"),
    (lambda j: j.update(direction_getter="det"), "direction_getter"),
], ids=["unknown-field", "unknown-nested-field", "wrong-type", "max-angle-range",
        "step-size-range", "count-range", "missing-stop-map", "direction-getter"])
def test_invalid_parameter(daemon, good_job, edit, field):
    """A field unknown, of the wrong type, out of range or missing: 400
    invalid_parameter naming the field."""
    job = json.loads(json.dumps(good_job))
    edit(job)
    assert_error(daemon.api.post_json("/v1/jobs", job), 400, "invalid_parameter", field)


def test_output_path_not_allowed(daemon, good_job):
    """output.path in a server job: 400 invalid_parameter, field output.path."""
    job = dict(good_job, output={"format": "trk", "path": "/tmp/tracks.trk"})
    assert_error(daemon.api.post_json("/v1/jobs", job), 400, "invalid_parameter", "output.path")


@pytest.mark.parametrize("place, field", [("odf", "inputs.odf"), ("stop_map", "inputs.stop_map"),
                                          ("roi", "seeds.roi")])
def test_unknown_volume(daemon, phantom, volumes, place, field):
    """A well-formed volume id the server does not have: 422 unknown_volume,
    field naming the input."""
    ids = dict(volumes, **{place: UNKNOWN_ID})
    job = server_job(phantom, ids, count=100)
    assert_error(daemon.api.post_json("/v1/jobs", job), 422, "unknown_volume", field)


def test_malformed_volume_id(daemon, phantom, volumes):
    """A volume id that is not "sha256:" and 64 lowercase hex digits: 400
    invalid_parameter, field inputs.odf."""
    job = server_job(phantom, dict(volumes, odf="sha256:XYZ"), count=100)
    assert_error(daemon.api.post_json("/v1/jobs", job), 400, "invalid_parameter", "inputs.odf")


def test_server_paths_disabled(daemon, phantom, volumes):
    """A server-side path while data_roots is empty (the default): 422
    server_paths_disabled naming the input, absolute or relative, and saying
    to upload instead."""
    for path in (str(phantom.path(PHANTOM_INPUTS["odf"])), PHANTOM_INPUTS["odf"]):
        job = server_job(phantom, dict(volumes, odf=path), count=100)
        r = daemon.api.post_json("/v1/jobs", job)
        assert_error(r, 422, "server_paths_disabled", "inputs.odf")
        assert "disabled" in r.error["message"] and "upload" in r.error["message"], str(r)
    job = server_job(phantom, dict(volumes, roi=str(phantom.path(PHANTOM_INPUTS["roi"]))),
                     count=100)
    assert_error(daemon.api.post_json("/v1/jobs", job), 422, "server_paths_disabled", "seeds.roi")


def test_body_over_max_request_bytes(daemon_factory, phantom):
    """With max_request_bytes=1K, a 2 KiB job document answers 413
    payload_too_large; one under the limit is parsed (here: 422 for its
    unknown volumes, not 413)."""
    d = daemon_factory(sets=["max_request_bytes=1K"])
    ids = {"odf": UNKNOWN_ID, "stop_map": UNKNOWN_ID, "roi": UNKNOWN_ID}
    job = json.dumps(server_job(phantom, ids, count=100))
    assert len(job) < 1024
    assert_error(d.api.post_json("/v1/jobs", job), 422, "unknown_volume", "inputs.odf")
    padded = job + " " * (2048 - len(job))
    assert_error(d.api.post_json("/v1/jobs", padded), 413, "payload_too_large")
    assert d.api.get("/healthz").status == 200


@pytest.mark.parametrize("method, path, allowed", [
    ("PUT", "/v1/jobs", "GET, POST"),
    ("DELETE", "/healthz", "GET"),
    ("POST", "/metrics", "GET"),
    ("POST", "/v1/device", "GET"),
    ("DELETE", "/v1/volumes", "GET, POST"),
    ("PUT", f"/v1/volumes/{UNKNOWN_ID}", "GET, HEAD, DELETE"),
    ("PATCH", f"/v1/jobs/{UNKNOWN_JOB}", "GET, DELETE"),
    ("POST", f"/v1/jobs/{UNKNOWN_JOB}/tractogram", "GET"),
])
def test_wrong_method(daemon, method, path, allowed):
    """A known route with a method it does not have: 405 method_not_allowed
    and an Allow header listing the methods it has."""
    r = daemon.api.request(method, path)
    assert_error(r, 405, "method_not_allowed")
    got = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}
    assert got == {m.strip() for m in allowed.split(",")}, r.headers


@pytest.mark.parametrize("method, path", [
    ("GET", "/"), ("GET", "/v1"), ("GET", "/v1/nope"), ("GET", "/v2/jobs"),
    ("GET", f"/v1/jobs/{UNKNOWN_JOB}/nope"), ("GET", f"/v1/volumes/{UNKNOWN_ID}/x"),
    ("POST", "/v1/nope"),
])
def test_unknown_route(daemon, method, path):
    """An unknown route: 404 not_found (whatever the method)."""
    r = daemon.api.request(method, path, body="{}" if method == "POST" else None)
    assert_error(r, 404, "not_found")


@pytest.mark.parametrize("method, suffix", [("GET", ""), ("DELETE", ""), ("GET", "/tractogram")])
def test_unknown_job(daemon, method, suffix):
    """GET, DELETE and the tractogram of an unknown job id: 404 not_found."""
    assert_error(daemon.api.request(method, f"/v1/jobs/{UNKNOWN_JOB}{suffix}"), 404, "not_found")


def test_input_on_another_grid_fails_the_job(daemon, phantom, volumes, other_grid_fa):
    """A stop map that is valid NIfTI on another grid passes the submission
    (202) and fails the job: GET shows status failed with error.code
    invalid_input and field inputs.stop_map; its tractogram is 409
    conflict; jobs_total{status="failed"} counts it."""
    r = daemon.api.upload(other_grid_fa)
    assert r.status == 201, str(r)
    job = server_job(phantom, dict(volumes, stop_map=r.json()["id"]), count=100)
    job_id = submit(daemon.api, job)
    doc = wait_job(daemon.api, job_id)
    assert doc["status"] == "failed", doc
    assert doc["result"] is None and doc["seconds"] is None, doc
    err = doc["error"]
    assert set(err) == {"code", "field", "message"}, err
    assert err["code"] == "invalid_input", err
    assert err["field"] == "inputs.stop_map", err
    assert err["message"], err
    assert_error(daemon.api.get(f"/v1/jobs/{job_id}/tractogram"), 409, "conflict")
    text = daemon.api.get("/metrics").body.decode()
    assert 'tractd_jobs_total{status="failed"} 1' in text.splitlines(), text


def test_wait_stream_of_failing_job(daemon, phantom, volumes, other_grid_fa):
    """?wait=stream for a job that fails before writing anything answers the
    job's error (422 invalid_input, field inputs.stop_map) instead of a TRK,
    naming the job in X-Tractd-Job as a streamed TRK does (it had none, so
    the client could not find the failed job)."""
    r = daemon.api.upload(other_grid_fa)
    assert r.status in (200, 201), str(r)
    job = server_job(phantom, dict(volumes, stop_map=r.json()["id"]), count=100)
    r = daemon.api.post_json("/v1/jobs?wait=stream", job)
    assert_error(r, 422, "invalid_input", "inputs.stop_map")
    job_id = r.headers.get("x-tractd-job", "")
    assert re.fullmatch(r"j-[0-9a-f]{16}", job_id), r.headers
    assert daemon.api.get_json(f"/v1/jobs/{job_id}")["status"] == "failed"


@pytest.mark.parametrize("query", ["?wait=streaming", "?wait=", "?wait=STREAM"])
def test_unknown_wait_value_refused(daemon, phantom, volumes, query):
    """A value of wait other than "stream" is a 400 naming the parameter,
    and no job is queued: it was taken for no wait (202 and the job's JSON,
    which a client that asked for a stream wrote into its .trk)."""
    def ids():
        return sorted(j["id"] for j in daemon.api.get_json("/v1/jobs")["jobs"])

    before = ids()
    r = daemon.api.post_json("/v1/jobs" + query, server_job(phantom, volumes, count=10))
    assert_error(r, 400, "invalid_parameter", "wait")
    assert "stream" in r.error["message"], r.error
    assert ids() == before


def test_too_large_for_device(daemon_factory, phantom):
    """With gpu_memory_budget=16M the phantom's ODF (76 MiB as float32) cannot
    fit a job: the job fails with error.code too_large_for_device, the field
    inputs.odf and a message saying how much it needs (MiB); ?wait=stream
    answers that error with 422."""
    d = daemon_factory(sets=["gpu_memory_budget=16M"])
    ids = upload_phantom(d.api, phantom)
    job = server_job(phantom, ids, count=10)
    doc = wait_job(d.api, submit(d.api, job))
    assert doc["status"] == "failed", doc
    assert doc["error"]["code"] == "too_large_for_device", doc
    assert doc["error"]["field"] == "inputs.odf", doc
    assert "MiB" in doc["error"]["message"], doc
    assert_error(d.api.post_json("/v1/jobs?wait=stream", job), 422, "too_large_for_device",
                 "inputs.odf")


def test_pft_retry_too_long_for_lavapipe_fails(daemon, phantom, volumes):
    """A pft retry that one lavapipe dispatch cannot finish (64 particles,
    10 mm back and front) fails the job with 422 invalid_input naming
    tracking.pft, instead of re-dispatching forever (the job used to hang)."""
    maps = {}
    for name in ("include", "exclude"):
        r = daemon.api.upload(phantom.path(f"{name}.nii.gz"))
        assert r.status in (200, 201), str(r)
        maps[name] = r.json()["id"]
    job = server_job(phantom, volumes, count=20, tracking={
        "return_all": False, "pft": {"particles": 64, "back_mm": 10, "front_mm": 10}})
    job["stopping"] = {"criterion": "act", **maps}
    err = assert_error(daemon.api.post_json("/v1/jobs?wait=stream", job), 422, "invalid_input",
                       "tracking.pft")
    assert "fewer particles" in err["message"], err
