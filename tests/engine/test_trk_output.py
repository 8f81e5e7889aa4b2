"""Geometry and format of tractd's TRK output on the phantom.

One run per tracking configuration (explicit seed points, so every streamline's
seed is known); the tests check the file against the ODF's grid and every
streamline against the tracking rules of reference §2.1, §2.2 and §3.1:
points inside the volume, FA above the threshold at every tracked point,
fixed step length, turning angle at most max_angle (2 x max_angle at the seed,
where the two halves start from +first and -first).
"""
import json
import re
import shutil
import struct

import nibabel as nib
import numpy as np
import pytest

from conftest import load_trk, run_cli, run_job, trilinear

from dipy.tracking.utils import random_seeds_from_mask
from scipy.spatial import cKDTree

N_SEEDS = 1000
SEED_PLACEMENT_SEED = 99

# Two configurations, so constants hard-wired in the engine show up.
CONFIGS = {
    "default": {"sphere": "symmetric362", "step_size": 0.5, "max_angle": 60.0,
                "fa_threshold": 0.1},
    "tight": {"sphere": "symmetric362", "step_size": 0.3, "max_angle": 35.0,
              "fa_threshold": 0.2},
}

# Points are float32 in the file, (p + 0.5) * voxel_size, read back through the
# affine: coordinates below ~50 voxels carry ~1e-5 voxel of rounding.
TOL_STEP_VOX = 1e-4          # |segment| - step_size
TOL_ANGLE_DEG = 0.05         # float32 segment directions (~1e-5 / 0.3 rad)
TOL_SEED_MATCH_VOX = 1e-3    # seed given in double, stored as float32
# The GPU interpolates FA in float32; a point whose float64 trilinear FA lies
# within this of the threshold may fall on either side.
TOL_FA = 1e-5
# Header fields are float32 in the file.
TOL_AFFINE = 1e-5


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tracked(request, tractd, phantom, tmp_path_factory):
    """Runs one configuration; returns (config, seeds, Trk, stats dict, trk path)."""
    cfg = CONFIGS[request.param]
    seeds = random_seeds_from_mask(phantom.roi, np.eye(4), seeds_count=N_SEEDS,
                                   seed_count_per_voxel=False, random_seed=SEED_PLACEMENT_SEED)
    job = phantom.job_with(seeds={"points": seeds.tolist(), "space": "voxel"}, tracking=cfg)
    workdir = tmp_path_factory.mktemp(f"trk_{request.param}")
    _, trk_path, stats_path = run_job(tractd, job, workdir, name="out")
    trk = load_trk(trk_path)
    assert len(trk) > 0, "no streamlines at all"
    stats = json.loads(stats_path.read_text())
    return cfg, seeds, trk, stats, trk_path


def read_trk_raw(path):
    """Parses the TRK by hand: returns (header bytes, n_count, list of point counts)
    and checks that the records exactly fill the file."""
    data = path.read_bytes()
    assert len(data) >= 1000, f"file is {len(data)} bytes, shorter than a TRK header"
    hdr = data[:1000]
    n_scalars = struct.unpack_from("<h", hdr, 36)[0]
    n_props = struct.unpack_from("<h", hdr, 238)[0]
    n_count = struct.unpack_from("<i", hdr, 988)[0]
    counts = []
    off = 1000
    while off < len(data):
        assert off + 4 <= len(data), f"truncated record header at byte {off}"
        n = struct.unpack_from("<i", data, off)[0]
        assert n > 0, f"record {len(counts)} at byte {off} has {n} points"
        off += 4 + 4 * (n * (3 + n_scalars) + n_props)
        assert off <= len(data), f"record {len(counts)} runs past the end of the file"
        counts.append(n)
    return hdr, n_count, counts


@pytest.fixture(scope="module")
def seed_of(tracked):
    """For each streamline: (index of the point that is one of the seeds, that
    seed's number), or (None, None) when no point matches a seed."""
    _, seeds, trk, _, _ = tracked
    tree = cKDTree(seeds)
    out = []
    for s in trk.streamlines:
        dist, idx = tree.query(s)
        i = int(np.argmin(dist))
        out.append((i, int(idx[i])) if dist[i] <= TOL_SEED_MATCH_VOX else (None, None))
    return out


