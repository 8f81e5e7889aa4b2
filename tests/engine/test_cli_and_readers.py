"""The command line end to end, and other readers of tractd's TRK.

- DIPY's StatefulTractogram loader accepts the file (bounding-box check on);
- Vulkan problems (no driver, bad --device) fail with exit 1 and a message
  naming the device, leaving no output behind;
- the pipeline cache option (a path, 'none');
- output handling: standard output, atomic writes, unwritable paths, paths
  that are no regular file (a FIFO, a directory);
- the documented command-line contract: --help, --version, usage errors,
  `tractd phantom` and its errors (scripts/demo.sh: test_examples.py).

MRtrix3 is not tested here: Debian's MRtrix3 3.0.3 `tckconvert` reads only
.tck, .txt and .vtk input ("Unsupported input file type" for .trk) and
`tckinfo` refuses a .trk ("not a valid track file").

Exit codes: 0 success, 1 runtime failure, 2 usage error, 3 invalid job or input.
"""
import json
import os
import re
import subprocess
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from conftest import PHANTOM_FILES, PHANTOM_ODF_FILES, RUN_TIMEOUT_S, run_cli, run_job, write_job

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_INVALID = 3


# Small jobs: a few hundred seeds track in well under a second on lavapipe.
N_SEEDS = 200
RNG_SEED = 7

# A Vulkan loader pointed at a driver manifest that does not exist finds no
# driver at all (VK_ICD_FILENAMES for older loaders, VK_DRIVER_FILES for newer).
NO_DRIVER_ENV = {"VK_ICD_FILENAMES": "/nonexistent.json",
                 "VK_DRIVER_FILES": "/nonexistent.json"}
DEVICE_ERROR_RE = re.compile(r"no Vulkan device|cannot create a Vulkan instance")
OUT_OF_RANGE_DEVICE = 99

# TRK header: n_count (int32) at byte 988 of the 1000-byte header.
TRK_HEADER_SIZE = 1000
TRK_N_COUNT = slice(988, 992)

# vkGetPipelineCacheData starts with a VkPipelineCacheHeaderVersionOne:
# headerSize (32) and headerVersion (VK_PIPELINE_CACHE_HEADER_VERSION_ONE).
VK_CACHE_HEADER_SIZE = 32
VK_CACHE_HEADER_VERSION_ONE = 1

# TRK points are float32 in the file.
TOL_POINTS_MM = 1e-3

DEFAULT_PHANTOM_SHAPE = (48, 48, 24)
COMMANDS = ("serve", "run", "track", "fit", "merge", "phantom", "devices")


# ------------------------------------------------------------------ helpers, fixtures

def small_job(phantom):
    """The phantom's job with N_SEEDS random seeds in its ROI."""
    return phantom.job_with(seeds={"roi": str(phantom.path("seed_roi.nii.gz")),
                                   "count": N_SEEDS, "rng_seed": RNG_SEED})


def run_bytes(binary, args, env=None, cwd=None):
    """Runs `binary *args` with stdout as bytes through a pipe (not seekable)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([binary] + [str(a) for a in args], capture_output=True,
                          timeout=RUN_TIMEOUT_S, env=full_env, cwd=cwd)


def files_in(directory):
    """Names of everything under directory (recursively), sorted."""
    return sorted(str(p.relative_to(directory)) for p in Path(directory).rglob("*"))


def assert_fails(proc, code, pattern):
    """proc exited with code and its stderr matches the regular expression."""
    assert proc.returncode == code, (
        f"exit {proc.returncode}, expected {code}\nstderr:\n{proc.stderr}")
    assert re.search(pattern, proc.stderr), (
        f"stderr does not match {pattern!r}:\n{proc.stderr}")


@pytest.fixture(scope="module")
def job_file(phantom, tmp_path_factory):
    """The small job written to a file of its own (no output.path)."""
    return write_job(tmp_path_factory.mktemp("cli_job") / "job.json", small_job(phantom))


@pytest.fixture(scope="module")
def reference(tractd, phantom, tmp_path_factory):
    """One ordinary run of the small job to a file: (trk path, stats dict)."""
    workdir = tmp_path_factory.mktemp("cli_ref")
    _, trk, stats = run_job(tractd, small_job(phantom), workdir, name="ref",
                            extra_args=["--pipeline-cache", "none"])
    stats = json.loads(stats.read_text())
    assert stats["streamlines"] > 0, "the small job tracked nothing"
    return trk, stats


# ------------------------------------------------------------------ readers

def test_dipy_load_tractogram(reference, phantom):
    """DIPY's load_tractogram(trk, 'same', bbox_valid_check=True) accepts the file:
    the header's grid and affine are those of the ODF, every point lies within
    the volume's bounding box, and the count is the one tractd reported."""
    from dipy.io.streamline import load_tractogram

    trk, stats = reference
    sft = load_tractogram(str(trk), "same", bbox_valid_check=True)
    assert len(sft.streamlines) == stats["streamlines"]
    affine, dims, _, _ = sft.space_attributes
    np.testing.assert_allclose(affine, phantom.affine, atol=1e-5)
    assert tuple(int(d) for d in dims) == tuple(phantom.shape)
    assert sft.is_bbox_in_vox_valid()
    # Same points as nibabel's reader, in RAS mm.
    ras = nib.streamlines.load(str(trk)).streamlines
    sft.to_rasmm()
    np.testing.assert_allclose(sft.streamlines.get_data(), ras.get_data(), atol=TOL_POINTS_MM)


