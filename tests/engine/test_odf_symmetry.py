"""Whether an ODF input is antipodally symmetric, which decides how directions
compare (|cos| when it is: daemon/models/fit.c, fit_prepare_odf). Every antipodal
pair of every voxel is compared; values within 1e-3 of the voxel's maximum
count as equal. One voxel out of that tolerance makes the whole ODF
asymmetric, a difference within it does not. The answer is read from the
kernels the engine compiles, whose defines `tractd -v` logs.
"""
import re

import nibabel as nib
import numpy as np
import pytest

from conftest import run_cli, write_job

N_SEEDS = 50
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("odf_symmetry")


def _symmetric_define(tractd, phantom, workdir, name, odf_path):
    job = phantom.job_with(seeds={"roi": str(phantom.path("seed_roi.nii.gz")),
                                  "count": N_SEEDS, "rng_seed": 0})
    job["inputs"]["odf"] = str(odf_path)
    job_path = write_job(workdir / f"{name}.json", job)
    proc = run_cli(tractd, ["-v", "run", job_path, "-o", workdir / f"{name}.trk"], check=True)
    found = set(re.findall(r"compiled prob_track\.comp .*SYMMETRIC=(\d)", proc.stderr))
    assert len(found) == 1, proc.stderr
    return found.pop() == "1"


def _odf_changed(phantom, workdir, name, relative):
    """The phantom's ODF with one value of its strongest voxel raised by
    relative times that voxel's maximum."""
    img = phantom.odf_img
    odf = np.asarray(img.dataobj, dtype=np.float32).copy()
    top = odf.max(axis=3)
    x, y, z = np.unravel_index(np.argmax(top), top.shape)
    odf[x, y, z, 7] += np.float32(relative * top[x, y, z])
    path = workdir / f"{name}.nii"
    nib.save(nib.Nifti1Image(odf, img.affine, img.header), str(path))
    return path


def test_symmetric_odf_compares_axes(tractd, phantom, workdir):
    assert _symmetric_define(tractd, phantom, workdir, "as_given", phantom.path("odf.nii.gz"))


def test_difference_within_tolerance_is_symmetric(tractd, phantom, workdir):
    path = _odf_changed(phantom, workdir, "within", TOLERANCE / 10)
    assert _symmetric_define(tractd, phantom, workdir, "within", path)


def test_one_asymmetric_voxel_makes_the_odf_asymmetric(tractd, phantom, workdir):
    path = _odf_changed(phantom, workdir, "beyond", TOLERANCE * 10)
    assert not _symmetric_define(tractd, phantom, workdir, "beyond", path)
