"""TRX jobs over HTTP: a TRX zip is useless until its directory, written last,
so the daemon hands it out only once the job is done. GET .../tractogram
asked while the job runs, and POST ?wait=stream, both answer with the whole
file (an ID.trx attachment), byte-identical to `tractd run` of the same job,
and the job is done by the time the body is there."""
import io
import json
import subprocess
import zipfile

from .support import job_status, local_job, server_job, submit, wait_job, wait_running

# Enough seeds that the job is still running when the tractogram is asked for.
JOB = dict(count=4000, rng_seed=4321)
TRX_OUTPUT = {"format": "trx", "compression": "deflate", "save_seeds": True}


def _cli_trx(tractd, phantom, tmp_path):
    job = local_job(phantom, **JOB)
    job["output"] = dict(TRX_OUTPUT)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    subprocess.run([tractd, "run", str(path), "-o", str(tmp_path / "cli.trx"), "-q"],
                   check=True)
    return (tmp_path / "cli.trx").read_bytes()


def _server_trx(phantom, volumes):
    job = server_job(phantom, volumes, **JOB)
    job["output"] = dict(TRX_OUTPUT)
    return job


def _check_zip(body):
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        assert zf.testzip() is None
        assert {"header.json", "positions.3.float32", "offsets.uint64",
                "dps/seeds.3.float32"} <= set(zf.namelist())


def test_trx_tractogram_waits_for_the_end(daemon, volumes, phantom, tractd, tmp_path):
    want = _cli_trx(tractd, phantom, tmp_path)
    job_id = submit(daemon.api, _server_trx(phantom, volumes))
    wait_running(daemon.api, job_id)
    r = daemon.api.get(f"/v1/jobs/{job_id}/tractogram")
    assert r.status == 200, str(r)
    assert job_status(daemon.api, job_id)["status"] == "done"
    assert f'filename="{job_id}.trx"' in r.headers.get("content-disposition", ""), r.headers
    _check_zip(r.body)
    assert r.body == want


def test_trx_wait_stream(daemon, volumes, phantom, tractd, tmp_path):
    want = _cli_trx(tractd, phantom, tmp_path)
    r = daemon.api.post_json("/v1/jobs?wait=stream", _server_trx(phantom, volumes))
    assert r.status == 200, str(r)
    job_id = r.headers.get("x-tractd-job", "")
    assert job_status(daemon.api, job_id)["status"] == "done"
    assert f'filename="{job_id}.trx"' in r.headers.get("content-disposition", ""), r.headers
    _check_zip(r.body)
    assert r.body == want
    assert wait_job(daemon.api, job_id)["status"] == "done"
