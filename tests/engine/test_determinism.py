"""tractd's output is a function of the job alone (design: Philox keyed by
(job seed, seed index)): the same job gives byte-identical TRKs, and the same
stop reasons, whatever the chunking; a different rng_seed gives a different
tractogram. seeds.select N gives the first N streamlines of the same job
without it, whatever the chunking too."""
import json
import struct

import pytest

from conftest import load_trk, run_job

# Seeds per run: enough for many chunks at --max-chunk-seeds 7 (~290 chunks),
# small enough to keep the five runs quick on lavapipe.
N_SEEDS = 2000
SMALL_CHUNK_SEEDS = 7
# A GPU memory budget just above the inputs (the phantom's ODF is
# 48*48*24*362*4 B = 76 MiB) and the engine's minimum work space (8 MiB), so
# the ODF stays float32 and each chunk's streamlines run in many small batches.
TIGHT_BUDGET = "85M"
# A bound on one GPU submit's work (streamline steps) far below the default.
DISPATCH_STEPS = "20000"
# Read-back buffers far below the default 128 MiB.
READBACK_BYTES = "64K"
# A storage-buffer range that holds a few hundred streamlines' point slots
# (12,012 bytes each at max_steps 500): several batches a chunk.
SMALL_BINDING = "4M"


def _roi_job(phantom, rng_seed=0):
    seeds = dict(phantom.job["seeds"])
    seeds["roi"] = str(phantom.dir / seeds["roi"])
    seeds["count"] = N_SEEDS
    seeds["rng_seed"] = rng_seed
    return phantom.job_with(seeds=seeds)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("determinism")


@pytest.fixture(scope="module")
def reference(tractd, phantom, workdir):
    """The default run: (TRK bytes, stats)."""
    _, trk, stats = run_job(tractd, _roi_job(phantom), workdir, name="reference")
    data = trk.read_bytes()
    assert len(load_trk(trk)) > 0, "the reference run wrote no streamlines"
    return data, json.loads(stats.read_text())


def _diff_summary(a, b):
    if len(a) != len(b):
        return f"sizes differ: {len(a)} vs {len(b)} bytes"
    first = next(i for i in range(len(a)) if a[i] != b[i])
    return f"same size ({len(a)} bytes), first difference at byte {first}"


def test_same_job_twice(tractd, phantom, workdir, reference):
    _, trk, _ = run_job(tractd, _roi_job(phantom), workdir, name="again")
    data = trk.read_bytes()
    assert data == reference[0], "same job, different output: " + _diff_summary(data, reference[0])


