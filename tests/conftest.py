"""Shared fixtures and helpers for the tractd engine and DIPY parity tests.

Run with the system Python (dipy, nibabel, numpy, pytest):

    TRACTD=build/tractd [TRACTD_ASAN=build-asan/tractd] /usr/bin/python3 -m pytest tests/parity tests/engine

TRACTD must name the engine binary: the tests fail (never skip) without it.
Everything here works in tractd's voxel space: voxel centres at integer
coordinates, a voxel i covering [i - 0.5, i + 0.5) on each axis.
"""
import json
import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from dipy.core.gradients import gradient_table
from dipy.data import get_sphere
from dipy.direction import BootDirectionGetter, ProbabilisticDirectionGetter
from dipy.io import read_bvals_bvecs
from dipy.reconst.dti import TensorModel
from dipy.reconst.shm import CsaOdfModel, OpdtModel
from dipy.tracking.local_tracking import LocalTracking
from dipy.tracking.stopping_criterion import ThresholdStoppingCriterion
from scipy.stats import ks_2samp

# TRK loading and the connection metrics live in scoring.py, which
# bench/constraints.py shares; imported here for the tests.
from scoring import (Trk, connection_stats, drop_single_points, endpoint_labels,  # noqa: F401
                     lengths_mm, lengths_points, load_trk, one_step_further, voxel_of)

# A run on the default phantom takes seconds on lavapipe; 300 s only catches hangs.
RUN_TIMEOUT_S = 300

PHANTOM_ODF_FILES = ("odf.nii.gz", "fa.nii.gz", "seed_roi.nii.gz", "labels.nii.gz",
                     "include.nii.gz", "exclude.nii.gz", "wm.nii.gz", "gm.nii.gz",
                     "csf.nii.gz", "5tt.nii.gz", "bundles.json", "job.json", "job_ptt.json",
                     "job_act.json", "job_act_5tt.json", "job_interface.json")
# Written too unless `tractd phantom --no-dwi`.
PHANTOM_DWI_FILES = ("dwi.nii.gz", "dwi.bval", "dwi.bvec", "mask.nii.gz", "job_dwi.json",
                     "job_boot.json")
PHANTOM_FILES = PHANTOM_ODF_FILES + PHANTOM_DWI_FILES


# --------------------------------------------------------------------------- binary

def _binary_from_env(var):
    """Absolute path of the executable named by env var, or None if unset."""
    path = os.environ.get(var)
    if not path:
        return None
    return str(Path(path).resolve())


@pytest.fixture(scope="session")
def tractd():
    """Path of the engine binary ($TRACTD). Fails the test when unset or missing."""
    path = _binary_from_env("TRACTD")
    if path is None:
        pytest.fail("TRACTD is not set: point it at the engine binary, e.g. "
                    "TRACTD=build/tractd (these tests never skip without it)", pytrace=False)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"TRACTD={path} is not an executable file", pytrace=False)
    return path


def tractd_asan_path():
    """Path of the ASan/UBSan build ($TRACTD_ASAN) if it names an executable, else None."""
    path = _binary_from_env("TRACTD_ASAN")
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    return None


# --------------------------------------------------------------------------- running the CLI

