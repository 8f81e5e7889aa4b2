"""output.save_seeds: each streamline's seed travels with it as TRK
data_per_streamline "seeds" in RAS+ mm (DIPY's save_seeds), readable by
nibabel and DIPY; every seed is a point of its own streamline."""

import nibabel as nib
import numpy as np
from dipy.io.streamline import load_tractogram

from conftest import run_cli, write_job

N_SEEDS = 300
TOL_MM = 1e-4


def test_seeds_saved_per_streamline(tractd, phantom, tmp_path):
    seeds = dict(phantom.job["seeds"], roi=str(phantom.dir / phantom.job["seeds"]["roi"]),
                 count=N_SEEDS, rng_seed=9)
    job = phantom.job_with(seeds=seeds, output={"save_seeds": True})
    out = tmp_path / "seeds.trk"
    run_cli(tractd, ["run", write_job(tmp_path / "job.json", job), "-o", out, "-q"],
            check=True)
    trk = nib.streamlines.load(out)
    saved = trk.tractogram.data_per_streamline["seeds"]
    assert saved.shape == (len(trk.streamlines), 3) and len(saved) > 0, saved.shape
    for i, (points, seed) in enumerate(zip(trk.streamlines, saved)):
        nearest = np.abs(points - seed).max(axis=1).min()
        assert nearest < TOL_MM, f"streamline {i}: seed {seed} is {nearest} mm from its points"
    # Without the option the file is unchanged: no property in the header.
    plain = tmp_path / "plain.trk"
    job["output"] = {}
    run_cli(tractd, ["run", write_job(tmp_path / "plain.json", job), "-o", plain, "-q"],
            check=True)
    assert nib.streamlines.load(plain).header["nb_properties_per_streamline"] == 0
    sft = load_tractogram(str(out), "same", bbox_valid_check=True)
    assert np.allclose(sft.data_per_streamline["seeds"], saved)
