"""ODF_MIRRORED (issue 24; engine.c's odf_mirrored, pmf.glsl): where every
antipodal pair of ODF values is equal to the bit (DIPY's sampled ODFs and
the phantom's are) and the sphere's second half is its first negated (the
default repulsion724), the kernels read the first half of the sphere and
copy its PMF to the second. That must track exactly what reading the whole
sphere tracks.

The whole-sphere run takes the same ODF with one value of its strongest
voxel one float step up: no longer mirrored, still symmetric (the
difference is far within 1e-3 of the maximum), and a PMF that moves by a
float step at the few points that interpolate that voxel, which draws no
other direction on this job. The pairs are compared on the host, as the
slabs are read, and on the GPU, as a raw .nii is transposed there (the test
hook TRACTD_GPU_KERNELS=1 makes lavapipe a GPU device); float16 storage
reads four values a word, the last of the first half's words holding two of
the second half's.

ODFs sampled from SH (a dwi job's fit, an SH input) are mirrored by
construction: fit_sample_sh samples the first half of a mirrored sphere and
copies it, even-order SH taking one value at antipodes.

A mirrored ODF's pages hold only the first half of the sphere, which is all
the kernels read (test_odf_half_pages.py has the streamed cases).
"""
import gzip
import json
import re
import shutil

import nibabel as nib
import numpy as np
import pytest

from conftest import run_cli, write_job

N_SEEDS = 300
GPU = {"TRACTD_GPU_KERNELS": "1"}
RAW = "ODF transposed on the GPU"


@pytest.fixture(scope="module")
def phantom_dir(tractd, tmp_path_factory):
    """A repulsion724 phantom, its ODF as given (mirrored.nii, and gzipped)
    and one float step off at one value (nudged.nii, and gzipped)."""
    ph = tmp_path_factory.mktemp("odf_mirrored") / "ph"
    run_cli(tractd, ["phantom", "--dim", "24,24,16", "--sphere", "repulsion724", "--seeds",
                     N_SEEDS, "--uncompressed", "--no-dwi", ph], check=True)
    img = nib.load(str(ph / "odf.nii"))
    odf = np.asarray(img.dataobj, dtype=np.float32).copy()
    half = odf.shape[3] // 2
    assert np.array_equal(odf[..., :half], odf[..., half:]), "the phantom's ODF is not mirrored"
    _save(ph, "mirrored", odf, img)
    top = odf.max(axis=3)
    x, y, z = np.unravel_index(np.argmax(top), top.shape)
    odf[x, y, z, 5] = np.nextafter(odf[x, y, z, 5], np.float32(np.inf))
    _save(ph, "nudged", odf, img)
    return ph