def run_cli(binary, args, env=None, timeout=RUN_TIMEOUT_S, check=False):
    """Runs `binary *args` and returns the CompletedProcess (text stdout/stderr).

    env: extra environment variables on top of os.environ. check=True asserts
    exit code 0 and shows stderr when it is not.
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    cmd = [binary] + [str(a) for a in args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"timed out after {timeout} s: {' '.join(cmd)}\nstderr:\n{e.stderr}",
                    pytrace=False)
    if check:
        assert proc.returncode == 0, (
            f"{' '.join(cmd)} exited with {proc.returncode}\nstdout:\n{proc.stdout}\n"
            f"stderr:\n{proc.stderr}")
    return proc


def write_job(path, job):
    """Writes job (a dict) as JSON to path and returns the path."""
    path = Path(path)
    path.write_text(json.dumps(job, indent=1))
    return path


def run_job(binary, job, workdir, name="job", extra_args=(), env=None, check=True):
    """Writes job to workdir/NAME.json, runs `tractd run` with -o workdir/NAME.trk
    and --stats-json workdir/NAME.stats.json. Returns (proc, trk_path, stats_path)."""
    workdir = Path(workdir)
    job_path = write_job(workdir / f"{name}.json", job)
    trk = workdir / f"{name}.trk"
    stats = workdir / f"{name}.stats.json"
    proc = run_cli(binary, ["run", job_path, "-o", trk, "--stats-json", stats, "-q",
                            *extra_args], env=env, check=check)
    return proc, trk, stats


# --------------------------------------------------------------------------- phantom

@dataclass
class Phantom:
    """The engine's built-in phantom (files written by `tractd phantom`), or a
    test's own phantom in the same layout: volumes odf, fa, seed_roi, labels,
    dwi and mask ending in `suffix`, bundle b's end zones labelled 2b+1, 2b+2."""
    dir: Path
    job: dict
    bundles: list          # [{"name": str, "labels": [2b+1, 2b+2]}, ...]
    job_dwi: dict = None   # job_dwi.json: the same seeds and tracking on the raw DWI
    suffix: str = ".nii.gz"   # of the volumes (odf, fa, seed_roi, labels, dwi, mask)
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_dir(cls, directory):
        """The phantom `tractd phantom` wrote to directory (every file checked)."""
        directory = Path(directory)
        missing = [f for f in PHANTOM_FILES if not (directory / f).is_file()]
        assert not missing, f"`tractd phantom` did not write {missing} in {directory}"
        return cls(dir=directory, job=json.loads((directory / "job.json").read_text()),
                   bundles=_read_bundles(directory / "bundles.json"),
                   job_dwi=json.loads((directory / "job_dwi.json").read_text()))

    def path(self, name):
        return self.dir / name

    def _load(self, stem, dtype):
        name = stem + self.suffix
        if name not in self._cache:
            img = nib.load(str(self.path(name)))
            self._cache[name] = (img, np.asarray(img.get_fdata(), dtype=dtype))
        return self._cache[name]

    @property
    def odf_img(self):
        return self._load("odf", np.float32)[0]

    @property
    def affine(self):
        return self.odf_img.affine

    @property
    def odf(self):
        """ODF as float64 [x, y, z, NV] (not clipped)."""
        return self._load("odf", np.float32)[1].astype(np.float64)

    @property
    def fa(self):
        return self._load("fa", np.float64)[1]

    @property
    def roi(self):
        return self._load("seed_roi", np.float64)[1] > 0

    @property
    def labels(self):
        return np.rint(self._load("labels", np.float64)[1]).astype(np.int32)

    @property
    def shape(self):
        return self.odf_img.shape[:3]

    @property
    def dwi(self):
        """The raw DWI as float64 [x, y, z, volumes] (stored as float32)."""
        return self._load("dwi", np.float32)[1].astype(np.float64)

    @property
    def mask(self):
        """The DWI fit mask (the grid less a one-voxel border) as bool."""
        return self._load("mask", np.float64)[1] > 0

    def job_with(self, **sections):
        """The phantom's job.json with absolute input paths, sections replaced or
        merged: job_with(seeds={...}) replaces seeds, tracking={...} is merged
        into the phantom's tracking section. No output.path (tests use -o)."""
        return self._job_with(self.job, sections)

    def dwi_job_with(self, **sections):
        """job_with on job_dwi.json (inputs dwi, bvals, bvecs, mask; model csd,
        which a model=... section replaces)."""
        return self._job_with(self.job_dwi, sections)

    def _job_with(self, base, sections):
        job = json.loads(json.dumps(base))
        for key, value in job["inputs"].items():
            job["inputs"][key] = str(self.dir / value)
        if "roi" in job.get("seeds", {}):
            job["seeds"]["roi"] = str(self.dir / job["seeds"]["roi"])
        job.pop("output", None)
        for key, value in sections.items():
            if key == "tracking":
                job.setdefault("tracking", {}).update(value)
            else:
                job[key] = value
        return job


def _read_bundles(path):
    doc = json.loads(Path(path).read_text())
    bundles = doc["bundles"] if isinstance(doc, dict) else doc
    for b, entry in enumerate(bundles):
        assert list(entry["labels"]) == [2 * b + 1, 2 * b + 2], (
            f"bundles.json entry {b} has labels {entry['labels']}, expected {[2*b+1, 2*b+2]}")
    return bundles


