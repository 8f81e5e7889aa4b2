"""MRtrix3 images through the daemon: .mif and .mif.gz uploads are stored by
content as kinds mif and mif-gz; a DWI .mif upload brings its gradient table
(no bvals/bvecs uploaded) and tracks byte for byte as `tractd run` of the
same files; the job log says how the gradients were read and warns, as
job=ID, when a NIfTI job left inputs.bvecs_convention open on a positive-
determinant image."""
import json
import re
import subprocess

import nibabel as nib
import numpy as np

from mifio import world_scheme, write_mif

from .support import assert_same_trk, daemon_env, run_to_completion

SEEDS = dict(count=200, rng_seed=3)


def _job(phantom, inputs, roi):
    job = json.loads((phantom.dir / "job_dwi.json").read_text())
    job.pop("output", None)
    job["inputs"] = inputs
    job["seeds"] = {"roi": roi, **SEEDS}
    return job


def _upload(endpoint, path, kind):
    r = endpoint.upload(path)
    assert r.status in (200, 201), str(r)
    assert r.json()["kind"] == kind, r.json()
    return r.json()["id"]


def test_mif_dwi_upload_tracks_like_the_cli(daemon, phantom, tractd, tmp_path):
    img = nib.load(str(phantom.path("dwi.nii.gz")))
    dwi = np.asarray(img.dataobj, dtype=np.float32)
    bvals = np.loadtxt(phantom.path("dwi.bval"))
    bvecs = np.loadtxt(phantom.path("dwi.bvec")).T
    mask = np.asarray(nib.load(str(phantom.path("mask.nii.gz"))).dataobj)
    files = {"dwi": write_mif(tmp_path / "dwi.mif.gz", dwi, img.affine,
                              scheme=world_scheme(bvals, bvecs, img.affine)),
             "mask": write_mif(tmp_path / "mask.mif", mask, img.affine, dtype="bit")}
    ids = {"dwi": _upload(daemon.api, files["dwi"], "mif-gz"),
           "mask": _upload(daemon.api, files["mask"], "mif")}
    roi = _upload(daemon.api, phantom.path("seed_roi.nii.gz"), "nifti-gz")
    doc, trk = run_to_completion(daemon.api, _job(phantom, ids, roi))
    log = daemon.log_path.read_text()
    assert f"job={doc['id']} gradients: the dw_scheme of inputs.dwi" in log, daemon.log()

    local = _job(phantom, files, str(phantom.path("seed_roi.nii.gz")))
    (tmp_path / "job.json").write_text(json.dumps(local))
    subprocess.run([tractd, "run", str(tmp_path / "job.json"), "-o", str(tmp_path / "cli.trk"),
                    "-q"], check=True, timeout=300)
    assert_same_trk(trk, (tmp_path / "cli.trk").read_bytes(), "DWI .mif job over HTTP")


def test_daemon_warns_of_an_unchosen_bvecs_convention(daemon, phantom):
    ids = {key: _upload(daemon.api, phantom.path(name), kind) for key, name, kind in (
        ("dwi", "dwi.nii.gz", "nifti-gz"), ("bvals", "dwi.bval", "text"),
        ("bvecs", "dwi.bvec", "text"), ("mask", "mask.nii.gz", "nifti-gz"))}
    roi = _upload(daemon.api, phantom.path("seed_roi.nii.gz"), "nifti-gz")
    unchosen, _ = run_to_completion(daemon.api, _job(phantom, ids, roi))
    chosen, _ = run_to_completion(daemon.api, _job(phantom, {**ids, "bvecs_convention": "fsl"},
                                                   roi))
    log = daemon.log_path.read_text()
    assert re.search(rf"warning.*job={unchosen['id']} gradients: inputs.bvecs read with "
                     r"bvecs_convention voxel \(the default\)", log), daemon.log()
    assert re.search(rf"info.*job={chosen['id']} gradients: inputs.bvecs read with "
                     "bvecs_convention fsl: x flipped", log), daemon.log()
    assert not re.search(rf"warning.*job={chosen['id']}", log), daemon.log()


def test_tractctl_sends_bvecs_convention_as_a_setting(tractctl, daemon, phantom, tmp_path):
    """`tractctl track` uploads the job's files, a .mif DWI among them, and sends
    inputs.bvecs_convention as it is, not as a file to upload."""
    job = json.loads((phantom.dir / "job_dwi.json").read_text())
    job["inputs"]["bvecs_convention"] = "voxel"
    job["seeds"]["count"] = 50
    path = phantom.dir / "job_dwi_convention.json"
    path.write_text(json.dumps(job))
    env = daemon_env()
    env.pop("TRACTD_SOCKET", None)
    out = tmp_path / "dwi.trk"
    p = subprocess.run([tractctl, "--socket", str(daemon.sock), "track", str(path), "-o",
                        str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    assert out.stat().st_size > 1000
