"""The tail of a warm job's result (issue 24): the daemon writes a job in
chunks that double from the first (each at most the seeds handed out before
it, and at most the half second of tracking the rate allows), so that a job
tracked faster than that still reaches a ?wait=stream client while it is
tracked; the result is the same bytes as `tractd run` whatever the chunks.
A finished result is served whole with its length, from the file. No timed
assertions: chunk sizes from the daemon's debug log, and bytes."""
import re
import subprocess
import sys
from pathlib import Path

from .support import (assert_same_trk, fetch_tractogram, local_job, run_to_completion,
                      server_job, upload_phantom, wait_job)

FIRST_CHUNK_SEEDS = 256     # engine.c's FIRST_TIMED_CHUNK_SEEDS
# Four steps a streamline: the first chunk tracks in well under the half
# second a chunk is sized to, so the rate alone would make the second chunk
# all the rest (as a fast GPU does for 100,000 seeds).
FAST = dict(count=1500, rng_seed=5, tracking={"max_steps": 4})
CHUNK_LOG = re.compile(r"chunk (\d+): (\d+) seeds")
GROWTH_LOG = re.compile(r"line buffers for (\d+) streamlines allocated")


def test_fast_job_streams_in_doubling_chunks(daemon_factory, phantom, references):
    """Each chunk after the first holds at most the seeds before it, so a fast
    1,500-seed job goes out in four chunks (256, 256, 512, 476) rather than two,
    and its first records are in the spool before it is tracked; its line
    buffers grow once, at the first chunk; the streamed bytes are `tractd
    run`'s (n_count possibly 0)."""
    d = daemon_factory()
    ids = upload_phantom(d.api, phantom)
    run_to_completion(d.api, server_job(phantom, ids, count=100))   # compiles: not counted
    log_start = len(d.log(tail=100000))
    logged = len(CHUNK_LOG.findall(d.log(tail=100000)))
    r = d.api.post_json("/v1/jobs?wait=stream", server_job(phantom, ids, **FAST))
    assert r.status == 200, str(r)
    doc = wait_job(d.api, r.headers["x-tractd-job"])
    assert doc["status"] == "done", doc
    chunks = [int(n) for _, n in CHUNK_LOG.findall(d.log(tail=100000))[logged:]]
    assert sum(chunks) == FAST["count"], chunks
    assert chunks[0] == FIRST_CHUNK_SEEDS, chunks
    for k in range(1, len(chunks)):
        assert chunks[k] <= max(sum(chunks[:k]), FIRST_CHUNK_SEEDS), chunks
    assert len(chunks) >= 4, chunks
    # The first chunk sizes the line buffers for the largest the job can
    # hold (half its seeds), so the doubling chunks grow them no more.
    growths = GROWTH_LOG.findall(d.log(tail=100000)[log_start:])
    assert len(growths) == 1, growths
    timing = doc["timing"]
    assert timing["first_output"] < timing["tracked"], timing
    assert_same_trk(r.body, references.trk(local_job(phantom, **FAST)), "streamed tractogram",
                    allow_zero_n_count=True)


def test_selection_sizes_the_line_buffers(daemon_factory, phantom):
    """With seeds.select, chunks hold about the streamlines still missing, so
    the line buffers are sized by the selection, not by the seed count: 300
    streamlines of 100,000 seeds take buffers for at most 1,024 lines (the
    next power of two above 300 at some 1.2 streamlines a seed)."""
    d = daemon_factory()
    ids = upload_phantom(d.api, phantom)
    log_start = len(d.log(tail=100000))
    doc, _ = run_to_completion(d.api, server_job(phantom, ids, count=100000, select=300))
    assert doc["result"]["selected"] == 300, doc
    growths = [int(n) for n in GROWTH_LOG.findall(d.log(tail=100000)[log_start:])]
    assert growths and max(growths) <= 1024, growths


def test_finished_result_served_with_its_length(daemon, volumes, phantom):
    """A done job's tractogram is the spool file's bytes, sent with a
    Content-Length equal to the recorded size (not chunked), so a client
    can tell a cut answer."""
    doc, body = run_to_completion(daemon.api, server_job(phantom, volumes, count=300,
                                                         rng_seed=9))
    r = daemon.api.get(f"/v1/jobs/{doc['id']}/tractogram")
    assert r.status == 200, str(r)
    assert "chunked" not in r.headers.get("transfer-encoding", ""), r.headers
    assert r.headers.get("content-length") == str(doc["result"]["bytes"]), r.headers
    assert r.headers.get("x-tractd-job") == doc["id"], r.headers
    spooled = (daemon.state_dir / "spool" / f"{doc['id']}.tractogram").read_bytes()
    assert r.body == spooled == body
    assert fetch_tractogram(daemon.api, doc["id"]) == spooled


def test_warm_jobs_bench_prints_the_tail(tractd, phantom):
    """bench/warm_jobs.py (run on the GPU host by the lead) prints each step
    of the jobs' timing, the client's first byte and how much of the result
    it had by `tracked` and by `done`."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "warm_jobs.py"
    out = subprocess.run([sys.executable, str(bench), tractd, str(phantom.dir), "--seeds", "300",
                          "--runs", "2"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for label in ("client wall time", "tracking -> first_output", "tracked -> synced",
                  "done -> client has it", "request -> client's first byte", "by tracked",
                  "by done", "result:"):
        assert label in out.stdout, out.stdout
    by_done = re.search(r"by done\s+([\d.]+)", out.stdout)
    assert by_done and 0.0 <= float(by_done.group(1)) <= 100.0, out.stdout
