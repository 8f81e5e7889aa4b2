"""Sharded jobs through the daemon: a job with seeds.shard (one submitted
per shard, as a cluster's per-node daemons would get them) writes the same
bytes as `tractd run --shard` of the same job on local paths, and the
shards fetched from the daemon merge into the whole job's output;
max_seeds_per_job counts a shard's seeds, not its job's."""
import json
import re
import subprocess

from .support import (assert_same_trk, local_job, run_to_completion, server_job, submit,
                      upload_phantom, wait_job)

JOB = dict(count=300, rng_seed=5)
SHARDS = 3


def _cli(tractd, phantom, tmp_path, name, *extra):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(local_job(phantom, **JOB)))
    out = tmp_path / name
    subprocess.run([tractd, "run", str(path), "-o", str(out), "-q", *extra], check=True)
    return out


def test_daemon_shards_equal_cli_shards_and_merge(daemon, volumes, phantom, tractd, tmp_path):
    parts = []
    for k in range(SHARDS):
        doc, body = run_to_completion(daemon.api,
                                      server_job(phantom, volumes, shard=f"{k}/{SHARDS}", **JOB))
        assert doc["progress"]["seeds_total"] in (300 // SHARDS, 300 // SHARDS + 1), doc
        want = _cli(tractd, phantom, tmp_path, f"cli{k}.trk", "--shard", f"{k}/{SHARDS}")
        assert_same_trk(body, want.read_bytes(), f"shard {k}/{SHARDS}")
        part = tmp_path / f"daemon{k}.trk"
        part.write_bytes(body)
        parts.append(part)
    merged = tmp_path / "merged.trk"
    subprocess.run([tractd, "merge", str(merged), *map(str, reversed(parts)), "-q"], check=True)
    whole = _cli(tractd, phantom, tmp_path, "whole.trk")
    assert_same_trk(merged.read_bytes(), whole.read_bytes(), "merged daemon shards")


def test_daemon_refuses_select_with_shard(daemon, volumes, phantom):
    r = daemon.api.post_json("/v1/jobs", server_job(phantom, volumes, shard="0/2", select=5,
                                                    **JOB))
    assert r.status == 400, str(r)
    assert "seeds.shard" in r.body.decode(), r.body


def test_seed_limit_counts_the_shards_seeds(daemon_factory, phantom, tractd, tmp_path):
    """max_seeds_per_job = 100: the 300-seed job in 3 shards runs on it (and
    merges into the whole job's output), in 2 shards (150 each) is refused at
    once (422 limit_exceeded naming seeds.count and the shard); per-voxel
    seeds, counted when the job runs, fail a shard over the limit and not
    one under it."""
    d = daemon_factory(tcp=False, sets=["max_seeds_per_job=100"])
    ids = upload_phantom(d.unix, phantom)
    parts = []
    for k in range(SHARDS):
        _, body = run_to_completion(d.unix, server_job(phantom, ids, shard=f"{k}/{SHARDS}",
                                                       **JOB))
        parts.append(tmp_path / f"daemon{k}.trk")
        parts[-1].write_bytes(body)
    merged = tmp_path / "merged.trk"
    subprocess.run([tractd, "merge", str(merged), *map(str, parts), "-q"], check=True)
    whole = _cli(tractd, phantom, tmp_path, "whole.trk")
    assert_same_trk(merged.read_bytes(), whole.read_bytes(), "merged capped shards")

    r = d.unix.post_json("/v1/jobs", server_job(phantom, ids, shard="0/2", **JOB))
    assert r.status == 422 and r.error["code"] == "limit_exceeded", str(r)
    assert r.error["field"] == "seeds.count", r.error
    assert "shard 0/2 tracks 150 of the job's 300 seeds" in r.error["message"], r.error
    assert "max_seeds_per_job" in r.error["message"], r.error

    per_voxel = dict(count=1, per_voxel=True, rng_seed=5)
    doc = wait_job(d.unix, submit(d.unix, server_job(phantom, ids, shard="0/1", **per_voxel)))
    assert doc["status"] == "failed" and doc["error"]["field"] == "seeds.count", doc
    found = re.search(r"shard 0/1 tracks (\d+) of the job's (\d+) seeds", doc["error"]["message"])
    assert found and found[1] == found[2] and int(found[1]) > 100, doc
    enough = -(-int(found[1]) // 100)
    doc = wait_job(d.unix, submit(d.unix, server_job(phantom, ids, shard=f"0/{enough}",
                                                     **per_voxel)))
    assert doc["status"] == "done", doc
