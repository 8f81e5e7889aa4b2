"""Sharded jobs (seeds.shard, `tractd run --shard K/N`) and `tractd merge`:
a job split in 1, 2, 3 or 4 shards, tracked shard by shard and merged in
any order, is byte-identical to the whole job's output, in TRK, TCK (with
its seeds file) and TRX, for ROI seeds, per-voxel seeds and explicit seed
points; parts that are not one job's whole set, or that read other input
files, are refused by name."""

import gzip
import json
import random
import shutil
import subprocess

import pytest

from conftest import run_cli, write_job

SEEDS = 120
SPLITS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def small_phantom(tractd, tmp_path_factory):
    """A small phantom (24x24x16): shard runs take about a second each."""
    outdir = tmp_path_factory.mktemp("shard_phantom")
    run_cli(tractd, ["phantom", outdir, "--dim", "24,24,16", "--seeds", SEEDS, "-q"],
            check=True)
    return outdir


def job_for(phantom_dir, fmt, seeds=None):
    job = json.loads((phantom_dir / "job.json").read_text())
    job["inputs"] = {k: str(phantom_dir / v) for k, v in job["inputs"].items()}
    job["seeds"]["roi"] = str(phantom_dir / job["seeds"]["roi"])
    if seeds is not None:
        job["seeds"] = seeds
    job["seeds"]["rng_seed"] = 7
    output = {"format": fmt, "save_seeds": True}
    if fmt != "tck":
        output.update(save_seed_index=True, save_direction_getter=True)
    job["output"] = output
    return job


def run(tractd, job_path, out, *extra):
    run_cli(tractd, ["run", job_path, "-o", out, "-q", *extra], check=True)


def assert_same_bytes(a, b):
    assert a.read_bytes() == b.read_bytes(), f"{b} differs from {a}"


def split_and_merge(tractd, job_path, fmt, tmp_path, n, tag):
    """Runs the n shards, merges them shuffled, returns the merged path."""
    parts = []
    for k in range(n):
        part = tmp_path / f"{tag}_{k}of{n}.{fmt}"
        run(tractd, job_path, part, "--shard", f"{k}/{n}")
        parts.append(part)
    random.Random(n).shuffle(parts)
    merged = tmp_path / f"{tag}_merged{n}.{fmt}"
    run_cli(tractd, ["merge", merged, *parts, "-q"], check=True)
    return merged


@pytest.mark.parametrize("fmt", ["trk", "tck", "trx"])
def test_shards_merge_to_the_whole_job(tractd, small_phantom, tmp_path, fmt):
    job_path = write_job(tmp_path / "job.json", job_for(small_phantom, fmt))
    whole = tmp_path / f"whole.{fmt}"
    run(tractd, job_path, whole)
    for n in SPLITS:
        merged = split_and_merge(tractd, job_path, fmt, tmp_path, n, "roi")
        assert_same_bytes(whole, merged)
        if fmt == "tck":
            assert_same_bytes(whole.with_name(whole.name + ".seeds.txt"),
                              merged.with_name(merged.name + ".seeds.txt"))


@pytest.mark.parametrize("fmt", ["trk", "tck"])
def test_points_and_per_voxel_shards(tractd, small_phantom, tmp_path, fmt):
    """Explicit points (drawn in order of their index) and per-voxel seeding
    (rounds over the shuffled voxels) split as exactly as ROI counts."""
    points = [[12 + 0.3 * (i % 7), 12 - 0.2 * (i % 5), 8 + 0.1 * (i % 3)] for i in range(40)]
    roi = job_for(small_phantom, fmt)["seeds"]["roi"]
    variants = {"points": {"points": points},
                "per_voxel": {"roi": roi, "count": 1, "per_voxel": True}}
    for tag, seeds in variants.items():
        job_path = write_job(tmp_path / f"{tag}.json", job_for(small_phantom, fmt, seeds))
        whole = tmp_path / f"{tag}_whole.{fmt}"
        run(tractd, job_path, whole)
        assert_same_bytes(whole, split_and_merge(tractd, job_path, fmt, tmp_path, 3, tag))


def merge(tractd, out, *parts):
    return run_cli(tractd, ["merge", out, *parts])