@pytest.fixture(scope="session")
def phantom(tractd, tmp_path_factory):
    """The default phantom (48x48x24, 1 mm, symmetric362), made once per session."""
    outdir = tmp_path_factory.mktemp("phantom")
    run_cli(tractd, ["phantom", outdir], check=True)
    return Phantom.from_dir(outdir)


# --------------------------------------------------------------------------- real scans

# The real data sets (../shared/data/real/README.md): beside the clone, at the
# same relative path in CI (read-only there).
REAL_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "real"
REAL_DATA_SETS = ("prisma_xa30", "canon_oblique")


@pytest.fixture(scope="session")
def real_data():
    """<repo>/../shared/data/real. Fails (never skips) when it or one of its data
    sets is missing: the real-scan tests are part of the suite, not optional."""
    missing = [d for d in REAL_DATA_SETS if not (REAL_DATA / d).is_dir()]
    if missing:
        pytest.fail(f"real scans missing: {', '.join(str(REAL_DATA / d) for d in missing)} "
                    f"(the tests expect ../shared/data/real beside the repository, "
                    f"see its README.md)", pytrace=False)
    return REAL_DATA


# --------------------------------------------------------------------------- metrics

# Whole streamlines on the phantom: every bundle at least this long (the straight
# one, 40 voxels, and the arc, 31.4) has at least WHOLE_MIN_FRACTION of the
# streamlines joining its two end zones, their median length at least
# WHOLE_MIN_LENGTH of the bundle's. On lavapipe, repulsion724 (2000 seeds, every
# direction getter) gives 10-20 % and 1.01-1.08; lines cut at ~60 steps (30
# voxels), as before the shaders' loop-limit fix, join neither bundle's ends.
WHOLE_LONG_BUNDLE_VOXELS = 30.0
WHOLE_MIN_FRACTION = 0.05
WHOLE_MIN_LENGTH = 0.95


def assert_whole_streamlines(trk_path, phantom, label=""):
    """The tractogram at trk_path (TRK, TCK or anything nibabel reads as RAS+
    mm), tracked on phantom's grid, holds whole streamlines
    along the phantom's long bundles (see WHOLE_LONG_BUNDLE_VOXELS): lengths in
    voxels against bundles.json's length_voxels. Returns {bundle: (fraction,
    median length / bundle length)} for the long bundles."""
    to_voxel = np.linalg.inv(phantom.affine)
    lines = [nib.affines.apply_affine(to_voxel, np.asarray(s, dtype=np.float64))
             for s in nib.streamlines.load(str(trk_path)).streamlines]
    assert lines, f"{label}: {trk_path} holds no streamlines"
    lengths = lengths_mm(lines, np.eye(4))          # voxel units
    ends = np.sort(endpoint_labels(lines, phantom.labels), axis=1)
    longest = max(b["length_voxels"] for b in phantom.bundles)
    assert lengths.max() >= longest, (
        f"{label}: the longest of {len(lines)} streamlines is {lengths.max():.1f} voxels, "
        f"shorter than the longest bundle ({longest:.1f}): streamlines are cut")
    found = {}
    for b, bundle in enumerate(phantom.bundles):
        if bundle["length_voxels"] < WHOLE_LONG_BUNDLE_VOXELS:
            continue
        joined = (ends[:, 0] == 2 * b + 1) & (ends[:, 1] == 2 * b + 2)
        fraction = joined.sum() / len(lines)
        ratio = float(np.median(lengths[joined]) / bundle["length_voxels"]) if joined.any() else 0.0
        found[bundle["name"]] = (fraction, ratio)
    assert found, f"{label}: the phantom has no bundle of {WHOLE_LONG_BUNDLE_VOXELS} voxels or more"
    short = {name: f"{100 * fr:.1f} % join its ends, median {r:.2f} of its length"
             for name, (fr, r) in found.items()
             if fr < WHOLE_MIN_FRACTION or r < WHOLE_MIN_LENGTH}
    assert not short, (
        f"{label}: streamlines do not run the length of the long bundles (want at least "
        f"{100 * WHOLE_MIN_FRACTION:.0f} % joining each one's end zones, median at least "
        f"{WHOLE_MIN_LENGTH} of its length; longest line {lengths.max():.1f} voxels): {short}")
    return found


LENGTH_QUANTILES = (10, 25, 50, 75, 90)