# ------------------------------------------------------------------ header and file

def test_header_matches_odf(tracked, phantom):
    _, _, trk, _, _ = tracked
    F = nib.streamlines.Field
    img = phantom.odf_img
    assert tuple(trk.header[F.DIMENSIONS]) == tuple(img.shape[:3])
    np.testing.assert_allclose(trk.header[F.VOXEL_SIZES], img.header.get_zooms()[:3],
                               atol=TOL_AFFINE, err_msg="voxel_size != NIfTI pixdim[1..3]")
    np.testing.assert_allclose(trk.affine, img.affine, atol=TOL_AFFINE,
                               err_msg="vox_to_ras != the ODF's affine")
    order = trk.header[F.VOXEL_ORDER]
    order = order.decode("latin-1") if isinstance(order, bytes) else order
    assert order == "".join(nib.aff2axcodes(img.affine)), "voxel_order != aff2axcodes(affine)"


def test_raw_header_and_record_count(tracked):
    _, _, trk, _, path = tracked
    hdr, n_count, counts = read_trk_raw(path)
    assert hdr[:6] == b"TRACK\0"
    assert struct.unpack_from("<i", hdr, 992)[0] == 2, "version != 2"
    assert struct.unpack_from("<i", hdr, 996)[0] == 1000, "hdr_size != 1000"
    assert n_count == len(counts), f"header n_count {n_count} != {len(counts)} records"
    assert len(counts) == len(trk)
    assert min(counts) >= 2, "a record has fewer than 2 points"


def test_stats_json(tracked):
    _, _, trk, stats, _ = tracked
    for key in ("seeds", "streamlines", "points", "chunks", "device", "seconds"):
        assert key in stats, f"--stats-json lacks {key!r}: {stats}"
    for key in ("load", "upload", "compile", "track", "encode", "write"):
        assert key in stats["seconds"], f"stats.seconds lacks {key!r}: {stats['seconds']}"
        assert stats["seconds"][key] >= 0
    assert stats["seeds"] == N_SEEDS
    assert stats["streamlines"] == len(trk)
    assert stats["points"] == sum(len(s) for s in trk.streamlines)
    assert stats["chunks"] >= 1


# ------------------------------------------------------------------ streamline geometry

def test_points_inside_volume(tracked, phantom):
    _, _, trk, _, _ = tracked
    hi = np.asarray(phantom.shape) - 0.5
    bad = [k for k, s in enumerate(trk.streamlines)
           if np.any(s < -0.5) or np.any(s >= hi)]
    assert not bad, (f"{len(bad)} streamlines leave [-0.5, dim-0.5), first #{bad[0]}: "
                     f"{trk.streamlines[bad[0]][[0, -1]]}")


def test_each_streamline_contains_its_seed(tracked, seed_of):
    _, _, trk, _, _ = tracked
    missing = [k for k, (i, _) in enumerate(seed_of) if i is None]
    assert not missing, (f"{len(missing)}/{len(trk)} streamlines contain none of the seed "
                         f"points (first #{missing[0]})")


def test_streamlines_in_seed_order(tracked, seed_of):
    """Streamlines come out by seed (then direction), whatever the chunking."""
    order = [j for _, j in seed_of if j is not None]
    back = [k for k in range(1, len(order)) if order[k] < order[k - 1]]
    assert not back, f"seed order goes back {len(back)} times, first at streamline {back[0]}"


def test_tracked_points_above_fa_threshold(tracked, phantom, seed_of):
    """Every point but the seed passed check_point: trilinear(FA) > fa_threshold."""
    cfg, _, trk, _, _ = tracked
    thr = cfg["fa_threshold"]
    fa = phantom.fa
    bad = []
    for k, s in enumerate(trk.streamlines):
        si = seed_of[k][0]
        for i, p in enumerate(s):
            if i == si:
                continue
            val, inside = trilinear(fa, p)
            if not inside or val <= thr - TOL_FA:
                bad.append((k, i, val, inside))
    assert not bad, (f"{len(bad)} tracked points with FA <= {thr} or outside; first "
                     f"(line, point, FA, inside) = {bad[:5]}")