@pytest.fixture(scope="module")
def parts(tractd, small_phantom, tmp_path_factory):
    """Shards 0..2 of 3 of a TRK job, and shard 1 of another job (rng_seed)."""
    d = tmp_path_factory.mktemp("shard_parts")
    job = job_for(small_phantom, "trk")
    job_path = write_job(d / "job.json", job)
    job["seeds"]["rng_seed"] = 8
    other_path = write_job(d / "other.json", job)
    out = {}
    for k in range(3):
        out[k] = d / f"p{k}.trk"
        run(tractd, job_path, out[k], "--shard", f"{k}/3")
    out["other"] = d / "other1.trk"
    run(tractd, other_path, out["other"], "--shard", "1/3")
    out["whole"] = d / "whole.trk"
    run(tractd, job_path, out["whole"])
    out["four"] = d / "q1.trk"
    run(tractd, job_path, out["four"], "--shard", "1/4")
    return out


def test_merge_refuses_missing_duplicate_and_foreign_parts(tractd, parts, tmp_path):
    out = tmp_path / "m.trk"
    proc = merge(tractd, out, parts[0], parts[2])
    assert proc.returncode == 3 and "shard 1/3" in proc.stderr and "missing" in proc.stderr
    proc = merge(tractd, out, parts[0], parts[1], parts[1], parts[2])
    assert proc.returncode == 3 and "again" in proc.stderr and str(parts[1]) in proc.stderr
    proc = merge(tractd, out, parts[0], parts["other"], parts[2])
    assert proc.returncode == 3 and "another job" in proc.stderr
    assert str(parts["other"]) in proc.stderr
    proc = merge(tractd, out, parts[0], parts["four"], parts[2])
    assert proc.returncode == 3 and str(parts["four"]) in proc.stderr and "of 4" in proc.stderr
    proc = merge(tractd, out, parts[0], parts["whole"], parts[2])
    assert proc.returncode == 3 and "no shard record" in proc.stderr
    assert str(parts["whole"]) in proc.stderr
    proc = merge(tractd, parts[0], parts[0], parts[1], parts[2])
    assert proc.returncode == 3 and "also a part" in proc.stderr
    assert not out.exists()
    assert merge(tractd, out).returncode == 2
    merge(tractd, out, parts[2], parts[0], parts[1]).check_returncode()
    assert_same_bytes(parts["whole"], out)


def test_bad_shards_refused(tractd, small_phantom, tmp_path):
    job = job_for(small_phantom, "trk")
    job_path = write_job(tmp_path / "job.json", job)
    for bad in ("3/3", "1", "a/4", "-1/4", "1/0"):
        proc = run_cli(tractd, ["run", job_path, "-o", tmp_path / "x.trk", "--shard", bad])
        assert proc.returncode == 2 and "--shard" in proc.stderr, (bad, proc.stderr)
    job["seeds"]["shard"] = "3/3"
    proc = run_cli(tractd, ["run", write_job(tmp_path / "bad.json", job), "-o",
                            tmp_path / "x.trk"])
    assert proc.returncode == 3 and "seeds.shard" in proc.stderr
    job["seeds"]["shard"] = "0/1000"
    proc = run_cli(tractd, ["run", write_job(tmp_path / "many.json", job), "-o",
                            tmp_path / "x.trk"])
    assert proc.returncode == 3 and "seeds.shard" in proc.stderr and "1000 shards" in proc.stderr


def test_select_with_shard_refused(tractd, small_phantom, tmp_path):
    job = job_for(small_phantom, "trk")
    job["seeds"]["select"] = 10
    job_path = write_job(tmp_path / "select.json", job)
    proc = run_cli(tractd, ["run", job_path, "-o", tmp_path / "x.trk", "--shard", "0/2"])
    assert proc.returncode == 3
    assert "seeds.shard" in proc.stderr and "seeds.select" in proc.stderr
    job["seeds"]["shard"] = "1/2"
    proc = run_cli(tractd, ["run", write_job(tmp_path / "doc.json", job), "-o",
                            tmp_path / "x.trk"])
    assert proc.returncode == 3 and "seeds.shard" in proc.stderr


def test_shard_in_the_document_equals_the_option(tractd, small_phantom, tmp_path):
    job = job_for(small_phantom, "trx")
    job_path = write_job(tmp_path / "job.json", job)
    by_option = tmp_path / "opt.trx"
    run(tractd, job_path, by_option, "--shard", "1/2")
    job["seeds"]["shard"] = "1/2"
    by_doc = tmp_path / "doc.trx"
    run(tractd, write_job(tmp_path / "doc.json", job), by_doc)
    assert_same_bytes(by_option, by_doc)


