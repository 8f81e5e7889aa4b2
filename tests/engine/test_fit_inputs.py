"""Raw-DWI, SH and model inputs: bad ones are refused with exit code 3 and
`tractd: error: FIELD: REASON` naming the field, through both `tractd fit` and
`tractd run`; good ones fit and track deterministically.

Every broken input is derived from one small phantom (32x32x16, one shell:
6 b0s + 64 directions at b=1000, SNR 30) made once per module. Reasons are
checked loosely (a word or two of the message), the field exactly.
"""
import hashlib
import json
import re

import nibabel as nib
import numpy as np
import pytest

from conftest import load_trk, run_cli, write_job

EXIT_INVALID = 3
PHANTOM_DIM = "32,32,16"
N_B0 = 6
RUN_SEEDS = 300


# ------------------------------------------------------------------ inputs, built once

def _save(path, data, affine):
    nib.save(nib.Nifti1Image(np.ascontiguousarray(data, dtype=np.float32), affine), str(path))
    return str(path)


def _write_bvals(path, bvals):
    path.write_text(" ".join(f"{b:g}" for b in bvals) + "\n")
    return str(path)


def _write_bvecs(path, bvecs):
    """FSL layout: 3 rows, one column per volume."""
    path.write_text("\n".join(" ".join(f"{x:.17g}" for x in row) for row in bvecs.T) + "\n")
    return str(path)


class Data:
    """The phantom's DWI and tables, and files derived from them on demand."""

    def __init__(self, tractd, root):
        self.root = root
        self.dir = root / "phantom"
        run_cli(tractd, ["phantom", "-q", "--dim", PHANTOM_DIM, self.dir], check=True)
        img = nib.load(str(self.dir / "dwi.nii.gz"))
        self.affine = img.affine
        self.dwi = np.asarray(img.dataobj, dtype=np.float32)
        self.bvals = np.loadtxt(self.dir / "dwi.bval")
        self.bvecs = np.loadtxt(self.dir / "dwi.bvec").T           # (n, 3)
        assert self.dwi.shape[3] == len(self.bvals) == N_B0 + 64
        assert np.sum(self.bvals <= 50) == N_B0
        self._made = {}

    def path(self, name):
        return str(self.dir / name)

    def get(self, name):
        if name not in self._made:
            ext = ".nii.gz" if name.split("_")[0] in ("dwi", "mask", "sh") else ".txt"
            self._made[name] = getattr(self, "_make_" + name)(self.root / (name + ext))
        return self._made[name]

    def subset(self, name, keep):
        """DWI and tables with only the volumes in keep: (dwi, bvals, bvecs) paths."""
        d = self.root / name
        d.mkdir(exist_ok=True)
        return (_save(d / "dwi.nii.gz", self.dwi[..., keep], self.affine),
                _write_bvals(d / "dwi.bval", self.bvals[keep]),
                _write_bvecs(d / "dwi.bvec", self.bvecs[keep]))

    # tables
    def _make_bvals_short(self, path):                # one value fewer than volumes
        return _write_bvals(path, self.bvals[:-1])

    def _make_bvecs_short(self, path):                # one vector fewer
        return _write_bvecs(path, self.bvecs[:-1])

    def _make_bvecs_not_unit(self, path):
        v = self.bvecs.copy()
        dw = np.nonzero(self.bvals > 50)[0][3]
        v[dw] *= 0.5
        return _write_bvecs(path, v)

    def _make_bvals_negative(self, path):
        b = self.bvals.copy()
        b[np.nonzero(self.bvals > 50)[0][2]] = -1000
        return _write_bvals(path, b)

    def _make_bvals_token(self, path):
        text = (self.dir / "dwi.bval").read_text().split()
        text[8] = "abc"
        path.write_text(" ".join(text) + "\n")
        return str(path)

    def _make_bvals_no_b0(self, path):                # b0s given b=1000 ...
        b = self.bvals.copy()
        b[b <= 50] = 1000
        return _write_bvals(path, b)

    def _make_bvecs_no_b0(self, path):                # ... and unit vectors
        v = self.bvecs.copy()
        v[self.bvals <= 50] = [1.0, 0.0, 0.0]
        return _write_bvecs(path, v)

    # volumes
    def _make_dwi_nan(self, path):
        d = self.dwi.copy()
        d[10, 11, 5, 20] = np.nan
        return _save(path, d, self.affine)

    def _make_dwi_3d(self, path):
        return _save(path, self.dwi[..., 0], self.affine)

    def _make_mask_other_grid(self, path):            # one x-slice fewer
        mask = np.asarray(nib.load(self.path("mask.nii.gz")).dataobj)
        nib.save(nib.Nifti1Image(np.ascontiguousarray(mask[:-1]), self.affine), str(path))
        return str(path)

    def _make_sh_44(self, path):                       # 44 is no (L+1)(L+2)/2
        return _save(path, np.zeros(self.dwi.shape[:3] + (44,)), self.affine)

    def _make_sh_45(self, path):                       # order 8, valid
        return _save(path, np.zeros(self.dwi.shape[:3] + (45,)), self.affine)

    def _make_dwi_isotropic(self, path):
        """Pure isotropic signal S0 exp(-b D) (FA 0) in the response ROI cube
        (radius 10 around the centre, all of z), the phantom outside it: no
        voxel there has FA > 0.7, yet voxels outside are fit once a response
        is given."""
        d = self.dwi.copy()
        iso = (100.0 * np.exp(-self.bvals * 0.8e-3)).astype(np.float32)
        cx, cy = d.shape[0] // 2, d.shape[1] // 2
        d[cx - 10:cx + 11, cy - 10:cy + 11, :, :] = iso
        return _save(path, d, self.affine)


