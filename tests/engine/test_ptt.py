"""The PTT direction getter end to end on lavapipe: output is a function of
the job alone (same bytes twice, whatever the chunking); against prob from
the same seeds on the phantom's known bundles, at least as many valid
connections and smoother streamlines; no step turns more than max_angle, nor
more than the maximum curvature allows (the frame propagation of the shipped
kernel; daemon/engine/ptt.c's twin is unit-tested against arcs and helices); bad ptt
jobs fail up front naming their field. Agreement with DIPY is
tests/parity/test_ptt_dipy.py's.
"""
import json

import nibabel as nib
import numpy as np
import pytest

from conftest import load_trk, run_cli, run_job, summarize, write_job

EXIT_INVALID = 3
EXIT_RUNTIME = 1
RUN_SEEDS = 600
SMALL_CHUNK_SEEDS = 37
CYLINDER_SEEDS = 150    # four probe lines: four times the lookups
STEP = 0.5
# PTT's setting on the phantom (test_ptt_dipy.py): at 60 degrees its arcs may
# curl within half a voxel and it wanders, DIPY's PTT as much.
MAX_ANGLE = 20.0
# DIPY's maximum curvature: a step of STEP on it turns by 2 sin(max_angle / 2)
# radians (19.9 degrees), under max_angle.
MAX_TURN = 2 * np.sin(np.radians(MAX_ANGLE) / 2)


def job(phantom, getter, rng_seed=0, **tracking):
    return phantom.job_with(
        direction_getter=getter,
        seeds={"roi": str(phantom.path("seed_roi.nii.gz")), "count": RUN_SEEDS,
               "rng_seed": rng_seed},
        tracking={"step_size": STEP, "max_angle": MAX_ANGLE, **tracking})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("ptt")


@pytest.fixture(scope="module")
def reference(tractd, phantom, workdir):
    """The default PTT run's TRK path."""
    _, trk, stats = run_job(tractd, job(phantom, "ptt"), workdir, name="reference")
    assert json.loads(stats.read_text())["seeds"] == RUN_SEEDS
    assert len(load_trk(trk).streamlines) > RUN_SEEDS // 2
    return trk


@pytest.fixture(scope="module")
def prob(tractd, phantom, workdir):
    _, trk, _ = run_job(tractd, job(phantom, "prob"), workdir, name="prob")
    return trk


def turn_angles(streamlines):
    """Angle (radians) between consecutive steps, all streamlines together."""
    out = []
    for s in streamlines:
        d = np.diff(np.asarray(s, dtype=np.float64), axis=0)
        d /= np.linalg.norm(d, axis=1)[:, None]
        out.append(np.arccos(np.clip(np.sum(d[1:] * d[:-1], axis=1), -1, 1)))
    return np.concatenate(out)


def angular_change_per_mm(streamlines, affine):
    lin = np.asarray(affine, dtype=np.float64)[:3, :3]
    mm = sum(np.linalg.norm(np.diff(s, axis=0) @ lin.T, axis=1).sum() for s in streamlines)
    return turn_angles(streamlines).sum() / mm


def test_same_job_twice_chunking_and_devices(tractd, phantom, workdir, reference):
    """The same bytes again, in small chunks, and shared out over two logical
    devices (each builds its own ptt tables)."""
    _, again, _ = run_job(tractd, job(phantom, "ptt"), workdir, name="again")
    _, chunked, stats = run_job(tractd, job(phantom, "ptt"), workdir, name="chunked",
                                extra_args=("--max-chunk-seeds", str(SMALL_CHUNK_SEEDS)))
    _, two, two_stats = run_job(tractd, job(phantom, "ptt"), workdir, name="two_devices",
                                extra_args=("--device", "0,0", "--max-chunk-seeds",
                                            str(SMALL_CHUNK_SEEDS)))
    assert json.loads(stats.read_text())["chunks"] >= RUN_SEEDS // SMALL_CHUNK_SEEDS
    assert json.loads(two_stats.read_text())["devices"] == 2
    assert again.read_bytes() == reference.read_bytes()
    assert chunked.read_bytes() == reference.read_bytes()
    assert two.read_bytes() == reference.read_bytes()


def test_rng_seed_matters(tractd, phantom, workdir, reference):
    _, other, _ = run_job(tractd, job(phantom, "ptt", rng_seed=1), workdir, name="seed1")
    assert other.read_bytes() != reference.read_bytes()


def test_no_step_turns_more_than_the_curvature_allows(reference):
    angles = turn_angles(load_trk(reference).streamlines)
    assert len(angles) > 10000
    # float32 points: a few 1e-4 rad of rounding on half-voxel steps.
    assert angles.max() <= MAX_TURN + 2e-3, np.degrees(angles.max())
    assert angles.max() < np.radians(MAX_ANGLE)


