"""stopping act and cmc, and tracking.return_all, against DIPY's
ActStoppingCriterion and CmcStoppingCriterion.

Both sides track the default phantom (`tractd phantom`, which writes
include.nii.gz, 1 in the bundles' end zones, and exclude.nii.gz, 1 outside the
bundles and end zones) from the same explicit seeds, prob getter on the same
ODF and sphere, as test_prob_dipy.py:

  DIPY 1.6: ProbabilisticDirectionGetter.from_pmf (conftest's dipy_prob_track
  settings), ActStoppingCriterion(include, exclude),
  LocalTrackingMinusFirst(return_all=False): only streamlines whose both ends
  stopped as ENDPOINT (include > 0.5) or OUTSIDEIMAGE;
  tractd: "stopping": {"criterion": "act", ...}, "tracking": {"return_all": false};
  and the same with CmcStoppingCriterion.from_pve(wm, gm, csf, step_size=0.5,
  average_voxel_size=1) against "stopping": {"criterion": "cmc", ...} on the
  phantom's wm, gm and csf (gm is include's map, csf exclude's).

Compared (the random walks differ, so statistically): streamlines kept per seed
within 10 % (relative) and the valid-connection fraction (both ends in the end
zones of one bundle, each line taken one step further at its ends: the
stopping point in the include map is not kept) within 4 percentage points. Then: tractd's output is
byte-identical whatever the chunking, and return_all false keeps exactly the
lines of a return_all true run whose two ends are valid. Run with `pytest -s`
to see the figures.
"""
import json

import nibabel as nib
import numpy as np
import pytest

from conftest import (ANATOMICAL_TRACKING, LocalTrackingMinusFirst, assert_parity, format_table,
                      load_trk, run_job, summarize)
from scoring import one_step_further

from dipy.data import get_sphere
from dipy.direction import ProbabilisticDirectionGetter
from dipy.tracking.stopping_criterion import ActStoppingCriterion, CmcStoppingCriterion
from dipy.tracking.utils import random_seeds_from_mask

N_SEEDS = 2000
SEED_PLACEMENT_SEED = 1234
DIPY_RANDOM_SEED = 42
DIPY_RANDOM_SEED_ALT = 4242

TRACKING = ANATOMICAL_TRACKING

TOL_PER_SEED_REL = 0.10
TOL_VALID_FRACTION_ABS = 0.04

VALID_ENDS = ("outside", "include", "stop_map")


CRITERIA = {"act": ("include", "exclude"), "cmc": ("wm", "gm", "csf")}


def _map(phantom, name):
    return np.asarray(nib.load(str(phantom.path(f"{name}.nii.gz"))).dataobj, np.float64)


def _act_job(phantom, seeds, return_all=False, criterion="act"):
    stopping = {"criterion": criterion}
    stopping.update({m: str(phantom.path(f"{m}.nii.gz")) for m in CRITERIA[criterion]})
    return phantom.job_with(
        seeds={"points": seeds.tolist(), "space": "voxel"},
        tracking={**TRACKING, "return_all": return_all}, stopping=stopping)


def _dipy_act(phantom, seeds, random_seed, criterion="act"):
    t = TRACKING
    if criterion == "act":
        sc = ActStoppingCriterion(_map(phantom, "include"), _map(phantom, "exclude"))
    else:
        sc = CmcStoppingCriterion.from_pve(_map(phantom, "wm"), _map(phantom, "gm"),
                                           _map(phantom, "csf"), step_size=t["step_size"],
                                           average_voxel_size=1.0)
    dg = ProbabilisticDirectionGetter.from_pmf(
        np.clip(phantom.odf, 0, None), max_angle=t["max_angle"], sphere=get_sphere(t["sphere"]),
        pmf_threshold=t["pmf_threshold"], relative_peak_threshold=t["relative_peak_threshold"],
        min_separation_angle=t["min_separation_angle"])
    tracker = LocalTrackingMinusFirst(dg, sc, seeds, affine=np.eye(4), step_size=t["step_size"],
                                      maxlen=t["max_steps"], return_all=False,
                                      random_seed=random_seed)
    return [np.asarray(s, dtype=np.float64) for s in tracker]


