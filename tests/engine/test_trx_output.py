"""TRX output (output.format "trx"): a zip that trx-python 0.6 and a plain
zipfile + numpy reader both read, holding the same streamlines as the TRK of
the same job, in RAS+ mm; float16 positions within a half's precision;
deflate or store as asked; seeds as dps; the header's affine and dimensions
those of the input, oblique and LAS included; the same bytes whatever the
chunking, each entry's data descriptor (the positions stream into the zip)
agreeing with the central directory; TRX options refused with the other
formats."""
import json
import struct
import zipfile

import nibabel as nib
import numpy as np
import pytest
from trx.trx_file_memmap import load as trx_load

from conftest import load_trk, run_cli, write_job

N_SEEDS = 300
# TRK stores voxel-mm and TRX RAS mm, both float32: a few float32 ulps apart.
TOL_MM = 1e-4
# float16 keeps 11 significant bits: rounding costs at most |x| * 2^-11 (plus
# the float32 tolerance above for the TRK side).
F16_REL = 2.0 ** -11


def _job(phantom, output, rng_seed=5):
    seeds = dict(phantom.job["seeds"], roi=str(phantom.dir / phantom.job["seeds"]["roi"]),
                 count=N_SEEDS, rng_seed=rng_seed)
    return phantom.job_with(seeds=seeds, output=output)


def _run(tractd, tmp_path, name, job):
    out = tmp_path / f"{name}.{job['output'].get('format', 'trk')}"
    run_cli(tractd, ["run", write_job(tmp_path / f"{name}.json", job), "-o", out, "-q"],
            check=True)
    return out


def _ras_lines(trk):
    return [nib.affines.apply_affine(trk.affine, s) for s in trk.streamlines]


def read_trx_plain(path):
    """The TRX arrays by the spec alone: (header, [lines], dps, compress types)."""
    with zipfile.ZipFile(path) as zf:
        names = {i.filename: i for i in zf.infolist()}
        header = json.loads(zf.read("header.json"))
        pos_name = next(n for n in names if n.startswith("positions.3."))
        dtype = np.dtype("<" + {"float32": "f4", "float16": "f2"}[pos_name.split(".")[-1]])
        positions = np.frombuffer(zf.read(pos_name), dtype=dtype).reshape(-1, 3)
        offsets = np.frombuffer(zf.read("offsets.uint64"), dtype="<u8")
        dps = {n[len("dps/"):].split(".")[0]:
               np.frombuffer(zf.read(n), dtype="<f4").reshape(-1, 3)
               for n in names if n.startswith("dps/")}
        methods = {n: i.compress_type for n, i in names.items()}
    n, v = header["NB_STREAMLINES"], header["NB_VERTICES"]
    assert positions.shape == (v, 3)
    assert len(offsets) == n + 1 and offsets[0] == 0 and offsets[-1] == v, offsets
    assert np.all(np.diff(offsets.astype(np.int64)) > 0), "empty or unordered streamlines"
    lines = [positions[offsets[i]:offsets[i + 1]].astype(np.float64) for i in range(n)]
    return header, lines, dps, methods, dtype


def _compare(ras, lines, tol_of):
    assert len(ras) == len(lines) > 0
    for i, (a, b) in enumerate(zip(ras, lines)):
        assert a.shape == b.shape, f"streamline {i}: {a.shape} vs {b.shape}"
        err = np.abs(a - b)
        assert np.all(err <= tol_of(a)), f"streamline {i} differs by {err.max()}"


def _check_header(header, img):
    assert np.allclose(np.asarray(header["VOXEL_TO_RASMM"]), img.affine, atol=1e-9)
    assert list(header["DIMENSIONS"]) == list(img.shape[:3])


@pytest.mark.parametrize("positions,compression", [
    ("float32", "store"), ("float32", "deflate"), ("float16", "store")])
