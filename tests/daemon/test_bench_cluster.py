"""bench/cluster.sh (the lead runs it on the GPU machine through `make
bench`) at tiny sizes on lavapipe: the shard section times the whole job and
each split, and its merged bytes equal the whole run's; the cohort section
runs scripts/slurm/tractd-pilot without Slurm and one `tractd track` per
subject, prints subjects/minute both ways and finds the outputs identical."""

import os
import re
import subprocess
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cluster.sh"
NUMBER = r"[0-9]+\.[0-9]+"


def test_cluster_bench_tiny(tractd, tmp_path):
    env = {**os.environ, "BENCH_DIR": str(tmp_path / "bench"), "BENCH_SHARD_CASE": "small",
           "BENCH_SHARD_SEEDS": "300", "BENCH_SHARD_SPLITS": "1 2",
           "BENCH_COHORT_SUBJECTS": "2", "BENCH_COHORT_SEEDS": "100",
           "BENCH_COHORT_DIM": "24,24,16"}
    proc = subprocess.run(["sh", str(BENCH), tractd], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(rf"^  whole +1 +- +- +{NUMBER} +1\.00 reference$", out, re.M), out
    for n in (1, 2):
        assert re.search(rf"^  {n} +1 +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} yes$", out, re.M), out
    assert re.search(rf"one pilot daemon \(tractd-pilot\) +{NUMBER} +{NUMBER}$", out, re.M), out
    assert re.search(rf"one tractd track per subject +{NUMBER} +{NUMBER}$", out, re.M), out
    assert "outputs identical: 2 of 2" in out, out
