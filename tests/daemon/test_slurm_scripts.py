"""scripts/slurm/ without a cluster (make check-cluster runs them on one):
tractd-slurm submit writes a shard array and a merge job, submits them with
--gres=gpu:1 and --dependency=afterok on the array (a fake sbatch records the
calls) and its scripts, run as Slurm would run them, merge into the single
run's bytes; tractd-pilot tracks its slice of a subject list through its own
daemon into BIDS-derivatives paths equal to `tractd track`'s outputs, with a
sidecar of the job, and lists the subjects that failed."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "slurm"
FAKE_SBATCH = """#!/bin/sh
# Records its arguments, one call per line, and answers job ids 41, 42...
echo "$*" >> "$0.calls"
echo "$(( $(wc -l < "$0.calls") + 40 ));cluster"
"""


@pytest.fixture(scope="module")
def phantom(tractd, tmp_path_factory):
    outdir = tmp_path_factory.mktemp("slurm_phantom")
    run_cli(tractd, ["phantom", outdir, "--dim", "24,24,16", "--seeds", 150, "-q"], check=True)
    return outdir


@pytest.fixture()
def fake_sbatch(tmp_path):
    path = tmp_path / "sbatch"
    path.write_text(FAKE_SBATCH)
    path.chmod(0o755)
    return path


def submit(tractd, fake_sbatch, *args):
    env = dict(os.environ, TRACTD=str(tractd), SBATCH=str(fake_sbatch))
    return subprocess.run(["sh", SCRIPTS / "tractd-slurm", "submit", *map(str, args)],
                          env=env, capture_output=True, text=True, timeout=60)


def test_submit_writes_array_and_dependent_merge_that_join_byte_identically(
        tractd, phantom, fake_sbatch, tmp_path):
    single = tmp_path / "single.trk"
    run_cli(tractd, ["run", phantom / "job.json", "-o", single, "-q"], check=True)
    out = tmp_path / "it's merged.trk"  # a quote in the path: the scripts quote it
    done = submit(tractd, fake_sbatch, phantom / "job.json", "--shards", 3, "--output", out,
                  "--", "--partition=gpu")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "shards 41\nmerge 42\n"
    calls = Path(f"{fake_sbatch}.calls").read_text().splitlines()
    assert calls[0].startswith("--parsable --array=0-2 --gres=gpu:1 --partition=gpu ")
    assert calls[1].startswith("--parsable --dependency=afterok:41 --partition=gpu ")
    scripts = Path(f"{out}.slurm")
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="")
    for k in (2, 0, 1):
        env["SLURM_ARRAY_TASK_ID"] = str(k)
        subprocess.run(["sh", scripts / "shards.sbatch"], env=env, check=True, timeout=120)
    subprocess.run(["sh", scripts / "merge.sbatch"], check=True, timeout=120)
    assert out.read_bytes() == single.read_bytes()
    assert json.loads(Path(f"{out}.stats.json").read_text())["shards"] == 3
    assert not (scripts / "parts").exists()


@pytest.mark.parametrize("args, message", [
    ((), "missing JOB.json"),
    (("JOB", "--output", "x.trk"), "--shards: a whole number from 1"),
    (("JOB", "--shards", "0", "--output", "x.trk"), "--shards: a whole number from 1"),
    (("JOB", "--shards", "2"), "--output: missing"),
    (("JOB", "--shards", "2", "--output", "x.nii"), "must end in .trk, .tck or .trx"),
    (("no-such.json", "--shards", "2", "--output", "x.trk"), "is not a file"),
])
def test_submit_usage_errors_exit_2_naming_the_option(tractd, phantom, fake_sbatch, args, message):
    args = [phantom / "job.json" if a == "JOB" else a for a in args]
    done = submit(tractd, fake_sbatch, *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not Path(f"{fake_sbatch}.calls").exists()


def test_pilot_tracks_its_slice_into_bids_derivatives_and_lists_failures(
        tractd, tractctl, phantom, tmp_path):
    bids = tmp_path / "bids"
    lines = []
    for stem in ("sub-01/dwi/sub-01", "sub-02/ses-1/dwi/sub-02_ses-1", "sub-03/dwi/sub-03",
                 "sub-04/dwi/sub-04"):
        if stem != "sub-03/dwi/sub-03":  # sub-03's DWI is missing: it fails
            (bids / stem).parent.mkdir(parents=True)
            for ext in ("nii.gz", "bval", "bvec"):
                (bids / f"{stem}_dwi.{ext}").write_bytes((phantom / f"dwi.{ext}").read_bytes())
        lines.append(f"{bids / stem}_dwi.nii.gz\t{phantom / 'mask.nii.gz'}")
    subjects = tmp_path / "subjects.txt"
    subjects.write_text("# cohort\n" + "\n".join(lines) + "\n")
    root = tmp_path / "derivatives"
    env = dict(os.environ, TRACTD=str(tractd), TRACTCTL=str(tractctl), TMPDIR=str(tmp_path),
               SLURM_JOB_ID="77", SLURM_ARRAY_JOB_ID="70", SLURM_ARRAY_TASK_ID="1",
               SLURM_ARRAY_TASK_MIN="0", SLURM_ARRAY_TASK_COUNT="2")
    options = ["--seeds", "100", "--rng-seed", "5"]
    done = subprocess.run(["sh", SCRIPTS / "tractd-pilot", subjects, root, *options],
                          env=env, capture_output=True, text=True, timeout=300)
    # Task 1 of 2 takes the second and fourth subjects.
    assert done.returncode == 0, done.stderr
    assert (root / "failed-70_1.txt").read_text() == ""
    for stem in ("sub-02/ses-1/dwi/sub-02_ses-1", "sub-04/dwi/sub-04"):
        ref = tmp_path / "ref.trx"
        run_cli(tractd, ["track", f"{bids / stem}_dwi.nii.gz", ref, "--mask",
                         phantom / "mask.nii.gz", *options, "-q", "--force"], check=True)
        out = root / f"{stem}_tractography"
        assert Path(f"{out}.trx").read_bytes() == ref.read_bytes()
        sidecar = json.loads(Path(f"{out}.json").read_text())
        assert sidecar["seeds"]["rng_seed"] == 5 and sidecar["output"]["path"] == f"{out}.trx"
    assert not (root / "sub-01").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tractd-")] == []

    env.update(SLURM_ARRAY_TASK_ID="0")
    done = subprocess.run(["sh", SCRIPTS / "tractd-pilot", subjects, root, *options],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert (root / "failed-70_0.txt").read_text() == lines[2] + "\n"
    assert (root / "sub-01/dwi/sub-01_tractography.trx").exists()