def test_step_length(tracked):
    cfg, _, trk, _, _ = tracked
    seg = np.concatenate([np.linalg.norm(np.diff(s, axis=0), axis=1) for s in trk.streamlines])
    err = np.abs(seg - cfg["step_size"])
    assert err.max() <= TOL_STEP_VOX, (
        f"{int(np.sum(err > TOL_STEP_VOX))}/{len(seg)} segments differ from step_size "
        f"{cfg['step_size']} by > {TOL_STEP_VOX}; range [{seg.min():.6f}, {seg.max():.6f}]")


def test_turning_angle(tracked, seed_of):
    cfg, _, trk, _, _ = tracked
    max_angle = cfg["max_angle"]
    bad = []
    worst = 0.0
    for k, s in enumerate(trk.streamlines):
        if len(s) < 3:
            continue
        d = np.diff(s, axis=0)
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        cos = np.clip(np.sum(d[:-1] * d[1:], axis=1), -1, 1)
        ang = np.degrees(np.arccos(cos))           # ang[j] is the turn at point j + 1
        limit = np.full(len(ang), max_angle)
        si = seed_of[k][0]
        if si is not None and 1 <= si <= len(s) - 2:
            limit[si - 1] = 2 * max_angle          # backward and forward halves meet
        over = np.nonzero(ang > limit + TOL_ANGLE_DEG)[0]
        worst = max(worst, float(np.max(ang - limit)))
        if len(over):
            bad.append((k, int(over[0]) + 1, float(ang[over[0]])))
    assert not bad, (f"{len(bad)} streamlines turn by more than {max_angle} deg; "
                     f"first (line, point, angle) = {bad[:5]}; worst excess {worst:.3f} deg")


# ------------------------------------------------------------------ the phantom's own job

def test_phantom_job_relative_paths(tractd, phantom, tmp_path):
    """`tractd run job.json` (ROI seeds, relative paths, output.path) as written by
    `tractd phantom` works from any working directory and writes tracks.trk."""
    copy = tmp_path / "ph"
    shutil.copytree(phantom.dir, copy)
    proc = run_cli(tractd, ["run", copy / "job.json", "-q"], check=True)
    out = copy / phantom.job["output"]["path"]
    assert out.is_file(), f"no {out}; stderr:\n{proc.stderr}"
    trk = load_trk(out)
    assert len(trk) > 0
    hi = np.asarray(phantom.shape) - 0.5
    assert all(np.all(s >= -0.5) and np.all(s < hi) for s in trk.streamlines)


def test_non_unit_voxel_size(tractd, tmp_path):
    """A 2 mm, non-cubic phantom: header from its affine, step_size still in voxels."""
    ph = tmp_path / "ph2"
    run_cli(tractd, ["phantom", "--voxel-size", "2", "--dim", "40,36,20", "--seeds", "300", ph],
            check=True)
    out = tmp_path / "out.trk"
    run_cli(tractd, ["run", ph / "job.json", "-o", out, "-q"], check=True)
    img = nib.load(str(ph / "odf.nii.gz"))
    trk = load_trk(out)
    F = nib.streamlines.Field
    assert tuple(trk.header[F.DIMENSIONS]) == (40, 36, 20)
    np.testing.assert_allclose(trk.header[F.VOXEL_SIZES], img.header.get_zooms()[:3],
                               atol=TOL_AFFINE)
    np.testing.assert_allclose(trk.affine, img.affine, atol=TOL_AFFINE)
    assert len(trk) > 0
    pts = np.concatenate(trk.streamlines)
    assert np.all(pts >= -0.5) and np.all(pts < np.array([40, 36, 20]) - 0.5)
    step = json.loads((ph / "job.json").read_text()).get("tracking", {}).get("step_size", 0.5)
    seg = np.concatenate([np.linalg.norm(np.diff(s, axis=0), axis=1) for s in trk.streamlines])
    assert np.abs(seg - step).max() <= TOL_STEP_VOX, (
        f"segments in voxels range [{seg.min()}, {seg.max()}], step_size {step}")


# ---- tracking.step_mm ------------------------------------------------------

STEP_MM = 0.8


def _small_phantom(tractd, directory, voxel_mm):
    run_cli(tractd, ["phantom", "--dim", "24,24,16", "--seeds", "300", "--no-dwi",
                     "--voxel-size", str(voxel_mm), directory, "-q"], check=True)
    return directory