def test_at_least_prob_valid_connections_and_smoother(phantom, reference, prob):
    ptt_lines = load_trk(reference).streamlines
    prob_lines = load_trk(prob).streamlines
    kw = dict(labels=phantom.labels, bundles=phantom.bundles, affine=phantom.affine)
    ptt_s, prob_s = summarize(ptt_lines, RUN_SEEDS, **kw), summarize(prob_lines, RUN_SEEDS, **kw)
    ptt_turn = angular_change_per_mm(ptt_lines, phantom.affine)
    prob_turn = angular_change_per_mm(prob_lines, phantom.affine)
    print(f"\n== ptt vs prob, {RUN_SEEDS} seeds: valid fraction {ptt_s['valid_fraction']:.3f} vs "
          f"{prob_s['valid_fraction']:.3f}; mean angular change {np.degrees(ptt_turn):.2f} vs "
          f"{np.degrees(prob_turn):.2f} degrees/mm; mean length {ptt_s['mean_len_pts']:.1f} vs "
          f"{prob_s['mean_len_pts']:.1f} points")
    assert ptt_s["valid_fraction"] >= prob_s["valid_fraction"]
    assert ptt_turn < prob_turn


@pytest.mark.parametrize("getter,change,field,reason", [
    ("prob", {"probe_length": 1.0}, "tracking.probe_length",
     "applies to direction_getter \"ptt\" only"),
    ("ptt", {"max_attempts": 3}, "tracking.max_attempts",
     "applies to direction_getter \"boot\" only"),
    ("ptt", {"probe_quality": 1}, "tracking.probe_quality", "must be in [2, 64]"),
    ("ptt", {"probe_length": 0}, "tracking.probe_length", "must be in (0, 10]"),
    ("ptt", {"rejection_tries": 0}, "tracking.rejection_tries", "must be in [1, 10000]"),
])
def test_bad_ptt_jobs(tractd, phantom, workdir, getter, change, field, reason):
    path = write_job(workdir / "bad.json", job(phantom, getter, **change))
    proc = run_cli(tractd, ["run", path, "-o", workdir / "bad.trk"])
    assert proc.returncode == EXIT_INVALID, proc.stderr
    assert f"tractd: error: {field}: " in proc.stderr, proc.stderr
    assert reason in proc.stderr, proc.stderr


def test_ptt_takes_csd_only(tractd, phantom, workdir):
    bad = phantom.dwi_job_with(direction_getter="ptt", model="opdt",
                               seeds={"roi": str(phantom.path("seed_roi.nii.gz")), "count": 10})
    path = write_job(workdir / "bad_model.json", bad)
    proc = run_cli(tractd, ["run", path, "-o", workdir / "bad.trk"])
    assert proc.returncode == EXIT_INVALID, proc.stderr
    assert ("tractd: error: model: must be \"csd\" with direction_getter \"ptt\""
            in proc.stderr), proc.stderr


def test_probe_cylinder_and_getter_code(tractd, phantom, workdir, reference):
    """probe_count > 1 samples a cylinder around the arc (another support, so
    other streamlines); output.save_direction_getter stores ptt's code, 2."""
    changed = job(phantom, "ptt", probe_count=4, probe_radius=0.5)
    changed["output"] = {"save_direction_getter": True}
    changed["seeds"]["count"] = CYLINDER_SEEDS
    _, trk, _ = run_job(tractd, changed, workdir, name="cylinder")
    tf = nib.streamlines.load(str(trk))
    assert len(tf.streamlines) > CYLINDER_SEEDS // 2
    first = load_trk(reference).streamlines[:5]
    assert any(len(a) != len(b) or not np.allclose(a, b)
               for a, b in zip(first, load_trk(trk).streamlines[:5]))
    assert np.all(tf.tractogram.data_per_streamline["direction_getter"] == 2)


def test_paged_volumes_change_nothing(tractd, phantom, workdir, reference):
    """The ODF (76 MiB) and the per-voxel scale split into pages far below one
    binding and one allocation (paged_volume.h): the same bytes."""
    proc, trk, _ = run_job(tractd, job(phantom, "ptt"), workdir, name="paged",
                           extra_args=("--max-binding-bytes", "8M", "--max-alloc-bytes", "4M",
                                       "-v"))
    assert "ODF on the GPU as float32: 20 pages" in proc.stderr, proc.stderr[-2000:]
    assert trk.read_bytes() == reference.read_bytes()


def test_sh_storage_is_refused(tractd, phantom, workdir):
    """ptt samples the ODF as float32 or float16 only (engine.c)."""
    dwi = phantom.dwi_job_with(
        direction_getter="ptt", seeds={"roi": str(phantom.path("seed_roi.nii.gz")), "count": 10},
        tracking={"max_angle": MAX_ANGLE, "odf_storage": "sh"})
    path = write_job(workdir / "ptt_sh.json", dwi)
    proc = run_cli(tractd, ["run", path, "-o", workdir / "ptt_sh.trk"])
    assert proc.returncode == EXIT_INVALID, proc.stderr
    assert "tractd: error: tracking.odf_storage: \"sh\" is not available" in proc.stderr


def test_auto_storage_that_ends_as_sh_is_refused(tractd, phantom, workdir):
    """With a budget that holds only the SH coefficients, auto storage picks
    "sh", which ptt refuses before tracking, saying what to change."""
    dwi = phantom.dwi_job_with(
        direction_getter="ptt", seeds={"roi": str(phantom.path("seed_roi.nii.gz")), "count": 10},
        tracking={"max_angle": MAX_ANGLE})
    proc, trk, _ = run_job(tractd, dwi, workdir, name="ptt_auto_sh", check=False,
                           extra_args=("--gpu-memory-budget", "30M"))
    assert proc.returncode == EXIT_RUNTIME, proc.stderr
    assert "tracking.odf_storage: ptt tracks the ODF as float32 or float16" in proc.stderr
    assert not trk.exists()
