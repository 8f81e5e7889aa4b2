"""A streamed ODF transposed on the GPU (issue 24; engine/odf_transpose.h).

A GPU device takes a float32 .nii ODF as the file stores it (volume after
volume) and a kernel writes each voxel into its page, clipped at zero, with
the host's symmetry check, instead of the host transposing each slab. The
test hook TRACTD_GPU_KERNELS=1 makes lavapipe a GPU device here. Every raw
upload must give the tractogram, and the symmetric or asymmetric outcome, of
the same ODF read whole (gzipped: never streamed, so transposed on the host):
with chunks that split z-planes and pages that split z-columns, on two
devices, through the staging buffers, with negative values (clipped before
the check), and at the symmetry tolerance's edge, where a float compare
would decide otherwise than fit.c's double one, and in float16 pages. A
non-finite value fails as the slabs fail.

The phantom is 21x19x37 (slabs of 8, 8, 8, 8 and 5 planes), its planes
varied along z as test_odf_stream.py's are.
"""
import gzip
import re
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from conftest import run_cli, run_job
from test_odf_stream import N_SEEDS, _job, _stack_along_z, _with_nan
from test_odf_stream import _run as stream_run

EXIT_INVALID = 3
GPU = {"TRACTD_GPU_KERNELS": "1"}
RAW = "ODF transposed on the GPU"
HOST = "ODF transposed on the host"
SPHERE_DATA = Path(__file__).resolve().parents[2] / "daemon" / "models" / "sphere_data.c"


def _antipodes():
    """symmetric362's vertex -> antipode, from the table tractd embeds."""
    text = SPHERE_DATA.read_text()
    body = text[text.index("symmetric362_vertices[362][3] = {"):]
    body = body[:body.index("};")]
    numbers = re.findall(r"\{([^{}]*)\}", body)
    v = np.array([[float(x.strip().rstrip("f")) for x in n.split(",")] for n in numbers])
    assert v.shape == (362, 3)
    return np.argmin(v @ v.T, axis=1)


