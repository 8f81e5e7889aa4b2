"""Volumes: content-addressed uploads (POST /v1/volumes), HEAD and GET of
/v1/volumes/{id}, the kinds, refused uploads (415, 413) and what they leave
on disk."""
import gzip
import hashlib

from .support import PHANTOM_INPUTS, sha256_id

ABSENT_ID = "sha256:" + hashlib.sha256(b"no such volume").hexdigest()


def _leftovers(d):
    """Files in the store that are not published volumes (temporary uploads)."""
    vol_dir = d.state_dir / "volumes"
    return sorted(p.name for p in vol_dir.iterdir()
                  if p.name.startswith(".") and p.name != ".owners")


def test_upload_id_is_sha256(daemon, phantom):
    """Uploading the phantom's odf, fa and seed ROI with `curl --data-binary
    @file` answers 201 with id = sha256 of the file (computed here), its size
    and kind nifti-gz; the same bytes again from the same user answer 200 with
    the same document, and 201 from another identity (here the TCP token)."""
    for name in PHANTOM_INPUTS.values():
        path = phantom.path(name)
        want = {"id": sha256_id(path), "bytes": path.stat().st_size, "kind": "nifti-gz"}
        r = daemon.unix.upload(path)
        assert r.status == 201, str(r)
        assert r.headers.get("content-type", "").startswith("application/json"), r.headers
        assert r.json() == want
        r = daemon.unix.upload(path)
        assert r.status == 200, str(r)
        assert r.json() == want
        # Another identity (the TCP token's) uploads it for the first time:
        # 201, though the bytes are stored once.
        r = daemon.tcp.upload(path)
        assert r.status == 201, str(r)
        assert r.json() == want
    assert _leftovers(daemon) == []


def test_head_and_get(daemon, phantom):
    """HEAD /v1/volumes/{id} is 200 for an uploaded volume and 404 for an
    unknown one (curl --head reads no body); GET gives the upload's JSON, or 404
    not_found."""
    path = phantom.path(PHANTOM_INPUTS["roi"])
    vid = sha256_id(path)
    assert daemon.api.upload(path).status in (200, 201)
    for ep in daemon.endpoints:
        r = ep.request("HEAD", f"/v1/volumes/{vid}")
        assert r.status == 200, str(r)
        assert r.headers.get("content-length", "0") == "0", r.headers
        r = ep.request("HEAD", f"/v1/volumes/{ABSENT_ID}")
        assert r.status == 404, str(r)
        r = ep.get(f"/v1/volumes/{vid}")
        assert r.status == 200, str(r)
        assert r.json() == {"id": vid, "bytes": path.stat().st_size, "kind": "nifti-gz"}
        r = ep.get(f"/v1/volumes/{ABSENT_ID}")
        assert r.status == 404, str(r)
        assert r.error["code"] == "not_found"


def test_kinds(daemon, phantom, tmp_path):
    """An uncompressed .nii is kind nifti, a bvals file kind text; each id is
    the sha256 of what was sent."""
    nii = tmp_path / "fa.nii"
    nii.write_bytes(gzip.decompress(phantom.path(PHANTOM_INPUTS["stop_map"]).read_bytes()))
    bvals = tmp_path / "dwi.bval"
    bvals.write_text("0 1000 1000 1000 2000 2000\n")
    for path, kind in ((nii, "nifti"), (bvals, "text")):
        r = daemon.api.upload(path)
        assert r.status == 201, str(r)
        assert r.json() == {"id": sha256_id(path), "bytes": path.stat().st_size, "kind": kind}


def test_garbage_upload_is_415(daemon, tmp_path):
    """Bytes that are neither NIfTI (plain or gzip'd) nor text answer 415
    unsupported_media_type, and nothing is stored under their id."""
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 8)
    r = daemon.api.upload(junk)
    assert r.status == 415, str(r)
    assert r.error["code"] == "unsupported_media_type"
    assert r.error["field"] == ""
    assert daemon.api.request("HEAD", f"/v1/volumes/{sha256_id(junk)}").status == 404
    assert _leftovers(daemon) == []


def test_gzip_that_is_not_nifti_is_415(daemon, tmp_path):
    """A gzip file whose content is not NIfTI (gzip'd binary junk) is not a
    .nii.gz: 415 unsupported_media_type (API.md), and it is not stored."""
    junk = tmp_path / "junk.gz"
    junk.write_bytes(gzip.compress(bytes(range(256)) * 8))
    r = daemon.api.upload(junk)
    assert r.status == 415, str(r)
    assert r.error["code"] == "unsupported_media_type"
    assert daemon.api.request("HEAD", f"/v1/volumes/{sha256_id(junk)}").status == 404


def test_upload_over_max_upload_bytes_is_413(daemon_factory, phantom, tmp_path):
    """With max_upload_bytes=1M (the smallest the configuration takes), the
    phantom's odf (1.5 MB) answers 413 payload_too_large and is not stored
    (no id, no temporary file left); exactly 1 MiB is accepted, a byte more
    is not."""
    d = daemon_factory(sets=["max_upload_bytes=1M"])
    odf = phantom.path(PHANTOM_INPUTS["odf"])
    r = d.api.upload(odf)
    assert r.status == 413, str(r)
    assert r.error["code"] == "payload_too_large"
    assert d.api.request("HEAD", f"/v1/volumes/{sha256_id(odf)}").status == 404
    exact = tmp_path / "exact.txt"
    exact.write_bytes(b"1 " * (1 << 19))
    r = d.api.upload(exact)
    assert r.status == 201, str(r)
    over = tmp_path / "over.txt"
    over.write_bytes(b"1 " * (1 << 19) + b"\n")
    r = d.api.upload(over)
    assert r.status == 413, str(r)
    assert r.error["code"] == "payload_too_large"
    assert _leftovers(d) == []
    assert d.api.get("/healthz").status == 200
