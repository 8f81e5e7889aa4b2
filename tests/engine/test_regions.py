"""regions.include/exclude (tckgen's -include/-exclude) and tracking.max_cross
on a small phantom (24x24x16, 1 mm, repulsion100), prob, 100 seeds.

A region only keeps or drops a line: the kept lines are the lines of the
same job without regions (same seeds, same draws) that visit every include
sphere and have no point after the seed in an exclude sphere, in the same
order, point for point. A line entering an exclude region ends there (and
its other half is not tracked), but it is never written, so that truncation
cannot show in the output: the comparison is exact. The rejections counted
are those lines (exclude) and at least the written ones that miss an
include region (lines of a single point are tracked and counted, never
written).
"""
import json

import nibabel as nib
import numpy as np
import pytest

from conftest import run_cli, run_job

N_SEEDS = 100
INCLUDE = ({"center": [0.0, 0.0, 0.0], "radius": 4.0},)
EXCLUDE = ({"center": [-8.0, -8.0, 0.0], "radius": 3.0},)


@pytest.fixture(scope="module")
def small(tractd, tmp_path_factory):
    d = tmp_path_factory.mktemp("regions")
    run_cli(tractd, ["-q", "phantom", "--dim", "24,24,16", "--sphere", "repulsion100",
                     "--no-dwi", d / "ph"], check=True)
    job = json.loads((d / "ph" / "job.json").read_text())
    for key, value in job["inputs"].items():
        job["inputs"][key] = str(d / "ph" / value)
    job["seeds"]["roi"] = str(d / "ph" / job["seeds"]["roi"])
    job["seeds"]["count"] = N_SEEDS
    job["output"] = {"save_seeds": True, "save_seed_index": True}
    return d, job


def _run(tractd, small, name, extra_args=(), **sections):
    d, base = small
    job = json.loads(json.dumps(base))
    for key, value in sections.items():
        if key == "tracking":
            job["tracking"].update(value)
        else:
            job[key] = value
    _, trk, stats = run_job(tractd, job, d, name=name, extra_args=extra_args)
    tf = nib.streamlines.load(str(trk))
    lines = list(tf.streamlines)
    seeds = np.asarray(tf.tractogram.data_per_streamline["seeds"], dtype=np.float64)
    index = np.asarray(tf.tractogram.data_per_streamline["seed_index"]).ravel().astype(int)
    return lines, seeds, index, json.loads(stats.read_text()), trk


def _in_sphere(points, sphere):
    return np.linalg.norm(points - np.asarray(sphere["center"]), axis=1) <= sphere["radius"]


def _after_seed(line, seed):
    """The points of a line less its seed (tckgen tests exclude regions from
    the first step on)."""
    at_seed = np.all(np.abs(line - seed) < 1e-4, axis=1)
    assert at_seed.sum() == 1, "the seed is a point of its streamline"
    return line[~at_seed]


def _excluded(line, seed):
    rest = _after_seed(line, seed)
    return any(_in_sphere(rest, s).any() for s in EXCLUDE)


def _keeps(line, seed):
    return all(_in_sphere(line, s).any() for s in INCLUDE) and not _excluded(line, seed)


@pytest.fixture(scope="module")
def unconstrained(tractd, small):
    return _run(tractd, small, "free")


@pytest.fixture(scope="module")
def constrained(tractd, small):
    return _run(tractd, small, "regions",
                regions={"include": list(INCLUDE), "exclude": list(EXCLUDE)})


def test_kept_lines_visit_every_include_and_no_exclude(constrained):
    lines, seeds, _, stats, _ = constrained
    assert 0 < len(lines) == stats["streamlines"]
    for line, seed in zip(lines, seeds):
        assert _keeps(line, seed)


def test_kept_set_is_the_unconstrained_run_filtered(unconstrained, constrained):
    free_lines, free_seeds, free_index, _, _ = unconstrained
    lines, _, index, _, _ = constrained
    kept = [i for i, (line, seed) in enumerate(zip(free_lines, free_seeds)) if _keeps(line, seed)]
    assert 0 < len(kept) < len(free_lines)
    assert len(lines) == len(kept)
    assert list(index) == [free_index[i] for i in kept]
    for line, i in zip(lines, kept):
        assert np.array_equal(line, free_lines[i])


