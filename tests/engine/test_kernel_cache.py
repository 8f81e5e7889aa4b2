"""The first run of a configuration says that it compiles the GPU kernels,
and keeps their SPIR-V beside the pipeline cache so that the next process
compiles nothing; `tractd warmup` fills that cache for the default
configurations.

The tests name a pipeline cache of their own (cold) and leave Mesa's shader
cache where it is, so that lavapipe's machine code of the kernels (minutes
for ptt when cold) is reused across test runs.
"""
import json
import os
import re

import pytest

from conftest import run_cli, write_job

COMPILING = "compiling the GPU kernels for"
FROM_CACHE = re.compile(r"debug: (\S+\.comp) .*: SPIR-V from the cache")


@pytest.fixture(scope="module")
def prob_job(tractd, tmp_path_factory):
    """A small phantom's prob job on the default sphere (repulsion724)."""
    outdir = tmp_path_factory.mktemp("kernel_cache_phantom")
    run_cli(tractd, ["phantom", "--dim", "24,24,16", "--seeds", 32, "--no-dwi",
                     "--sphere", "repulsion724", outdir], check=True)
    job = json.loads((outdir / "job.json").read_text())
    job.pop("output", None)
    return write_job(outdir / "prob.json", job)


def run(tractd, job, cache, out, *args):
    return run_cli(tractd, ["run", job, "-o", out, "--pipeline-cache", cache, *args], check=True)


def test_first_run_says_it_compiles(tractd, prob_job, tmp_path):
    """Cold cache: the info line names the device and the cache; warm: no
    line, and -v shows every kernel's SPIR-V taken from the cache."""
    cache = tmp_path / "cache" / "pipelines.bin"
    cold = run(tractd, prob_job, cache, tmp_path / "a.trk")
    assert COMPILING in cold.stderr and str(cache) in cold.stderr, cold.stderr
    assert list((cache.parent / "spirv").glob("*.spv")), "no SPIR-V cached"
    warm = run(tractd, prob_job, cache, tmp_path / "b.trk", "-v")
    assert COMPILING not in warm.stderr, warm.stderr
    assert sorted(FROM_CACHE.findall(warm.stderr)) == [
        "compact.comp", "prob_init.comp", "prob_track.comp"], warm.stderr
    assert (tmp_path / "a.trk").read_bytes() == (tmp_path / "b.trk").read_bytes()


def test_spirv_cache_of_another_key_is_not_used(tractd, prob_job, tmp_path):
    """A cached file whose key does not match its name (a hash collision, a
    damaged file) is compiled again, with the same output."""
    cache = tmp_path / "cache" / "pipelines.bin"
    run(tractd, prob_job, cache, tmp_path / "a.trk")
    for spv in (cache.parent / "spirv").glob("*.spv"):
        spv.write_bytes(b"another key\0" + bytes(64))
    again = run(tractd, prob_job, cache, tmp_path / "b.trk")
    assert COMPILING in again.stderr, again.stderr
    assert (tmp_path / "a.trk").read_bytes() == (tmp_path / "b.trk").read_bytes()


def test_warmup_fills_the_cache(tractd, prob_job, tmp_path):
    """tractd warmup compiles into the cache and removes its scratch
    directory; a default-sphere prob job then compiles nothing."""
    cache = tmp_path / "cache" / "pipelines.bin"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = run_cli(tractd, ["warmup", "--pipeline-cache", cache],
                   env={"TMPDIR": str(scratch)}, check=True)
    assert "ready in" in proc.stderr, proc.stderr
    assert os.listdir(scratch) == [], "the warm-up left its scratch files"
    job = run(tractd, prob_job, cache, tmp_path / "a.trk", "-v")
    assert COMPILING not in job.stderr, job.stderr
    assert len(FROM_CACHE.findall(job.stderr)) == 3, job.stderr
