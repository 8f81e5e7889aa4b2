"""Data per streamline beyond the seed point: output.save_seed_index (the
global seed index, which for seeds.points is the position in the list) and
output.save_direction_getter (0 prob, 1 boot) as TRK properties that nibabel
reads as data_per_streamline and as TRX dps arrays; for TCK, output.save_seeds
writes OUTPUT.seeds.txt in the layout of MRtrix3's tckgen -output_seeds."""
import nibabel as nib
import numpy as np
import trx.trx_file_memmap as tmm

from conftest import run_cli, write_job

TOL_MM = 1e-4
N_POINTS = 40


def _points_job(phantom, output):
    """An explicit seed list (voxel space) inside the seed ROI."""
    vox = np.argwhere(phantom.roi > 0)
    pick = vox[np.linspace(0, len(vox) - 1, N_POINTS).astype(int)].astype(float)
    seeds = {"points": pick.tolist(), "space": "voxel", "rng_seed": 3}
    ras = nib.affines.apply_affine(phantom.affine, pick)
    return phantom.job_with(seeds=seeds, output=output), ras


def _run(tractd, tmp_path, name, job, check=True):
    out = tmp_path / name
    return out, run_cli(tractd, ["run", write_job(tmp_path / f"{name}.json", job), "-o", out,
                                 "-q"], check=check)


def _check_seed_of_each(streamlines, index, ras):
    assert len(streamlines) == len(index) > 0
    assert index.min() >= 0 and index.max() < len(ras)
    for i, (points, k) in enumerate(zip(streamlines, index)):
        nearest = np.abs(points - ras[k]).max(axis=1).min()
        assert nearest < TOL_MM, f"streamline {i}: seed {k} is {nearest} mm from its points"


def test_trk_properties(tractd, phantom, tmp_path):
    job, ras = _points_job(phantom, {"save_seeds": True, "save_seed_index": True,
                                     "save_direction_getter": True})
    out, _ = _run(tractd, tmp_path, "p.trk", job)
    trk = nib.streamlines.load(out)
    dps = trk.tractogram.data_per_streamline
    assert set(dps.keys()) == {"seeds", "seed_index", "direction_getter"}
    assert trk.header["nb_properties_per_streamline"] == 5
    index = dps["seed_index"][:, 0].astype(int)
    assert np.array_equal(dps["seed_index"][:, 0], index)
    _check_seed_of_each(trk.streamlines, index, ras)
    assert np.allclose(dps["seeds"], ras[index], atol=TOL_MM)
    assert np.all(dps["direction_getter"] == 0)
    # Seeds come in list order: indices never decrease along the file.
    assert np.all(np.diff(index) >= 0)


def test_trk_index_without_seeds(tractd, phantom, tmp_path):
    job, ras = _points_job(phantom, {"save_seed_index": True})
    out, _ = _run(tractd, tmp_path, "i.trk", job)
    trk = nib.streamlines.load(out)
    assert list(trk.tractogram.data_per_streamline.keys()) == ["seed_index"]
    _check_seed_of_each(trk.streamlines,
                        trk.tractogram.data_per_streamline["seed_index"][:, 0].astype(int), ras)


def test_trx_dps(tractd, phantom, tmp_path):
    job, ras = _points_job(phantom, {"format": "trx", "save_seeds": True,
                                     "save_seed_index": True, "save_direction_getter": True})
    out, _ = _run(tractd, tmp_path, "p.trx", job)
    t = tmm.load(str(out))
    try:
        dps = t.data_per_streamline
        assert dps["seed_index"].dtype == np.uint32
        assert dps["direction_getter"].dtype == np.uint8
        index = np.asarray(dps["seed_index"]).reshape(-1).astype(int)
        _check_seed_of_each(list(t.streamlines), index, ras)
        assert np.allclose(np.asarray(dps["seeds"]), ras[index], atol=TOL_MM)
        assert np.all(np.asarray(dps["direction_getter"]) == 0)
    finally:
        t.close()
    # The same streamlines and indices as the TRK of the job.
    job["output"] = {"save_seed_index": True}
    trk, _ = _run(tractd, tmp_path, "same.trk", job)
    want = nib.streamlines.load(trk).tractogram.data_per_streamline["seed_index"][:, 0]
    assert np.array_equal(index, want.astype(int))