def summarize(streamlines, n_seeds, labels=None, bundles=None, affine=None):
    """Figures compared between DIPY and tractd (1-point lines dropped first):
    counts, mean, median and the LENGTH_QUANTILES of the lengths in points
    ("q10_len_pts"...), and the lengths themselves ("lengths_pts", for
    assert_length_distribution)."""
    lines = drop_single_points(streamlines)
    lp = lengths_points(lines)
    out = {
        "seeds": n_seeds,
        "streamlines": len(lines),
        "per_seed": len(lines) / n_seeds if n_seeds else 0.0,
        "mean_len_pts": float(lp.mean()) if len(lp) else 0.0,
        "median_len_pts": float(np.median(lp)) if len(lp) else 0.0,
        "lengths_pts": lp,
    }
    for q in LENGTH_QUANTILES:
        out[f"q{q}_len_pts"] = float(np.percentile(lp, q)) if len(lp) else 0.0
    if affine is not None:
        lm = lengths_mm(lines, affine)
        out["mean_len_mm"] = float(lm.mean()) if len(lm) else 0.0
    if labels is not None and bundles is not None:
        cs = connection_stats(lines, labels, bundles)
        out["valid_fraction"] = cs["valid_fraction"]
        out["per_bundle"] = cs["per_bundle"]
    return out


# --------------------------------------------------------------------------- DIPY tracking

class LocalTrackingMinusFirst(LocalTracking):
    """LocalTracking whose backward half starts from -first, as tractd's does.

    DIPY 1.6's local_tracker writes each new direction into the first_step
    array it is given, so LocalTracking's `first_step = -first_step` is the
    opposite of the LAST forward direction, not of the seed's peak (checked:
    after a forward half the array holds the direction of the final, rejected
    step). On the default phantom that raises the prob getter's mean length by
    ~6 %, lowers the valid-connection fraction by ~7 pp and lets lines fold
    back at the seed. Passing a copy restores -first (reference §2.1).
    """

    def _tracker(self, seed, first_step, streamline):
        return super()._tracker(seed, first_step.copy(), streamline)


# The DIPY side of the parity tests. `tracking` is the job's tracking section
# (tractd's names; every key these functions read must be there), seeds are
# voxel coordinates, and DIPY tracks in voxel space (identity affine) as the
# engine does.

# The prob settings the anatomical parity tests (test_act_dipy.py,
# test_pft_dipy.py) track the phantom with on both sides: one copy, so that
# their figures stay comparable with each other.
ANATOMICAL_TRACKING = {
    "sphere": "symmetric362",
    "step_size": 0.5,
    "max_angle": 60.0,
    "relative_peak_threshold": 0.25,
    "min_separation_angle": 45.0,
    "pmf_threshold": 0.05,
    "max_steps": 500,
}


def dipy_local_track(dg, fa, seeds, tracking, random_seed):
    """Tracks with the direction getter dg, stopped by
    ThresholdStoppingCriterion(fa, fa_threshold), through LocalTrackingMinusFirst
    (maxlen = max_steps, return_all). Returns the streamlines (float64)."""
    t = tracking
    sc = ThresholdStoppingCriterion(fa, t["fa_threshold"])
    tracker = LocalTrackingMinusFirst(dg, sc, seeds, affine=np.eye(4), step_size=t["step_size"],
                                      maxlen=t["max_steps"], return_all=True,
                                      random_seed=random_seed)
    return [np.asarray(s, dtype=np.float64) for s in tracker]


def dipy_prob_track(odf, fa, seeds, tracking, random_seed):
    """DIPY 1.6's ProbabilisticDirectionGetter.from_pmf on the ODF clipped at
    0 (tractd clips it before interpolating) and on tracking's sphere,
    ThresholdStoppingCriterion(fa, fa_threshold), LocalTrackingMinusFirst
    (maxlen = max_steps, return_all). Returns the streamlines (float64)."""
    t = tracking
    sphere = get_sphere(t["sphere"])
    odf = np.clip(odf, 0, None)
    assert odf.shape[3] == len(sphere.vertices)
    dg = ProbabilisticDirectionGetter.from_pmf(
        odf, max_angle=t["max_angle"], sphere=sphere, pmf_threshold=t["pmf_threshold"],
        relative_peak_threshold=t["relative_peak_threshold"],
        min_separation_angle=t["min_separation_angle"])
    return dipy_local_track(dg, fa, seeds, t, random_seed)