def _save(ph, name, odf, img):
    nib.save(nib.Nifti1Image(odf, img.affine, img.header), str(ph / f"{name}.nii"))
    with open(ph / f"{name}.nii", "rb") as src, gzip.open(ph / f"{name}.nii.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)


@pytest.fixture(scope="module")
def phantom_dir(tractd, tmp_path_factory):
    """The phantom with negative values: planes 17 and 18 lowered by half
    their voxels' maxima (tracking interpolates across them, so unclipped
    values change the tractogram), in the strongest voxel a pair unequal
    before clipping (-5 and -0.5) and equal after, and a negative value
    without its antipode; as neg.nii and gzipped."""
    directory = tmp_path_factory.mktemp("odf_transpose")
    run_cli(tractd, ["phantom", "--dim", "21,19,37", "--uncompressed", "--no-dwi",
                     directory / "ph"], check=True)
    ph = directory / "ph"
    _stack_along_z(ph)
    img = nib.load(str(ph / "odf.nii"))
    odf = np.asarray(img.dataobj, dtype=np.float32).copy()
    anti = _antipodes()
    odf[:, :, 17:19, :] -= np.float32(0.5) * odf[:, :, 17:19, :].max(axis=3, keepdims=True)
    top = odf.max(axis=3)
    x, y, z = np.unravel_index(np.argmax(top), top.shape)
    odf[x, y, z, 3], odf[x, y, z, anti[3]] = -5.0, -0.5
    odf[3, 4, 20, :] = np.float32(0.1)
    odf[3, 4, 20, 9] = -1.0
    odf[3, 4, 20, anti[9]] = 0.0
    _save(ph, "neg", odf, img)
    return directory


def _run(tractd, directory, name, odf, *args, env=None, **tracking):
    """test_odf_stream's run of the phantom's job, with lavapipe as a GPU device."""
    return stream_run(tractd, directory, name, odf, *args, env=dict(GPU, **(env or {})),
                      **tracking)


def _symmetric(proc):
    found = set(re.findall(r"compiled prob_track\.comp .*SYMMETRIC=(\d)", proc.stderr))
    assert len(found) == 1, proc.stderr[-2000:]
    return found.pop() == "1"


@pytest.fixture(scope="module")
def whole(tractd, phantom_dir):
    proc, trk, stats = _run(tractd, phantom_dir, "whole", "neg.nii.gz")
    assert RAW not in proc.stderr and HOST not in proc.stderr
    assert stats["streamlines"] > N_SEEDS // 2
    return trk, _symmetric(proc)


def test_raw_upload_gives_the_host_bytes(tractd, phantom_dir, whole):
    proc, trk, _ = _run(tractd, phantom_dir, "raw", "neg.nii")
    assert f"{RAW} (raw float32 upload): 5 slabs in 5 chunks" in proc.stderr, \
        proc.stderr[-2000:]
    assert trk == whole[0]
    assert _symmetric(proc) and whole[1]


def test_chunks_that_split_planes_and_pages_that_split_columns(tractd, phantom_dir, whole):
    # 200 KiB holds 141 voxels of 362 values: chunks end inside rows of x and
    # planes of 399 voxels, and pages end inside z-columns of 37.
    proc, trk, _ = _run(tractd, phantom_dir, "split", "neg.nii", "--max-alloc-bytes", "200K")
    assert re.search(r"5 slabs in \d+ chunks of up to 141 voxels", proc.stderr), \
        proc.stderr[-2000:]
    assert "pages of 141 voxels" in proc.stderr
    assert trk == whole[0]


def test_two_devices_each_transpose(tractd, phantom_dir, whole):
    proc, trk, stats = _run(tractd, phantom_dir, "two", "neg.nii", "--device", "0,0")
    assert proc.stderr.count(RAW) == 2, proc.stderr[-2000:]
    assert stats["devices"] == 2
    assert trk == whole[0]


def test_through_the_staging_buffers(tractd, phantom_dir, whole):
    # A discrete GPU's uploads go through the staging buffers (2 MiB under
    # --gpu-memory 128M): each 1 MB chunk takes one.
    proc, trk, _ = _run(tractd, phantom_dir, "staged", "neg.nii", "--gpu-memory", "128M",
                        "--max-alloc-bytes", "1M", env={"TRACTD_STAGED_UPLOADS": "1"})
    assert RAW in proc.stderr, proc.stderr[-2000:]
    assert trk == whole[0]


@pytest.fixture(scope="module")
def subnormal_dir(phantom_dir):
    """The phantom's ODF times 2^-20: its values (about 1e-6 and less) are
    subnormal halves, rounded in the kernel's last branch."""
    img = nib.load(str(phantom_dir / "ph" / "neg.nii"))
    odf = np.asarray(img.dataobj, dtype=np.float32) * np.float32(2.0 ** -20)
    _save(phantom_dir / "ph", "subnormal", odf, img)
    return phantom_dir


@pytest.mark.parametrize("odf, pmf_threshold", [("neg", 0.1), ("neg", 0.0),
                                                ("subnormal", 0.1)])
def test_float16_pages_give_the_host_bytes(tractd, subnormal_dir, odf, pmf_threshold):
    """float16 storage: the kernel rounds each value to half as the host's
    half_from_float does (pmf_threshold 0 lets the smallest values weigh in
    every draw; the scaled ODF is all subnormal halves)."""
    name = f"{odf}_{pmf_threshold}"
    _, whole16, _ = _run(tractd, subnormal_dir, f"whole16_{name}", f"{odf}.nii.gz",
                         odf_storage="float16", pmf_threshold=pmf_threshold)
    proc, trk, stats = _run(tractd, subnormal_dir, f"streamed16_{name}", f"{odf}.nii",
                            odf_storage="float16", pmf_threshold=pmf_threshold)
    assert stats["odf_storage"] == "float16"
    assert stats["streamlines"] > N_SEEDS // 2
    assert f"{RAW} (raw float32 upload into float16 pages)" in proc.stderr, \
        proc.stderr[-2000:]
    assert trk == whole16


# fit.c compares a float gap with 1e-3 (a double) times the voxel's top: with
# top 1024, the gap float32(1.024) is over it, while float32(1e-3) * 1024 is
# that same float; the float just below it is within.
EDGE = np.float32(1.024)


def _save_with_gap(ph, name, gap):
    """The phantom's ODF with voxel (10, 9, 30) at 1024 but for vertex 5 at 0
    and its antipode at gap, saved as NAME.nii and NAME.nii.gz."""
    img = nib.load(str(ph / "neg.nii"))
    odf = np.asarray(img.dataobj, dtype=np.float32).copy()
    anti = _antipodes()
    odf[10, 9, 30, :] = np.float32(1024)
    odf[10, 9, 30, 5], odf[10, 9, 30, anti[5]] = np.float32(0), gap
    _save(ph, name, odf, img)


@pytest.mark.parametrize("gap, symmetric", [(EDGE, False),
                                            (np.nextafter(EDGE, np.float32(0)), True)],
                         ids=["just_over", "just_within"])
def test_symmetry_at_the_tolerance(tractd, phantom_dir, gap, symmetric):
    name = f"edge{int(symmetric)}"
    _save_with_gap(phantom_dir / "ph", name, gap)
    proc_whole, trk_whole, _ = _run(tractd, phantom_dir, name + "_whole", name + ".nii.gz")
    proc, trk, _ = _run(tractd, phantom_dir, name + "_raw", name + ".nii")
    assert RAW in proc.stderr
    assert _symmetric(proc_whole) is symmetric
    assert _symmetric(proc) is symmetric
    assert trk == trk_whole


def test_non_finite_value_fails_as_the_slabs_do(tractd, phantom_dir):
    _with_nan(phantom_dir, "nan", x=13, y=4, z=33, t=5)
    messages = []
    for odf in ("nan.nii", "nan.nii.gz"):
        proc, trk, _ = run_job(tractd, _job(phantom_dir, odf), phantom_dir, name=odf,
                               check=False, extra_args=("-v",), env=GPU)
        assert proc.returncode == EXIT_INVALID, proc.stderr
        assert not trk.exists()
        assert HOST not in proc.stderr
        errors = [line for line in proc.stderr.splitlines() if "error" in line]
        messages.append(errors[-1].replace(".gz", ""))
    assert "inputs.odf" in messages[0] and "voxel (13, 4, 33), volume 5" in messages[0], messages
    assert messages[0] == messages[1]


def test_tiny_values_leave_the_symmetry_to_the_host(tractd, phantom_dir):
    # A voxel whose largest value is under 2^-90: a GPU that flushes
    # subnormal floats could judge it otherwise, so the host decides.
    ph = phantom_dir / "ph"
    img = nib.load(str(ph / "neg.nii"))
    odf = np.asarray(img.dataobj, dtype=np.float32).copy()
    odf[5, 5, 5, :] = np.float32(1e-30)
    odf[5, 5, 5, 5] = np.float32(0)
    _save(ph, "tiny", odf, img)
    proc_whole, trk_whole, _ = _run(tractd, phantom_dir, "tiny_whole", "tiny.nii.gz")
    proc, trk, _ = _run(tractd, phantom_dir, "tiny_raw", "tiny.nii")
    assert "symmetry checked on the host" in proc.stderr, proc.stderr[-2000:]
    assert not _symmetric(proc_whole)
    assert not _symmetric(proc)
    assert trk == trk_whole
