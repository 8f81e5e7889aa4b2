"""MRtrix3 .mif inputs and the bvecs convention.

A .mif is read as `mrconvert x.mif x.nii` would write it: the same voxels on
the same affine, whatever its layout (axes permuted, reversed, volume-
contiguous), datatype (Float32BE, Bit...) or compression. A DWI .mif brings
its own gradient table (dw_scheme, scanner coordinates). Tracks are compared
byte for byte with the NIfTI job they stand for. Files are written here from
numpy (tests/mifio.py), and with MRtrix3's mrconvert where it is installed.

inputs.bvecs_convention: "voxel" (default, DIPY's reading) or "fsl" (x
flipped for a positive-determinant affine, as MRtrix3's -fslgrad); the log
says which was used and warns when the job did not choose and it matters.
"""
import json
import shutil
import subprocess

import nibabel as nib
import numpy as np
import pytest

from conftest import run_cli, write_job
from mifio import world_scheme, write_mif

EXIT_INVALID = 3
SEEDS = 300


class Data:
    """A small phantom (24x24x16, 1 mm, positive determinant) and its arrays."""

    def __init__(self, tractd, root):
        self.dir = root / "phantom"
        run_cli(tractd, ["phantom", "-q", "--dim", "24,24,16", self.dir], check=True)
        img = nib.load(str(self.dir / "dwi.nii.gz"))
        self.affine = img.affine
        self.dwi = np.asarray(img.dataobj, dtype=np.float32)
        self.mask = np.asarray(nib.load(str(self.dir / "mask.nii.gz")).dataobj)
        self.bvals = np.loadtxt(self.dir / "dwi.bval")
        self.bvecs = np.loadtxt(self.dir / "dwi.bvec").T          # (n, 3), voxel axes
        assert np.linalg.det(self.affine[:3, :3]) > 0

    def path(self, name):
        return str(self.dir / name)


@pytest.fixture(scope="module")
def data(tractd, tmp_path_factory):
    return Data(tractd, tmp_path_factory.mktemp("mif"))


def _job(inputs, data, **tracking):
    return {"inputs": inputs, "seeds": {"roi": data.path("seed_roi.nii.gz"), "count": SEEDS},
            "tracking": {"sphere": "symmetric362", **tracking}, "output": {"format": "tck"}}


def _nifti_dwi_inputs(data, **extra):
    return {"dwi": data.path("dwi.nii.gz"), "bvals": data.path("dwi.bval"),
            "bvecs": data.path("dwi.bvec"), "mask": data.path("mask.nii.gz"), **extra}


def _track(tractd, job, workdir, name, check=True):
    """Runs the job; (process, tractogram bytes or None)."""
    path = write_job(workdir / f"{name}.json", job)
    out = workdir / f"{name}.tck"
    proc = run_cli(tractd, ["run", path, "-o", out], check=check)
    return proc, (out.read_bytes() if proc.returncode == 0 else None)


@pytest.fixture(scope="module")
def nifti_tracks(tractd, data, tmp_path_factory):
    """The phantom's NIfTI DWI job (bvecs along the voxel axes, chosen)."""
    _, out = _track(tractd, _job(_nifti_dwi_inputs(data, bvecs_convention="voxel"), data),
                    tmp_path_factory.mktemp("nifti"), "nifti")
    return out


@pytest.mark.parametrize("name,dtype", [("dwi.mif", ">f4"), ("dwi.mif.gz", "<f8")])
def test_dwi_mif_tracks_like_the_nifti(tractd, data, nifti_tracks, tmp_path, name, dtype):
    """The phantom's DWI as a .mif whose first two axes are swapped in the header,
    the first reversed, volumes contiguous, with its dw_scheme in scanner
    coordinates and a Bit mask .mif: no bvals/bvecs, and the same tracks."""
    dwi = write_mif(tmp_path / name, data.dwi, data.affine, dtype=dtype,
                    scheme=world_scheme(data.bvals, data.bvecs, data.affine))
    mask = write_mif(tmp_path / "mask.mif", data.mask, data.affine, perm=(2, 0, 1),
                     reverse=(False, True, True), dtype="bit")
    proc, out = _track(tractd, _job({"dwi": dwi, "mask": mask}, data), tmp_path, "mif")
    assert out == nifti_tracks
    assert "gradients: the dw_scheme of inputs.dwi" in proc.stderr, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr


def _seed_points(data):
    """The phantom's seed voxels, as points (any grid of its shape takes them)."""
    roi = np.asarray(nib.load(data.path("seed_roi.nii.gz")).dataobj)
    return {"points": np.argwhere(roi > 0)[:150].astype(float).tolist(), "space": "voxel"}


