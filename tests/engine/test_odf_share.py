"""Several devices transposing a streamed ODF share one host copy of it
(issue 24; job/odf_stream.h's odf_stream_share_*, gpu_buffer_import_host).

Where two or more GPU devices read the float32 file raw, the stream's filler
thread copies each chunk once into host buffers that every device imports
(VK_EXT_external_memory_host, which lavapipe has) and copies out of, instead
of each device copying the file itself. The tractogram and the symmetry
verdict must be those of one device and of the host path; with many chunks
the two buffers take turns; where an import fails (the hook
TRACTD_FAULT_HOST_IMPORT=N refuses the imports of the devices after the
first N to import: every device's, or only the second's) every device reads the file itself,
to the same bytes. The phantom is test_odf_transpose.py's (5 slabs).
"""
import re

import pytest

from conftest import run_job
from test_odf_stream import _job, _with_nan
from test_odf_transpose import (EDGE, GPU, RAW, _run, _save_with_gap, _symmetric,
                                phantom_dir, whole)  # noqa: F401

EXIT_INVALID = 3
SHARED = "raw float32 upload, one host copy shared"
OWN = "reads the ODF's file itself"
READS_SHARED = "reads the ODF from the host copy shared by"


@pytest.fixture(scope="module")
def one_device(tractd, phantom_dir, whole):  # noqa: F811
    proc, trk, _ = _run(tractd, phantom_dir, "one", "neg.nii")
    assert RAW in proc.stderr and SHARED not in proc.stderr, proc.stderr[-2000:]
    assert trk == whole[0]
    return trk


def test_two_devices_share_the_host_copy(tractd, phantom_dir, whole, one_device):  # noqa: F811
    proc, trk, stats = _run(tractd, phantom_dir, "shared", "neg.nii", "--device", "0,0")
    assert proc.stderr.count(f"{RAW} ({SHARED}): 5 slabs in 5 chunks") == 2, \
        proc.stderr[-3000:]
    assert "staging from the host copy shared by 2 devices" in proc.stderr
    assert proc.stderr.count(f"{READS_SHARED} 2 devices") == 2
    assert stats["devices"] == 2
    assert trk == one_device == whole[0]
    assert _symmetric(proc) is whole[1]


def test_many_chunks_take_turns_in_the_buffers(tractd, phantom_dir, whole):  # noqa: F811
    # Chunks of 141 voxels: 4 slabs of 8 planes of 399 voxels take 23 each,
    # the last slab's 5 planes 15; three devices copy out of the two buffers
    # in turn.
    proc, trk, _ = _run(tractd, phantom_dir, "shared_split", "neg.nii", "--device", "0,0,0",
                        "--max-alloc-bytes", "200K")
    found = re.findall(rf"{re.escape(SHARED)}\): 5 slabs in (\d+) chunks of up to 141 voxels",
                       proc.stderr)
    assert found == ["107"] * 3, proc.stderr[-3000:]
    assert "shared by 3 devices" in proc.stderr
    assert trk == whole[0]


def test_asymmetric_odf_gives_the_same_verdict(tractd, phantom_dir):  # noqa: F811
    # test_odf_transpose's voxel just over the symmetry tolerance.
    _save_with_gap(phantom_dir / "ph", "asym_shared", EDGE)
    proc_whole, trk_whole, _ = _run(tractd, phantom_dir, "asym_whole", "asym_shared.nii.gz")
    proc, trk, _ = _run(tractd, phantom_dir, "asym_shared", "asym_shared.nii",
                        "--device", "0,0")
    assert proc.stderr.count(READS_SHARED) == 2, proc.stderr[-3000:]
    assert not _symmetric(proc_whole)
    assert not _symmetric(proc)
    assert trk == trk_whole


@pytest.mark.parametrize("refused_after", ["0", "1"], ids=["every_import", "second_device"])
def test_refused_import_reads_the_file_on_each_device(tractd, phantom_dir, whole,  # noqa: F811
                                                      refused_after):
    proc, trk, _ = _run(tractd, phantom_dir, "refused" + refused_after, "neg.nii",
                        "--device", "0,0", env={"TRACTD_FAULT_HOST_IMPORT": refused_after})
    assert SHARED not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("cannot import the ODF's shared host copy") == \
        (2 if refused_after == "0" else 1)
    assert proc.stderr.count(OWN) == 2
    assert proc.stderr.count(f"{RAW} (raw float32 upload): 5 slabs in 5 chunks") == 2
    assert trk == whole[0]


def test_non_finite_value_fails_as_one_device_does(tractd, phantom_dir):  # noqa: F811
    _with_nan(phantom_dir, "nan_shared", x=13, y=4, z=33, t=5)
    messages = []
    for devices in ("0", "0,0"):
        proc, trk, _ = run_job(tractd, _job(phantom_dir, "nan_shared.nii"), phantom_dir,
                               name="nan" + devices, check=False,
                               extra_args=("-v", "--device", devices), env=GPU)
        assert proc.returncode == EXIT_INVALID, proc.stderr
        assert not trk.exists()
        assert proc.stderr.count(READS_SHARED) == (2 if devices == "0,0" else 0), \
            proc.stderr[-3000:]
        messages.append([line for line in proc.stderr.splitlines() if "error" in line][-1])
    assert "voxel (13, 4, 33), volume 5" in messages[0], messages
    assert messages[0] == messages[1]