@pytest.fixture(scope="module")
def data(tractd, tmp_path_factory):
    return Data(tractd, tmp_path_factory.mktemp("fit_inputs"))


def dwi_job(data, **inputs):
    job = {
        "inputs": {"dwi": data.path("dwi.nii.gz"), "bvals": data.path("dwi.bval"),
                   "bvecs": data.path("dwi.bvec"), "mask": data.path("mask.nii.gz")},
        "model": {"name": "csd", "sh_order": 8},
        "seeds": {"roi": data.path("seed_roi.nii.gz"), "count": 100, "rng_seed": 0},
    }
    job["inputs"].update(inputs)
    return job


def odf_job(data, **inputs):
    job = {"inputs": {"odf": data.path("odf.nii.gz"), "stop_map": data.path("fa.nii.gz")},
           "seeds": {"roi": data.path("seed_roi.nii.gz"), "count": 100, "rng_seed": 0},
           "tracking": {"sphere": "symmetric362"}}
    job["inputs"].update(inputs)
    return job


# ------------------------------------------------------------------ cases
# (id, field, reason words (regex, case-insensitive), function(data) -> job)

def _few_directions(data, n_dw):
    dw = np.nonzero(data.bvals > 50)[0]
    keep = np.concatenate([np.nonzero(data.bvals <= 50)[0], dw[:n_dw]])
    dwi, bvals, bvecs = data.subset(f"dw{n_dw}", keep)
    return dwi_job(data, dwi=dwi, bvals=bvals, bvecs=bvecs)


def _with_model(job, **model):
    job["model"].update(model)
    return job


def _sh_job(data, sh, **extra):
    job = odf_job(data)
    del job["inputs"]["odf"]
    job["inputs"].update(sh=sh, **extra)
    return job