def _oblique(affine):
    c, s = np.cos(0.3), np.sin(0.3)
    out = affine.copy()
    out[:3, :3] = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]) @ np.diag([2.0, 2.0, 2.5])
    return out


def test_oblique_mif_reads_its_affine(tractd, data, tmp_path):
    """A rotated, anisotropic grid: the ODF and FA as .mif (axes permuted and
    reversed) track, in TRK whose header carries the affine, as the NIfTIs."""
    affine = _oblique(data.affine)
    odf = np.asarray(nib.load(data.path("odf.nii.gz")).dataobj, dtype=np.float32)
    fa = np.asarray(nib.load(data.path("fa.nii.gz")).dataobj, dtype=np.float32)
    nii = {}
    for name, vol in (("odf", odf), ("fa", fa)):
        nii[name] = str(tmp_path / f"{name}.nii.gz")
        nib.save(nib.Nifti1Image(vol, affine), nii[name])
    mif = {"odf": write_mif(tmp_path / "odf.mif", odf, affine, perm=(0, 2, 1),
                            reverse=(False, False, True)),
           "fa": write_mif(tmp_path / "fa.mif", fa, affine, perm=(2, 0, 1),
                           reverse=(True, True, False), dtype=">f4")}
    outs = []
    for files in (nii, mif):
        job = _job({"odf": files["odf"], "stop_map": files["fa"]}, data)
        job["seeds"] = _seed_points(data)
        job["output"]["format"] = "trk"
        path = write_job(tmp_path / "job.json", job)
        out = tmp_path / "out.trk"
        run_cli(tractd, ["run", path, "-o", out, "-q"], check=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_oblique_dwi_mif_turns_its_scheme(tractd, data, tmp_path):
    """On the rotated grid the dw_scheme (scanner directions) is turned back to
    the voxel axes: the .mif fits (tractd fit) as the NIfTI with the voxel
    bvecs, within the rounding of the rotation and back."""
    affine = _oblique(data.affine)
    nii = tmp_path / "dwi.nii.gz"
    nib.save(nib.Nifti1Image(data.dwi, affine), str(nii))
    mif = write_mif(tmp_path / "dwi.mif", data.dwi, affine, perm=(0, 2, 1),
                    reverse=(False, False, True),
                    scheme=world_scheme(data.bvals, data.bvecs, affine))
    fits = []
    for name, inputs in (("nii", {"dwi": str(nii), "bvals": data.path("dwi.bval"),
                                  "bvecs": data.path("dwi.bvec"), "bvecs_convention": "voxel"}),
                         ("mif", {"dwi": mif})):
        job = write_job(tmp_path / f"{name}.json", _job(inputs, data))
        run_cli(tractd, ["fit", job, "-o", tmp_path / name, "-q"], check=True)
        fits.append(np.asarray(nib.load(str(tmp_path / name / "sh.nii.gz")).dataobj))
    scale = np.abs(fits[0]).max()
    assert np.abs(fits[0] - fits[1]).max() < 1e-4 * scale
    # and not merely any fit: the voxel bvecs stored as if they were scanner
    # directions fit otherwise
    wrong = write_mif(tmp_path / "wrong.mif", data.dwi, affine, perm=(0, 2, 1),
                      reverse=(False, False, True),
                      scheme=np.column_stack([data.bvecs, data.bvals]))
    job = write_job(tmp_path / "wrong.json", _job({"dwi": wrong}, data))
    run_cli(tractd, ["fit", job, "-o", tmp_path / "wrong", "-q"], check=True)
    other = np.asarray(nib.load(str(tmp_path / "wrong" / "sh.nii.gz")).dataobj)
    assert np.abs(fits[0] - other).max() > 1e-2 * scale


def test_fod_mif_defaults_to_tournier07(tractd, data, tmp_path):
    """SH coefficients as a .mif (the layout permuted) need no sh_basis: they are
    MRtrix3's tournier07 in world axes, and track as the NIfTI job naming it."""
    fit = tmp_path / "fit"
    job = write_job(tmp_path / "fit.json", _job(_nifti_dwi_inputs(data, bvecs_convention="voxel"),
                                                data))
    run_cli(tractd, ["fit", job, "-o", fit, "-q"], check=True)
    img = nib.load(str(fit / "sh.nii.gz"))
    sh = np.asarray(img.dataobj, dtype=np.float32)
    fod = write_mif(tmp_path / "wmfod.mif", sh, img.affine, perm=(2, 1, 0),
                    reverse=(True, False, True))
    fa = write_mif(tmp_path / "fa.mif.gz", np.asarray(nib.load(str(fit / "fa.nii.gz")).dataobj),
                   img.affine)
    _, want = _track(tractd, _job({"sh": str(fit / "sh.nii.gz"), "sh_basis": "tournier07",
                                   "stop_map": str(fit / "fa.nii.gz")}, data), tmp_path, "nii")
    _, got = _track(tractd, _job({"sh": fod, "stop_map": fa}, data), tmp_path, "mif")
    assert got == want
    # A NIfTI still names its basis.
    proc, _ = _track(tractd, _job({"sh": str(fit / "sh.nii.gz"), "stop_map": fa}, data),
                     tmp_path, "nobasis", check=False)
    assert proc.returncode == EXIT_INVALID
    assert "inputs.sh_basis: is required with inputs.sh" in proc.stderr, proc.stderr


def _mif_error(tractd, data, tmp_path, inputs):
    proc, _ = _track(tractd, _job(inputs, data), tmp_path, "bad", check=False)
    assert proc.returncode == EXIT_INVALID, proc.stderr
    return proc.stderr


def test_malformed_mif_errors_name_file_and_reason(tractd, data, tmp_path):
    scheme = world_scheme(data.bvals, data.bvecs, data.affine)
    good = write_mif(tmp_path / "good.mif", data.dwi, data.affine, scheme=scheme)
    raw = open(good, "rb").read()
    detached = tmp_path / "detached.mif"
    head = raw[:raw.index(b"file: .")]
    detached.write_bytes(head + b"file: dwi.dat 0\nEND\n")
    err = _mif_error(tractd, data, tmp_path, {"dwi": str(detached)})
    assert f"inputs.dwi: {detached}: MRtrix header: the voxel data are in a separate file" in err
    cut = tmp_path / "cut.mif"
    cut.write_bytes(raw[:len(raw) // 2])
    err = _mif_error(tractd, data, tmp_path, {"dwi": str(cut)})
    assert f"inputs.dwi: {cut}: file is truncated or corrupt" in err, err
    cplx = tmp_path / "complex.mif"
    cplx.write_bytes(raw.replace(b"datatype: Float32LE", b"datatype: CFloat32"))
    err = _mif_error(tractd, data, tmp_path, {"dwi": str(cplx)})
    assert f"inputs.dwi: {cplx}: MRtrix header: datatype is not supported" in err, err
    # Its own table and bvals/bvecs: one or the other.
    err = _mif_error(tractd, data, tmp_path, {"dwi": good, "bvals": data.path("dwi.bval"),
                                              "bvecs": data.path("dwi.bvec")})
    assert ("inputs.bvals: " + good + " carries its gradient table (dw_scheme) and "
            "inputs.bvals and inputs.bvecs give another") in err, err
    # A table that does not validate is the DWI's.
    scaled = write_mif(tmp_path / "scaled.mif", data.dwi, data.affine,
                       scheme=np.column_stack([data.bvecs * 1.5, data.bvals]))
    err = _mif_error(tractd, data, tmp_path, {"dwi": scaled})
    assert f"inputs.dwi: {scaled}: dw_scheme: b-vector of volume" in err, err
    # No table at all.
    bare = write_mif(tmp_path / "bare.mif", data.dwi, data.affine)
    err = _mif_error(tractd, data, tmp_path, {"dwi": bare})
    assert "inputs.bvals: is required with inputs.dwi: " + bare + " has no gradient table" in err


def _flipped_bvecs(data, path):
    rows = data.bvecs.T.copy()
    rows[0] = -rows[0]
    path.write_text("\n".join(" ".join(f"{x:.17g}" for x in r) for r in rows) + "\n")
    return str(path)


def test_bvecs_convention_fsl_is_the_x_flip(tractd, data, nifti_tracks, tmp_path):
    """On the phantom (positive determinant) fsl reads the bvecs with x negated:
    fsl on the x-flipped file tracks exactly as voxel on the file; fsl on the
    file itself differs. Only the job that did not choose is warned."""
    flipped = _flipped_bvecs(data, tmp_path / "fsl.bvec")
    proc, fsl = _track(tractd, _job(_nifti_dwi_inputs(data, bvecs=flipped,
                                                      bvecs_convention="fsl"), data),
                       tmp_path, "fsl")
    assert fsl == nifti_tracks
    assert "gradients: inputs.bvecs read with bvecs_convention fsl: x flipped" in proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    _, unflipped = _track(tractd, _job(_nifti_dwi_inputs(data, bvecs_convention="fsl"), data),
                          tmp_path, "fsl_unflipped")
    assert unflipped != nifti_tracks
    proc, default = _track(tractd, _job(_nifti_dwi_inputs(data), data), tmp_path, "default")
    assert default == nifti_tracks
    assert ("tractd: warning: gradients: inputs.bvecs read with bvecs_convention voxel "
            "(the default)") in proc.stderr, proc.stderr
    assert 'set inputs.bvecs_convention to "fsl" or "voxel"' in proc.stderr


def test_bvecs_convention_negative_determinant(tractd, data, tmp_path):
    """With x running right to left (negative determinant) FSL's convention and
    the voxel axes agree: fsl and voxel track alike and nothing is warned."""
    affine = data.affine @ np.diag([-1.0, 1, 1, 1])
    nii = tmp_path / "las.nii.gz"
    nib.save(nib.Nifti1Image(data.dwi, affine), str(nii))
    mask = tmp_path / "mask.nii.gz"
    nib.save(nib.Nifti1Image(data.mask.astype(np.uint8), affine), str(mask))
    roi = tmp_path / "roi.nii.gz"
    nib.save(nib.Nifti1Image(np.asarray(nib.load(data.path("seed_roi.nii.gz")).dataobj),
                             affine), str(roi))
    outs = []
    for conv in (None, "fsl"):
        inputs = _nifti_dwi_inputs(data, dwi=str(nii), mask=str(mask))
        if conv:
            inputs["bvecs_convention"] = conv
        job = _job(inputs, data)
        job["seeds"]["roi"] = str(roi)
        proc, out = _track(tractd, job, tmp_path, conv or "default")
        assert "warning" not in proc.stderr, proc.stderr
        assert "negative determinant" in proc.stderr, proc.stderr
        outs.append(out)
    assert outs[0] == outs[1]


def test_track_command_takes_a_mif(tractd, data, tmp_path):
    """`tractd track DWI.mif OUTPUT`: gradients from the .mif, no sidecars sought."""
    dwi = write_mif(tmp_path / "dwi.mif", data.dwi, data.affine,
                    scheme=world_scheme(data.bvals, data.bvecs, data.affine))
    out = tmp_path / "t.tck"
    proc = run_cli(tractd, ["track", dwi, out, "--seeds", "50", "--mask",
                            data.path("mask.nii.gz")], check=True)
    assert "gradients: the dw_scheme of inputs.dwi" in proc.stderr, proc.stderr
    assert out.stat().st_size > 0


# ---------------------------------------------------------------- with MRtrix3 itself

needs_mrtrix = pytest.mark.skipif(shutil.which("mrconvert") is None,
                                  reason="MRtrix3 (mrconvert) is not installed")


def _mrconvert(*args):
    subprocess.run(["mrconvert", "-quiet", "-force", *map(str, args)], check=True, timeout=120)


@needs_mrtrix
def test_mrconvert_dwi_tracks_like_its_nifti(tractd, data, tmp_path):
    """mrconvert makes the .mif (FSL gradients imported, strides 2,-1,3,4,
    Float32BE; a Bit mask as .mif.gz); its NIfTI conversion with the exported
    FSL tables (bvecs_convention fsl) tracks byte for byte as the .mif."""
    fsl_bvec = _flipped_bvecs(data, tmp_path / "phantom_fsl.bvec")
    mif = tmp_path / "dwi.mif"
    _mrconvert(data.path("dwi.nii.gz"), "-fslgrad", fsl_bvec, data.path("dwi.bval"),
               "-strides", "2,-1,3,4", "-datatype", "float32be", mif)
    mask = tmp_path / "mask.mif.gz"
    _mrconvert(data.path("mask.nii.gz"), "-strides", "2,-1,3", "-datatype", "bit", mask)
    roi = tmp_path / "roi.mif"
    _mrconvert(data.path("seed_roi.nii.gz"), "-strides", "2,-1,3", roi)
    back = {n: tmp_path / f"{n}.nii" for n in ("dwi", "mask", "roi")}
    _mrconvert(mif, back["dwi"], "-export_grad_fsl", tmp_path / "x.bvec", tmp_path / "x.bval")
    _mrconvert(mask, back["mask"])
    _mrconvert(roi, back["roi"])
    a = _job({"dwi": str(mif), "mask": str(mask)}, data)
    a["seeds"]["roi"] = str(roi)
    b = _job({"dwi": str(back["dwi"]), "bvals": str(tmp_path / "x.bval"),
              "bvecs": str(tmp_path / "x.bvec"), "bvecs_convention": "fsl",
              "mask": str(back["mask"])}, data)
    b["seeds"]["roi"] = str(back["roi"])
    _, out_a = _track(tractd, a, tmp_path, "mif")
    _, out_b = _track(tractd, b, tmp_path, "nii")
    assert out_a == out_b
    # The strides moved the axes: the NIfTI mrconvert wrote is not the phantom's grid.
    assert not np.allclose(nib.load(str(back["dwi"])).affine, data.affine)