# ------------------------------------------------------------------ Vulkan device errors

def test_run_without_vulkan_driver(tractd, job_file, tmp_path):
    """With no Vulkan driver to load, `tractd run` on a valid job exits 1 with a
    message about the device and leaves neither the output nor its .tmp."""
    out = tmp_path / "out.trk"
    proc = run_cli(tractd, ["run", job_file, "-o", out, "--pipeline-cache", "none"],
                   env=NO_DRIVER_ENV)
    assert_fails(proc, EXIT_RUNTIME, DEVICE_ERROR_RE)
    assert files_in(tmp_path) == [], "a run that never got a device left files behind"


def test_devices_without_vulkan_driver(tractd):
    """`tractd devices` with no Vulkan driver exits 1 naming the device problem
    (not 0 with an empty list)."""
    proc = run_cli(tractd, ["devices"], env=NO_DRIVER_ENV)
    assert_fails(proc, EXIT_RUNTIME, DEVICE_ERROR_RE)


def test_devices_lists_lavapipe(tractd):
    """`tractd devices` exits 0 and lists at least one device, numbered from 0
    (the out-of-range test below relies on there being fewer than 99)."""
    proc = run_cli(tractd, ["devices"], check=True)
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    assert lines and lines[0].startswith("0"), proc.stdout
    assert len(lines) < OUT_OF_RANGE_DEVICE


def test_device_index_out_of_range(tractd, job_file, tmp_path):
    """`--device 99` exits 1 with "out of range" and writes no output."""
    out = tmp_path / "out.trk"
    proc = run_cli(tractd, ["run", job_file, "-o", out, "--device", OUT_OF_RANGE_DEVICE,
                            "--pipeline-cache", "none"])
    assert_fails(proc, EXIT_RUNTIME, r"device.*out of range")
    assert files_in(tmp_path) == []


# ------------------------------------------------------------------ pipeline cache

def test_pipeline_cache_file(tractd, job_file, reference, tmp_path):
    """--pipeline-cache DIR/cache.bin creates the file (a Vulkan pipeline cache,
    no temporary left beside it; the kernels' SPIR-V goes to DIR/spirv/); a
    second run loading it succeeds with the same output, and so does a run
    given a corrupt cache file."""
    ref_trk, _ = reference
    cache = tmp_path / "cachedir" / "cache.bin"       # parent created by tractd
    for name in ("first", "second"):
        out = tmp_path / f"{name}.trk"
        run_cli(tractd, ["run", job_file, "-o", out, "-q", "--pipeline-cache", cache],
                check=True)
        assert cache.is_file(), f"{name} run did not leave {cache}"
        data = cache.read_bytes()
        assert len(data) >= VK_CACHE_HEADER_SIZE
        assert np.frombuffer(data[:8], "<u4").tolist() == [VK_CACHE_HEADER_SIZE,
                                                           VK_CACHE_HEADER_VERSION_ONE]
        assert [f for f in files_in(cache.parent) if not f.startswith("spirv")] == ["cache.bin"]
        assert out.read_bytes() == ref_trk.read_bytes(), f"{name} run differs from the reference"

    cache.write_bytes(bytes(range(256)) * 8)          # not a pipeline cache
    out = tmp_path / "corrupt.trk"
    run_cli(tractd, ["run", job_file, "-o", out, "-q", "--pipeline-cache", cache], check=True)
    assert out.read_bytes() == ref_trk.read_bytes()