def test_trx_matches_trk(tractd, phantom, tmp_path, positions, compression):
    """Same job as TRK and TRX: the same streamlines in RAS mm, read by
    trx-python and by the plain reader; entries stored or deflated as asked."""
    trk = load_trk(_run(tractd, tmp_path, "ref", _job(phantom, {"format": "trk"})))
    trx_path = _run(tractd, tmp_path, "out", _job(phantom, {
        "format": "trx", "positions": positions, "compression": compression}))
    ras = _ras_lines(trk)
    if positions == "float16":
        tol_of = lambda a: np.abs(a) * F16_REL + TOL_MM  # noqa: E731
    else:
        tol_of = lambda a: TOL_MM  # noqa: E731

    header, lines, dps, methods, dtype = read_trx_plain(trx_path)
    assert dtype == np.dtype("<" + ("f2" if positions == "float16" else "f4"))
    assert header["NB_STREAMLINES"] == len(trk)
    assert dps == {}
    want = zipfile.ZIP_DEFLATED if compression == "deflate" else zipfile.ZIP_STORED
    assert set(methods.values()) == {want}, methods
    _check_header(header, phantom.odf_img)
    _compare(ras, lines, tol_of)

    trx = trx_load(str(trx_path))
    try:
        assert trx.streamlines._data.dtype == dtype
        assert np.allclose(trx.header["VOXEL_TO_RASMM"], phantom.affine, atol=1e-5)
        assert list(trx.header["DIMENSIONS"]) == list(phantom.shape)
        _compare(ras, [np.asarray(s, dtype=np.float64) for s in trx.streamlines], tol_of)
    finally:
        trx.close()


def test_trx_seeds(tractd, phantom, tmp_path):
    """save_seeds: dps/seeds.3.float32, the TRK's seeds, one per streamline."""
    trk_path = _run(tractd, tmp_path, "ref", _job(phantom, {"save_seeds": True}))
    trk_seeds = nib.streamlines.load(trk_path).tractogram.data_per_streamline["seeds"]
    trx_path = _run(tractd, tmp_path, "out", _job(phantom, {"format": "trx",
                                                            "save_seeds": True}))
    header, lines, dps, _, _ = read_trx_plain(trx_path)
    assert set(dps) == {"seeds"} and dps["seeds"].shape == (header["NB_STREAMLINES"], 3)
    assert np.allclose(dps["seeds"], trk_seeds, atol=TOL_MM, rtol=0)
    _compare(_ras_lines(load_trk(trk_path)), lines, lambda a: TOL_MM)
    trx = trx_load(str(trx_path))
    try:
        assert np.allclose(trx.data_per_streamline["seeds"], trk_seeds, atol=TOL_MM, rtol=0)
    finally:
        trx.close()


def _oblique_las_copy(phantom, dest):
    """The phantom's inputs with x reversed (LAS) and a 20-degree rotation about
    z plus a shift: voxels unchanged, only the voxel-to-RAS affine differs."""
    t = np.deg2rad(20)
    rot = np.array([[np.cos(t), -np.sin(t), 0, 0], [np.sin(t), np.cos(t), 0, 0],
                    [0, 0, 1, 0], [0, 0, 0, 1]])
    flip = np.diag([-1.0, 1.0, 1.0, 1.0])
    flip[0, 3] = phantom.shape[0] - 1
    shift = np.eye(4)
    shift[:3, 3] = [-12.5, 30.25, 7.0]
    job = _job(phantom, {"format": "trx"})
    for key, value in list(job["inputs"].items()) + [("roi", job["seeds"]["roi"])]:
        src = nib.load(value)
        affine = shift @ rot @ src.affine @ flip
        out = dest / f"{key}.nii.gz"
        img = nib.Nifti1Image(np.asarray(src.dataobj)[::-1], affine, src.header)
        img.set_sform(affine, code=1)
        img.set_qform(affine, code=1)
        nib.save(img, str(out))
        if key == "roi":
            job["seeds"]["roi"] = str(out)
        else:
            job["inputs"][key] = str(out)
    return job


