"""Raw DWI through the daemon: uploaded DWI, bvals and bvecs (text uploads)
and mask are fitted (DTI, CSD) by the daemon; the result is byte-identical to
`tractd run` of the same job; while fitting, the job document names the
stage; a second job on the same inputs and model reuses the fit (a cache
hit, no load time) while another model parameter fits again; tractctl
uploads the tables but not sh_basis."""
import json
import re
import subprocess

from .support import (assert_same_trk, daemon_env, job_status, run_to_completion, submit,
                      wait_job)

DWI_INPUTS = {"dwi": "dwi.nii.gz", "bvals": "dwi.bval", "bvecs": "dwi.bvec",
              "mask": "mask.nii.gz"}
SEEDS = dict(count=300, rng_seed=5)
FIT_STAGES = {"load", "dti", "response", "csd", "odf", "track"}


def _dwi_job(phantom, inputs, roi, **seeds):
    job = json.loads((phantom.dir / "job_dwi.json").read_text())
    job.pop("output", None)
    job["inputs"] = dict(inputs)
    job["seeds"] = {"roi": str(roi), **seeds}
    return job


def _upload_dwi(endpoint, phantom):
    ids = {}
    for key, name in {**DWI_INPUTS, "roi": "seed_roi.nii.gz"}.items():
        r = endpoint.upload(phantom.path(name))
        assert r.status in (200, 201), str(r)
        ids[key] = r.json()["id"]
    return ids


def test_dwi_job_matches_cli_and_reuses_the_fit(daemon, phantom, tractd, tmp_path):
    ids = _upload_dwi(daemon.api, phantom)
    roi = ids.pop("roi")
    job = _dwi_job(phantom, ids, roi, **SEEDS)
    doc, trk = run_to_completion(daemon.api, job)
    assert doc["progress"]["stage"] is None, doc["progress"]
    # The daemon's log says which model order the job was fitted at.
    assert re.search(rf"job={doc['id']} CSD of order \d+ \(\d+ coefficients\) from \d+ "
                     "diffusion-weighted directions", daemon.log_path.read_text()), daemon.log()

    local = _dwi_job(phantom, {k: str(phantom.path(v)) for k, v in DWI_INPUTS.items()},
                     phantom.path("seed_roi.nii.gz"), **SEEDS)
    (tmp_path / "job.json").write_text(json.dumps(local))
    subprocess.run([tractd, "run", str(tmp_path / "job.json"), "-o", str(tmp_path / "cli.trk"),
                    "-q"], check=True, timeout=300)
    assert_same_trk(trk, (tmp_path / "cli.trk").read_bytes(), "DWI job over HTTP")

    before = daemon.api.get_json("/v1/device")["cache"]
    again, trk_again = run_to_completion(daemon.api, job)
    after = daemon.api.get_json("/v1/device")["cache"]
    assert after["hits"] == before["hits"] + 1, (before, after)
    assert again["seconds"]["load"] < 1e-3, again["seconds"]
    assert_same_trk(trk_again, trk, "second DWI job")

    other = json.loads(json.dumps(job))
    other["model"]["sh_order"] = 6
    before = after
    refit, _ = run_to_completion(daemon.api, other)
    after = daemon.api.get_json("/v1/device")["cache"]
    assert after["misses"] == before["misses"] + 1, (before, after)
    assert refit["seconds"]["load"] > 0, refit["seconds"]


def test_fit_stages_are_reported(daemon, phantom):
    """The job document's progress.stage walks through the fit before
    tracking; stage_fraction stays within [0, 1]."""
    ids = _upload_dwi(daemon.api, phantom)
    roi = ids.pop("roi")
    job = _dwi_job(phantom, ids, roi, count=100, rng_seed=9)
    job["model"]["tau"] = 0.11          # a model the cache has not seen
    job_id = submit(daemon.api, job)
    seen = set()
    while True:
        doc = job_status(daemon.api, job_id)
        stage = doc["progress"]["stage"]
        if stage is not None:
            seen.add(stage)
            assert 0.0 <= doc["progress"]["stage_fraction"] <= 1.0, doc["progress"]
        if doc["status"] not in ("queued", "running"):
            break
    assert doc["status"] == "done", doc
    assert seen <= FIT_STAGES, seen
    assert seen & {"dti", "csd"}, f"no fit stage seen while polling: {seen}"