def test_pipeline_cache_none(tractd, job_file, tmp_path):
    """--pipeline-cache none writes no cache anywhere: not the default
    $XDG_CACHE_HOME/tractd/pipelines.bin, not a file named 'none'. Without the
    option the default file is written, so the check is not vacuous."""
    xdg = tmp_path / "xdg"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {"XDG_CACHE_HOME": str(xdg), "HOME": str(tmp_path / "home")}
    default_cache = xdg / "tractd" / "pipelines.bin"

    proc = run_bytes(tractd, ["run", job_file, "-o", "out.trk", "-q", "--pipeline-cache", "none"],
                     env=env, cwd=cwd)
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    assert not (xdg / "tractd").exists()
    assert not (tmp_path / "home").exists()
    assert files_in(cwd) == ["out.trk"]

    proc = run_bytes(tractd, ["run", job_file, "-o", "out2.trk", "-q"], env=env, cwd=cwd)
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    assert default_cache.is_file(), "the default pipeline cache was not written"


# ------------------------------------------------------------------ output handling

def test_output_to_stdout(tractd, job_file, reference):
    """`-o -` writes the TRK, and nothing else, to standard output. Through a pipe
    the header's n_count cannot be patched at the end, so it may be 0 (nibabel
    then reads to EOF); apart from n_count the bytes equal a file run's, and
    nibabel loads the same number of streamlines."""
    ref_trk, ref_stats = reference
    proc = run_bytes(tractd, ["run", job_file, "-o", "-", "--pipeline-cache", "none"])
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    piped, ref = proc.stdout, ref_trk.read_bytes()
    assert len(piped) == len(ref), "stdout is not the same size as the file run's TRK"

    n_count = int(np.frombuffer(piped[TRK_N_COUNT], "<i4")[0])
    assert n_count in (0, ref_stats["streamlines"]), f"n_count is {n_count}"
    assert piped[:TRK_N_COUNT.start] == ref[:TRK_N_COUNT.start]
    assert piped[TRK_N_COUNT.stop:] == ref[TRK_N_COUNT.stop:]
    assert len(piped) > TRK_HEADER_SIZE


def test_output_to_stdout_loads_in_nibabel(tractd, job_file, reference, tmp_path):
    """The bytes from `-o -`, saved to a file, load in nibabel with the file
    run's streamline count and points."""
    ref_trk, ref_stats = reference
    proc = run_bytes(tractd, ["run", job_file, "-o", "-", "-q", "--pipeline-cache", "none"])
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    saved = tmp_path / "piped.trk"
    saved.write_bytes(proc.stdout)
    piped = nib.streamlines.load(str(saved))
    ref = nib.streamlines.load(str(ref_trk))
    assert len(piped.streamlines) == len(ref.streamlines) == ref_stats["streamlines"]
    np.testing.assert_array_equal(piped.streamlines.get_data(), ref.streamlines.get_data())


@pytest.mark.parametrize("case", ["bad_max_angle", "memory_budget"])
def test_failed_job_leaves_no_output(tractd, phantom, tmp_path, case):
    """A failed job leaves neither the output file nor OUT.tmp: an invalid
    max_angle (refused before any file is opened, exit 3) and a memory budget too
    small for the inputs (refused after OUT.tmp was opened, exit 1). An existing
    file at the output path is left as it was."""
    job = small_job(phantom)
    if case == "bad_max_angle":
        job["tracking"]["max_angle"] = 120
        extra, code, pattern = [], EXIT_INVALID, r"tracking\.max_angle"
    else:
        extra, code, pattern = ["--gpu-memory-budget", "1K"], EXIT_RUNTIME, r"budget"
    job_path = write_job(tmp_path / "job.json", job)
    outdir = tmp_path / "out"
    outdir.mkdir()

    out = outdir / "tracks.trk"
    proc = run_cli(tractd, ["run", job_path, "-o", out, "--pipeline-cache", "none", *extra])
    assert_fails(proc, code, pattern)
    assert files_in(outdir) == []

    old = b"an earlier tractogram"
    out.write_bytes(old)
    proc = run_cli(tractd, ["run", job_path, "-o", out, "--pipeline-cache", "none", *extra])
    assert_fails(proc, code, pattern)
    assert files_in(outdir) == ["tracks.trk"]
    assert out.read_bytes() == old