def test_trx_oblique_las(tractd, phantom, tmp_path):
    """On an oblique LAS grid the header holds that affine and the points are
    it applied to the voxel coordinates, as the TRK of the same job says."""
    job = _oblique_las_copy(phantom, tmp_path)
    img = nib.load(job["inputs"]["odf"])
    assert nib.aff2axcodes(img.affine)[0] == "L" and abs(img.affine[1, 0]) > 0.1
    trk = load_trk(_run(tractd, tmp_path, "ref", dict(job, output={"format": "trk"})))
    trx_path = _run(tractd, tmp_path, "out", job)
    header, lines, _, _, _ = read_trx_plain(trx_path)
    _check_header(header, img)
    assert np.allclose(trk.affine, img.affine, atol=1e-4)
    _compare([nib.affines.apply_affine(img.affine, s) for s in trk.streamlines], lines,
             lambda a: TOL_MM)
    trx = trx_load(str(trx_path))
    try:
        assert np.allclose(trx.header["VOXEL_TO_RASMM"], img.affine, atol=1e-5)
        assert len(trx.streamlines) == len(trk)
    finally:
        trx.close()


def test_trx_is_deterministic(tractd, phantom, tmp_path):
    """The same job twice gives the same bytes: no clock in the zip."""
    job = _job(phantom, {"format": "trx", "compression": "deflate"})
    a = _run(tractd, tmp_path, "a", job).read_bytes()
    b = _run(tractd, tmp_path, "b", job).read_bytes()
    assert a == b


def _walk_local_entries(path):
    """The archive read front to back, as a streaming reader does: each local
    header announces a data descriptor (bit 3: the sizes come after the
    data), and that descriptor holds the CRC-32 and the zip64 (8-byte)
    sizes the central directory gives. Returns the entry names in order."""
    data = path.read_bytes()
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    at = 0
    for info in infos:
        sig, _, flags, method = struct.unpack_from("<IHHH", data, at)
        assert sig == 0x04034B50 and flags & 0x08 and method == info.compress_type, info
        name_len, extra_len = struct.unpack_from("<HH", data, at + 26)
        assert data[at + 30:at + 30 + name_len].decode() == info.filename
        at += 30 + name_len + extra_len + info.compress_size
        assert struct.unpack_from("<IIQQ", data, at) == (
            0x08074B50, info.CRC, info.compress_size, info.file_size), info
        at += 24
    assert struct.unpack_from("<I", data, at)[0] == 0x02014B50, "no central directory after"
    for info in infos:
        # trx-python before 0.6 maps each array at header_offset +
        # len(FileHeader()), which Python builds from the central entry.
        name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
        assert len(info.FileHeader()) == 30 + name_len + extra_len, info
    return [i.filename for i in infos]


@pytest.mark.parametrize("compression", ["store", "deflate"])
def test_trx_bytes_do_not_depend_on_chunking(tractd, phantom, tmp_path, compression):
    """The positions stream into the archive as the chunks come, their CRC-32
    summed from the encoders' pieces: one chunk or many, the same bytes,
    every CRC right (testzip reads all data) and every descriptor too."""
    job_path = write_job(tmp_path / "job.json", _job(phantom, {
        "format": "trx", "positions": "float16", "compression": compression,
        "save_seeds": True}))
    outs = []
    for name, flags in (("whole", []), ("chunks", ["--max-chunk-seeds", "7"]),
                        ("pieces", ["--readback-bytes", "64K"])):
        out = tmp_path / f"{name}.trx"
        run_cli(tractd, ["run", job_path, "-o", out, "-q", *flags], check=True)
        outs.append(out.read_bytes())
    assert outs[1] == outs[0] and outs[2] == outs[0]
    with zipfile.ZipFile(tmp_path / "whole.trx") as zf:
        assert zf.testzip() is None
    names = _walk_local_entries(tmp_path / "whole.trx")
    assert names == ["positions.3.float16", "header.json", "offsets.uint64",
                     "dps/seeds.3.float32"], names


@pytest.mark.parametrize("output,field", [
    ({"format": "tck", "positions": "float16"}, "output.positions"),
    ({"format": "trk", "compression": "deflate"}, "output.compression"),
    ({"positions": "float32"}, "output.positions"),
    ({"format": "trx", "positions": "float64"}, "output.positions"),
    ({"format": "trx", "compression": "bzip2"}, "output.compression"),
])
def test_trx_options_refused(tractd, phantom, tmp_path, output, field):
    proc = run_cli(tractd, ["run", write_job(tmp_path / "bad.json", _job(phantom, output)),
                            "-o", tmp_path / "bad.out", "-q"])
    assert proc.returncode == 3, proc.stderr
    assert field in proc.stderr, proc.stderr