def test_bad_gradient_table_is_a_field_error(daemon, phantom, tmp_path):
    """A bvals upload with one value too few fails the job naming
    inputs.bvals (the tables are checked against the DWI when fitting)."""
    values = phantom.path("dwi.bval").read_text().split()
    short = tmp_path / "short.bval"
    short.write_text(" ".join(values[:-1]) + "\n")
    ids = _upload_dwi(daemon.api, phantom)
    roi = ids.pop("roi")
    r = daemon.api.upload(short)
    assert r.status in (200, 201), str(r)
    ids["bvals"] = r.json()["id"]
    job_id = submit(daemon.api, _dwi_job(phantom, ids, roi, count=10))
    doc = wait_job(daemon.api, job_id)
    assert doc["status"] == "failed", doc
    assert doc["error"]["field"] == "inputs.bvals", doc["error"]
    assert f"{len(values) - 1}" in doc["error"]["message"], doc["error"]


def test_tractctl_uploads_tables_not_settings(tractctl, daemon, phantom, tmp_path):
    """A dwi job file with relative paths runs through `tractctl track`; an sh
    job's sh_basis is sent as a setting, not taken for a file."""
    job = json.loads((phantom.dir / "job_dwi.json").read_text())
    job["seeds"]["count"] = 50
    path = phantom.dir / "job_dwi_small.json"
    path.write_text(json.dumps(job))
    env = daemon_env()
    env.pop("TRACTD_SOCKET", None)
    out = tmp_path / "dwi.trk"
    p = subprocess.run([tractctl, "--socket", str(daemon.sock), "track", str(path), "-o",
                        str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    assert out.stat().st_size > 1000

    sh_job = {"inputs": {"sh": "no-such-sh.nii.gz", "sh_basis": "tournier07",
                         "stop_map": "fa.nii.gz"},
              "seeds": {"roi": "seed_roi.nii.gz", "count": 10}}
    sh_path = phantom.dir / "job_sh_missing.json"
    sh_path.write_text(json.dumps(sh_job))
    p = subprocess.run([tractctl, "--socket", str(daemon.sock), "track", str(sh_path), "-o",
                        str(tmp_path / "sh.trk")], capture_output=True, text=True, timeout=60,
                       env=env)
    assert p.returncode != 0
    assert "no-such-sh.nii.gz" in p.stderr, p.stderr
    assert "tournier07" not in p.stderr, p.stderr


def test_boot_job_matches_cli_and_is_cached_apart(daemon, phantom, tractd, tmp_path):
    """A boot job over HTTP gives the bytes of `tractd run`; its inputs (the
    DWI and the OPDT matrices) are cached apart from a CSD fit of the same
    files, and a second boot job reuses them."""
    ids = _upload_dwi(daemon.api, phantom)
    roi = ids.pop("roi")
    job = _dwi_job(phantom, ids, roi, count=200, rng_seed=3)
    job["direction_getter"] = "boot"
    job["model"] = {"name": "opdt", "sh_order": 4}
    job["tracking"]["pmf_threshold"] = 0.1
    before = daemon.api.get_json("/v1/device")["cache"]
    doc, trk = run_to_completion(daemon.api, job)
    after = daemon.api.get_json("/v1/device")["cache"]
    assert doc["status"] == "done", doc
    assert after["misses"] == before["misses"] + 1, (before, after)

    local = phantom.dwi_job_with(direction_getter="boot", model=job["model"],
                                 seeds={**job["seeds"], "roi": str(phantom.path("seed_roi.nii.gz"))},
                                 tracking=job["tracking"])
    (tmp_path / "boot.json").write_text(json.dumps(local))
    subprocess.run([tractd, "run", str(tmp_path / "boot.json"), "-o", str(tmp_path / "boot.trk"),
                    "-q"], check=True, timeout=300)
    assert_same_trk(trk, (tmp_path / "boot.trk").read_bytes(), "boot job over HTTP")

    again, trk_again = run_to_completion(daemon.api, job)
    assert daemon.api.get_json("/v1/device")["cache"]["hits"] == after["hits"] + 1
    assert again["seconds"]["load"] < 1e-3, again["seconds"]
    assert_same_trk(trk_again, trk, "second boot job")
