"""Sharded jobs through the daemon: a job with seeds.shard (one submitted
per shard, as a cluster's per-node daemons would get them) writes the same
bytes as `tractd run --shard` of the same job on local paths, and the
shards fetched from the daemon merge into the whole job's output."""
import json
import subprocess

from .support import assert_same_trk, local_job, run_to_completion, server_job

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
