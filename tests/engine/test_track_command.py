"""`tractd track DWI OUTPUT` and the command line's first-contact edges (issue 20).

- track composes the job from options and runs it as `tractd run` does: the
  same bytes as `tractd run` of the job `--print-job` printed;
- the gradients found beside the DWI by name (X.bval/X.bvec, else
  bvals/bvecs), --bvals/--bvecs over them, exit 3 naming what was looked for;
- OUTPUT's extension picks the format; an existing OUTPUT is kept without --force;
- --set reaches any field by its dotted path; the named options their fields;
- `tractd run -` reads the job from standard input, its paths from the
  current directory; `run -o x.tck` writes TCK, and a job naming another
  format is a usage error naming both;
- each command's own --help; the option columns of the help apart;
- --include/--exclude append spheres and masks to regions.include/exclude,
  their errors naming the option.
"""
import json
import shutil
import subprocess
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from conftest import RUN_TIMEOUT_S, run_cli, write_job

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INVALID = 3

N_SEEDS = 300
SPHERE = "repulsion724"


@pytest.fixture(scope="module")
def ph(tractd, tmp_path_factory):
    """`tractd phantom --sphere repulsion724 DIR`: dwi.nii.gz, dwi.bval, dwi.bvec,
    mask.nii.gz, seed_roi.nii.gz and the jobs."""
    d = tmp_path_factory.mktemp("track_phantom")
    run_cli(tractd, ["phantom", "--sphere", SPHERE, d, "-q"], check=True)
    return d


def track_args(ph, output, *extra):
    """track on the phantom's DWI, seeds in its seed ROI, fitted in its mask."""
    return ["track", ph / "dwi.nii.gz", output, "--mask", ph / "mask.nii.gz",
            "--seed-roi", ph / "seed_roi.nii.gz", "--seeds", str(N_SEEDS), "-q", *extra]


def printed_job(tractd, args):
    proc = run_cli(tractd, [*args, "--print-job"], check=True)
    return json.loads(proc.stdout)


def assert_fails(proc, code, *words):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


def test_track_same_bytes_as_run_of_printed_job(tractd, ph, tmp_path):
    """track writes the TRK `tractd run` writes from the job --print-job printed."""
    tracked = tmp_path / "tracked.trk"
    run_cli(tractd, track_args(ph, tracked), check=True)
    job = printed_job(tractd, track_args(ph, tracked))
    assert job["inputs"] == {"dwi": str(ph / "dwi.nii.gz"), "bvals": str(ph / "dwi.bval"),
                             "bvecs": str(ph / "dwi.bvec"), "mask": str(ph / "mask.nii.gz")}
    assert job["seeds"] == {"roi": str(ph / "seed_roi.nii.gz"), "count": N_SEEDS}
    assert job["output"] == {"format": "trk", "path": str(tracked)}
    job_file = write_job(tmp_path / "printed.json", job)
    run_cli(tractd, ["run", job_file, "-o", tmp_path / "ran.trk", "-q"], check=True)
    assert len(nib.streamlines.load(str(tracked)).streamlines) > 0
    assert tracked.read_bytes() == (tmp_path / "ran.trk").read_bytes()


def test_print_job_runs_nothing(tractd, ph, tmp_path):
    out = tmp_path / "never.trk"
    printed_job(tractd, track_args(ph, out))
    assert not out.exists()


