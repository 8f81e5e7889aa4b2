"""tractd run's progress within a seed chunk, in a log (-v, stderr not a
terminal) and on a terminal (a pseudo-terminal as stderr).

One chunk (--max-chunk-seeds above the seed count) tracked in several
submits (a small --max-dispatch-steps): the seeds-done figure must pass
values strictly between 0 and the total before the chunk is written.
"""
import json
import os
import pty
import re
import subprocess

import pytest

from conftest import RUN_TIMEOUT_S, run_cli, write_job

SEEDS = 300
ONE_CHUNK = ["--max-chunk-seeds", "1000000", "--max-dispatch-steps", "20000"]
LINE = re.compile(r"tracking +(\d+)% \((\d+)/(\d+) seeds, (\d+) streamlines")


@pytest.fixture(scope="module")
def small_job(tractd, tmp_path_factory):
    """A 24x24x16 phantom's prob job of SEEDS seeds."""
    outdir = tmp_path_factory.mktemp("progress_phantom")
    run_cli(tractd, ["phantom", "--dim", "24,24,16", "--seeds", SEEDS, outdir], check=True)
    job = json.loads((outdir / "job.json").read_text())
    job.pop("output", None)
    return write_job(outdir / "one_chunk.json", job)


def seeds_shown(text):
    """The (seeds done, total) pairs of the progress lines in text, in order."""
    return [(int(m[2]), int(m[3])) for m in LINE.finditer(text)]


def assert_advances_within_the_chunk(shown, stats):
    assert stats["chunks"] == 1, stats
    assert stats["submits"] > 3, stats
    done = [d for d, _ in shown]
    assert all(total == SEEDS for _, total in shown), shown
    assert done == sorted(done), f"seeds done went back: {done}"
    assert done[-1] == SEEDS, shown
    assert any(0 < d < SEEDS for d in done), f"no progress within the chunk: {shown}"


def test_verbose_log_shows_progress_within_a_chunk(tractd, small_job, tmp_path):
    """-v with stderr to a file: info lines per tenth of the seeds, the last at 100 %."""
    stats = tmp_path / "stats.json"
    proc = run_cli(tractd, ["run", small_job, "-o", tmp_path / "out.trk", "-v",
                            "--stats-json", stats, "--pipeline-cache", "none", *ONE_CHUNK],
                   check=True)
    shown = seeds_shown(proc.stderr)
    assert_advances_within_the_chunk(shown, json.loads(stats.read_text()))
    assert len(shown) <= 11, f"more than a line per tenth:\n{proc.stderr}"
    assert "\r" not in proc.stderr


def test_device_seconds_are_the_kernels_on_the_devices_clock(tractd, small_job, tmp_path):
    """--stats-json's seconds.device sums each kernel's batches by the
    device's timestamps (lavapipe keeps a clock): every submit's share, so
    within the host's wait for them ("kernels") but not far below it on a
    device that runs nothing else; the summary line says the same."""
    stats = tmp_path / "stats.json"
    proc = run_cli(tractd, ["run", small_job, "-o", tmp_path / "out.trk", "--stats-json", stats,
                            "--pipeline-cache", "none", *ONE_CHUNK], check=True)
    doc = json.loads(stats.read_text())
    seconds, device = doc["seconds"], doc["seconds"]["device"]
    assert doc["submits"] > 3, doc
    assert set(device) == {"init", "track", "compact"}, device
    assert all(device[k] > 0 for k in device), device
    on_device = sum(device.values())
    assert on_device <= seconds["kernels"], seconds
    assert on_device > 0.5 * seconds["kernels"], seconds
    assert re.search(r"on the device: init [0-9.]+ s, track [0-9.]+ s, compact [0-9.]+ s",
                     proc.stderr), proc.stderr


def test_each_device_says_where_its_time_went(tractd, small_job, tmp_path):
    """-v: each device's line at the end of a run (two logical devices on
    lavapipe here) gives its chunks, when its tracking and its writing ended,
    its kernels' seconds and its threads' waits, consistent with the run's
    statistics: the chunks add up, each device's kernels are within its
    tracking's time, and the waits within the run."""
    stats = tmp_path / "stats.json"
    proc = run_cli(tractd, ["-v", "run", small_job, "-o", tmp_path / "out.trk", "--stats-json",
                            stats, "--pipeline-cache", "none", "--device", "0,0",
                            "--max-chunk-seeds", "50"], check=True)
    doc = json.loads(stats.read_text())
    lines = re.findall(r"device (\d+): (\d+) chunk\(s\), tracked by ([0-9.]+) s and written by "
                       r"([0-9.]+) s from the run's start; kernels ([0-9.]+) s; its chunks' seeds and "
                       r"lists ([0-9.]+) s; its tracking waited ([0-9.]+) s for a write slot, its writer ([0-9.]+) s for the "
                       r"chunks before its own", proc.stderr)
    assert [int(line[0]) for line in lines] == [0, 1], proc.stderr
    assert sum(int(line[1]) for line in lines) == doc["chunks"], (lines, doc)
    assert abs(sum(float(line[4]) for line in lines) - doc["seconds"]["kernels"]) < 0.01, lines
    run_wall = doc["seconds"]["track"] + doc["seconds"]["encode"] + doc["seconds"]["write"]
    for _, _, tracked, written, kernels, listing, slot_wait, turn_wait in lines:
        assert 0 < float(kernels) <= float(tracked) <= float(written) <= run_wall + 0.01, lines
        assert float(kernels) + float(listing) + float(slot_wait) <= float(tracked) + 0.01, lines
        assert float(turn_wait) <= run_wall, lines


def test_log_without_verbose_has_no_progress(tractd, small_job, tmp_path):
    """A log at the default level stays free of progress lines."""
    proc = run_cli(tractd, ["run", small_job, "-o", tmp_path / "out.trk",
                            "--pipeline-cache", "none", *ONE_CHUNK], check=True)
    assert seeds_shown(proc.stderr) == [], proc.stderr


def test_terminal_line_advances_within_a_chunk(tractd, small_job, tmp_path):
    """On a terminal, the self-overwriting line is redrawn within the chunk."""
    stats = tmp_path / "stats.json"
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([tractd, "run", str(small_job), "-o", str(tmp_path / "out.trk"),
                             "--stats-json", str(stats), "--pipeline-cache", "none",
                             *ONE_CHUNK], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=terminal)
    os.close(terminal)
    chunks = []
    while True:
        try:
            data = os.read(controller, 65536)
        except OSError:          # EIO: the last writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(controller)
    assert proc.wait(timeout=RUN_TIMEOUT_S) == 0
    text = b"".join(chunks).decode()
    assert "\r" in text, text
    assert_advances_within_the_chunk(seeds_shown(text), json.loads(stats.read_text()))
