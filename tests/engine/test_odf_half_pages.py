"""Pages of half the sphere for a streamed mirrored ODF (issue 24;
engine/odf_transpose.h's half, job/odf_stream.h's odf_stream_copy_chunk).

On a mirrored sphere (the default repulsion724) a GPU that transposes a raw
.nii ODF guesses from its middle z-plane that every value equals its
antipode's, stages only the first half's volumes and writes pages of 364
values a voxel instead of 724: half the ODF's GPU memory, allocation, upload
and freeing. The kernels read only that half already (ODF_MIRRORED). The
staging compares each value it copies with its antipode's, clipped at zero
as the transpose's check compares them (on two devices, the stream's
filler does, once for both); at the first that differs the upload starts
again with pages of the whole sphere. An ODF read whole on
the host (gzipped, never streamed) is known mirrored or not before its
upload and goes up as half or whole pages from the start. Every run must
track the bytes of the same ODF read whole on the host, and say in its
defines whether the kernels read half the sphere.

The phantom is test_odf_stream.py's 21x19x37 (5 slabs, planes varied along
z) on repulsion724; the test hook TRACTD_GPU_KERNELS=1 makes lavapipe a GPU.
"""
import gzip
import re
import shutil
import struct

import nibabel as nib
import numpy as np
import pytest

from conftest import run_cli, run_job
from test_odf_stream import _job, _stack_along_z
from test_odf_stream import _run as stream_run

EXIT_INVALID = 3
GPU = {"TRACTD_GPU_KERNELS": "1"}
HALF_UPLOAD = "ODF transposed on the GPU (raw float32 upload of half the sphere"
WHOLE_AGAIN = "its pages hold the whole sphere"
MIDDLE_Z = 37 // 2