def test_gradients_found_by_name(tractd, ph, tmp_path):
    """X.bval/X.bvec beside X.nii.gz first, then bvals/bvecs in its directory;
    --bvals/--bvecs over both."""
    sidecars = tmp_path / "bids"
    sidecars.mkdir()
    shutil.copy(ph / "dwi.nii.gz", sidecars / "sub-01_dwi.nii.gz")
    shutil.copy(ph / "dwi.bval", sidecars / "sub-01_dwi.bval")
    shutil.copy(ph / "dwi.bvec", sidecars / "sub-01_dwi.bvec")
    args = track_args(ph, tmp_path / "a.trk")
    args[1] = sidecars / "sub-01_dwi.nii.gz"
    job = printed_job(tractd, args)
    assert job["inputs"]["bvals"] == str(sidecars / "sub-01_dwi.bval")
    assert job["inputs"]["bvecs"] == str(sidecars / "sub-01_dwi.bvec")

    fsl = tmp_path / "fsl"
    fsl.mkdir()
    shutil.copy(ph / "dwi.nii.gz", fsl / "data.nii.gz")
    shutil.copy(ph / "dwi.bval", fsl / "bvals")
    shutil.copy(ph / "dwi.bvec", fsl / "bvecs")
    args = track_args(ph, tmp_path / "b.trk")
    args[1] = fsl / "data.nii.gz"
    job = printed_job(tractd, args)
    assert job["inputs"]["bvals"] == str(fsl / "bvals")
    assert job["inputs"]["bvecs"] == str(fsl / "bvecs")

    job = printed_job(tractd, [*args, "--bvals", ph / "dwi.bval", "--bvecs", ph / "dwi.bvec"])
    assert job["inputs"]["bvals"] == str(ph / "dwi.bval")


def test_gradients_missing_exit_3(tractd, ph, tmp_path):
    """No gradients beside the DWI: exit 3 naming the files looked for."""
    shutil.copy(ph / "dwi.nii.gz", tmp_path / "scan.nii.gz")
    args = track_args(ph, tmp_path / "x.trk")
    args[1] = tmp_path / "scan.nii.gz"
    proc = run_cli(tractd, args)
    assert_fails(proc, EXIT_INVALID, "scan.bval", "scan.bvec", "bvals", "bvecs", "--bvals")
    assert not (tmp_path / "x.trk").exists()


def test_format_from_extension(tractd, ph, tmp_path):
    """.tck writes a TCK nibabel reads, with the streamlines of the TRK; another
    extension is a usage error."""
    run_cli(tractd, track_args(ph, tmp_path / "t.tck"), check=True)
    run_cli(tractd, track_args(ph, tmp_path / "t.trk"), check=True)
    tck = nib.streamlines.load(str(tmp_path / "t.tck"))
    assert isinstance(tck, nib.streamlines.TckFile)
    assert len(tck.streamlines) == len(nib.streamlines.load(str(tmp_path / "t.trk")).streamlines)
    proc = run_cli(tractd, track_args(ph, tmp_path / "t.vtk"))
    assert_fails(proc, EXIT_USAGE, ".trk", ".tck", ".trx")


def test_existing_output_needs_force(tractd, ph, tmp_path):
    out = tmp_path / "kept.trk"
    out.write_bytes(b"precious")
    proc = run_cli(tractd, track_args(ph, out))
    assert_fails(proc, EXIT_USAGE, "--force")
    assert out.read_bytes() == b"precious"
    run_cli(tractd, [*track_args(ph, out), "--force"], check=True)
    assert len(nib.streamlines.load(str(out)).streamlines) > 0


def test_options_and_set_reach_fields(tractd, ph, tmp_path):
    """The named options set their fields, --set a nested one (VALUE as JSON, else
    a string); an invalid value is jobspec's error naming the field (exit 3)."""
    job = printed_job(tractd, [*track_args(ph, tmp_path / "s.trk"), "--dg", "ptt",
                               "--step-size", "0.25", "--max-angle", "30", "--fa-threshold",
                               "0.2", "--sphere", "repulsion100", "--rng-seed", "5",
                               "--set", "tracking.max_steps=800",
                               "--set", "output.compress={\"tolerance_mm\": 0.1}"])
    assert job["direction_getter"] == "ptt"
    assert job["tracking"] == {"step_size": 0.25, "max_angle": 30, "fa_threshold": 0.2,
                               "sphere": "repulsion100", "max_steps": 800}
    assert job["seeds"]["rng_seed"] == 5
    assert job["output"]["compress"] == {"tolerance_mm": 0.1}
    job = printed_job(tractd, [*track_args(ph, tmp_path / "s.trk"), "--sh-order", "6"])
    assert job["model"] == {"sh_order": 6}
    proc = run_cli(tractd, [*track_args(ph, tmp_path / "s.trk"), "--set",
                            "tracking.max_angle=120", "--print-job"])
    assert_fails(proc, EXIT_INVALID, "tracking.max_angle")


