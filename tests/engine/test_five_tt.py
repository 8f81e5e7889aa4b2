"""MRtrix3's 5TT image for ACT (`"stopping": {"criterion": "act", "five_tt":
FILE}`) and seeds on the white/grey-matter interface (`"seeds": {"interface":
{"five_tt": FILE} | {"wm": FILE, "gm": FILE}}`), on a small phantom: `tractd
phantom` writes 5tt.nii.gz (its end zones cortical GM, its bundles WM, the
rest CSF: the same tissues as include.nii.gz and exclude.nii.gz),
job_act_5tt.json and job_interface.json.

- the 5TT maps to the include/exclude maps exactly: job_act_5tt.json writes
  job_act.json's bytes, from a NIfTI or a .mif 5TT, and a 5TT with
  sub-cortical GM, pathological tissue and background those of the maps the
  README's formula gives;
- a 5TT that is not one (4 volumes, a value outside [0, 1], another grid)
  is refused (exit 3) naming the field;
- every interface seed lies on a face between a WM voxel (wm > 0.5) and a GM
  voxel (gm > 0.5); the seeds are the same from the 5TT or from wm and gm;
  the output does not depend on the chunking or the sharding;
- interface seeding raises the share of lines with both ends in grey matter
  over seeding in the bundles' mask, both with ACT (the share joining one
  bundle's two end zones it does not raise on this phantom: see the test);
- seeds.select with return_all false writes the first N kept streamlines.
"""
import json

import nibabel as nib
import numpy as np
import pytest

from conftest import (connection_stats, endpoint_labels, load_trk, one_step_further, run_cli,
                      write_job)
from mifio import write_mif

DIM = "24,24,16"
N_SEEDS = 400
SELECT = 40


@pytest.fixture(scope="module")
def small(tractd, tmp_path_factory):
    d = tmp_path_factory.mktemp("fivett")
    run_cli(tractd, ["phantom", "--dim", DIM, "--seeds", str(N_SEEDS), d], check=True)
    return d


def _job(small, name):
    return json.loads((small / f"{name}.json").read_text())


def _run(tractd, small, job, name, *extra, check=True):
    """Runs job (a dict, its paths relative to the phantom) as small/NAME.json;
    returns (process, output path)."""
    path = write_job(small / f"{name}.json", job)
    out = small / f"{name}.trk"
    proc = run_cli(tractd, ["run", path, "-o", out, "--force", "-q", *extra], check=check)
    return proc, out


@pytest.fixture(scope="module")
def act_5tt(tractd, small):
    return _run(tractd, small, _job(small, "job_act_5tt"), "act_5tt")[1].read_bytes()


def test_5tt_gives_the_include_exclude_output(tractd, small, act_5tt):
    _, maps = _run(tractd, small, _job(small, "job_act"), "act_maps")
    assert act_5tt == maps.read_bytes()
    assert len(load_trk(small / "act_5tt.trk").streamlines) > 0


def test_5tt_maps_as_documented(tractd, small):
    """A 5TT with sub-cortical GM, pathological tissue and background gives
    the output of the include/exclude maps the README states: include =
    cortical + sub-cortical GM, 1 where the five sum below 0.5; exclude = CSF."""
    img = nib.load(str(small / "5tt.nii.gz"))
    tt = np.asarray(img.dataobj, np.float32).copy()
    half = tt.shape[0] // 2
    tt[:half, ..., 1], tt[:half, ..., 0] = tt[:half, ..., 0], 0     # cortical -> sub-cortical
    tt[:, :6, ..., 4] = 0.25 * tt[:, :6, ..., 3]                    # some CSF pathological
    tt[:, :6, ..., 3] *= 0.75
    tt[..., :2, :] *= 0.2                                           # background
    nib.save(nib.Nifti1Image(tt, img.affine), str(small / "5tt_varied.nii"))
    c = [tt[..., k] for k in range(5)]
    total = (((c[0] + c[1]) + c[2]) + c[3]) + c[4]
    include = np.where(total < np.float32(0.5), np.float32(1), c[0] + c[1])
    for name, data in (("inc_varied.nii", include), ("exc_varied.nii", c[3])):
        nib.save(nib.Nifti1Image(data.astype(np.float32), img.affine), str(small / name))
    job = _job(small, "job_act_5tt")
    job["stopping"]["five_tt"] = "5tt_varied.nii"
    from_5tt = _run(tractd, small, job, "act_5tt_varied")[1].read_bytes()
    job["stopping"] = {"criterion": "act", "include": "inc_varied.nii",
                       "exclude": "exc_varied.nii"}
    assert _run(tractd, small, job, "act_maps_varied")[1].read_bytes() == from_5tt


def test_5tt_mif_loads(tractd, small, act_5tt):
    img = nib.load(str(small / "5tt.nii.gz"))
    write_mif(small / "5tt.mif", np.asarray(img.dataobj, np.float32), img.affine)
    job = _job(small, "job_act_5tt")
    job["stopping"]["five_tt"] = "5tt.mif"
    assert _run(tractd, small, job, "act_5tt_mif")[1].read_bytes() == act_5tt


def _bad_5tt(small, kind):
    img = nib.load(str(small / "5tt.nii.gz"))
    data = np.asarray(img.dataobj, np.float32).copy()
    affine = img.affine
    if kind == "four volumes":
        data = data[..., :4]
    elif kind == "above 1":
        data[3, 4, 5, 2] = 1.5
    else:
        affine = affine.copy()
        affine[0, 3] += 1.0
    name = "bad_5tt_" + kind.replace(" ", "_") + ".nii"
    nib.save(nib.Nifti1Image(data, affine), str(small / name))
    return name


@pytest.mark.parametrize("kind,reason", [("four volumes", "got 4 volumes"),
                                         ("above 1", "must be in [0, 1], got 1.5"),
                                         ("other grid", "different grid")])