def test_merged_statistics_are_the_whole_jobs(tractd, small_phantom, tmp_path):
    """Each shard's --stats-json carries its shard; merge --part-stats sums
    them into the whole job's counts and stop reasons, each shard once."""
    job_path = write_job(tmp_path / "job.json", job_for(small_phantom, "trk"))
    run(tractd, job_path, tmp_path / "whole.trk", "--stats-json", tmp_path / "whole.json")
    parts, stats = [], []
    for k in range(3):
        parts.append(tmp_path / f"p{k}.trk")
        stats.append(tmp_path / f"p{k}.json")
        run(tractd, job_path, parts[k], "--shard", f"{k}/3", "--stats-json", stats[k])
        assert json.loads(stats[k].read_text())["shard"] == {"index": k, "count": 3}
    opts = [a for s in reversed(stats) for a in ("--part-stats", s)]
    run_cli(tractd, ["merge", tmp_path / "m.trk", *parts, "--stats-json", tmp_path / "m.json",
                     *opts, "-q"], check=True)
    whole, merged = (json.loads((tmp_path / n).read_text()) for n in ("whole.json", "m.json"))
    for key in ("seeds", "streamlines", "points", "stop_reasons", "seeds_without_direction"):
        assert merged[key] == whole[key], key
    assert merged["shards"] == 3
    proc = run_cli(tractd, ["merge", tmp_path / "m2.trk", *parts, "--stats-json",
                            tmp_path / "m2.json", *opts[:4]])
    assert proc.returncode == 3 and "shard 0/3" in proc.stderr and "missing" in proc.stderr


def test_track_shard_option(tractd, small_phantom, tmp_path):
    """`tractd track --shard K/N` puts seeds.shard in the job it composes."""
    proc = run_cli(tractd, ["track", small_phantom / "dwi.nii.gz", tmp_path / "t.trk",
                            "--shard", "2/5", "--seed-roi", small_phantom / "seed_roi.nii.gz",
                            "--print-job"], check=True)
    assert json.loads(proc.stdout)["seeds"]["shard"] == "2/5"
    proc = run_cli(tractd, ["track", small_phantom / "dwi.nii.gz", tmp_path / "t.trk",
                            "--shard", "5/5", "--print-job"])
    assert proc.returncode == 2 and "--shard" in proc.stderr


def test_part_without_count_refused(tractd, small_phantom, parts, tmp_path):
    """A TRK part written to a pipe keeps 0 streamlines in its header: merge
    refuses it rather than write a wrong count."""
    job_path = write_job(tmp_path / "job.json", job_for(small_phantom, "trk"))
    piped = subprocess.run([tractd, "run", str(job_path), "-o", "-", "-q", "--shard", "0/3"],
                           capture_output=True, check=True).stdout
    part = tmp_path / "piped0.trk"
    part.write_bytes(piped)
    proc = merge(tractd, tmp_path / "m.trk", part, parts[1], parts[2])
    assert proc.returncode == 3 and "no streamline count" in proc.stderr
    assert str(part) in proc.stderr


def subject_copy(phantom_dir, dest, change_stop_map):
    """The phantom's ODF job inputs under another directory: the same bytes,
    or (change_stop_map) a stop map one corner voxel apart, as another
    subject's (or a re-made map) with the same grid would be."""
    dest.mkdir()
    for name in ("job.json", "odf.nii.gz", "fa.nii.gz", "seed_roi.nii.gz"):
        shutil.copy(phantom_dir / name, dest / name)
    if change_stop_map:
        image = bytearray(gzip.decompress((dest / "fa.nii.gz").read_bytes()))
        image[-4:] = bytes([0, 0, 0, 0x3f])     # the last voxel's float32: 0.5
        (dest / "fa.nii.gz").write_bytes(gzip.compress(bytes(image)))
    return dest


def test_merge_refuses_parts_of_other_inputs(tractd, small_phantom, tmp_path):
    """The same job document on other input files (the fingerprint leaves
    the files' names out) is another job: merge refuses the mix, naming
    the part; the same bytes under another name merge as one job."""
    second = {}
    for tag, changed in (("same", False), ("other", True)):
        job = job_for(subject_copy(small_phantom, tmp_path / tag, changed), "trk")
        second[tag] = tmp_path / f"{tag}1.trk"
        run(tractd, write_job(tmp_path / f"{tag}.json", job), second[tag], "--shard", "1/2")
    job_path = write_job(tmp_path / "job.json", job_for(small_phantom, "trk"))
    first, whole = tmp_path / "p0.trk", tmp_path / "whole.trk"
    run(tractd, job_path, first, "--shard", "0/2")
    run(tractd, job_path, whole)
    out = tmp_path / "m.trk"
    proc = merge(tractd, out, first, second["other"])
    assert proc.returncode == 3 and "other input files" in proc.stderr, proc.stderr
    assert str(second["other"]) in proc.stderr and not out.exists()
    merge(tractd, out, first, second["same"]).check_returncode()
    assert_same_bytes(whole, out)