def run_stdin(tractd, args, stdin, cwd):
    return subprocess.run([tractd, *[str(a) for a in args]], input=stdin, capture_output=True,
                          timeout=RUN_TIMEOUT_S, cwd=cwd)


def small_relative_job(ph):
    """The phantom's job.json (relative paths) with few seeds and no output section."""
    job = json.loads((ph / "job.json").read_text())
    job["seeds"]["count"] = N_SEEDS
    del job["output"]
    return job


def test_run_reads_stdin(tractd, ph, tmp_path):
    """`tractd run -`: the job from standard input, its relative paths from the
    current directory; the bytes of the same job run from a file."""
    job = small_relative_job(ph)
    write_job(ph / "small.json", job)
    run_cli(tractd, ["run", ph / "small.json", "-o", tmp_path / "file.trk", "-q"], check=True)
    proc = run_stdin(tractd, ["run", "-", "-o", tmp_path / "stdin.trk", "-q"],
                     json.dumps(job).encode(), cwd=ph)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert (tmp_path / "stdin.trk").read_bytes() == (tmp_path / "file.trk").read_bytes()


def test_run_output_extension_picks_format(tractd, ph, tmp_path):
    """`run -o x.tck` of a job naming no format writes TCK; a job naming trk is a
    usage error naming both formats and writes nothing."""
    job_file = write_job(tmp_path / "nofmt.json",
                         {**small_relative_job(ph),
                          "inputs": {k: str(ph / v) for k, v in
                                     json.loads((ph / "job.json").read_text())["inputs"].items()},
                          "seeds": {"roi": str(ph / "seed_roi.nii.gz"), "count": N_SEEDS}})
    run_cli(tractd, ["run", job_file, "-o", tmp_path / "x.tck", "-q"], check=True)
    assert isinstance(nib.streamlines.load(str(tmp_path / "x.tck")), nib.streamlines.TckFile)
    job = json.loads(job_file.read_text())
    job["output"] = {"format": "trk"}
    trk_job = write_job(tmp_path / "trk.json", job)
    proc = run_cli(tractd, ["run", trk_job, "-o", tmp_path / "y.tck"])
    assert_fails(proc, EXIT_USAGE, "tck", "output.format is trk")
    assert not (tmp_path / "y.tck").exists()


@pytest.mark.parametrize("command, own, foreign", [
    ("run", "--gpu-memory-budget", "--dim"),
    ("track", "--print-job", "--dim"),
    ("fit", "--odf", "--gpu-memory-budget"),
    ("phantom", "--directions", "--print-job"),
])
def test_command_help(tractd, command, own, foreign):
    """`tractd COMMAND --help`: that command's usage and options only."""
    proc = run_cli(tractd, [command, "--help"], check=True)
    assert proc.stdout.startswith(f"Usage: tractd {command} "), proc.stdout[:200]
    assert own in proc.stdout and foreign not in proc.stdout


def test_help_texts(tractd):
    """The top help names TRX and track, its option columns apart (help2man
    joins a one-space gap); the unknown-command message names serve."""
    text = run_cli(tractd, ["--help"], check=True).stdout
    assert "TRK, TCK or TRX" in text and "track DWI OUTPUT" in text
    assert "--gpu-memory-budget B  GPU" in text and "--max-binding-bytes B  lower" in text
    proc = run_cli(tractd, ["frobnicate"])
    assert_fails(proc, EXIT_USAGE, "serve", "track")
    proc = run_cli(tractd, ["track", "only-one.nii.gz"])
    assert_fails(proc, EXIT_USAGE, "DWI and OUTPUT")


def test_track_without_seed_region_is_usage_error(tractd, ph, tmp_path):
    proc = run_cli(tractd, ["track", ph / "dwi.nii.gz", tmp_path / "n.trk"])
    assert_fails(proc, EXIT_USAGE, "--seed-roi", "--mask")