@pytest.mark.parametrize("field", ["stopping.five_tt", "seeds.interface.five_tt"])
def test_bad_5tt_refused(tractd, small, kind, reason, field):
    job = _job(small, "job_interface")
    if field == "stopping.five_tt":
        job["stopping"]["five_tt"] = _bad_5tt(small, kind)
    else:
        job["seeds"]["interface"]["five_tt"] = _bad_5tt(small, kind)
    proc, _ = _run(tractd, small, job, "bad", check=False)
    assert proc.returncode == 3, proc.stderr
    assert field in proc.stderr and reason in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def interface_all(tractd, small):
    """job_interface.json with return_all true and the seeds saved: (TRK
    bytes, TRK)."""
    job = _job(small, "job_interface")
    job["tracking"]["return_all"] = True
    job["output"] = {"save_seeds": True}
    _, out = _run(tractd, small, job, "interface_all")
    return out.read_bytes(), out


def _tissue(small, name):
    return np.asarray(nib.load(str(small / f"{name}.nii.gz")).dataobj, np.float64)


def test_interface_seeds_lie_on_the_interface(small, interface_all):
    trk = nib.streamlines.load(str(interface_all[1]))
    seeds_mm = trk.tractogram.data_per_streamline["seeds"]
    assert len(seeds_mm) > N_SEEDS / 2
    voxel = nib.affines.apply_affine(np.linalg.inv(nib.load(str(small / "5tt.nii.gz")).affine),
                                     seeds_mm)
    wm, gm = _tissue(small, "wm"), _tissue(small, "gm")
    for seed in voxel:
        on_face = False
        for axis in range(3):
            if abs(seed[axis] - np.floor(seed[axis]) - 0.5) > 1e-4:
                continue
            a = np.rint(seed).astype(int)
            a[axis] = int(np.floor(seed[axis]))
            b = a.copy()
            b[axis] += 1
            pair = (wm[tuple(a)], gm[tuple(b)]), (wm[tuple(b)], gm[tuple(a)])
            on_face |= any(w > 0.5 and g > 0.5 for w, g in pair)
        assert on_face, f"seed {seed} is not on a WM/GM face"


def test_interface_from_wm_gm_is_the_5tt_one(tractd, small, interface_all):
    job = _job(small, "job_interface")
    job["tracking"]["return_all"] = True
    job["output"] = {"save_seeds": True}
    job["seeds"]["interface"] = {"wm": "wm.nii.gz", "gm": "gm.nii.gz"}
    assert _run(tractd, small, job, "interface_pve")[1].read_bytes() == interface_all[0]


def test_interface_seeds_do_not_depend_on_chunks_or_shards(tractd, small, interface_all):
    job = _job(small, "job_interface")
    job["tracking"]["return_all"] = True
    job["output"] = {"save_seeds": True}
    _, chunked = _run(tractd, small, job, "interface_chunked", "--max-chunk-seeds", "7")
    assert chunked.read_bytes() == interface_all[0]
    parts = [_run(tractd, small, job, f"interface_part{k}", "--shard", f"{k}/3")[1]
             for k in range(3)]
    merged = small / "interface_merged.trk"
    run_cli(tractd, ["merge", merged, *parts, "--force"], check=True)
    assert merged.read_bytes() == interface_all[0]


def _fractions(small, trk_path):
    """(both ends in grey matter, both ends in one bundle's end zones) of the
    lines of trk_path, each taken one step further to where it stopped."""
    labels = np.rint(_tissue(small, "labels")).astype(np.int32)
    bundles = json.loads((small / "bundles.json").read_text())
    lines = one_step_further([x for x in load_trk(trk_path).streamlines if len(x) >= 2])
    in_gm = np.mean((endpoint_labels(lines, labels) > 0).all(axis=1))
    return in_gm, connection_stats(lines, labels, bundles)["valid_fraction"]


def test_interface_seeding_raises_valid_ends(tractd, small):
    """ACT, return_all true: the share of lines whose both ends are in grey
    matter (valid ends) rises with interface seeds, 46.9 % -> 52.9 % here.
    The share joining one bundle's two end zones does not (31.6 % -> 33.2 %;
    return_all false 54.4 % -> 54.1 %): the crossing bundles swap lines
    whatever the seeds, and interface seeds give every bundle the same share
    per end face where mask seeds favour the long straight one."""
    figures = {}
    for seeds in ("mask", "interface"):
        job = _job(small, "job_interface")
        job["tracking"]["return_all"] = True
        if seeds == "mask":
            job["seeds"] = _job(small, "job_act_5tt")["seeds"]
        figures[seeds] = _fractions(small, _run(tractd, small, job, f"ends_{seeds}")[1])
    print(f"\nACT on the 5TT, return_all true, {N_SEEDS} seeds: (both ends in GM, valid "
          f"connections) mask seeds {figures['mask']}, interface seeds {figures['interface']}")
    assert figures["interface"][0] > figures["mask"][0] + 0.03


@pytest.mark.parametrize("name", ["job_act_5tt", "job_interface"])
def test_select_keeps_the_first_kept_streamlines(tractd, small, name):
    """return_all false: select N writes the first N streamlines that were
    kept, those of the job without select."""
    _, every = _run(tractd, small, _job(small, name), f"{name}_every")
    job = _job(small, name)
    job["seeds"]["select"] = SELECT
    _, selected = _run(tractd, small, job, f"{name}_select", "--max-chunk-seeds", "16")
    every, selected = load_trk(every).streamlines, load_trk(selected).streamlines
    assert len(every) > SELECT and len(selected) == SELECT
    for a, b in zip(selected, every[:SELECT]):
        assert np.array_equal(a, b)