class DipyDwi:
    """A phantom's DWI as DIPY reads it: gtab (b <= b0_threshold are b0s, as
    tractd reads them), float64 data, and the DTI (WLS) FA inside the mask (0
    outside): tractd's default stop map for a dwi job."""

    def __init__(self, phantom, b0_threshold=50):
        bvals, bvecs = read_bvals_bvecs(str(phantom.path("dwi.bval")),
                                        str(phantom.path("dwi.bvec")))
        self.gtab = gradient_table(bvals, bvecs, b0_threshold=b0_threshold)
        self.data = phantom.dwi
        fa = TensorModel(self.gtab, fit_method="WLS").fit(self.data, mask=phantom.mask).fa
        self.fa = np.where(phantom.mask, np.nan_to_num(fa), 0.0)


DIPY_BOOT_MODELS = {"opdt": OpdtModel, "csa": CsaOdfModel}


def dipy_boot_track(dwi, model, seeds, tracking, random_seed):
    """DIPY 1.6's BootDirectionGetter.from_data on a DipyDwi with model (a
    boot job's model section: name, sh_order, sh_lambda, min_signal), the
    tracking section's sphere, max_angle, max_attempts, pmf_threshold and peak
    parameters; stopped on dwi.fa; LocalTrackingMinusFirst as dipy_prob_track."""
    t = tracking
    fit_model = DIPY_BOOT_MODELS[model["name"]](dwi.gtab, sh_order=model["sh_order"],
                                                smooth=model["sh_lambda"],
                                                min_signal=model["min_signal"])
    dg = BootDirectionGetter.from_data(
        dwi.data, fit_model, max_angle=t["max_angle"], sphere=get_sphere(t["sphere"]),
        max_attempts=t["max_attempts"], pmf_threshold=t["pmf_threshold"],
        relative_peak_threshold=t["relative_peak_threshold"],
        min_separation_angle=t["min_separation_angle"])
    return dipy_local_track(dg, dwi.fa, seeds, t, random_seed)


# DIPY's PTT (ptt_tracking) is not in Debian's DIPY 1.6: it runs in
# build/venv-dipy (tests/requirements-dipy.txt, `make venv-dipy`) as a
# subprocess, this script, with the interpreter $TRACTD_DIPY_PYTHON names.
DIPY_PTT_REFERENCE = Path(__file__).parent / "parity" / "dipy_ptt_reference.py"
DIPY_PTT_TIMEOUT_S = 600


@pytest.fixture(scope="session")
def dipy_python():
    """The Python of build/venv-dipy ($TRACTD_DIPY_PYTHON). Fails the test when unset."""
    path = os.environ.get("TRACTD_DIPY_PYTHON")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("TRACTD_DIPY_PYTHON must name the Python of build/venv-dipy (DIPY "
                    "from tests/requirements-dipy.txt, `make venv-dipy`); got " + repr(path),
                    pytrace=False)
    return path


def ptt_odf(phantom, fa_threshold):
    """The ODF as tractd's ptt samples it (engine.c upload_ptt_tables): clipped
    at 0, divided by each voxel's maximum, zero where FA < fa_threshold."""
    odf = np.clip(phantom.odf, 0, None)
    top = odf.max(axis=3)
    scale = np.where((phantom.fa >= fa_threshold) & (top > 0),
                     1.0 / np.where(top > 0, top, 1), 0)
    return odf * scale[..., None]