def _save(ph, name, odf, img):
    nib.save(nib.Nifti1Image(odf, img.affine, img.header), str(ph / f"{name}.nii"))
    with open(ph / f"{name}.nii", "rb") as src, gzip.open(ph / f"{name}.nii.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)


def _strongest_voxel(odf, z):
    top = odf[:, :, z, :].max(axis=2)
    x, y = np.unravel_index(np.argmax(top), top.shape)
    return x, y


@pytest.fixture(scope="module")
def phantom_dir(tractd, tmp_path_factory):
    """mirrored: the phantom's ODF; clipped: pairs equal only once clipped
    at zero (-5 and -0.5, -0 and +0); late: one value of the strongest voxel
    of plane 30 (slab 3 of 5, past the middle plane) one float step up, in
    the sphere's second half; middle: the same in plane 18, where the guess
    looks. Each as .nii and gzipped."""
    directory = tmp_path_factory.mktemp("odf_half_pages")
    ph = directory / "ph"
    run_cli(tractd, ["phantom", "--dim", "21,19,37", "--sphere", "repulsion724",
                     "--uncompressed", "--no-dwi", ph], check=True)
    _stack_along_z(ph)
    img = nib.load(str(ph / "odf.nii"))
    odf = np.asarray(img.dataobj, dtype=np.float32).copy()
    half = odf.shape[3] // 2
    assert half == 362 and np.array_equal(odf[..., :half], odf[..., half:])
    _save(ph, "mirrored", odf, img)
    clipped = odf.copy()
    x, y = _strongest_voxel(odf, 20)
    clipped[x, y, 20, 3], clipped[x, y, 20, 3 + half] = -5.0, -0.5
    clipped[x, y, 20, 9], clipped[x, y, 20, 9 + half] = np.float32(-0.0), np.float32(0.0)
    _save(ph, "clipped", clipped, img)
    for name, z in (("late", 30), ("middle", MIDDLE_Z)):
        nudged = odf.copy()
        x, y = _strongest_voxel(odf, z)
        nudged[x, y, z, half + 5] = np.nextafter(nudged[x, y, z, half + 5], np.float32(np.inf))
        _save(ph, name, nudged, img)
    return directory


def _run(tractd, directory, name, odf, *args, **tracking):
    proc, trk, _ = stream_run(tractd, directory, name, odf, *args, env=GPU, **tracking)
    mirrored = set(re.findall(r"compiled prob_track\.comp .*ODF_MIRRORED=(\d)", proc.stderr))
    assert len(mirrored) == 1, proc.stderr[-2000:]
    return proc.stderr, trk, mirrored.pop() == "1"


def _odf_mib(stderr):
    """The GPU memory of the ODF's pages, from the upload's debug line."""
    found = re.findall(r"ODF on the GPU as [^:]*: \d+ pages of \d+ voxels, ([\d.]+) MiB", stderr)
    assert found, stderr[-2000:]
    return float(found[0])


@pytest.fixture(scope="module")
def host(tractd, phantom_dir):
    """Each ODF read whole on the host, float32 and float16: (stderr, bytes, mirrored)."""
    return {(name, storage): _run(tractd, phantom_dir, f"host_{name}_{storage}",
                                  f"{name}.nii.gz", odf_storage=storage)
            for name in ("mirrored", "clipped", "late", "middle")
            for storage in ("float32", "float16")}


@pytest.mark.parametrize("storage", ["float32", "float16"])
@pytest.mark.parametrize("name", ["mirrored", "clipped"])
def test_mirrored_odf_goes_up_as_half_the_sphere(tractd, phantom_dir, host, name, storage):
    stderr, trk, mirrored = _run(tractd, phantom_dir, f"half_{name}_{storage}", f"{name}.nii",
                                 odf_storage=storage)
    assert HALF_UPLOAD in stderr and WHOLE_AGAIN not in stderr, stderr[-2000:]
    assert f"ODF on the GPU as {storage} of half the sphere" in stderr
    host_stderr, host_trk, host_mirrored = host[(name, storage)]
    assert f"ODF on the GPU as {storage} of half the sphere" in host_stderr
    # 364 values a voxel (362 rounded up to a multiple of 4) against 724.
    whole_mib = _odf_mib(host[("late", storage)][0])
    assert _odf_mib(stderr) == _odf_mib(host_stderr) == pytest.approx(whole_mib * 364 / 724,
                                                                      rel=0.01)
    assert mirrored and host_mirrored
    assert len(trk) > 10000, f"only {len(trk)} bytes tracked"
    assert trk == host_trk


@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_small_pages_through_the_staging_buffers(tractd, phantom_dir, host, storage):
    """Pages of 140 (float16: 281) voxels of 364 values end inside z-columns,
    chunks inside planes, and each piece goes through the staging buffers
    (TRACTD_STAGED_UPLOADS, as on a discrete GPU)."""
    proc, trk, _ = stream_run(tractd, phantom_dir, f"small_{storage}", "mirrored.nii",
                              "--max-alloc-bytes", "200K", odf_storage=storage,
                              env=dict(GPU, TRACTD_STAGED_UPLOADS="1"))
    voxels = 140 if storage == "float32" else 281
    assert f"ODF on the GPU as {storage} of half the sphere: " in proc.stderr, \
        proc.stderr[-2000:]
    assert f"pages of {voxels} voxels" in proc.stderr
    assert trk == host[("mirrored", storage)][1]


def test_unequal_pair_past_the_middle_goes_up_whole(tractd, phantom_dir, host):
    stderr, trk, mirrored = _run(tractd, phantom_dir, "late", "late.nii")
    assert WHOLE_AGAIN in stderr, stderr[-2000:]
    assert "ODF transposed on the GPU (raw float32 upload):" in stderr
    assert "ODF on the GPU as float32:" in stderr
    assert not mirrored and not host[("late", "float32")][2]
    assert "half the sphere" not in host[("late", "float32")][0]
    assert trk == host[("late", "float32")][1]


def test_unequal_middle_plane_never_tries_half(tractd, phantom_dir, host):
    stderr, trk, mirrored = _run(tractd, phantom_dir, "middle", "middle.nii")
    assert "half the sphere" not in stderr and WHOLE_AGAIN not in stderr, stderr[-2000:]
    assert not mirrored
    assert trk == host[("middle", "float32")][1]


@pytest.mark.parametrize("name", ["mirrored", "late"])
def test_two_devices_share_half_the_sphere(tractd, phantom_dir, host, name):
    """Two devices share one host copy of the first half's volumes, which
    the stream's filler compares with their antipodes as it copies them; at
    a chunk where a pair differs it stops, and each device uploads the
    whole sphere again from the file itself."""
    stderr, trk, mirrored = _run(tractd, phantom_dir, f"two_{name}", f"{name}.nii",
                                 "--device", "0,0")
    shared_half = f"{HALF_UPLOAD}, one host copy shared)"
    assert stderr.count(shared_half) == (2 if name == "mirrored" else 0), stderr[-3000:]
    assert stderr.count("reads the ODF from the host copy shared by 2 devices") == 2
    assert stderr.count(WHOLE_AGAIN) == (0 if name == "mirrored" else 2), stderr[-3000:]
    if name == "late":
        assert stderr.count("ODF transposed on the GPU (raw float32 upload):") == 2
    assert mirrored == (name == "mirrored")
    assert trk == host[(name, "float32")][1]


def _with_nans(directory, name, x, y, z, volumes):
    """The phantom's ODF with NaN (the same bits) at voxel (x, y, z) of each
    volume given, as .nii and gzipped."""
    ph = directory / "ph"
    img = nib.load(str(ph / "odf.nii"))
    nx, ny, nz, _ = img.shape
    data = bytearray((ph / "odf.nii").read_bytes())
    for t in volumes:
        offset = img.dataobj.offset + 4 * (((t * nz + z) * ny + y) * nx + x)
        data[offset:offset + 4] = struct.pack("<f", float("nan"))
    (ph / f"{name}.nii").write_bytes(bytes(data))
    with gzip.open(ph / f"{name}.nii.gz", "wb") as gz:
        gz.write(bytes(data))


@pytest.mark.parametrize("volumes", [(5,), (5, 362 + 5)], ids=["one_vertex", "antipodes"])
def test_non_finite_value_fails_as_the_host_does(tractd, phantom_dir, volumes):
    """NaN at one vertex differs from its antipode's value, so the upload
    starts again, whole, and the transpose flags it there; NaN at both
    (equal bits) stays mirrored, and the half upload's transpose flags it:
    either way the error of the same ODF read whole on the host."""
    name = "nan_" + "_".join(map(str, volumes))
    _with_nans(phantom_dir, name, 13, 4, 33, volumes)
    messages = []
    for odf in (f"{name}.nii", f"{name}.nii.gz"):
        proc, trk, _ = run_job(tractd, _job(phantom_dir, odf), phantom_dir, name=odf,
                               check=False, extra_args=("-v",), env=GPU)
        assert proc.returncode == EXIT_INVALID, proc.stderr[-2000:]
        assert not trk.exists()
        raw = odf.endswith(".nii")
        assert (WHOLE_AGAIN in proc.stderr) == (raw and len(volumes) == 1), proc.stderr[-2000:]
        errors = [line for line in proc.stderr.splitlines() if "error" in line]
        messages.append(errors[-1].replace(".gz", ""))
    assert "inputs.odf" in messages[0] and "voxel (13, 4, 33), volume 5" in messages[0], messages
    assert messages[0] == messages[1]