def test_output_to_a_fifo(tractd, job_file, reference, tmp_path):
    """A path that is no regular file (a FIFO here; /dev/null is the common
    one) is written in place: the reader gets the file run's TRK, and the FIFO
    is still a FIFO afterwards, with no FIFO.tmp beside it. Written through
    FIFO.tmp and renamed, the reader would wait for ever and the FIFO would
    become a regular file (as root, `-o /dev/null` replaced /dev/null)."""
    ref_trk, _ = reference
    outdir, copy = tmp_path / "out", tmp_path / "read.trk"
    outdir.mkdir()
    fifo = outdir / "tracks.trk"
    os.mkfifo(fifo)
    with open(copy, "wb") as sink, subprocess.Popen(["cat", str(fifo)], stdout=sink) as reader:
        proc = run_cli(tractd, ["run", job_file, "-o", fifo, "--pipeline-cache", "none"])
        try:
            reader.wait(timeout=5)
        except subprocess.TimeoutExpired:
            reader.kill()
            raise AssertionError(f"the FIFO's reader got no end; tractd: {proc.stderr}")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert Path(fifo).is_fifo() and files_in(outdir) == ["tracks.trk"]
    # Not seekable: n_count may stay 0, as through a pipe.
    got, ref = copy.read_bytes(), ref_trk.read_bytes()
    assert got[:TRK_N_COUNT.start] == ref[:TRK_N_COUNT.start]
    assert got[TRK_N_COUNT.stop:] == ref[TRK_N_COUNT.stop:]


def test_output_to_a_directory(tractd, job_file, tmp_path):
    """-o naming a directory fails before tracking, naming output.path and
    the reason, and leaves the directory as it was."""
    proc = run_cli(tractd, ["run", job_file, "-o", tmp_path, "--pipeline-cache", "none"])
    # "cannot create": at the open, not "cannot write" at the end of the job.
    assert_fails(proc, EXIT_RUNTIME, r"output\.path: cannot create .*Is a directory")
    assert files_in(tmp_path) == []


def test_output_into_missing_directory(tractd, job_file, tmp_path):
    """Output into a directory that does not exist: exit 1, naming output.path."""
    out = tmp_path / "no_such_dir" / "tracks.trk"
    proc = run_cli(tractd, ["run", job_file, "-o", out, "--pipeline-cache", "none"])
    assert_fails(proc, EXIT_RUNTIME, r"output\.path")
    assert not out.parent.exists()


# ------------------------------------------------------------------ command line basics

def test_help(tractd):
    """--help exits 0 and documents every command and the exit status."""
    proc = run_cli(tractd, ["--help"], check=True)
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\b", proc.stdout, re.M), f"--help omits '{command}'"
    assert "Exit status" in proc.stdout
    for code in (EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, EXIT_INVALID):
        assert re.search(rf"\b{code} [a-z]", proc.stdout), f"--help omits exit code {code}"


def test_version(tractd):
    """--version exits 0 and prints 'tractd X.Y.Z'."""
    proc = run_cli(tractd, ["--version"], check=True)
    assert re.match(r"tractd \d+\.\d+\.\d+", proc.stdout), proc.stdout


@pytest.mark.parametrize("args, pattern", [
    ([], r"missing command"),
    (["frobnicate"], r"unknown command 'frobnicate'"),
    (["frobnicate", "x"], r"unknown command 'frobnicate'"),
    (["run"], r"'run' takes exactly one argument"),
    (["run", "a.json", "b.json"], r"'run' takes exactly one argument"),
    (["phantom"], r"'phantom' takes exactly one argument"),
    (["devices", "extra"], r"'devices' takes no arguments?"),
    (["track", "dwi.nii.gz"], r"'track' takes DWI and OUTPUT"),
    (["merge", "out.trk"], r"'merge' takes OUT and at least one PART"),
], ids=["none", "unknown", "unknown_with_arg", "run_no_arg", "run_two_args",
        "phantom_no_arg", "devices_with_arg", "track_one_arg", "merge_one_arg"])
