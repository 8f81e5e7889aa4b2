"""The README's command lines run as written.

README's first block under "Running a job" is run by tests/engine/test_examples.py;
its `tractd track` block, the daemon's first block (`tractd serve &` ... `kill
%1`) and the curl walk-through are run here. The daemon's second block (`id=$(tractctl
submit job.json)`...) is not: it names a job.json and a volume id
(`sha256:9f86d0...`) that are placeholders, not files of a walk-through.

The curl walk-through of "The daemon" is taken from README.md as it is and
run with bash (errexit, pipefail) in a directory holding build/demo, the
phantom the quick start writes (`tractd phantom --sphere repulsion724`, as
scripts/demo.sh does), against a daemon listening where the block looks for
it ($XDG_RUNTIME_DIR/tractd.sock). It ran nowhere as written before: the
socket path was wrong for root, and the job it posted was refused for
output.path, then for naming local files.
"""
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import nibabel as nib

from .support import assert_same_trk, daemon_env, short_tmpdir

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_block(after):
    """The first ```sh block of README.md after the text `after`."""
    text = README.read_text()
    start = text.index(after)
    m = re.compile(r"```sh\n(.*?)```", re.S).search(text, start)
    assert m, f"no sh block after {after!r} in README.md"
    return m.group(1)


def test_curl_walkthrough(daemon_factory, tractd, tmp_path):
    block = readme_block("With curl, on the phantom")
    demo = tmp_path / "build" / "demo"
    subprocess.run([tractd, "phantom", "-q", "--sphere", "repulsion724", demo], check=True,
                   timeout=300, env=daemon_env())
    d = daemon_factory(tcp=False)
    env = dict(daemon_env(), XDG_RUNTIME_DIR=str(d.sock.parent))
    p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"exit {p.returncode}\n{block}\nstdout:\n{p.stdout}\n{p.stderr}"
    assert '"status":"ok"' in p.stdout, p.stdout
    assert "tractd_jobs_total" in p.stdout, p.stdout
    # Both copies streamed while their jobs ran: n_count may be 0 in either.
    fetched = (demo / "tracks.trk").read_bytes()
    streamed = (demo / "tracks-streamed.trk").read_bytes()
    assert_same_trk(fetched[:988] + b"\0\0\0\0" + fetched[992:], streamed,
                    "the streamed copy", allow_zero_n_count=True)
    trk = nib.streamlines.load(str(demo / "tracks.trk"))
    assert len(trk.streamlines) > 1000, len(trk.streamlines)
    # The job and the ROI's upload were deleted; the ODF and FA stay.
    jobs = d.unix.get_json("/v1/jobs")["jobs"]
    assert len(jobs) == 1, jobs          # the ?wait=stream job only
    assert len(d.unix.get_json("/v1/volumes")["volumes"]) == 2


def run_block(block, cwd, env, timeout=600):
    """Runs block with bash (errexit, pipefail) in its own process group,
    which is killed afterwards: a daemon the block started in the background
    does not outlive a block that failed before its `kill %1`. Its output
    goes to files, which such a daemon would keep open as it would pipes."""
    with open(cwd / "block.out", "w+") as out, open(cwd / "block.err", "w+") as err:
        proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", block], cwd=cwd, env=env,
                                stdout=out, stderr=err, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read()
    assert proc.returncode == 0, f"exit {proc.returncode}\n{block}\nstdout:\n{text}\n{errors}"
    return text


def test_daemon_first_block(tractd, tractctl, tmp_path):
    """The daemon's first block as written, in a directory where build/tractd
    and build/tractctl are the binaries under test and build/demo a small
    phantom in the quick start's layout (`tractd phantom --sphere
    repulsion724`, 24x24x16 voxels and 300 seeds to stay fast), $HOME the
    test's (the daemon's state_dir), $XDG_RUNTIME_DIR a short directory. `wait
    %1` is added after it: the daemon's exit status after `kill %1`, 0."""
    block = readme_block("## The daemon")
    build = tmp_path / "build"
    build.mkdir()
    (build / "tractd").symlink_to(tractd)
    (build / "tractctl").symlink_to(tractctl)
    subprocess.run([tractd, "phantom", "-q", "--sphere", "repulsion724", "--dim", "24,24,16",
                    "--seeds", "300", build / "demo"], check=True, timeout=300, env=daemon_env())
    env = {k: v for k, v in daemon_env().items()
           if k not in ("TRACTD_SOCKET", "XDG_STATE_HOME", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path), XDG_RUNTIME_DIR=str(short_tmpdir()))
    out = run_block(block + "wait %1\n", tmp_path, env)
    assert len(re.findall(r"^j-[0-9a-f]{16} +done ", out, re.M)) == 2, out
    assert re.search(r"^queue +0 queued, 0 running", out, re.M), out
    trk = nib.streamlines.load(str(tmp_path / "tracks.trk"))
    tck = nib.streamlines.load(str(tmp_path / "tracks.tck"))
    assert isinstance(tck, nib.streamlines.TckFile)
    assert len(trk.streamlines) > 0 and len(tck.streamlines) > 0


README_PHANTOM_DIR = "/tmp/ph"
# The block as written takes two minutes on lavapipe with 2 shared cores (PTT
# tracks 1000 seeds in 40 s there): the test writes a smaller phantom and
# tracks fewer seeds, nothing else changed.
README_PHANTOM_LINE = "tractd phantom --sphere repulsion724 /tmp/ph"
SMALL_PHANTOM_LINE = "tractd phantom --sphere repulsion724 --dim 24,24,16 /tmp/ph"
README_PTT_SEEDS, TEST_PTT_SEEDS = "--seeds 1000 --dg ptt", "--seeds 100 --dg ptt"


def test_track_block(tractd, tmp_path):
    """The `tractd track` block of "Running a job" as written, but for /tmp/ph
    (a directory of the test's), `tractd` (the binary under test, first on
    $PATH), the phantom's size and the seeds of PTT (see README_PHANTOM_LINE)."""
    block = readme_block("On the phantom (`tractd phantom DIR` writes")
    assert block.startswith(README_PHANTOM_LINE + "\n") and README_PTT_SEEDS in block, block
    block = block.replace(README_PHANTOM_LINE, SMALL_PHANTOM_LINE).replace(README_PTT_SEEDS,
                                                                           TEST_PTT_SEEDS)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tractd").symlink_to(tractd)
    ph = tmp_path / "ph"
    env = dict(daemon_env(), PATH=f"{bin_dir}:{os.environ['PATH']}")
    run_block(block.replace(README_PHANTOM_DIR, str(ph)), tmp_path, env)
    tck = nib.streamlines.load(str(ph / "tracks.tck"))
    assert isinstance(tck, nib.streamlines.TckFile) and len(tck.streamlines) > 0
    job = json.loads((tmp_path / "job.json").read_text())
    assert job["output"] == {"format": "trk", "path": str(ph / "tracks.trk")}
    assert not (ph / "tracks.trk").exists()
