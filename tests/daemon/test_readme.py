"""The README's command lines run as written.

The curl walk-through of "The daemon" is taken from README.md as it is and
run with bash (errexit, pipefail) in a directory holding build/demo, the
phantom the quick start writes (`tractd phantom --sphere repulsion724`, as
scripts/demo.sh does), against a daemon listening where the block looks for
it ($XDG_RUNTIME_DIR/tractd.sock). It ran nowhere as written before: the
socket path was wrong for root, and the job it posted was refused for
output.path, then for naming local files.
"""
import re
import subprocess
from pathlib import Path

import nibabel as nib

from .support import assert_same_trk, daemon_env

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
