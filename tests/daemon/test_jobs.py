"""Jobs over HTTP: submit, poll, fetch; the result is byte-identical to `tractd
run` of the same job on the same files (the engine is deterministic);
?wait=stream and a tractogram requested while the job runs give the same
bytes; the job document; the list; the warm volume cache; deleting a
finished job."""
import json
import re
import subprocess
from datetime import datetime

import nibabel as nib
import numpy as np

from .support import (PHANTOM_INPUTS, assert_same_trk, fetch_tractogram, get_metrics,
                      job_status, local_job, make_job, run_to_completion, server_job, submit,
                      trk_n_count, upload_phantom, wait_job, wait_running)

# The phantom's own job: 2000 seeds, rng_seed 1234 (about 1.5 s on lavapipe).
PARITY = dict(count=2000, rng_seed=1234)
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
PHASES = {"load", "upload", "compile", "track", "kernels", "encode", "write"}


def _points(trk_bytes):
    """Points in a TRK without scalars or properties: (size - header - counts) / 12."""
    n = trk_n_count(trk_bytes)
    return (len(trk_bytes) - 1000 - 4 * n) // 12


def _time(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")


def test_job_matches_cli(daemon, volumes, phantom, references, tmp_path):
    """A job on uploaded volumes: 202 with Location, polled until done; the
    tractogram (over the socket and over TCP) is byte-identical to `tractd
    run` of the same job on the local files; the done JOB has consistent
    result (its stop reasons those of `tractd run`), progress, timestamps and
    phase timings."""
    want = references.trk(local_job(phantom, **PARITY))
    job_id = submit(daemon.unix, server_job(phantom, volumes, **PARITY))
    doc = wait_job(daemon.unix, job_id)
    assert doc["status"] == "done", doc
    got = fetch_tractogram(daemon.unix, job_id)
    assert_same_trk(got, want)
    assert_same_trk(fetch_tractogram(daemon.tcp, job_id), want, "tractogram over TCP")
    assert doc["id"] == job_id
    assert doc["error"] is None
    assert doc["result"]["bytes"] == len(want)
    assert doc["result"]["streamlines"] == trk_n_count(want)
    assert doc["result"]["points"] == _points(want)
    cli_stats = references.stats(local_job(phantom, **PARITY))
    assert doc["result"]["stop_reasons"] == cli_stats["stop_reasons"], doc["result"]
    assert doc["result"]["seeds_without_direction"] == cli_stats["seeds_without_direction"]
    ends = sum(doc["result"]["stop_reasons"].values())
    assert ends % 2 == 0 and ends >= 2 * doc["result"]["streamlines"], doc["result"]
    assert doc["result"]["stop_reasons"]["unknown"] == 0, doc["result"]
    assert doc["progress"] == {"seeds_done": PARITY["count"], "seeds_total": PARITY["count"],
                               "streamlines": trk_n_count(want), "stage": None,
                               "stage_fraction": 0.0}
    for key in ("created", "started", "finished"):
        assert TIMESTAMP.match(doc[key] or ""), (key, doc[key])
    assert _time(doc["created"]) <= _time(doc["started"]) <= _time(doc["finished"])
    assert set(doc["seconds"]) == PHASES, doc["seconds"]
    assert all(v >= 0 for v in doc["seconds"].values()), doc["seconds"]
    assert doc["seconds"]["track"] > 0
    # nibabel reads what the daemon wrote.
    out = tmp_path / "daemon.trk"
    out.write_bytes(got)
    assert len(nib.streamlines.load(str(out)).streamlines) == doc["result"]["streamlines"]


def test_wait_stream(daemon, volumes, phantom, references):
    """POST /v1/jobs?wait=stream answers 200 with the TRK as the body and the
    job id in X-Tractd-Job; the bytes are those of `tractd run`, except that
    n_count (bytes 988..991) may be 0 when streamed before the end; the job
    is then done."""
    want = references.trk(local_job(phantom, **PARITY))
    r = daemon.api.post_json("/v1/jobs?wait=stream", server_job(phantom, volumes, **PARITY))
    assert r.status == 200, str(r)
    assert r.headers.get("content-type", "").startswith("application/octet-stream"), r.headers
    job_id = r.headers.get("x-tractd-job", "")
    assert re.fullmatch(r"j-[0-9a-f]{16}", job_id), r.headers
    assert_same_trk(r.body, want, "streamed tractogram", allow_zero_n_count=True)
    assert wait_job(daemon.api, job_id)["status"] == "done"
    # After the end, the finished file has n_count set.
    assert_same_trk(fetch_tractogram(daemon.api, job_id), want)


def test_tractogram_requested_while_running(daemon, volumes, phantom, references):
    """GET /v1/jobs/ID/tractogram right after the submission (job queued or
    running) follows the job to its end: the same bytes as `tractd run`,
    n_count possibly 0."""
    want = references.trk(local_job(phantom, **PARITY))
    job_id = submit(daemon.api, server_job(phantom, volumes, **PARITY))
    got = fetch_tractogram(daemon.api, job_id)
    assert_same_trk(got, want, "followed tractogram", allow_zero_n_count=True)
    assert wait_job(daemon.api, job_id)["status"] == "done"


def test_list_newest_first(daemon, volumes, phantom):
    """GET /v1/jobs lists every job, newest first, each as GET /v1/jobs/ID shows it."""
    first = submit(daemon.api, server_job(phantom, volumes, count=50, rng_seed=1))
    second = submit(daemon.api, server_job(phantom, volumes, count=50, rng_seed=2))
    wait_job(daemon.api, first)
    wait_job(daemon.api, second)
    r = daemon.api.get("/v1/jobs")
    assert r.status == 200, str(r)
    doc = r.json()
    assert set(doc) == {"jobs"}, doc
    ids = [j["id"] for j in doc["jobs"]]
    assert first in ids and second in ids, ids
    assert ids.index(second) < ids.index(first), ids
    created = [_time(j["created"]) for j in doc["jobs"]]
    assert created == sorted(created, reverse=True), created
    by_id = {j["id"]: j for j in doc["jobs"]}
    assert by_id[second] == job_status(daemon.api, second)


def test_warm_cache(daemon, volumes, phantom):
    """A second job on the same volumes finds them on the device: /v1/device's
    cache hits grow by one (misses do not), the cache holds them, and the
    job's seconds.load and seconds.upload are 0 (< 1 ms); /metrics agrees."""
    run_to_completion(daemon.api, server_job(phantom, volumes, count=100, rng_seed=3))
    before = daemon.api.get_json("/v1/device")["cache"]
    doc, _ = run_to_completion(daemon.api, server_job(phantom, volumes, count=100, rng_seed=4))
    after = daemon.api.get_json("/v1/device")["cache"]
    assert after["hits"] == before["hits"] + 1, (before, after)
    assert after["misses"] == before["misses"], (before, after)
    assert after["entries"] >= 1 and after["used_bytes"] > 0, after
    assert after["used_bytes"] <= after["budget_bytes"], after
    assert doc["seconds"]["load"] < 1e-3, doc["seconds"]
    assert doc["seconds"]["upload"] < 1e-3, doc["seconds"]
    m = get_metrics(daemon.api)
    assert m.value("tractd_cache_hits_total") == after["hits"]
    assert m.value("tractd_cache_misses_total") == after["misses"]
    assert m.value("tractd_cache_bytes") == after["used_bytes"]


def _box_mask(phantom, path, x_range):
    """A mask on the phantom's grid, 1 where x is in x_range (voxels)."""
    ref = nib.load(str(phantom.path("odf.nii.gz")))
    data = np.zeros(ref.shape[:3], np.uint8)
    data[x_range[0]:x_range[1] + 1] = 1
    nib.save(nib.Nifti1Image(data, ref.affine), str(path))
    return path


def test_region_masks_are_cached_inputs(daemon, volumes, phantom, tmp_path):
    """Region masks are read with the other inputs and cached with them: a
    second job with the same mask is a cache hit that loads nothing
    (seconds.load < 1 ms) and writes the same bytes; a job whose mask is
    another file is a miss, the mask being part of the cache's key as a
    stop map is."""
    masks = [daemon.api.upload(_box_mask(phantom, tmp_path / f"box{i}.nii.gz", r)).json()["id"]
             for i, r in enumerate([(20, 26), (10, 14)])]

    def job(mask):
        return dict(server_job(phantom, volumes, count=100, rng_seed=3),
                    regions={"include": [mask]})

    first, trk = run_to_completion(daemon.api, job(masks[0]))
    before = daemon.api.get_json("/v1/device")["cache"]
    again, trk_again = run_to_completion(daemon.api, job(masks[0]))
    after = daemon.api.get_json("/v1/device")["cache"]
    assert (after["hits"], after["misses"]) == (before["hits"] + 1, before["misses"]), (before,
                                                                                      after)
    assert again["seconds"]["load"] < 1e-3, again["seconds"]
    assert_same_trk(trk_again, trk, "the job on cached region masks")
    other, _ = run_to_completion(daemon.api, job(masks[1]))
    assert daemon.api.get_json("/v1/device")["cache"]["misses"] == after["misses"] + 1
    assert other["seconds"]["load"] > 0, other["seconds"]


def test_counters(daemon, volumes, phantom):
    """A done job adds one to tractd_jobs_total{status="done"}, its seeds to
    tractd_seeds_total and its streamlines to tractd_streamlines_total."""
    before = get_metrics(daemon.api)
    doc, _ = run_to_completion(daemon.api, server_job(phantom, volumes, count=100, rng_seed=5))
    after = get_metrics(daemon.api)
    done = 'tractd_jobs_total{status="done"}'
    assert after.value(done) == before.value(done) + 1
    assert after.value("tractd_seeds_total") == before.value("tractd_seeds_total") + 100
    assert (after.value("tractd_streamlines_total") ==
            before.value("tractd_streamlines_total") + doc["result"]["streamlines"])
    assert after.value("tractd_track_seconds_total") > before.value("tractd_track_seconds_total")
    assert after.value("tractd_spool_bytes") >= doc["result"]["bytes"]


def test_delete_finished_job(daemon, volumes, phantom):
    """DELETE of a finished job answers 204 with no body and removes it and its
    result: GET, its tractogram and a second DELETE are 404, the list no
    longer has it, and its spool file is gone."""
    doc, _ = run_to_completion(daemon.api, server_job(phantom, volumes, count=50, rng_seed=6))
    job_id = doc["id"]
    spool = daemon.state_dir / "spool" / f"{job_id}.tractogram"
    assert spool.exists(), sorted(p.name for p in spool.parent.iterdir())
    r = daemon.api.request("DELETE", f"/v1/jobs/{job_id}")
    assert r.status == 204, str(r)
    assert r.body == b""
    for method, path in (("GET", f"/v1/jobs/{job_id}"), ("GET", f"/v1/jobs/{job_id}/tractogram"),
                         ("DELETE", f"/v1/jobs/{job_id}")):
        r = daemon.api.request(method, path)
        assert r.status == 404, str(r)
        assert r.error["code"] == "not_found"
    assert job_id not in [j["id"] for j in daemon.api.get_json("/v1/jobs")["jobs"]]
    assert not spool.exists()


def test_server_paths_when_allowed(daemon_factory, phantom, references):
    """With data_roots naming the phantom's directory a job may name absolute
    files in it: its result is byte-identical to `tractd run` of the same job;
    a relative path is still refused (422 server_paths_disabled, the field)."""
    d = daemon_factory(sets=[f"data_roots={phantom.dir}"])
    job = local_job(phantom, **PARITY)
    _, got = run_to_completion(d.api, job)
    assert_same_trk(got, references.trk(job), "tractogram of a server-path job")
    rel = dict(job, inputs=dict(job["inputs"], odf="odf.nii.gz"))
    r = d.api.post_json("/v1/jobs", rel)
    assert r.status == 422, str(r)
    assert r.error["code"] == "server_paths_disabled" and r.error["field"] == "inputs.odf", str(r)
    assert "absolute" in r.error["message"], str(r)


def _job_in(phantom, data, odf=None, roi=None):
    """A small job on the copies in data, with odf or roi replaced."""
    return make_job(phantom, odf or data / PHANTOM_INPUTS["odf"],
                    data / PHANTOM_INPUTS["stop_map"], roi or data / PHANTOM_INPUTS["roi"],
                    count=100, rng_seed=1)


def test_server_paths_confined_to_data_roots(daemon_factory, phantom, tmp_path):
    """Server paths must resolve under a data root: a file elsewhere, a `..`
    escape, a symlink in the root pointing out, a missing file and a sibling
    directory sharing the root's prefix (/x/da vs /x/dab) are refused with 422
    server_paths_disabled naming the field and why; a symlink in the root
    pointing inside it is accepted and the job runs."""
    odf = phantom.path("odf.nii.gz")
    data, prefixed = tmp_path / "da", tmp_path / "dab"
    data.mkdir()
    prefixed.mkdir()
    for name in PHANTOM_INPUTS.values():
        (data / name).write_bytes(phantom.path(name).read_bytes())
    (tmp_path / "outside.nii.gz").write_bytes(odf.read_bytes())
    (prefixed / "odf.nii.gz").write_bytes(odf.read_bytes())
    (data / "escape.nii.gz").symlink_to(odf)
    (data / "inside.nii.gz").symlink_to(data / "odf.nii.gz")
    d = daemon_factory(sets=[f"data_roots={data}"])

    # A missing file is answered as one outside the roots: no probing of
    # what exists elsewhere on the server.
    refused = [odf, data / ".." / "outside.nii.gz", data / "escape.nii.gz",
               prefixed / "odf.nii.gz", data / "missing.nii.gz", tmp_path / "missing.nii.gz"]
    for path in refused:
        r = d.api.post_json("/v1/jobs", _job_in(phantom, data, odf=path))
        assert r.status == 422, f"{path}: {r}"
        assert r.error["code"] == "server_paths_disabled", f"{path}: {r}"
        assert r.error["field"] == "inputs.odf", f"{path}: {r}"
        assert "is not an existing file inside the data roots" in r.error["message"], str(r)
        assert str(data) in r.error["message"], f"{path}: {r}"

    # The ROI is checked the same way as the inputs.
    r = d.api.post_json("/v1/jobs", _job_in(phantom, data, roi=data / "escape.nii.gz"))
    assert r.status == 422 and r.error["field"] == "seeds.roi", str(r)

    job_id = submit(d.api, _job_in(phantom, data, odf=data / "inside.nii.gz"))
    assert wait_job(d.api, job_id)["status"] == "done"


def test_queue_full(daemon_factory, phantom):
    """With max_queued_jobs=1: one job running and one queued, the next
    submission answers 429 queue_full; once the queued one is cancelled a
    submission is accepted again."""
    d = daemon_factory(sets=["max_queued_jobs=1"])
    ids = upload_phantom(d.api, phantom)
    running = submit(d.api, server_job(phantom, ids, count=5000, rng_seed=1))
    wait_running(d.api, running)
    queued = submit(d.api, server_job(phantom, ids, count=10, rng_seed=2))
    r = d.api.post_json("/v1/jobs", server_job(phantom, ids, count=10, rng_seed=3))
    assert r.status == 429, str(r)
    assert r.error["code"] == "queue_full", str(r)
    assert d.api.request("DELETE", f"/v1/jobs/{queued}").status == 202
    again = submit(d.api, server_job(phantom, ids, count=10, rng_seed=4))
    assert wait_job(d.api, again)["status"] == "done"
    assert wait_job(d.api, running)["status"] == "done"


def test_expired_result_is_gone(daemon_factory, phantom):
    """With spool_max_bytes=1M the spool cannot keep a 1.5 MB result: after a
    2000-seed job ends, the results expire oldest first, and the tractogram
    of the earlier (small) job answers 410 gone; its JOB stays, done."""
    d = daemon_factory(sets=["spool_max_bytes=1M"])
    ids = upload_phantom(d.api, phantom)
    small, data = run_to_completion(d.api, server_job(phantom, ids, count=50, rng_seed=1))
    assert len(data) < (1 << 20)
    big = submit(d.api, server_job(phantom, ids, **PARITY))
    assert wait_job(d.api, big)["status"] == "done"
    r = d.api.get(f"/v1/jobs/{small['id']}/tractogram")
    assert r.status == 410, str(r)
    assert r.error["code"] == "gone", str(r)
    assert job_status(d.api, small["id"])["status"] == "done"


def test_tck_job(daemon, volumes, phantom, tractd, tmp_path):
    """output.format "tck" through the API: the tractogram is offered as a .tck
    attachment and is byte-identical to `tractd run` of the same job."""
    job = server_job(phantom, volumes, count=300, rng_seed=77)
    job["output"] = {"format": "tck"}
    job_id = submit(daemon.unix, job)
    assert wait_job(daemon.unix, job_id)["status"] == "done"
    r = daemon.unix.get(f"/v1/jobs/{job_id}/tractogram")
    assert r.status == 200, str(r)
    assert f'filename="{job_id}.tck"' in r.headers.get("content-disposition", ""), r.headers
    local = local_job(phantom, count=300, rng_seed=77)
    local["output"] = {"format": "tck"}
    (tmp_path / "job.json").write_text(json.dumps(local))
    subprocess.run([tractd, "run", str(tmp_path / "job.json"), "-o", str(tmp_path / "cli.tck"),
                    "-q"], check=True)
    assert r.body == (tmp_path / "cli.tck").read_bytes()


def test_two_devices(daemon_factory, phantom, references):
    """device = 0,0 (two contexts on the one lavapipe GPU, each with its own
    upload and chunks): /v1/device counts 2, a job's result is byte-identical
    to `tractd run` on one device (its stop reasons too), and its volumes are
    cached once for both."""
    d = daemon_factory(sets=[f"data_roots={phantom.dir}", "device=0,0"])
    assert d.api.get_json("/v1/device")["device"]["count"] == 2
    job = local_job(phantom, **PARITY)
    doc, got = run_to_completion(d.api, job)
    assert_same_trk(got, references.trk(job), "tractogram of a two-device job")
    assert doc["result"]["stop_reasons"] == references.stats(job)["stop_reasons"], doc
    _, again = run_to_completion(d.api, job)
    assert_same_trk(again, got, "the second run on the cached volumes")
    assert d.api.get_json("/v1/device")["cache"]["hits"] >= 1


def test_bad_device_list_stops_start(tractd, tmp_path):
    """A device list that is neither indices nor UUIDs stops the daemon at
    start (exit 3) naming the key."""
    proc = subprocess.run([tractd, "serve", "--set", "device=gpu0", "--print-config"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3, proc.stderr
    assert "device" in proc.stderr and "indices or UUIDs" in proc.stderr, proc.stderr


def test_act_job_on_uploaded_maps_matches_cli(daemon, volumes, phantom, references):
    """stopping act with return_all false over HTTP, its include and exclude
    maps uploaded (volume ids, opened at submission like every input): the
    tractogram and stop reasons are those of `tractd run` on the local files."""
    maps = {}
    for name in ("include", "exclude"):
        r = daemon.api.upload(phantom.path(f"{name}.nii.gz"))
        assert r.status in (200, 201), str(r)
        maps[name] = r.json()["id"]
    act = dict(PARITY, tracking={"return_all": False})
    local = local_job(phantom, **act)
    local["stopping"] = {"criterion": "act", "include": str(phantom.path("include.nii.gz")),
                         "exclude": str(phantom.path("exclude.nii.gz"))}
    remote = server_job(phantom, volumes, **act)
    remote["stopping"] = {"criterion": "act", **maps}
    job_id = submit(daemon.unix, remote)
    doc = wait_job(daemon.unix, job_id)
    assert doc["status"] == "done", doc
    assert_same_trk(fetch_tractogram(daemon.unix, job_id), references.trk(local))
    reasons = doc["result"]["stop_reasons"]
    assert reasons == references.stats(local)["stop_reasons"], doc["result"]
    assert reasons["include"] > 0 and reasons["exclude"] > 0, reasons