def test_mask_seeds_without_seed_roi(tractd, ph, tmp_path):
    job = printed_job(tractd, ["track", ph / "dwi.nii.gz", tmp_path / "m.trk", "--mask",
                               ph / "mask.nii.gz"])
    assert job["seeds"] == {"roi": str(ph / "mask.nii.gz")}
    assert Path(job["output"]["path"]).is_absolute()


def test_set_select(tractd, ph, tmp_path):
    """--set seeds.select=N reaches the job (beside --seeds' count): the TCK
    holds N streamlines, and its header says so as tckgen's does
    (max_num_tracks). That they are the first N: test_determinism.py."""
    select = 40
    selected = tmp_path / "selected.tck"
    args = track_args(ph, selected, "--set", f"seeds.select={select}")
    assert printed_job(tractd, args)["seeds"] == {"roi": str(ph / "seed_roi.nii.gz"),
                                                  "count": N_SEEDS, "select": select}
    run_cli(tractd, args, check=True)
    assert len(nib.streamlines.load(str(selected)).streamlines) == select
    header = selected.read_bytes().split(b"\nEND\n", 1)[0].decode()
    assert f"\ncount: {select:010d}\n" in header, header
    assert f"\nmax_num_tracks: {select}\n" in header, header
    assert f"\nmax_num_seeds: {N_SEEDS}\n" in header, header


@pytest.mark.parametrize("option, value, field, want", [
    ("--select", "50", "seeds.select", 50),
    ("--step", "0.5", "tracking.step_mm", 0.5),
    ("--bvecs-convention", "voxel", "inputs.bvecs_convention", "voxel"),
])
def test_new_options_reach_the_job(tractd, ph, tmp_path, option, value, field, want):
    """--select, --step and --bvecs-convention set their fields, which
    --print-job prints once jobspec has read them."""
    proc = run_cli(tractd, [*track_args(ph, tmp_path / "n.trk"), option, value, "--print-job"])
    assert proc.returncode == EXIT_OK, proc.stderr
    section, name = field.split(".")
    assert json.loads(proc.stdout)[section][name] == want


def test_include_exclude_options(tractd, ph, tmp_path):
    """--include and --exclude (tckgen's): a sphere X,Y,Z,R (RAS+ mm) or a
    mask file, repeatable, appended in the order given to regions.include and
    regions.exclude after what --set gave; a run keeps only the lines through
    the include sphere."""
    mask = ph / "csf.nii.gz"
    args = track_args(ph, tmp_path / "r.trk", "--set", 'regions={"include": []}',
                      "--include", "0,0,0,4", "--exclude", mask, "--include", "-1.5,2,0.5e1,3")
    assert printed_job(tractd, args)["regions"] == {
        "include": [{"center": [0, 0, 0], "radius": 4}, {"center": [-1.5, 2, 5], "radius": 3}],
        "exclude": [str(mask)]}
    out = tmp_path / "included.trk"
    run_cli(tractd, track_args(ph, out, "--include", "0,0,0,4"), check=True)
    lines = nib.streamlines.load(str(out)).streamlines
    assert len(lines) > 0
    assert all((np.linalg.norm(line, axis=1) <= 4 + 1e-4).any() for line in lines)


@pytest.mark.parametrize("extra, code, words", [
    (["--include", "1,2,3"], EXIT_USAGE, ["--include '1,2,3'", "X,Y,Z,R"]),
    (["--exclude", "no-such-mask.nii.gz"], EXIT_INVALID, ["--exclude 'no-such-mask.nii.gz'"]),
    (["--set", "regions.include=3", "--include", "1,2,3,4"], EXIT_USAGE,
     ["regions.include", "--include"]),
])
def test_include_exclude_errors_name_the_option(tractd, ph, tmp_path, extra, code, words):
    assert_fails(run_cli(tractd, track_args(ph, tmp_path / "x.trk", *extra)), code, *words)