def _run_tracking(tractd, ph, out, tracking, check=True):
    """Runs the phantom's job with tracking merged in (the job file beside
    the phantom's, so its relative paths hold); output format from out."""
    job = json.loads((ph / "job.json").read_text())
    job["tracking"].update(tracking)
    job["output"] = {"format": out.suffix[1:], "path": str(out)}
    job_path = ph / f"{out.stem}.json"
    job_path.write_text(json.dumps(job))
    return run_cli(tractd, ["run", job_path, "-q"], check=check)


def _tck_step_size(path):
    """The step_size property of a TCK header (mm)."""
    header = path.read_bytes().split(b"\nEND\n", 1)[0].decode()
    return float(re.search(r"^step_size: (\S+)$", header, re.M).group(1))


@pytest.mark.parametrize("voxel_mm", [1, 2])
def test_step_mm_on_isotropic_grids(tractd, tmp_path, voxel_mm):
    """tracking.step_mm is step_size = step_mm / voxel size, byte for byte
    (DIPY steps step_mm * inv_voxel_size on every axis: the same on an
    isotropic grid): segments step_mm long in mm, and the TCK header's
    step_size (mm) is step_mm."""
    ph = _small_phantom(tractd, tmp_path / "ph", voxel_mm)
    by_mm, by_voxels = tmp_path / "mm.trk", tmp_path / "voxels.trk"
    _run_tracking(tractd, ph, by_mm, {"step_mm": STEP_MM})
    _run_tracking(tractd, ph, by_voxels, {"step_size": STEP_MM / voxel_mm})
    assert by_mm.read_bytes() == by_voxels.read_bytes()
    trk = nib.streamlines.load(str(by_mm))
    assert len(trk.streamlines) > 0
    seg = np.concatenate([np.linalg.norm(np.diff(s, axis=0), axis=1) for s in trk.streamlines])
    assert np.abs(seg - STEP_MM).max() <= TOL_STEP_VOX * voxel_mm, (seg.min(), seg.max())
    tck = tmp_path / "mm.tck"
    _run_tracking(tractd, ph, tck, {"step_mm": STEP_MM})
    assert _tck_step_size(tck) == pytest.approx(STEP_MM, rel=1e-6)


def test_step_mm_on_anisotropic_grid(tractd, tmp_path):
    """On 2 x 2 x 4 mm voxels the step is step_mm over the mean voxel size
    (DIPY's average_voxel_size), as the README says: 1 mm is 0.375 voxels."""
    ph = _small_phantom(tractd, tmp_path / "ph", 1)
    for name in ("odf.nii.gz", "fa.nii.gz", "seed_roi.nii.gz"):
        img = nib.load(str(ph / name))
        aniso = nib.Nifti1Image(np.asarray(img.dataobj), np.diag([2.0, 2.0, 4.0, 1.0]))
        nib.save(aniso, str(ph / name))
    out = tmp_path / "aniso.trk"
    _run_tracking(tractd, ph, out, {"step_mm": 1.0})
    trk = load_trk(out)
    assert len(trk) > 0
    seg = np.concatenate([np.linalg.norm(np.diff(s, axis=0), axis=1) for s in trk.streamlines])
    assert np.abs(seg - 0.375).max() <= TOL_STEP_VOX, (seg.min(), seg.max())


@pytest.mark.parametrize("tracking,words", [
    ({"step_size": 0.5, "step_mm": 0.5}, ["tracking.step_mm", "tracking.step_size"]),
    ({"step_mm": 0}, ["tracking.step_mm", "got 0"]),
    ({"step_mm": -1}, ["tracking.step_mm", "got -1"]),
    # 8 mm on 1 mm voxels: over step_size's 5 voxels.
    ({"step_mm": 8}, ["tracking.step_mm", "8 voxels"]),
])
def test_step_mm_refused(tractd, tmp_path, tracking, words):
    """Both steps, or a step_mm out of range: exit 3 naming the field(s)."""
    ph = _small_phantom(tractd, tmp_path / "ph", 1)
    proc = _run_tracking(tractd, ph, tmp_path / "bad.trk", tracking, check=False)
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)
    assert not (tmp_path / "bad.trk").exists()
