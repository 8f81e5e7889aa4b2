"""Server-side paths on a shared server (security issue, findings 1-4).

The daemon runs as root with data_roots; clients are uid 65534 (nobody) and
uid 23456 on the Unix socket. A user may write in a directory under a data
root (data/u, theirs); the secrets are root's, mode 0600, outside the roots
or inside them. The daemon must open each input once, as the user who
submits the job, beneath the roots, regular files only, and read nothing
else: no NIfTI companion name, no file swapped in after the check, nothing
the user could not read, and no FIFO that would stall the worker.
"""
import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from .support import make_job, server_job, submit, upload_phantom, wait_job, wait_running

NOBODY = 65534
OTHER = 23456
SECRET = "db_password=hunter2-0123456789"
# A job that keeps the worker busy until it is cancelled (see test_cancel).
LONG_SEEDS = 200000

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="runs the daemon as root and curl as other uids")


def _open_socket(d):
    """Lets every user reach the socket (0660 root:root in a directory of
    the daemon's; a real setup grants a group, see README)."""
    for parent in (d.sock.parent, d.sock.parent.parent):
        if str(parent).startswith("/tmp/"):
            os.chmod(parent, 0o755)
    os.chmod(d.sock, 0o666)


class Server:
    """A root daemon with data_roots=DATA; DATA/u belongs to nobody; the
    secrets (root's, 0600) are in SECRET, outside the roots."""

    def __init__(self, daemon_factory, phantom, tmp):
        os.chmod(tmp, 0o755)
        self.data, self.secret = tmp / "data", tmp / "secret"
        self.user_dir = self.data / "u"
        for d in (self.data, self.user_dir, self.secret):
            d.mkdir()
            os.chmod(d, 0o755)
        os.chown(self.user_dir, NOBODY, NOBODY)
        for name in ("odf.nii.gz", "fa.nii.gz", "seed_roi.nii.gz", "dwi.nii.gz",
                     "dwi.bval", "dwi.bvec"):
            shutil.copy(phantom.path(name), self.data / name)
            os.chmod(self.data / name, 0o644)
        self.secret_odf = self._secret("odf.nii.gz", phantom.path("odf.nii.gz").read_bytes())
        self.secret_text = self._secret("notes.txt", (SECRET + "\n").encode() * 4000)
        self.d = daemon_factory(tcp=False, sets=[f"data_roots={self.data}"])
        _open_socket(self.d)
        self.a = self.d.unix.as_user(NOBODY)
        self.b = self.d.unix.as_user(OTHER)
        self.phantom = phantom

    def _secret(self, name, data):
        path = self.secret / name
        path.write_bytes(data)
        os.chmod(path, 0o600)
        return path

    def user_file(self, name, data=b""):
        """A file of nobody's in DATA/u."""
        path = self.user_dir / name
        path.write_bytes(data)
        os.chown(path, NOBODY, NOBODY)
        return path

    def user_link(self, name, target):
        path = self.user_dir / name
        path.symlink_to(target)
        os.lchown(path, NOBODY, NOBODY)
        return path

    def job(self, **paths):
        """The phantom's job on the files in DATA, with paths replaced."""
        files = {"odf": self.data / "odf.nii.gz", "stop_map": self.data / "fa.nii.gz",
                 "roi": self.data / "seed_roi.nii.gz", **paths}
        return make_job(self.phantom, files["odf"], files["stop_map"], files["roi"],
                        count=200, rng_seed=1)

    def dwi_job(self, directory):
        """The phantom's DWI job on the files in directory."""
        job = json.loads((self.phantom.dir / "job_dwi.json").read_text())
        job.pop("output", None)
        job["inputs"] = {"dwi": str(directory / "dwi.nii.gz"),
                         "bvals": str(directory / "dwi.bval"),
                         "bvecs": str(directory / "dwi.bvec")}
        job["seeds"] = {"roi": str(directory / "seed_roi.nii.gz"), "count": 200, "rng_seed": 1}
        return job


def _never_tracked(endpoint, r, what):
    """The job was refused at submission (4xx), or ran and failed: no
    tractogram of what the user could not read. Returns the messages."""
    if r.status != 202:
        assert 400 <= r.status < 500, f"{what}: {r}"
        return r.error["message"]
    doc = wait_job(endpoint, r.json()["id"], timeout=120)
    assert doc["status"] != "done", f"{what}: the job tracked a file the user cannot read: {doc}"
    return (doc.get("error") or {}).get("message", "")


