"""lavapipe's own path (issue 24) and its benchmark.

On a CPU device the ODF kernels read the ODF a 64-bit word per load, two
float32 or four float16 vertices (ODF_PAIR_LOADS, engine.c's odf_pair_loads;
the tests run on lavapipe), and prob's pass 2 takes the cone from a table
(CONE_LISTS on CPU devices, CONE_MASKS on GPUs): -vv names each kernel's
defines. That the streamlines stay the same to the bit is
scripts/compare-outputs.sh's check against the one-float build.
`make bench-lavapipe` (bench/lavapipe.sh) runs here at a tiny size.
"""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli, write_job

REPO = Path(__file__).resolve().parent.parent.parent
# "compiled prob_track.comp SG=8 ... in 0.3 s" or "prob_track.comp SG=8 ...: SPIR-V from the cache"
TRACK_DEFINES = re.compile(r"prob_track\.comp((?: [A-Z_0-9]+=\d+)+)")


@pytest.fixture(scope="module")
def small_phantom(tractd, tmp_path_factory):
    outdir = tmp_path_factory.mktemp("lavapipe_phantom")
    run_cli(tractd, ["phantom", "--dim", "24,24,16", "--seeds", 32, "--no-dwi",
                     "--sphere", "repulsion724", outdir], check=True)
    return outdir


@pytest.mark.parametrize("storage, pairs", [("float32", 1), ("float16", 1)])
def test_word_loads_chosen_on_cpu(tractd, small_phantom, tmp_path, storage, pairs):
    job = json.loads((small_phantom / "job.json").read_text())
    job.pop("output", None)
    job["tracking"]["odf_storage"] = storage
    path = write_job(small_phantom / f"job_{storage}.json", job)
    proc = run_cli(tractd, ["-vv", "run", path, "-o", tmp_path / "out.trk"], check=True)
    defines = TRACK_DEFINES.search(proc.stderr)
    assert defines, "-vv did not name prob_track.comp's defines:\n" + proc.stderr
    assert f"ODF_PAIR_LOADS={pairs}" in defines.group(1).split(), defines.group(1)


@pytest.mark.parametrize("gpu_kernels, lists, masks", [("0", 1, 0), ("1", 0, 1)])
def test_cone_table_chosen(tractd, small_phantom, tmp_path, gpu_kernels, lists, masks):
    """prob's pass 2 tells the cone from a table: a CPU device reads the ODF
    at its listed cone only (CONE_LISTS), a GPU reads the whole sphere and
    takes the cone from masks (CONE_MASKS); TRACTD_GPU_KERNELS=1 gives
    lavapipe the GPU's variants. That both track alike is test_cpu_kernels'."""
    job = json.loads((small_phantom / "job.json").read_text())
    job.pop("output", None)
    path = write_job(small_phantom / "job_cone.json", job)
    proc = run_cli(tractd, ["-vv", "run", path, "-o", tmp_path / "out.trk"], check=True,
                   env={"TRACTD_GPU_KERNELS": gpu_kernels})
    defines = TRACK_DEFINES.search(proc.stderr)
    assert defines, "-vv did not name prob_track.comp's defines:\n" + proc.stderr
    assert f"CONE_LISTS={lists}" in defines.group(1).split(), defines.group(1)
    assert f"CONE_MASKS={masks}" in defines.group(1).split(), defines.group(1)


def test_bench_lavapipe_prints_both_sides(tractd, dipy_python, tmp_path):
    env = dict(os.environ, BENCH_DIR=str(tmp_path), LAVAPIPE_GRID="24,24,16",
               LAVAPIPE_SEEDS="20", LAVAPIPE_REPEATS="1", LAVAPIPE_THREADS="1",
               BENCH_DIPY_PYTHON=dipy_python)
    proc = subprocess.run([str(REPO / "bench" / "lavapipe.sh"), tractd], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line.split()[:1] in (["dipy"], ["tractd"])}
    assert set(rows) == {"dipy", "tractd"}, proc.stdout
    for tool, row in rows.items():
        assert row[1] == "1" and float(row[2]) > 0 and int(row[4]) > 0, (tool, proc.stdout)
    assert rows["tractd"][-1].endswith("x"), proc.stdout
    assert "llvmpipe" in proc.stdout, proc.stdout