def test_boot_direction_getter_code(tractd, phantom, tmp_path):
    d = phantom.dir
    job = {
        "inputs": {"dwi": str(d / "dwi.nii.gz"), "bvals": str(d / "dwi.bval"),
                   "bvecs": str(d / "dwi.bvec"), "mask": str(d / "mask.nii.gz")},
        "direction_getter": "boot", "model": "opdt",
        "seeds": {"roi": str(d / "seed_roi.nii.gz"), "count": 50, "rng_seed": 4},
        "tracking": {"sphere": "symmetric362", "pmf_threshold": 0.1},
        "output": {"save_direction_getter": True},
    }
    out, _ = _run(tractd, tmp_path, "boot.trk", job)
    dg = nib.streamlines.load(out).tractogram.data_per_streamline["direction_getter"]
    assert len(dg) > 0 and np.all(dg == 1)


def _read_seeds_txt(path):
    lines = path.read_text().split("\n")
    assert lines[0].startswith("# ")
    assert lines[1] == "#Track_index,Seed_index,Pos_x,Pos_y,Pos_z,"
    assert lines[-2:] == ["", ""], "tckgen ends the file with an empty line"
    rows = [ln.split(",") for ln in lines[2:-2]]
    assert all(len(r) == 6 and r[5] == "" for r in rows), "rows end in a comma"
    return (np.array([[int(r[0]), int(r[1])] for r in rows]),
            np.array([[float(v) for v in r[2:5]] for r in rows]))


def test_tck_seeds_file(tractd, phantom, tmp_path):
    job, ras = _points_job(phantom, {"format": "tck", "save_seeds": True})
    out, _ = _run(tractd, tmp_path, "p.tck", job)
    tck = nib.streamlines.load(out).streamlines
    ids, pos = _read_seeds_txt(tmp_path / "p.tck.seeds.txt")
    assert np.array_equal(ids[:, 0], np.arange(len(tck)))
    for i, (points, (_, v), p) in enumerate(zip(tck, ids, pos)):
        assert 0 <= v < len(points)
        assert np.abs(points[v] - p).max() < TOL_MM, f"streamline {i}: vertex {v}"
        assert np.abs(ras - p).max(axis=1).min() < TOL_MM, f"streamline {i}: not a listed seed"
    assert not (tmp_path / "p.tck.seeds.txt.tmp").exists()


def test_tck_seeds_file_compressed(tractd, phantom, tmp_path):
    """Compression keeps the seed's index pointing into the kept points."""
    job, _ = _points_job(phantom, {"format": "tck", "save_seeds": True, "compress": True})
    out, _ = _run(tractd, tmp_path, "c.tck", job)
    tck = nib.streamlines.load(out).streamlines
    ids, _ = _read_seeds_txt(tmp_path / "c.tck.seeds.txt")
    assert len(ids) == len(tck) > 0
    assert all(0 <= v < len(p) for p, (_, v) in zip(tck, ids))


def test_bad_combinations(tractd, phantom, tmp_path):
    for field in ("save_seed_index", "save_direction_getter"):
        job, _ = _points_job(phantom, {"format": "tck", field: True})
        _, res = _run(tractd, tmp_path, f"{field}.tck", job, check=False)
        assert res.returncode == 3, res.stderr
        assert f"output.{field}" in res.stderr
    job, _ = _points_job(phantom, {"format": "tck", "save_seeds": True})
    path = write_job(tmp_path / "stdout.json", job)
    res = run_cli(tractd, ["run", path, "-o", "-", "-q"])
    assert res.returncode == 3 and "output.save_seeds" in res.stderr, res.stderr
