"""seeds.points_file and seeds.first_index through the daemon, `tractd run`
and tractctl: a .npy upload is kind npy; a job naming it writes the bytes of
`tractd run` on the local file; a list tracked in two parts, the second
with first_index, is the whole list's tractogram; a file that is no .npy
fails the job naming seeds.points_file, a point outside the image
seeds.points_file[i], and its points count against max_seeds_per_job;
`tractctl track` uploads the file like the inputs."""
import json
import subprocess

import nibabel as nib
import numpy as np

from .support import (assert_same_trk, daemon_env, local_job, run_to_completion, server_job,
                      submit, upload_phantom, wait_job)

N = 300


def _points(tmp_path, name, points):
    path = tmp_path / name
    np.save(path, points)
    return path


def _seeds(tmp_path):
    rng = np.random.default_rng(11)
    return rng.uniform([2, 2, 2], [21, 21, 13], size=(N, 3))


def _upload(daemon, path, kind):
    r = daemon.api.upload(path)
    assert r.status in (200, 201), str(r)
    assert r.json()["kind"] == kind, r.json()
    return r.json()["id"]


def _streamlines(trk_bytes, tmp_path, name):
    path = tmp_path / name
    path.write_bytes(trk_bytes)
    trk = nib.streamlines.load(str(path))
    return trk.streamlines, trk.tractogram.data_per_streamline["seed_index"].ravel()


def test_points_file_on_the_daemon_equals_cli_and_parts_join(daemon, volumes, phantom,
                                                            references, tmp_path):
    seeds = _seeds(tmp_path)
    whole = _points(tmp_path, "whole.npy", seeds)
    tail = _points(tmp_path, "tail.npy", seeds[100:].astype(np.float32))
    output = {"save_seed_index": True}

    def job(seeds_doc, ids=None):
        doc = (server_job(phantom, ids, rng_seed=4) if ids else local_job(phantom, rng_seed=4))
        doc["seeds"] = dict(seeds_doc, rng_seed=4)
        doc["output"] = output
        return doc

    _, got = run_to_completion(daemon.api, job({"points_file": _upload(daemon, whole, "npy")},
                                               volumes))
    want = references.trk(job({"points_file": str(whole)}))
    assert_same_trk(got, want, "seeds.points_file on the daemon")
    assert_same_trk(want, references.trk(job({"points": seeds.tolist()})), "points_file vs points")

    # Seeds 100.. as float32 from index 100, and 0..99 inline: the whole job's lines.
    _, tail_trk = run_to_completion(daemon.api, job(
        {"points_file": _upload(daemon, tail, "npy"), "first_index": 100}, volumes))
    head = references.trk(job({"points": seeds[:100].tolist()}))
    want_f32 = references.trk(job({"points": seeds[:100].tolist() +
                                   seeds[100:].astype(np.float32).astype(float).tolist()}))
    a, ai = _streamlines(head, tmp_path, "head.trk")
    b, bi = _streamlines(tail_trk, tmp_path, "tail.trk")
    w, wi = _streamlines(want_f32, tmp_path, "want.trk")
    assert len(a) + len(b) == len(w) and len(b) > 0
    assert all(np.array_equal(x, y) for x, y in zip(list(a) + list(b), w))
    assert np.array_equal(np.concatenate([ai, bi]), wi) and bi.min() >= 100


def test_bad_points_files_name_the_field(daemon, volumes, phantom, tmp_path):
    outside = _points(tmp_path, "outside.npy", np.array([[1.0, 1, 1], [1, 1, 99]]))
    cases = [(volumes["odf"], "seeds.points_file", "not a NumPy .npy file"),
             (_upload(daemon, outside, "npy"), "seeds.points_file[1]", "outside the image")]
    for vid, field, message in cases:
        job = server_job(phantom, volumes)
        job["seeds"] = {"points_file": vid}
        doc = wait_job(daemon.api, submit(daemon.api, job))
        assert doc["status"] == "failed", doc
        assert doc["error"]["field"] == field and message in doc["error"]["message"], doc
    job = server_job(phantom, volumes)
    job["seeds"] = {"roi": volumes["roi"], "first_index": 3}
    r = daemon.api.post_json("/v1/jobs", job)
    assert r.status == 400 and r.json()["error"]["field"] == "seeds.first_index", str(r)


def test_tractctl_uploads_the_points_file(tractctl, daemon, phantom, references, tmp_path):
    seeds = _seeds(tmp_path)
    _points(tmp_path, "seeds.npy", seeds)
    job = local_job(phantom, rng_seed=2)
    job["seeds"] = {"points_file": "seeds.npy", "rng_seed": 2, "first_index": 7}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    out = tmp_path / "ctl.trk"
    env = daemon_env()
    env.pop("TRACTD_SOCKET", None)
    proc = subprocess.run([tractctl, "--socket", str(daemon.sock), "track", str(path), "-o",
                           str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    job["seeds"]["points_file"] = str(tmp_path / "seeds.npy")
    assert_same_trk(out.read_bytes(), references.trk(job), "tractctl track, points_file")


def test_points_file_counts_against_max_seeds_per_job(daemon_factory, phantom, tmp_path):
    """The points of a file are counted when the job reads it: over
    max_seeds_per_job the job fails as limit_exceeded naming the file."""
    d = daemon_factory(sets=["max_seeds_per_job=100"], tcp=False)
    ids = upload_phantom(d.api, phantom)
    job = server_job(phantom, ids)
    job["seeds"] = {"points_file": _upload(d, _points(tmp_path, "s.npy", _seeds(tmp_path)), "npy")}
    doc = wait_job(d.api, submit(d.api, job))
    assert doc["status"] == "failed", doc
    assert doc["error"]["code"] == "limit_exceeded", doc
    assert doc["error"]["field"] == "seeds.points_file", doc