CASES = [
    ("bvals_count", "inputs.bvals", r"values but the DWI has \d+ volumes",
     lambda d: dwi_job(d, bvals=d.get("bvals_short"))),
    ("bvecs_count", "inputs.bvecs", r"vectors but bvals has",
     lambda d: dwi_job(d, bvecs=d.get("bvecs_short"))),
    ("bvec_not_unit", "inputs.bvecs", r"norm 0\.5.*unit",
     lambda d: dwi_job(d, bvecs=d.get("bvecs_not_unit"))),
    ("bval_negative", "inputs.bvals", r"negative",
     lambda d: dwi_job(d, bvals=d.get("bvals_negative"))),
    # The message names the place, never the file's text (it may not be a
    # gradient table at all: the security issue's finding 2).
    ("bval_not_a_number", "inputs.bvals", r"line \d+, value \d+ is not a number",
     lambda d: dwi_job(d, bvals=d.get("bvals_token"))),
    ("no_b0", "inputs.bvals", r"no b0",
     lambda d: dwi_job(d, bvals=d.get("bvals_no_b0"), bvecs=d.get("bvecs_no_b0"))),
    ("five_directions", "inputs.bvals", r"5 diffusion-weighted volumes.*at least 6",
     lambda d: _few_directions(d, 5)),
    ("dwi_nan", "inputs.dwi", r"finite|nan",
     lambda d: dwi_job(d, dwi=d.get("dwi_nan"))),
    ("dwi_3d", "inputs.dwi", r"volume",
     lambda d: dwi_job(d, dwi=d.get("dwi_3d"))),
    ("mask_other_grid", "inputs.mask", r"grid|shape|dimension|match",
     lambda d: dwi_job(d, mask=d.get("mask_other_grid"))),
    ("sh_order_odd", "model.sh_order", r"even",
     lambda d: _with_model(dwi_job(d), sh_order=7)),
    ("sh_without_basis", "inputs.sh_basis", r"required",
     lambda d: _sh_job(d, d.get("sh_45"))),
    ("sh_44_volumes", "inputs.sh", r"44",
     lambda d: _sh_job(d, d.get("sh_44"), sh_basis="descoteaux07_legacy")),
    ("model_with_odf", "model", r"dwi only",
     lambda d: {**odf_job(d), "model": "csd"}),
    ("bvals_without_dwi", "inputs.bvals", r"only allowed with inputs\.dwi",
     lambda d: odf_job(d, bvals=d.path("dwi.bval"))),
    ("isotropic_response_roi", "inputs.dwi", r"FA > 0\.7.*model\.response",
     lambda d: dwi_job(d, dwi=d.get("dwi_isotropic"))),
]


def _check_refused(proc, field, reason, out):
    msg = f"exit {proc.returncode}, stderr:\n{proc.stderr}"
    assert proc.returncode == EXIT_INVALID, f"expected exit {EXIT_INVALID}; {msg}"
    assert re.search(r"tractd: error: " + re.escape(field) + r": ", proc.stderr), \
        f"stderr does not name {field!r}; {msg}"
    line = next(l for l in proc.stderr.splitlines() if l.startswith("tractd: error:"))
    line = re.sub(r"/\S+", "", line)      # no words from file names
    assert re.search(reason, line, re.IGNORECASE), f"reason does not match {reason!r}; {msg}"
    assert "Sanitizer" not in proc.stderr, msg


@pytest.mark.parametrize("command", ["fit", "run"])
@pytest.mark.parametrize("case_id,field,reason,make", CASES, ids=[c[0] for c in CASES])
def test_bad_input(tractd, data, tmp_path, command, case_id, field, reason, make):
    job = write_job(tmp_path / "job.json", make(data))
    if command == "fit":
        out = tmp_path / "fit"
        proc = run_cli(tractd, ["fit", job, "-o", out, "--odf", "-q"])
        _check_refused(proc, field, reason, out)
        assert not (out / "sh.nii.gz").exists() and not (out / "odf.nii.gz").exists()
    else:
        out = tmp_path / "out.trk"
        proc = run_cli(tractd, ["run", job, "-o", out, "-q"])
        _check_refused(proc, field, reason, out)
        assert not out.exists() or out.stat().st_size == 0, "a refused job left output"


def test_given_response_fits_isotropic_roi(tractd, data, tmp_path):
    """The data refused above for want of a response voxel fits once
    model.response is given, and voxels outside the isotropic cube are fitted."""
    job = dwi_job(data, dwi=data.get("dwi_isotropic"))
    job["model"]["response"] = {"evals": [1.7e-3, 0.3e-3, 0.3e-3], "s0": 100}
    path = write_job(tmp_path / "job.json", job)
    run_cli(tractd, ["fit", path, "-o", tmp_path / "fit", "-q"], check=True)
    resp = json.loads((tmp_path / "fit" / "response.json").read_text())
    assert resp["evals"] == pytest.approx([1.7e-3, 0.3e-3, 0.3e-3], rel=1e-9), resp
    assert resp["response_voxels"] == 0, resp
    assert resp["fitted_voxels"] > 100, resp
    assert resp["failed_voxels"] == 0, resp