@pytest.fixture
def server(daemon_factory, phantom):
    """A Server in a directory every user may search (pytest's tmp_path is
    under a 0700 directory of root's)."""
    tmp = Path(tempfile.mkdtemp(prefix="tractd-files-", dir="/tmp"))
    try:
        yield Server(daemon_factory, phantom, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- finding 1

def test_nifti_companion_names_are_not_opened(server):
    """`x` plus a symlink `x.nii.gz` to root's secret ODF: only `x` is read
    (it is no NIfTI image), never the companion libnifti would pick."""
    x = server.user_file("x")
    server.user_link("x.nii.gz", server.secret_odf)
    msg = _never_tracked(server.a, server.a.post_json("/v1/jobs", server.job(odf=x)), "x")
    assert "not a NIfTI-1/-2 image" in msg, msg


def test_hdr_img_pair_is_refused(server, phantom):
    """A crafted .hdr (magic "ni1") whose .img is a symlink to root's 0600
    text file, as seeds.roi: refused, none of the text's bytes are read."""
    head = bytearray(gzip.decompress(phantom.path("seed_roi.nii.gz").read_bytes())[:348])
    head[344:348] = b"ni1\0"
    head[70:72] = (2).to_bytes(2, "little")     # datatype uint8
    head[72:74] = (8).to_bytes(2, "little")     # bitpix
    head[108:112] = bytes(4)                     # vox_offset 0
    head[112:116] = bytes(4)                     # scl_slope 0
    hdr = server.user_file("roi.hdr", bytes(head))
    server.user_link("roi.img", server.secret_text)
    msg = _never_tracked(server.a, server.a.post_json("/v1/jobs", server.job(roi=hdr)), "hdr")
    assert "a .hdr/.img pair is not read" in msg and "hunter2" not in msg, msg


# --------------------------------------------------------------------------- finding 2

def test_directory_swapped_after_submission_is_not_followed(server, phantom):
    """The job's directory is replaced by a symlink to root's directory of
    the same names (bvals there: a password) while the job waits in the
    queue: the job reads the files it was given, and no message carries
    the secret."""
    job_dir = server.user_dir / "subject"
    job_dir.mkdir()
    for name in ("dwi.nii.gz", "dwi.bval", "dwi.bvec", "seed_roi.nii.gz"):
        shutil.copy(phantom.path(name), job_dir / name)
    for p in (job_dir, *job_dir.iterdir()):
        os.chown(p, NOBODY, NOBODY)
    swapped = server.secret / "subject"
    swapped.mkdir(mode=0o700)
    for name in ("dwi.nii.gz", "dwi.bvec", "seed_roi.nii.gz"):
        shutil.copy(phantom.path(name), swapped / name)
    (swapped / "dwi.bval").write_text((SECRET + "\n") * 3)

    ids = upload_phantom(server.b, phantom)
    busy = submit(server.b, server_job(phantom, ids, count=LONG_SEEDS, rng_seed=3))
    wait_running(server.b, busy)
    job = submit(server.a, server.dwi_job(job_dir))
    job_dir.rename(server.user_dir / "old")
    server.user_link("subject", swapped)
    assert server.b.request("DELETE", f"/v1/jobs/{busy}").status in (202, 204)
    doc = wait_job(server.a, job, timeout=300)
    assert "hunter2" not in str(doc), doc
    assert doc["status"] == "done", doc


# --------------------------------------------------------------------------- finding 3

def test_file_the_user_cannot_read_is_refused(server):
    """Root's 0600 ODF inside the data root: the user who cannot read it
    gets the same answer as for a missing file, and no tractogram."""
    private = server.data / "private_odf.nii.gz"
    shutil.copy(server.secret_odf, private)
    os.chmod(private, 0o600)
    r = server.a.post_json("/v1/jobs", server.job(odf=private))
    assert r.status == 422, str(r)
    assert r.error["code"] == "server_paths_disabled" and r.error["field"] == "inputs.odf", str(r)
    missing = server.a.post_json("/v1/jobs", server.job(odf=server.data / "missing.nii.gz"))
    assert r.error["message"].replace("private_odf", "missing") == missing.error["message"]
    # What the user may read still works, as that user.
    job = submit(server.a, server.job())
    assert wait_job(server.a, job, timeout=120)["status"] == "done"
    assert server.a.get(f"/v1/jobs/{job}/tractogram").status == 200


# --------------------------------------------------------------------------- finding 4

def test_fifo_input_is_refused_and_stalls_nobody(server):
    """A FIFO as seeds.roi, and as the .nii companion of an ODF name, is
    refused at submission; another user's job then runs, and SIGTERM stops
    the daemon within seconds."""
    fifo = server.user_dir / "roi.nii"
    os.mkfifo(fifo)
    os.chown(fifo, NOBODY, NOBODY)
    r = server.a.post_json("/v1/jobs", server.job(roi=fifo))
    assert 400 <= r.status < 500 and r.error["field"] == "seeds.roi", str(r)
    y = server.user_file("y")
    os.mkfifo(server.user_dir / "y.nii")
    r = server.a.post_json("/v1/jobs", server.job(odf=y))
    if r.status == 202:   # then it must fail, not block
        assert wait_job(server.a, r.json()["id"], timeout=30)["status"] == "failed"
    else:
        assert 400 <= r.status < 500, str(r)
    other = submit(server.b, server.job())
    assert wait_job(server.b, other, timeout=60)["status"] == "done"
    t0 = time.monotonic()
    server.d.stop(timeout=15)
    assert time.monotonic() - t0 < 15