def test_usage_errors(tractd, args, pattern):
    """Command-line mistakes exit 2 with a message saying what is wrong."""
    proc = run_cli(tractd, args)
    assert_fails(proc, EXIT_USAGE, pattern)


def test_phantom_writes_all_files(tractd, tmp_path):
    """`tractd phantom DIR` writes the thirteen files; the volumes share the
    default grid and the four jobs name files that exist. With --no-dwi only the
    seven of the ODF jobs."""
    outdir = tmp_path / "ph"
    run_cli(tractd, ["phantom", outdir, "-q"], check=True)
    assert files_in(outdir) == sorted(PHANTOM_FILES)
    for name in ("odf.nii.gz", "fa.nii.gz", "seed_roi.nii.gz", "labels.nii.gz", "dwi.nii.gz",
                 "mask.nii.gz"):
        assert nib.load(str(outdir / name)).shape[:3] == DEFAULT_PHANTOM_SHAPE, name
    job = json.loads((outdir / "job.json").read_text())
    for path in (job["inputs"]["odf"], job["inputs"]["stop_map"], job["seeds"]["roi"]):
        assert (outdir / path).is_file(), f"job.json names missing {path}"
    for name in ("job_dwi.json", "job_boot.json"):
        job_dwi = json.loads((outdir / name).read_text())
        for path in (*job_dwi["inputs"].values(), job_dwi["seeds"]["roi"]):
            assert (outdir / path).is_file(), f"{name} names missing {path}"
    assert json.loads((outdir / "job_boot.json").read_text())["direction_getter"] == "boot"
    assert json.loads((outdir / "job_ptt.json").read_text())["inputs"] == job["inputs"]

    no_dwi = tmp_path / "no_dwi"
    run_cli(tractd, ["phantom", "--no-dwi", no_dwi, "-q"], check=True)
    assert files_in(no_dwi) == sorted(PHANTOM_ODF_FILES)


def test_phantom_dwi_usage_errors(tractd, tmp_path):
    """--snr, --shells, --b0s, --directions and --bvalue take numbers:
    anything else is a usage error (2)."""
    for args, pattern in ((["--snr", "lots"], r"invalid --snr 'lots'"),
                          (["--shells", "two"], r"invalid --shells 'two'"),
                          (["--b0s", "ten"], r"invalid --b0s 'ten'"),
                          (["--directions", "1.5"], r"invalid --directions '1.5'"),
                          (["--bvalue", "high"], r"invalid --bvalue 'high'")):
        proc = run_cli(tractd, ["phantom", *args, tmp_path / "ph"])
        assert_fails(proc, EXIT_USAGE, pattern)


@pytest.mark.parametrize("args, pattern", [
    (["--sphere", "nosuch"], r"phantom\.sphere"),
    (["--dim", "8,8,8"], r"phantom\.dim"),
    (["--snr", "-1"], r"phantom\.snr"),
    (["--snr", "nan"], r"phantom\.snr"),
    (["--shells", "3"], r"phantom\.shells"),
    (["--b0s", "0"], r"phantom\.b0s"),
    (["--b0s", "101"], r"phantom\.b0s"),
    (["--directions", "5"], r"phantom\.directions"),
    (["--directions", "1001"], r"phantom\.directions"),
    (["--bvalue", "50"], r"phantom\.bvalue"),
    (["--bvalue", "20001"], r"phantom\.bvalue"),
], ids=["unknown_sphere", "dim_too_small", "snr_negative", "snr_nan", "three_shells", "no_b0",
        "too_many_b0s", "too_few_directions", "too_many_directions", "bvalue_b0",
        "bvalue_too_high"])
def test_phantom_invalid_parameters(tractd, tmp_path, args, pattern):
    """Invalid phantom parameters exit 3 (invalid input) naming the field, and
    write nothing."""
    outdir = tmp_path / "ph"
    proc = run_cli(tractd, ["phantom", *args, outdir])
    assert_fails(proc, EXIT_INVALID, pattern)
    assert not outdir.exists() or files_in(outdir) == []