@pytest.mark.parametrize("n_dw", [30, 12])
def test_default_model_super_resolves_few_directions(tractd, data, tmp_path, n_dw):
    """A job naming no model on fewer directions than CSD of order 8 has
    coefficients (45) is fitted at order 8, super-resolved by the
    non-negativity constraint as DIPY and MRtrix3 fit it (it was refused,
    and so was every real scan tried), and tracked; response.json tells."""
    job = _few_directions(data, n_dw)
    del job["model"]
    path = write_job(tmp_path / "job.json", job)
    run_cli(tractd, ["fit", path, "-o", tmp_path / "fit", "-q"], check=True)
    resp = json.loads((tmp_path / "fit" / "response.json").read_text())
    assert (resp["sh_order"], resp["directions"], resp["super_resolved"]) == \
        (8, n_dw, True), resp
    assert resp["fitted_voxels"] > 100 and resp["failed_voxels"] == 0, resp
    out = tmp_path / "out.trk"
    proc = run_cli(tractd, ["run", path, "-o", out], check=True)
    assert nib.streamlines.load(str(out)).tractogram.streamlines.total_nb_rows > 0
    # The log says which order was fitted, and why it is super-resolved.
    assert re.search(rf"CSD of order 8 \(45 coefficients\) from {n_dw} diffusion-weighted "
                     r"directions: .*super-resolved", proc.stderr), proc.stderr


def test_fit_odf_job_needs_odf_flag(tractd, data, tmp_path):
    job = write_job(tmp_path / "job.json", odf_job(data))
    proc = run_cli(tractd, ["fit", job, "-o", tmp_path / "fit", "-q"])
    _check_refused(proc, "inputs", r"--odf", None)
    # With --odf it has something to write: the ODF itself, on the sphere.
    run_cli(tractd, ["fit", job, "-o", tmp_path / "fit2", "--odf", "-q"], check=True)
    odf = nib.load(str(tmp_path / "fit2" / "odf.nii.gz"))
    assert odf.shape == data.dwi.shape[:3] + (362,)
    assert not (tmp_path / "fit2" / "sh.nii.gz").exists()


# ------------------------------------------------------------------ the happy path

def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_run_dwi_job_deterministic(tractd, data, tmp_path):
    """The phantom's job_dwi.json (fit + track) run twice, with 1 and 2 fit
    threads: streamlines, byte-identical TRKs. seeds.count is lowered from the
    job's 2000 to 300 (a copy next to it, so its relative paths still resolve)
    to keep lavapipe's tracking under a second."""
    job = json.loads((data.dir / "job_dwi.json").read_text())
    assert job["inputs"]["dwi"] == "dwi.nii.gz" and "model" in job, job
    job["seeds"]["count"] = RUN_SEEDS
    job_path = write_job(data.dir / "job_dwi_small.json", job)
    outs = []
    for i in range(2):
        out = tmp_path / f"run{i}.trk"
        run_cli(tractd, ["run", job_path, "-o", out, "-q", "--threads", str(i + 1)],
                check=True)
        outs.append(out)
    n = len(load_trk(outs[0]))
    # Most seeds lie in bundles, and each yields one streamline or more.
    assert n >= RUN_SEEDS // 2, f"{n} streamlines from {RUN_SEEDS} seeds of the DWI job"
    assert _digest(outs[0]) == _digest(outs[1]), \
        f"two runs of job_dwi.json differ ({outs[0].stat().st_size} vs {outs[1].stat().st_size} bytes)"


def test_fit_deterministic_across_threads(tractd, data, tmp_path):
    job_path = data.dir / "job_dwi.json"
    digests = {}
    for threads in (1, 2):
        out = tmp_path / f"t{threads}"
        run_cli(tractd, ["fit", job_path, "-o", out, "--threads", threads, "-q"], check=True)
        digests[threads] = {n: _digest(out / n) for n in ("sh.nii.gz", "fa.nii.gz",
                                                          "response.json")}
    assert digests[1] == digests[2], digests