def _save(ph, name, odf, img):
    nib.save(nib.Nifti1Image(odf, img.affine, img.header), str(ph / f"{name}.nii"))
    with open(ph / f"{name}.nii", "rb") as src, gzip.open(ph / f"{name}.nii.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)


def _track(tractd, ph, name, odf, storage, env):
    """(TRK bytes, the defines of prob_init and prob_track, stderr)."""
    job = json.loads((ph / "job.json").read_text())
    job.pop("output", None)
    job["inputs"]["odf"] = odf
    job["tracking"]["odf_storage"] = storage
    trk = ph / f"{name}.trk"
    proc = run_cli(tractd, ["-v", "run", write_job(ph / f"{name}.json", job), "-o", trk],
                   env=env, check=True)
    defines = re.findall(r"compiled prob_(?:init|track)\.comp (.*) in ", proc.stderr)
    assert len(defines) == 2, proc.stderr[-2000:]
    return trk.read_bytes(), defines, proc.stderr


CASES = {
    "cpu_float32": (".nii.gz", "float32", None),
    "cpu_float16": (".nii.gz", "float16", None),
    "gpu_float32": (".nii.gz", "float32", GPU),
    "gpu_float16": (".nii.gz", "float16", GPU),
    "gpu_raw_float32": (".nii", "float32", GPU),
    "gpu_raw_float16": (".nii", "float16", GPU),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_half_the_sphere_tracks_as_the_whole(tractd, phantom_dir, case):
    suffix, storage, env = CASES[case]
    half, half_defines, half_err = _track(tractd, phantom_dir, f"{case}_half",
                                          "mirrored" + suffix, storage, env)
    whole, whole_defines, whole_err = _track(tractd, phantom_dir, f"{case}_whole",
                                             "nudged" + suffix, storage, env)
    for defines in half_defines:
        assert "ODF_MIRRORED=1" in defines and "SYMMETRIC=1" in defines, defines
    for defines in whole_defines:
        assert "ODF_MIRRORED=0" in defines and "SYMMETRIC=1" in defines, defines
    assert (RAW in half_err) == (RAW in whole_err) == (suffix == ".nii"), half_err[-2000:]
    # The mirrored ODF's pages hold half the sphere (resident.c's odf_half).
    assert f"ODF on the GPU as {storage} of half the sphere" in half_err, half_err[-2000:]
    assert "of half the sphere:" not in whole_err, whole_err[-2000:]
    assert len(half) > 10000, f"only {len(half)} bytes tracked"
    assert half == whole, f"{case}: reading half the sphere tracked otherwise than the whole"


@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_cpu_kernels_track_as_the_gpu_ones(tractd, phantom_dir, storage):
    """On the default sphere, where both read half of it: the CPU kernels
    (the cone's list halved, its entries copied) and the GPU ones (half the
    words, the PMF copied) track the same bytes."""
    cpu, cpu_defines, _ = _track(tractd, phantom_dir, f"cpu_{storage}", "mirrored.nii.gz",
                                 storage, None)
    gpu, gpu_defines, _ = _track(tractd, phantom_dir, f"gpu_{storage}", "mirrored.nii.gz",
                                 storage, GPU)
    assert "CONE_LISTS=1" in cpu_defines[1] and "CONE_MASKS=1" in gpu_defines[1], \
        (cpu_defines[1], gpu_defines[1])
    for defines in cpu_defines + gpu_defines:
        assert "ODF_MIRRORED=1" in defines, defines
    assert len(cpu) > 10000, f"only {len(cpu)} bytes tracked"
    assert cpu == gpu, "the CPU kernels tracked otherwise than the GPU ones"


@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_ptt_reads_half_the_sphere(tractd, phantom_dir, storage):
    """ptt reads the ODF at the vertex nearest its probe's tangent by axis
    (ptt.glsl's nearest_vertex): a vertex and its antipode tie exactly, and
    the lower index, in the first half, wins. Half pages (the mirrored ODF,
    read whole on the host) hold every value it reads: a second-half vertex
    would read the next voxel's values there, and other bytes."""
    tracked = {}
    for name in ("mirrored", "nudged"):
        job = json.loads((phantom_dir / "job_ptt.json").read_text())
        job.pop("output", None)
        job["inputs"]["odf"] = f"{name}.nii.gz"
        job["seeds"]["count"] = N_SEEDS
        job["tracking"]["odf_storage"] = storage
        trk = phantom_dir / f"ptt_{name}_{storage}.trk"
        proc = run_cli(tractd, ["-v", "run", write_job(phantom_dir / f"ptt_{name}.json", job),
                                "-o", trk], env=GPU, check=True)
        defines = re.findall(r"compiled ptt_track\.comp (.*) in ", proc.stderr)
        assert len(defines) == 1, proc.stderr[-2000:]
        mirrored = name == "mirrored"
        assert f"ODF_MIRRORED={int(mirrored)}" in defines[0], defines[0]
        assert (f"ODF on the GPU as {storage} of half the sphere" in proc.stderr) == mirrored
        tracked[name] = trk.read_bytes()
    assert len(tracked["mirrored"]) > 10000, f"only {len(tracked['mirrored'])} bytes tracked"
    assert tracked["mirrored"] == tracked["nudged"]


@pytest.fixture(scope="module")
def fitted_dir(tractd, tmp_path_factory):
    """A repulsion724 phantom with its DWI, fitted (CSD) by `tractd fit
    --odf`: fit/sh.nii.gz, and fit/odf.nii.gz, the ODF its jobs track."""
    ph = tmp_path_factory.mktemp("odf_mirrored_fit") / "ph"
    run_cli(tractd, ["phantom", "--dim", "24,24,16", "--sphere", "repulsion724", "--seeds",
                     N_SEEDS, ph], check=True)
    run_cli(tractd, ["fit", ph / "job_dwi.json", "-o", ph / "fit", "--odf"], check=True)
    return ph


def _job_with_inputs(ph, inputs):
    job = json.loads((ph / "job_dwi.json").read_text())
    job.pop("output", None)
    job["seeds"] = json.loads((ph / "job.json").read_text())["seeds"]
    if inputs:
        job["inputs"] = dict(inputs, stop_map="fit/fa.nii.gz")
        job.pop("model", None)
    return job


def test_sampled_sh_reads_half_the_sphere(tractd, fitted_dir):
    """The fit's ODF is mirrored to the bit; the dwi job, the same SH as an
    input and the fit's ODF as an input track the same bytes reading half
    the sphere, and that ODF one float step off at one value (read whole)
    the same again."""
    ph = fitted_dir
    img = nib.load(str(ph / "fit" / "odf.nii.gz"))
    odf = np.asarray(img.dataobj, dtype=np.float32).copy()
    half = odf.shape[3] // 2
    assert np.array_equal(odf[..., :half], odf[..., half:]), "the fit's ODF is not mirrored"
    top = odf.max(axis=3)
    x, y, z = np.unravel_index(np.argmax(top), top.shape)
    odf[x, y, z, 5] = np.nextafter(odf[x, y, z, 5], np.float32(np.inf))
    nib.save(nib.Nifti1Image(odf, img.affine, img.header), str(ph / "fit" / "nudged.nii.gz"))
    runs = {
        "dwi": (None, "1"),
        "sh": ({"sh": "fit/sh.nii.gz", "sh_basis": "descoteaux07_legacy"}, "1"),
        "odf": ({"odf": "fit/odf.nii.gz"}, "1"),
        "nudged": ({"odf": "fit/nudged.nii.gz"}, "0"),
    }
    tracked = {}
    for name, (inputs, mirrored) in runs.items():
        trk = ph / f"fitted_{name}.trk"
        proc = run_cli(tractd, ["-v", "run", write_job(ph / f"fitted_{name}.json",
                                                        _job_with_inputs(ph, inputs)),
                                "-o", trk], check=True)
        defines = re.findall(r"compiled prob_track\.comp (.*) in ", proc.stderr)
        assert len(defines) == 1, proc.stderr[-2000:]
        assert f"ODF_MIRRORED={mirrored}" in defines[0], (name, defines[0])
        tracked[name] = trk.read_bytes()
    assert len(tracked["dwi"]) > 10000, f"only {len(tracked['dwi'])} bytes tracked"
    for name in ("sh", "odf", "nudged"):
        assert tracked[name] == tracked["dwi"], f"{name} tracked otherwise than the dwi job"