def ptt_seed_directions(phantom, seeds, tracking):
    """One (seed, direction) pair per initial direction, as tractd's pass 1
    finds them: the peaks DIPY 1.6's ProbabilisticDirectionGetter finds at the
    seed with the tracking section's sphere, pmf_threshold and peak parameters."""
    t = tracking
    dg = ProbabilisticDirectionGetter.from_pmf(
        np.clip(phantom.odf, 0, None), max_angle=t["max_angle"], sphere=get_sphere(t["sphere"]),
        pmf_threshold=t["pmf_threshold"], relative_peak_threshold=t["relative_peak_threshold"],
        min_separation_angle=t["min_separation_angle"])
    pairs = [(s, d) for s in seeds for d in dg.initial_direction(s)]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def dipy_ptt_track(dipy_python, phantom, seeds, tracking, workdir, random_seed):
    """DIPY's ptt_tracking (dipy_ptt_reference.py) from the seeds and initial
    directions tractd's ptt starts from, on ptt_odf, stopped on the phantom's
    FA; the tracking section's step, max_angle, pmf_threshold, probe_length and
    probe_quality (one probe line, radius 0), one thread. Returns the
    streamlines in seed order (float64)."""
    t = tracking
    pair_seeds, directions = ptt_seed_directions(phantom, seeds, t)
    params = {"fa_threshold": t["fa_threshold"], "step_size": t["step_size"],
              "max_angle": t["max_angle"], "pmf_threshold": t["pmf_threshold"],
              "probe_length": t["probe_length"], "probe_quality": t["probe_quality"],
              "probe_count": 1, "probe_radius": 0.0,
              # DIPY >= 1.12 takes min_len and max_len in mm (points = mm /
              # step_size; voxel space: 1 mm a voxel). max_len bounds both a
              # half's points and the whole line's: 2 max_steps + 1 points
              # keeps every line whose halves tractd would keep.
              "min_len": 0, "max_len": (2 * t["max_steps"] + 1) * t["step_size"],
              "random_seed": random_seed, "nbr_threads": 1}
    workdir = Path(workdir)
    src, dst = workdir / "dipy_ptt_in.npz", workdir / "dipy_ptt_out.npz"
    np.savez(src, sf=ptt_odf(phantom, t["fa_threshold"]), fa=phantom.fa,
             vertices=get_sphere(t["sphere"]).vertices, seeds=pair_seeds,
             directions=directions, params=json.dumps(params))
    proc = subprocess.run([dipy_python, str(DIPY_PTT_REFERENCE), str(src), str(dst)],
                          capture_output=True, text=True, timeout=DIPY_PTT_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = np.load(dst)
    ends = np.cumsum(out["counts"])
    return np.split(out["points"], ends[:-1]) if len(ends) else []


# --------------------------------------------------------------------------- interpolation

def trilinear(vol, p):
    """DIPY's trilinear_interpolate4d_c rules for a 3D volume (reference §2.2).

    Returns (value, inside). Outside when any axis has p < -0.5 or p >= dim - 0.5.
    Corners i0 = f + (f == -1), i1 = f + (f != dim - 1) with f = floor(p).
    """
    p = np.asarray(p, dtype=np.float64)
    shape = np.asarray(vol.shape[:3])
    if np.any(p < -0.5) or np.any(p >= shape - 0.5):
        return 0.0, False
    f = np.floor(p).astype(np.int64)
    w1 = p - f
    w0 = 1.0 - w1
    i0 = f + (f == -1)
    i1 = f + (f != shape - 1)
    val = 0.0
    for cx, wx in ((i0[0], w0[0]), (i1[0], w1[0])):
        for cy, wy in ((i0[1], w0[1]), (i1[1], w1[1])):
            for cz, wz in ((i0[2], w0[2]), (i1[2], w1[2])):
                val += wx * wy * wz * vol[cx, cy, cz]
    return float(val), True


def format_table(rows, columns):
    """Plain-text table: rows is {label: {column: value}}."""
    width = max([len(str(r)) for r in rows] + [8])
    head = " " * width + "".join(f"{c:>16}" for c in columns)
    lines = [head]
    for label, vals in rows.items():
        cells = []
        for c in columns:
            v = vals.get(c, "")
            cells.append(f"{v:>16.4f}" if isinstance(v, float) else f"{v!s:>16}")
        lines.append(f"{label!s:<{width}}" + "".join(cells))
    return "\n".join(lines)


__all__ = ["RUN_TIMEOUT_S", "REAL_DATA", "PHANTOM_FILES", "PHANTOM_ODF_FILES", "PHANTOM_DWI_FILES", "Phantom", "Trk", "run_cli", "run_job", "write_job", "load_trk",
           "tractd_asan_path", "LocalTrackingMinusFirst", "drop_single_points", "lengths_points", "lengths_mm",
           "voxel_of", "endpoint_labels", "connection_stats", "summarize", "trilinear",
           "format_table"]


# --------------------------------------------------------------------------- parity comparisons

def parity_figures(res, key):
    """'tractd X, DIPY Y (DIPY run-to-run: Z)' for a failure message; the
    run-to-run figure only where a second DIPY run (dipy_alt) was made."""
    text = f"tractd {res['tractd'][key]:.4f}, DIPY {res['dipy'][key]:.4f}"
    if "dipy_alt" in res:
        text += f" (DIPY run-to-run: {res['dipy_alt'][key]:.4f})"
    return text


def rel_diff(a, b):
    return abs(a - b) / abs(b) if b else float("inf")


def assert_parity(res, key, tol, relative, label=""):
    """tractd's summary figure `key` within tol of DIPY's in res: relative
    (a fraction of DIPY's) or absolute (for fractions: percentage points)."""
    got, want = res["tractd"][key], res["dipy"][key]
    diff = rel_diff(got, want) if relative else abs(got - want)
    unit = "%" if relative else "pp"
    assert diff <= tol, (f"{label}{key} differs by {100 * diff:.2f} {unit} "
                         f"(> {100 * tol:.0f} {unit}): {parity_figures(res, key)}")


def ks_critical(n, m, alpha):
    """The two-sample Kolmogorov-Smirnov statistic that samples of n and m
    draws from one continuous distribution exceed with probability alpha
    (the asymptotic c(alpha) sqrt((n + m) / (n m)), c(alpha) =
    sqrt(-ln(alpha / 2) / 2): 1.95 at 0.001). Lengths in points are discrete;
    ties make the test conservative (the true level is below alpha)."""
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def length_ks(res, shift=0):
    """The two-sample KS statistic between tractd's and DIPY's lengths in
    points (summarize's lengths_pts): the largest gap between their empirical
    distribution functions F_t and F_d. With shift > 0, the gap left once
    either side may be moved by up to shift points, max over x of
    max(F_d(x - shift) - F_t(x), F_t(x) - F_d(x + shift)): 0 when tractd's
    lengths are DIPY's plus a constant within shift, and never above the
    plain statistic, so ks_critical bounds it too (conservatively)."""
    a = np.asarray(res["tractd"]["lengths_pts"])
    b = np.asarray(res["dipy"]["lengths_pts"])
    if shift == 0:
        return float(ks_2samp(a, b).statistic)
    x = np.arange(min(a.min(), b.min()) - shift, max(a.max(), b.max()) + shift + 1)
    cdf_a = np.searchsorted(np.sort(a), x, side="right") / len(a)

    def cdf_b(at):
        return np.searchsorted(np.sort(b), at, side="right") / len(b)

    return float(max(np.max(cdf_b(x - shift) - cdf_a), np.max(cdf_a - cdf_b(x + shift)), 0.0))


def assert_length_distribution(res, alpha, shift=0, label=""):
    """tractd's lengths in points (summarize's lengths_pts) and DIPY's pass a
    two-sample KS test at level alpha: length_ks(res, shift) is within
    ks_critical(n, m, alpha). The message lists both sides' quantiles."""
    a, b = res["tractd"]["lengths_pts"], res["dipy"]["lengths_pts"]
    assert len(a) and len(b), f"{label}no streamlines: tractd {len(a)}, DIPY {len(b)}"
    d = length_ks(res, shift)
    bound = ks_critical(len(a), len(b), alpha)
    quantiles = ", ".join(
        f"q{q} {res['tractd'][f'q{q}_len_pts']:g}/{res['dipy'][f'q{q}_len_pts']:g}"
        for q in LENGTH_QUANTILES)
    shifted = f" with lengths shifted by up to {shift} points" if shift else ""
    assert d <= bound, (f"{label}lengths in points differ: KS statistic{shifted} {d:.4f} > "
                        f"{bound:.4f} (alpha {alpha:g}, {len(a)} and {len(b)} lines); "
                        f"quantiles tractd/DIPY: {quantiles}")


def bundle_fractions(res, bundles, tolerance):
    """Valid connections per bundle as a fraction of all streamlines, for the
    dipy, tractd and dipy_alt summaries in res. Returns the printed table and
    the bundles where tractd and DIPY differ by more than tolerance."""
    rows, failures = {}, []
    for entry in bundles:
        name = entry["name"]
        row = {}
        for side in ("dipy", "tractd", "dipy_alt"):
            s = res[side]
            row[side] = s["per_bundle"][name] / s["streamlines"] if s["streamlines"] else 0.0
        rows[name] = row
        if abs(row["tractd"] - row["dipy"]) > tolerance:
            failures.append(f"{name}: tractd {row['tractd']:.4f} vs DIPY {row['dipy']:.4f}")
    return format_table(rows, ["dipy", "tractd", "dipy_alt"]), failures
