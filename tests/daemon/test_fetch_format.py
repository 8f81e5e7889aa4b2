# SPDX-License-Identifier: MIT
"""GET /v1/jobs/ID/tractogram?format=F: a finished result re-encoded in
another format gives the same streamlines as `tractd run` of the same job in
that format (within 1e-4 mm), with an ID.F attachment name; an unknown format
is 400 naming `format`; a job still running converts nothing (409) but its
own format still streams."""
import io
import json
import subprocess
import zipfile

import nibabel as nib
import numpy as np

from .support import server_job, local_job, submit, wait_job, wait_running

JOB = dict(count=1500, rng_seed=2468)
TOL_MM = 1e-4


def _cli(tractd, phantom, tmp_path, output, name):
    job = local_job(phantom, **JOB)
    job["output"] = dict(output)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(job))
    out = tmp_path / f"{name}.{output['format']}"
    subprocess.run([tractd, "run", str(path), "-o", str(out), "-q"], check=True)
    return out.read_bytes()


def _done_job(daemon, phantom, volumes, output):
    job = server_job(phantom, volumes, **JOB)
    job["output"] = dict(output)
    job_id = submit(daemon.api, job)
    doc = wait_job(daemon.api, job_id)
    assert doc["status"] == "done", doc
    return job_id


def _fetch(daemon, job_id, fmt):
    r = daemon.api.get(f"/v1/jobs/{job_id}/tractogram?format={fmt}")
    assert r.status == 200, str(r)
    assert f'filename="{job_id}.{fmt}"' in r.headers.get("content-disposition", ""), r.headers
    return r.body


def _nib_streamlines(data, suffix, tmp_path):
    path = tmp_path / f"load{suffix}"
    path.write_bytes(data)
    return list(nib.streamlines.load(str(path)).streamlines)


def _trx_arrays(data):
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        pos = np.frombuffer(zf.read("positions.3.float32"), "<f4").reshape(-1, 3)
        offsets = np.frombuffer(zf.read("offsets.uint64"), "<u8")
        seeds = (np.frombuffer(zf.read("dps/seeds.3.float32"), "<f4").reshape(-1, 3)
                 if "dps/seeds.3.float32" in zf.namelist() else None)
        header = json.loads(zf.read("header.json"))
    return header, pos, offsets, seeds


def _assert_same_streamlines(got, want):
    assert len(got) == len(want) > 0, (len(got), len(want))
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL_MM)


def test_trk_as_tck(daemon, volumes, phantom, tractd, tmp_path):
    job_id = _done_job(daemon, phantom, volumes, {"format": "trk", "save_seeds": True})
    got = _fetch(daemon, job_id, "tck")
    want = _cli(tractd, phantom, tmp_path, {"format": "tck"}, "cli")
    _assert_same_streamlines(_nib_streamlines(got, ".tck", tmp_path),
                             _nib_streamlines(want, ".tck", tmp_path))
    # The count is patched as in a file written by the job itself.
    assert got[:32] == want[:32]


def test_trk_as_trx(daemon, volumes, phantom, tractd, tmp_path):
    job_id = _done_job(daemon, phantom, volumes, {"format": "trk", "save_seeds": True})
    got = _trx_arrays(_fetch(daemon, job_id, "trx"))
    want = _trx_arrays(_cli(tractd, phantom, tmp_path,
                            {"format": "trx", "save_seeds": True}, "cli"))
    assert got[0] == want[0]                   # header.json: grid and counts
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=TOL_MM)
    np.testing.assert_array_equal(got[3], want[3])   # seeds copied, not recomputed


def test_tck_as_trk(daemon, volumes, phantom, tractd, tmp_path):
    """TCK carries no grid: the daemon converts with the job's own."""
    job_id = _done_job(daemon, phantom, volumes, {"format": "tck"})
    got = _fetch(daemon, job_id, "trk")
    want = _cli(tractd, phantom, tmp_path, {"format": "trk"}, "cli")
    assert got[:1000] == want[:1000]
    _assert_same_streamlines(_nib_streamlines(got, ".trk", tmp_path),
                             _nib_streamlines(want, ".trk", tmp_path))


