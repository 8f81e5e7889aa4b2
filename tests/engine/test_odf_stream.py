"""An uncompressed ODF read while it is uploaded (issue 24; job/odf_stream.h).

`tractd run` reads a .nii ODF in slabs of 8 z-planes (each one contiguous run
of every volume of the file) straight into the upload instead of whole into
host memory first. The phantom here is odd in every dimension and 37 voxels
along z: five slabs (8, 8, 8, 8 and 5 planes), so that every z-column of the
GPU pages takes five runs and the last slab is short. Every streamed run must
give the bytes of the same ODF read whole (the .nii gzipped, which is never
streamed): on one device, on two (each takes every slab as it is read), with
pages that end inside a z-column, and in float16. A slab skipped, or a slab
boundary put at the wrong z, changes the tractogram. A non-finite value is
refused as the whole read refuses it, naming the voxel.
"""
import gzip
import json
import shutil
import struct

import nibabel as nib
import numpy as np
import pytest

from conftest import run_cli, run_job

N_SEEDS = 300
CHUNK = "50"
SLABS = 5
EXIT_INVALID = 3


def _stack_along_z(ph):
    """The phantom's bundles fill planes 15 to 21 of 37: every plane z gets
    plane 15 + z % 7 (ODF, stop map and seeds), so that each slab holds
    seeds and a plane unlike its neighbours at its boundaries, and a slab
    read at the wrong z changes the tractogram."""
    planes = [15 + z % 7 for z in range(37)]
    for name in ("odf.nii", "fa.nii", "seed_roi.nii"):
        img = nib.load(str(ph / name))
        data = np.take(np.asarray(img.dataobj), planes, axis=2)
        nib.save(nib.Nifti1Image(data, img.affine, img.header), str(ph / name))