def test_rejections_counted(unconstrained, constrained):
    free_lines, free_seeds, _, free_stats, _ = unconstrained
    _, _, _, stats, _ = constrained
    excluded = sum(_excluded(line, seed) for line, seed in zip(free_lines, free_seeds))
    missing = sum(not _excluded(line, seed) and not _keeps(line, seed)
                  for line, seed in zip(free_lines, free_seeds))
    assert excluded > 0 and missing > 0
    assert stats["rejected"] == {"exclude_region": excluded,
                                 "include_missing": stats["rejected"]["include_missing"]}
    assert stats["rejected"]["include_missing"] >= missing
    # A rejected line stops where it entered the exclude region: one or both
    # of its ends (the other half is not tracked when the first entered it).
    ends = stats["stop_reasons"]["exclude_region"]
    assert excluded <= ends <= 2 * excluded
    assert "rejected" not in free_stats
    assert free_stats["stop_reasons"]["exclude_region"] == 0


def test_chunking_keeps_the_output(tractd, small, constrained):
    *_, trk = constrained
    *_, stats, chunked = _run(tractd, small, "regions_chunked",
                              ["--max-chunk-seeds", "7", "--readback-bytes", "4K"],
                              regions={"include": list(INCLUDE), "exclude": list(EXCLUDE)})
    assert stats["chunks"] > 1
    assert chunked.read_bytes() == trk.read_bytes()


def test_select_counts_kept_lines(tractd, small, constrained):
    lines, _, index, _, _ = constrained
    n = len(lines) // 2
    d, base = small
    seeds = dict(base["seeds"], select=n)
    selected, _, sel_index, stats, _ = _run(tractd, small, "regions_select", seeds=seeds,
                                            regions={"include": list(INCLUDE),
                                                     "exclude": list(EXCLUDE)})
    assert stats["streamlines"] == n == len(selected)
    assert list(sel_index) == list(index[:n])
    for a, b in zip(selected, lines):
        assert np.array_equal(a, b)


def test_max_cross_one_tracks_the_first_direction(tractd, small, unconstrained):
    free_lines, _, free_index, _, _ = unconstrained
    lines, _, index, stats, _ = _run(tractd, small, "max_cross", tracking={"max_cross": 1})
    assert len(set(index)) == len(index), "one streamline per seed"
    assert len(free_lines) > len(lines) > 0, "the phantom has crossings"
    first = {}
    for line, i in zip(free_lines, free_index):
        first.setdefault(i, line)
    for line, i in zip(lines, index):
        assert np.array_equal(line, first[i])


def _box_mask(small, name, x_range, shape=None):
    """A mask on the phantom's grid (or of shape), 1 where x is in x_range."""
    d, base = small
    ref = nib.load(base["inputs"]["odf"])
    data = np.zeros(shape or ref.shape[:3], np.uint8)
    data[x_range[0]:x_range[1] + 1] = 1
    path = d / name
    nib.save(nib.Nifti1Image(data, ref.affine), str(path))
    return path, data, ref.affine


def test_mask_region_as_tckgen(tractd, small, unconstrained):
    """A mask region holds a point whose nearest voxel is set (tckgen's
    rounding); the kept lines are the unconstrained ones filtered alike."""
    path, data, affine = _box_mask(small, "box.nii.gz", (14, 16))
    free_lines, free_seeds, free_index, _, _ = unconstrained
    lines, _, index, stats, _ = _run(tractd, small, "mask",
                                     regions={"include": [str(path)],
                                              "exclude": list(EXCLUDE)})
    to_voxel = np.linalg.inv(affine)

    def in_box(line):
        vox = np.floor(nib.affines.apply_affine(to_voxel, line) + 0.5).astype(int)
        inside = np.all((vox >= 0) & (vox < data.shape), axis=1)
        return bool(data[tuple(vox[inside].T)].any())

    kept = [i for i, (line, seed) in enumerate(zip(free_lines, free_seeds))
            if in_box(line) and not _excluded(line, seed)]
    assert 0 < len(kept) < len(free_lines)
    assert list(index) == [free_index[i] for i in kept]
    for line, i in zip(lines, kept):
        assert np.array_equal(line, free_lines[i])
    assert stats["rejected"]["include_missing"] > 0


def test_mask_on_another_grid_is_refused(tractd, small):
    path, _, _ = _box_mask(small, "small_box.nii.gz", (1, 2), shape=(8, 8, 8))
    d, base = small
    job = dict(base, regions={"exclude": [{"center": [0, 0, 0], "radius": 1}, str(path)]})
    proc, _, _ = run_job(tractd, job, d, name="bad_mask", check=False)
    assert proc.returncode == 3, proc.stderr
    assert "regions.exclude[1]" in proc.stderr and "different grid" in proc.stderr, proc.stderr