@pytest.mark.parametrize("flag,value,counter,minimum", [
    ("--max-chunk-seeds", SMALL_CHUNK_SEEDS, "chunks", -(-N_SEEDS // SMALL_CHUNK_SEEDS)),
    ("--gpu-memory-budget", TIGHT_BUDGET, "batches", 5),
    # One submit of at most DISPATCH_STEPS steps: max_steps 500 -> 40 items per
    # submit, so every seed chunk and streamline batch is split many times.
    ("--max-dispatch-steps", DISPATCH_STEPS, "submits", N_SEEDS // 40),
    # Read-back buffers of 64 KiB hold five streamlines of max_steps each and
    # about a hundred of the phantom's: every batch goes out in many pieces.
    ("--readback-bytes", READBACK_BYTES, "pieces", 10),
])
def test_chunking_does_not_change_output(tractd, phantom, workdir, reference, flag, value,
                                         counter, minimum):
    name = f"{flag.strip('-').replace('-', '_')}_{value}"
    _, trk, stats_path = run_job(tractd, _roi_job(phantom), workdir, name=name,
                                 extra_args=[flag, value])
    stats = json.loads(stats_path.read_text())
    print(f"\n{flag} {value}: {stats['chunks']} chunks, {stats['batches']} batches, "
          f"{stats['submits']} submits "
          f"(default run: {reference[1]['chunks']}, {reference[1]['batches']}, "
          f"{reference[1]['submits']})")
    assert stats[counter] >= minimum, (
        f"{flag} {value} ran {stats[counter]} {counter}, expected >= {minimum}")
    data = trk.read_bytes()
    assert data == reference[0], (f"{flag} {value} changed the output: "
                                  + _diff_summary(data, reference[0]))
    for key in ("stop_reasons", "seeds_without_direction"):
        assert stats[key] == reference[1][key], f"{flag} {value} changed {key}"


def test_batches_in_pieces_do_not_change_output(tractd, phantom, workdir, reference):
    """Many batches, each going out in several pieces: the next batch's
    tracking, queued behind a batch's compaction, reuses its line buffers, so
    it may start only after the batch's last piece is packed (engine.c's
    post_pieces); started after the first piece, the later pieces pack the
    next batch's points and this test fails."""
    _, trk, stats_path = run_job(tractd, _roi_job(phantom), workdir, name="batch_pieces",
                                 extra_args=["--max-binding-bytes", SMALL_BINDING,
                                             "--readback-bytes", READBACK_BYTES])
    stats = json.loads(stats_path.read_text())
    print(f"\n{stats['batches']} batches, {stats['pieces']} pieces")
    assert stats["batches"] >= 5 and stats["pieces"] >= 3 * stats["batches"], stats
    data = trk.read_bytes()
    assert data == reference[0], "batches in pieces changed the output: " + _diff_summary(
        data, reference[0])


def test_different_rng_seed_differs(tractd, phantom, workdir, reference):
    _, trk, _ = run_job(tractd, _roi_job(phantom, rng_seed=12345), workdir, name="rng")
    data = trk.read_bytes()
    assert data != reference[0], "rng_seed 12345 gave the same output as rng_seed 0"
    assert len(load_trk(trk)) > 0


# ---- seeds.select: the first N streamlines in seed order -------------------

SELECT = 300


def _select_job(phantom, select=SELECT, count=N_SEEDS):
    job = _roi_job(phantom)
    job["seeds"].update(count=count, select=select)
    return job


def _first_streamlines(trk_bytes, n):
    """The TRK of the first n streamlines of trk_bytes (no scalars or
    properties): its header with n_count n, then its first n records."""
    end = 1000
    for _ in range(n):
        end += 4 + 12 * struct.unpack_from("<i", trk_bytes, end)[0]
    return trk_bytes[:988] + struct.pack("<i", n) + trk_bytes[992:end]


@pytest.fixture(scope="module")
def selected(tractd, phantom, workdir):
    """The default run of the select job: (TRK bytes, stats)."""
    _, trk, stats = run_job(tractd, _select_job(phantom), workdir, name="select")
    return trk.read_bytes(), json.loads(stats.read_text())


def test_select_is_the_first_n(reference, selected):
    """seeds.select N writes exactly the first N streamlines of the same job
    without it, in seed order, and tells so: select and selected N, fewer
    seeds used than seeds.count, two ends counted per streamline considered."""
    data, stats = selected
    assert reference[1]["streamlines"] > SELECT
    assert data == _first_streamlines(reference[0], SELECT), (
        "not the first streamlines of the job without select: "
        + _diff_summary(data, _first_streamlines(reference[0], SELECT)))
    assert stats["streamlines"] == stats["selected"] == stats["select"] == SELECT, stats
    assert 0 < stats["seeds"] < N_SEEDS, stats
    assert "select" not in reference[1], reference[1]
    assert 2 * SELECT <= sum(stats["stop_reasons"].values()), stats


# The default run's chunks hold about as many seeds as streamlines are
# missing (300, then the rest) on one device; these split the work otherwise.
@pytest.mark.parametrize("flag,value,counter", [
    ("--max-chunk-seeds", 64, "chunks"),
    ("--max-chunk-seeds", SMALL_CHUNK_SEEDS, "chunks"),
    ("--readback-bytes", READBACK_BYTES, "pieces"),
    # Two contexts on the one GPU: chunks go to whichever is free.
    ("--device", "0,0", "devices"),
])
def test_select_does_not_depend_on_chunking(tractd, phantom, workdir, selected, flag, value,
                                            counter):
    """The same bytes, seeds used, stop reasons and seeds without a direction
    whatever the chunks: a chunk tracked past the N-th streamline writes
    nothing and counts nothing."""
    name = f"select_{flag.strip('-')}_{value}"
    _, trk, stats_path = run_job(tractd, _select_job(phantom), workdir, name=name,
                                 extra_args=[flag, value])
    stats = json.loads(stats_path.read_text())
    assert stats[counter] > selected[1][counter], (counter, stats[counter], selected[1][counter])
    data = trk.read_bytes()
    assert data == selected[0], f"{flag} {value} changed the output: " + _diff_summary(
        data, selected[0])
    for key in ("seeds", "streamlines", "points", "selected", "stop_reasons",
                "seeds_without_direction"):
        assert stats[key] == selected[1][key], f"{flag} {value} changed {key}"


def test_select_beyond_the_seeds(tractd, phantom, workdir):
    """More streamlines asked for than the seeds give: the job succeeds with
    all of them (the bytes of the job without select), warns as tckgen does
    and tells selected < select; every seed was used."""
    few = 60
    job = _roi_job(phantom)
    job["seeds"]["count"] = few
    _, whole, _ = run_job(tractd, job, workdir, name="few")
    proc, trk, stats_path = run_job(tractd, _select_job(phantom, select=100000, count=few),
                                    workdir, name="few_select", extra_args=["-v"])
    stats = json.loads(stats_path.read_text())
    assert trk.read_bytes() == whole.read_bytes()
    assert stats["select"] == 100000 and stats["selected"] == stats["streamlines"] < 100000
    assert stats["seeds"] == few, stats
    assert "warning: seeds.select: only" in proc.stderr, proc.stderr