@pytest.fixture(scope="module")
def streamed(tractd, tmp_path_factory):
    """A 21x19x37 phantom with an uncompressed ODF, and the same ODF gzipped."""
    directory = tmp_path_factory.mktemp("odf_stream")
    run_cli(tractd, ["phantom", "--dim", "21,19,37", "--uncompressed", "--no-dwi",
                     directory / "ph"], check=True)
    ph = directory / "ph"
    _stack_along_z(ph)
    with open(ph / "odf.nii", "rb") as src, gzip.open(ph / "odf_whole.nii.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return directory


def _job(directory, odf, **tracking):
    job = json.loads((directory / "ph" / "job.json").read_text())
    for key in ("odf", "stop_map"):
        job["inputs"][key] = str(directory / "ph" / job["inputs"][key])
    job["inputs"]["odf"] = str(directory / "ph" / odf)
    job["seeds"] = {"roi": str(directory / "ph" / job["seeds"]["roi"]), "count": N_SEEDS,
                    "rng_seed": 0}
    job["tracking"].update(tracking)
    return job


def _run(tractd, directory, name, odf, *args, env=None, **tracking):
    proc, trk, stats = run_job(tractd, _job(directory, odf, **tracking), directory, name=name,
                               extra_args=("--max-chunk-seeds", CHUNK, "-v", *args), env=env)
    return proc, trk.read_bytes(), json.loads(stats.read_text())


@pytest.fixture(scope="module")
def whole(tractd, streamed):
    proc, trk, stats = _run(tractd, streamed, "whole", "odf_whole.nii.gz")
    assert "slabs" not in proc.stderr
    assert stats["streamlines"] > N_SEEDS // 2
    return trk


def test_streamed_odf_gives_the_same_bytes(tractd, streamed, whole):
    proc, trk, _ = _run(tractd, streamed, "one_device", "odf.nii")
    assert f"ODF read in {SLABS} slabs while it was uploaded to 1 device" in proc.stderr, \
        proc.stderr[-2000:]
    assert trk == whole


def test_two_devices_take_every_slab(tractd, streamed, whole):
    proc, trk, stats = _run(tractd, streamed, "two_devices", "odf.nii", "--device", "0,0")
    assert f"ODF read in {SLABS} slabs while it was uploaded to 2 device" in proc.stderr
    assert stats["devices"] == 2
    assert trk == whole


def test_pages_that_end_inside_a_slab(tractd, streamed, whole):
    # 1 MiB pages hold 724 voxels of 362 values: 19.6 z-columns of 37, so that
    # a page ends inside a column and a column's run of a slab is split.
    proc, trk, _ = _run(tractd, streamed, "paged", "odf.nii", "--max-alloc-bytes", "1M")
    assert "ODF on the GPU as float32: 21 pages" in proc.stderr, proc.stderr[-2000:]
    assert trk == whole


def test_float16_streamed(tractd, streamed):
    _, whole16, _ = _run(tractd, streamed, "whole16", "odf_whole.nii.gz", odf_storage="float16")
    proc, trk, stats = _run(tractd, streamed, "streamed16", "odf.nii", "--device", "0,0",
                            "--max-alloc-bytes", "1M", odf_storage="float16")
    assert stats["odf_storage"] == "float16"
    assert "slabs" in proc.stderr
    assert trk == whole16
    # The same through the staging buffers (see the test below): float16
    # runs of a z-column scattered by the GPU's copies.
    job = _job(streamed, "odf.nii", odf_storage="float16")
    proc, trk, _ = run_job(tractd, job, streamed, name="staged16",
                           extra_args=("-v", "--gpu-memory", "128M", "--max-alloc-bytes", "1M"),
                           env={"TRACTD_STAGED_UPLOADS": "1"})
    assert "slabs" in proc.stderr
    assert trk.read_bytes() == whole16


def _with_nan(directory, name, x, y, z, t):
    ph = directory / "ph"
    img = nib.load(str(ph / "odf.nii"))
    nx, ny, nz, _ = img.shape
    offset = img.dataobj.offset + 4 * (((t * nz + z) * ny + y) * nx + x)
    data = bytearray((ph / "odf.nii").read_bytes())
    data[offset:offset + 4] = struct.pack("<f", float("nan"))
    (ph / f"{name}.nii").write_bytes(bytes(data))
    with gzip.open(ph / f"{name}.nii.gz", "wb") as gz:
        gz.write(bytes(data))


def test_non_finite_value_in_a_later_slab(tractd, streamed):
    _with_nan(streamed, "nan", x=13, y=4, z=33, t=5)
    messages = []
    for odf in ("nan.nii", "nan.nii.gz"):
        proc, trk, _ = run_job(tractd, _job(streamed, odf), streamed, name=odf, check=False,
                               extra_args=("--device", "0,0"))
        assert proc.returncode == EXIT_INVALID, proc.stderr
        assert not trk.exists()
        messages.append(proc.stderr.strip().splitlines()[-1].replace(".gz", ""))
    assert "inputs.odf" in messages[0] and "voxel (13, 4, 33), volume 5" in messages[0], messages
    assert messages[0] == messages[1]



@pytest.mark.parametrize("pages", [(), ("--max-alloc-bytes", "1M")], ids=["one_page", "1M_pages"])
def test_staged_copies_of_the_slabs(tractd, streamed, whole, pages):
    # lavapipe's device memory is mapped, so uploads fill it in place; a
    # discrete GPU's goes through the staging buffers, whose copies scatter
    # each slab's z-column runs (TRACTD_STAGED_UPLOADS makes lavapipe do the
    # same). --gpu-memory 128M makes them 2 MiB: a slab (4.6 MB) takes three,
    # and runs go on from one to the next.
    proc, trk, _ = run_job(tractd, _job(streamed, "odf.nii"), streamed, name="staged" + str(len(pages)),
                           extra_args=("-v", "--gpu-memory", "128M", *pages),
                           env={"TRACTD_STAGED_UPLOADS": "1"})
    assert f"ODF read in {SLABS} slabs" in proc.stderr, proc.stderr[-2000:]
    assert trk.read_bytes() == whole