@pytest.fixture(scope="module")
def seeds(phantom):
    s = random_seeds_from_mask(phantom.roi, np.eye(4), seeds_count=N_SEEDS,
                               seed_count_per_voxel=False, random_seed=SEED_PLACEMENT_SEED)
    assert len(s) == N_SEEDS
    return s


@pytest.fixture(scope="module", params=["act", "cmc"])
def tractd_act(request, tractd, phantom, seeds, tmp_path_factory):
    """tractd's run with return_all false: (workdir, TRK bytes, statistics,
    TRK, criterion)."""
    workdir = tmp_path_factory.mktemp(request.param)
    _, trk, stats = run_job(tractd, _act_job(phantom, seeds, criterion=request.param), workdir,
                            name=request.param)
    return (workdir, trk.read_bytes(), json.loads(stats.read_text()), load_trk(trk),
            request.param)


def test_act_parity_with_dipy(phantom, seeds, tractd_act):
    common = dict(labels=phantom.labels, bundles=phantom.bundles, affine=phantom.affine)

    def figures(lines):
        return summarize(one_step_further(lines), N_SEEDS, **common)

    criterion = tractd_act[4]
    res = {"dipy": figures(_dipy_act(phantom, seeds, DIPY_RANDOM_SEED, criterion)),
           "tractd": figures(tractd_act[3].streamlines),
           "dipy_alt": figures(_dipy_act(phantom, seeds, DIPY_RANDOM_SEED_ALT, criterion))}
    print(f"\n== {criterion}, return_all false, {N_SEEDS} seeds")
    print(format_table(res, ["streamlines", "per_seed", "mean_len_pts", "valid_fraction"]))
    print("tractd stop reasons:", tractd_act[2]["stop_reasons"])
    assert_parity(res, "per_seed", TOL_PER_SEED_REL, relative=True)
    assert_parity(res, "valid_fraction", TOL_VALID_FRACTION_ABS, relative=False)


def test_act_stop_reasons(tractd_act):
    reasons = tractd_act[2]["stop_reasons"]
    assert reasons["include"] > 0 and reasons["exclude"] > 0, reasons
    # No stop map is read: the threshold criterion never ends a line here.
    assert reasons["stop_map"] == 0 and reasons["unknown"] == 0, reasons


@pytest.mark.parametrize("flag,value", [("--max-chunk-seeds", "7"),
                                        ("--readback-bytes", "65536")])
def test_act_chunking_does_not_change_output(tractd, phantom, seeds, tractd_act, flag, value):
    workdir, reference, stats, _, criterion = tractd_act
    _, trk, s = run_job(tractd, _act_job(phantom, seeds, criterion=criterion), workdir,
                        name=f"{criterion}{flag}", extra_args=[flag, value])
    assert trk.read_bytes() == reference, f"{flag} {value} changed the {criterion} output"
    assert json.loads(s.read_text())["stop_reasons"] == stats["stop_reasons"]


def test_return_all_false_keeps_the_valid_lines(tractd, phantom, seeds, tractd_act):
    """return_all true writes every line; false only those whose both ends are
    valid, which are the same points (the walks do not depend on the filter)."""
    workdir, _, stats, kept, criterion = tractd_act
    job = _act_job(phantom, seeds, return_all=True, criterion=criterion)
    _, trk, s = run_job(tractd, job, workdir, name=f"{criterion}_all")
    every = load_trk(trk)
    assert json.loads(s.read_text())["stop_reasons"] == stats["stop_reasons"]
    assert len(every.streamlines) > len(kept.streamlines) > 0
    kept_points = {np.asarray(x, np.float32).tobytes() for x in kept.streamlines}
    every_points = {np.asarray(x, np.float32).tobytes() for x in every.streamlines}
    assert kept_points < every_points