def test_trx_as_trk(daemon, volumes, phantom, tractd, tmp_path):
    job_id = _done_job(daemon, phantom, volumes, {"format": "trx", "save_seeds": True})
    got = _fetch(daemon, job_id, "trk")
    want = _cli(tractd, phantom, tmp_path, {"format": "trk", "save_seeds": True}, "cli")
    assert got[:1000] == want[:1000]
    (tmp_path / "g.trk").write_bytes(got)
    (tmp_path / "w.trk").write_bytes(want)
    g = nib.streamlines.load(str(tmp_path / "g.trk"))
    w = nib.streamlines.load(str(tmp_path / "w.trk"))
    _assert_same_streamlines(list(g.streamlines), list(w.streamlines))
    np.testing.assert_allclose(g.tractogram.data_per_streamline["seeds"],
                               w.tractogram.data_per_streamline["seeds"], rtol=0, atol=0)


def test_same_format_is_the_file(daemon, volumes, phantom):
    job_id = _done_job(daemon, phantom, volumes, {"format": "trk"})
    plain = daemon.api.get(f"/v1/jobs/{job_id}/tractogram")
    assert plain.status == 200, str(plain)
    assert _fetch(daemon, job_id, "trk") == plain.body


def test_unknown_format_400(daemon, volumes, phantom):
    job_id = _done_job(daemon, phantom, volumes, {"format": "trk"})
    r = daemon.api.get(f"/v1/jobs/{job_id}/tractogram?format=vtk")
    assert r.status == 400, str(r)
    err = r.json()["error"]
    assert err["code"] == "invalid_parameter" and err["field"] == "format", err
    for name in ("trk", "tck", "trx"):
        assert name in err["message"], err


def test_running_job_409(daemon, volumes, phantom):
    job = server_job(phantom, volumes, count=6000, rng_seed=99)
    job_id = submit(daemon.api, job)
    wait_running(daemon.api, job_id)
    r = daemon.api.get(f"/v1/jobs/{job_id}/tractogram?format=tck")
    assert r.status == 409, str(r)
    err = r.json()["error"]
    assert err["code"] == "conflict" and err["field"] == "format", err
    assert "finished" in err["message"], err
    # Its own format still streams (and follows the job to its end).
    own = daemon.api.get(f"/v1/jobs/{job_id}/tractogram?format=trk")
    assert own.status == 200, str(own)
    assert wait_job(daemon.api, job_id)["status"] == "done"


def test_tck_seeds_refused_in_server_jobs(daemon, volumes, phantom):
    """A TCK job's seeds would be a second result file, which server jobs do
    not have: refused up front, naming output.save_seeds."""
    job = server_job(phantom, volumes, **JOB)
    job["output"] = {"format": "tck", "save_seeds": True}
    r = daemon.api.post_json("/v1/jobs", job)
    assert r.status == 400, str(r)
    doc = json.loads(r.body)
    assert doc["error"]["code"] == "invalid_parameter", doc
    assert doc["error"]["field"] == "output.save_seeds", doc


def test_trk_with_seed_index_converts(daemon, volumes, phantom, tmp_path):
    """A TRK with seeds, seed_index and direction_getter converts to TRX
    keeping the seeds (the other properties are dropped by conversion)."""
    job_id = _done_job(daemon, phantom, volumes, {"format": "trk", "save_seeds": True,
                                                  "save_seed_index": True,
                                                  "save_direction_getter": True})
    path = tmp_path / "job.trk"
    path.write_bytes(_fetch(daemon, job_id, "trk"))
    trk = nib.streamlines.load(str(path))
    _, pos, _, seeds = _trx_arrays(_fetch(daemon, job_id, "trx"))
    assert seeds is not None and len(pos) > 0
    assert np.allclose(seeds, trk.tractogram.data_per_streamline["seeds"])
