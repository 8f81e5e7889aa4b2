"""tractctl, the daemon's client ($TRACTCTL): `track` gives the bytes of
`tractd run` and uploads each input once; submit, status, list, wait, fetch,
cancel and device work, as text and as --json; a refused job exits 3 naming
the field, as does one that fails on its inputs once queued; no daemon 5.
Issue 20's points: `delete` (a running job too), `volumes` (list, delete),
`fetch --wait`, -o FILE's extension picking the format, and progress with
the time left and the fit stage in status, list and the progress line."""
import json
import os
import pty
import re
import subprocess

import nibabel as nib
import numpy as np
import pytest

from .support import (PHANTOM_INPUTS, RecordingProxy, assert_same_trk, daemon_env, free_port,
                      get_metrics, local_job, sha256_id, short_tmpdir, trk_n_count, wait_job,
                      wait_running)

PARITY = dict(count=2000, rng_seed=1234)
SMALL = dict(count=300, rng_seed=3)
# The first 250 streamlines of PARITY's job.
SELECT = dict(PARITY, select=250)
# About 9 s of tracking on lavapipe: still running when `cancel` comes.
CANCEL_SEEDS = 20000
JOB_ID = re.compile(r"^j-[0-9a-f]{16}$")


@pytest.fixture(scope="module")
def proxy(daemon):
    """A recording proxy in front of the module's daemon socket."""
    p = RecordingProxy(short_tmpdir() / "proxy.sock", daemon.sock)
    yield p
    p.close()


@pytest.fixture
def ctl(tractctl, daemon):
    """ctl(*args, socket=None) -> CompletedProcess of `tractctl --socket SOCK ARGS`."""
    def run(*args, socket=None, timeout=300):
        argv = [tractctl, "--socket", str(socket or daemon.sock), *map(str, args)]
        env = daemon_env()
        env.pop("TRACTD_SOCKET", None)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    return run


def _job_file(tmp_path, name, job):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(job, indent=1))
    return path


def _ok(p):
    assert p.returncode == 0, f"$ {' '.join(p.args)}\nexit {p.returncode}\n{p.stderr}"
    return p


def _volume_files(daemon):
    return sorted(p.name for p in (daemon.state_dir / "volumes").iterdir() if p.name != ".owners")


def test_track_matches_cli_and_uploads_once(ctl, daemon, proxy, phantom, references, tmp_path):
    """`tractctl track job.json -o out.trk` (local paths) exits 0 with out.trk
    byte-identical to `tractd run`; it uploads each input the daemon lacks;
    the second time it uploads nothing (no POST /v1/volumes passes the
    proxy, no 201 in the daemon's metrics, the store unchanged) and gives
    the same bytes again. No FILE.tmp is left."""
    want = references.trk(local_job(phantom, **PARITY))
    job = _job_file(tmp_path, "job", local_job(phantom, **PARITY))
    lacking = sum(daemon.api.request("HEAD", f"/v1/volumes/{vid}").status == 404
                  for vid in _local_ids(phantom))

    out1 = tmp_path / "first.trk"
    _ok(ctl("track", job, "-o", out1, socket=proxy.listen_path))
    assert_same_trk(out1.read_bytes(), want, "tractctl track")
    first = proxy.recorded()
    assert first.count("POST /v1/volumes") == lacking, first
    assert sum(r.startswith("POST /v1/jobs") for r in first) == 1, first

    proxy.clear()
    created = get_metrics(daemon.api).value('tractd_http_requests_total{code="201"}', 0)
    store = _volume_files(daemon)
    out2 = tmp_path / "second.trk"
    _ok(ctl("track", job, "-o", out2, socket=proxy.listen_path))
    assert_same_trk(out2.read_bytes(), want, "tractctl track (second run)")
    second = proxy.recorded()
    assert "POST /v1/volumes" not in second, second
    assert sum(r.startswith("POST /v1/jobs") for r in second) == 1, second
    assert get_metrics(daemon.api).value('tractd_http_requests_total{code="201"}', 0) == created
    assert _volume_files(daemon) == store
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.trk", "job.json", "second.trk"]


def test_track_select_matches_cli(ctl, daemon, phantom, references, tmp_path):
    """seeds.select through `tractctl track`: the daemon (its chunks sized by
    time) writes the bytes of `tractd run` (chunks from the device limits);
    the finished job tells select and selected, and its stop reasons,
    seeds without direction and seeds done are those of `tractd run`."""
    local = local_job(phantom, **SELECT)
    want, cli = references.trk(local), references.stats(local)
    out = tmp_path / "select.trk"
    doc = json.loads(_ok(ctl("track", _job_file(tmp_path, "select", local), "-o", out,
                             "--json")).stdout)
    assert_same_trk(out.read_bytes(), want, "tractctl track with seeds.select")
    assert trk_n_count(want) == SELECT["select"]
    assert doc["result"]["select"] == doc["result"]["selected"] == SELECT["select"], doc
    assert doc["result"]["stop_reasons"] == cli["stop_reasons"], (doc["result"], cli)
    assert doc["result"]["seeds_without_direction"] == cli["seeds_without_direction"]
    assert doc["progress"]["seeds_done"] == cli["seeds"] < PARITY["count"], (doc, cli)


def _local_ids(phantom):
    return [sha256_id(phantom.path(name)) for name in PHANTOM_INPUTS.values()]


def test_commands(ctl, tractctl, daemon, phantom, references, tmp_path):
    """submit prints the job id (--json: the 202 document); status (with the
    stop reasons), list and wait work as text and --json (documents that parse and agree with the
    API); fetch -o writes the bytes of `tractd run`; device (text and --json)
    shows the daemon's device, also over --server http://127.0.0.1:PORT."""
    want = references.trk(local_job(phantom, **SMALL))
    job = _job_file(tmp_path, "small", local_job(phantom, **SMALL))

    job_id = _ok(ctl("submit", job)).stdout.strip()
    assert JOB_ID.match(job_id), job_id
    doc = json.loads(_ok(ctl("--json", "submit", job)).stdout)
    assert JOB_ID.match(doc["id"]) and doc["location"] == f"/v1/jobs/{doc['id']}", doc
    second = doc["id"]

    _ok(ctl("wait", job_id))
    done = json.loads(_ok(ctl("--json", "wait", second)).stdout)
    assert done["id"] == second and done["status"] == "done", done

    text = _ok(ctl("status", job_id)).stdout
    assert job_id in text and "done" in text, text
    assert re.search(r"^stopped +stop_map \d+, outside \d+, no_direction \d+, max_steps \d+, "
                     r"include \d+, exclude \d+, exclude_region \d+, unknown 0 \(streamline ends\); \d+ seeds without direction$", text,
                     re.M), text
    status = json.loads(_ok(ctl("--json", "status", job_id)).stdout)
    api = daemon.api.get_json(f"/v1/jobs/{job_id}")
    # Timings may be printed with fewer digits.
    assert status.pop("seconds") == pytest.approx(api.pop("seconds"), rel=1e-9, abs=1e-12)
    assert status == api

    text = _ok(ctl("list")).stdout
    assert job_id in text and second in text, text
    listed = json.loads(_ok(ctl("--json", "list")).stdout)
    ids = [j["id"] for j in listed["jobs"]]
    assert ids.index(second) < ids.index(job_id), ids

    out = tmp_path / "fetched.trk"
    _ok(ctl("fetch", job_id, "-o", out))
    assert_same_trk(out.read_bytes(), want, "tractctl fetch")

    device = daemon.api.get_json("/v1/device")["device"]
    assert device["name"] in _ok(ctl("device")).stdout
    doc = json.loads(_ok(ctl("--json", "device")).stdout)
    assert doc["device"] == device, doc
    p = subprocess.run([tractctl, "--server", f"http://127.0.0.1:{daemon.port}",
                        "--token", daemon.token, "--json", "device"], capture_output=True, text=True, timeout=60, env=daemon_env())
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["device"] == device


def test_cancel(ctl, daemon, phantom, tmp_path):
    """`tractctl cancel ID` on a running job exits 0 and the job ends
    cancelled; `tractctl wait ID` then exits 1 and `fetch` exits 1."""
    job = _job_file(tmp_path, "long", local_job(phantom, count=CANCEL_SEEDS, rng_seed=41))
    job_id = _ok(ctl("submit", job)).stdout.strip()
    wait_running(daemon.api, job_id)
    _ok(ctl("cancel", job_id))
    doc = wait_job(daemon.api, job_id, timeout=60)
    assert doc["status"] == "cancelled", doc
    p = ctl("wait", job_id)
    assert p.returncode == 1, (p.returncode, p.stderr)
    p = ctl("fetch", job_id, "-o", tmp_path / "cancelled.trk")
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert not (tmp_path / "cancelled.trk").exists()


def test_refused_job_exits_3(ctl, phantom, tmp_path):
    """A job the daemon refuses (max_angle 120): `track` and `submit` exit 3
    with the field on stderr; no output file is written."""
    job = _job_file(tmp_path, "bad", local_job(phantom, count=100,
                                               tracking={"max_angle": 120}))
    out = tmp_path / "bad.trk"
    for args in (("track", job, "-o", out), ("submit", job)):
        p = ctl(*args)
        assert p.returncode == 3, f"{args[0]}: exit {p.returncode}\n{p.stderr}"
        assert "tracking.max_angle" in p.stderr, p.stderr
    assert not out.exists()
    assert not (tmp_path / "bad.trk.tmp").exists()


def test_job_failing_on_its_inputs_exits_3(ctl, phantom, tmp_path):
    """A job the daemon queues but that fails on its inputs when it runs
    (stop map on another grid): `track` exits 3, as `--help` promises for an
    invalid input, naming inputs.stop_map and the stop map's file as the job
    file names it, not its volume id; it leaves no output. It exited 1, and
    the message named only sha256:..."""
    fa = tmp_path / "fa_other_grid.nii.gz"
    nib.save(nib.Nifti1Image(np.ascontiguousarray(phantom.fa.astype(np.float32)[:-1]),
                             phantom.affine), str(fa))
    doc = local_job(phantom, count=100)
    doc["inputs"]["stop_map"] = str(fa)
    job = _job_file(tmp_path, "grid", doc)
    out = tmp_path / "grid.trk"
    p = ctl("track", job, "-o", out)
    assert p.returncode == 3, f"exit {p.returncode}\n{p.stderr}"
    assert "inputs.stop_map" in p.stderr, p.stderr
    assert str(fa) in p.stderr and "sha256:" not in p.stderr, p.stderr
    assert not out.exists() and not (tmp_path / "grid.trk.tmp").exists()


def test_no_daemon_exits_5(tractctl, tmp_path):
    """No daemon on the socket, or nothing on the TCP port: exit 5."""
    for args in (("--socket", str(short_tmpdir() / "none.sock")),
                 ("--server", f"http://127.0.0.1:{free_port()}")):
        p = subprocess.run([tractctl, *args, "--timeout", "5", "device"], capture_output=True,
                           text=True, timeout=60, env=daemon_env())
        assert p.returncode == 5, f"{args}: exit {p.returncode}\n{p.stderr}"
        assert "tractctl: error" in p.stderr, p.stderr



def test_fetch_names_tck_results(ctl, tractctl, daemon, phantom, tmp_path):
    """`tractctl fetch ID` without -o names the file after the job's output
    format: a TCK job's result lands in ID.tck, as MRtrix3's format."""
    job = local_job(phantom, count=100, rng_seed=43)
    job["output"] = {"format": "tck"}
    job_id = _ok(ctl("submit", _job_file(tmp_path, "tck", job))).stdout.strip()
    assert wait_job(daemon.api, job_id, timeout=60)["status"] == "done"
    workdir = tmp_path / "fetched"
    workdir.mkdir()
    env = daemon_env()
    env.pop("TRACTD_SOCKET", None)
    p = subprocess.run([str(tractctl), "--socket", str(daemon.sock), "fetch", job_id],
                       capture_output=True, text=True, cwd=workdir, env=env, timeout=60)
    _ok(p)
    assert (workdir / f"{job_id}.tck").read_bytes().startswith(b"mrtrix tracks\n")


def test_fetch_format_converts(ctl, tractctl, daemon, phantom, tmp_path):
    """`tractctl fetch ID --format tck` has the daemon convert a done TRK
    result; without -o the file is ID.tck. A bad --format is a usage error."""
    job = local_job(phantom, count=100, rng_seed=44)
    job_id = _ok(ctl("submit", _job_file(tmp_path, "trk", job))).stdout.strip()
    assert wait_job(daemon.api, job_id, timeout=60)["status"] == "done"
    workdir = tmp_path / "converted"
    workdir.mkdir()
    env = daemon_env()
    env.pop("TRACTD_SOCKET", None)
    p = subprocess.run([str(tractctl), "--socket", str(daemon.sock), "fetch", job_id,
                        "--format", "tck"],
                       capture_output=True, text=True, cwd=workdir, env=env, timeout=60)
    _ok(p)
    assert (workdir / f"{job_id}.tck").read_bytes().startswith(b"mrtrix tracks\n")
    p = ctl("fetch", job_id, "--format", "vtk")
    assert p.returncode == 2 and "--format" in p.stderr, p
    p = ctl("status", job_id, "--format", "tck")
    assert p.returncode == 2 and "--format" in p.stderr, p


# ---------------------------------------------------------------- issue 20: the client's side


def test_delete(ctl, daemon, phantom, tmp_path):
    """`tractctl delete ID` deletes a done job (GET then answers 404) and a
    running one, which the daemon cancels first; --json prints {"id",
    "deleted"}; an unknown (or already deleted) job exits 3."""
    done_id = _ok(ctl("submit", _job_file(tmp_path, "small", local_job(phantom, **SMALL)))
                  ).stdout.strip()
    assert wait_job(daemon.api, done_id, timeout=60)["status"] == "done"
    doc = json.loads(_ok(ctl("--json", "delete", done_id)).stdout)
    assert doc == {"id": done_id, "deleted": True}, doc
    assert daemon.api.request("GET", f"/v1/jobs/{done_id}").status == 404

    long_job = _job_file(tmp_path, "long", local_job(phantom, count=CANCEL_SEEDS, rng_seed=45))
    running_id = _ok(ctl("submit", long_job)).stdout.strip()
    wait_running(daemon.api, running_id)
    p = _ok(ctl("delete", running_id))
    assert "cancelled" in p.stderr and "deleted" in p.stderr, p.stderr
    assert daemon.api.request("GET", f"/v1/jobs/{running_id}").status == 404

    p = ctl("delete", running_id)
    assert p.returncode == 3, p
    p = ctl("delete")
    assert p.returncode == 2 and "delete ID" in p.stderr, p


def test_volumes_list_and_delete(ctl, daemon, tmp_path):
    """`tractctl volumes` lists one's uploads (id, kind, size) and the
    used/quota totals, --json the daemon's document; `volumes delete ID...`
    forgets them (HEAD then 404), a second time exits 3; a malformed id is a
    usage error that deletes nothing."""
    ids = []
    for i in range(2):
        text = tmp_path / f"unique{i}.bval"
        text.write_text(f"0 1000 {1000 + i} {tmp_path.name}\n")
        r = daemon.api.upload(text)
        assert r.status == 201, str(r)
        ids.append(r.json()["id"])

    listing = _ok(ctl("volumes")).stdout
    api = daemon.api.get_json("/v1/volumes")
    for vid in ids:
        assert re.search(rf"^{vid} +text +\d+ B$", listing, re.M), listing
    assert re.search(r"volumes?, .* used of a quota of ", listing), listing
    doc = json.loads(_ok(ctl("--json", "volumes")).stdout)
    assert doc == api, (doc, api)

    p = ctl("volumes", "delete", ids[0], "sha256:nothex")
    assert p.returncode == 2 and "sha256:nothex" in p.stderr, p
    assert daemon.api.request("HEAD", f"/v1/volumes/{ids[0]}").status == 200

    _ok(ctl("volumes", "delete", *ids))
    for vid in ids:
        assert daemon.api.request("HEAD", f"/v1/volumes/{vid}").status == 404
    assert not set(ids) & {v["id"] for v in daemon.api.get_json("/v1/volumes")["volumes"]}
    p = ctl("volumes", "delete", ids[0])
    assert p.returncode == 3, p


def test_fetch_wait_converts_a_running_job(ctl, daemon, phantom, tmp_path):
    """`tractctl fetch ID --wait -o x.tck` on a running TRK job waits for its
    end and then has the daemon convert it: a TCK with the job's streamlines.
    Without --wait the same request exits 3 (only finished jobs convert) and
    says so, leaving no file."""
    job = _job_file(tmp_path, "wait", local_job(phantom, count=CANCEL_SEEDS // 2, rng_seed=46))
    job_id = _ok(ctl("submit", job)).stdout.strip()
    wait_running(daemon.api, job_id)
    p = ctl("fetch", job_id, "-o", tmp_path / "early.tck")
    assert p.returncode == 3 and "--wait" in p.stderr, p
    assert not (tmp_path / "early.tck").exists()

    out = tmp_path / "waited.tck"
    _ok(ctl("fetch", job_id, "--wait", "-o", out))
    doc = daemon.api.get_json(f"/v1/jobs/{job_id}")
    assert doc["status"] == "done", doc
    tck = nib.streamlines.load(str(out))
    assert len(tck.streamlines) == doc["result"]["streamlines"]
    p = ctl("status", job_id, "--wait")
    assert p.returncode == 2 and "--wait" in p.stderr, p


def test_output_extension_picks_the_format(ctl, daemon, phantom, tmp_path):
    """`track JOB -o x.tck` writes a TCK (`.TRX` a TRX, any case) where the
    job names no output.format, and `.dat` keeps the TRK; a job whose
    output.format contradicts the extension exits 2 naming both, writing
    nothing. `fetch ID -o y.tck` of a TRK job converts; with a --format that
    contradicts it, exit 2."""
    job = _job_file(tmp_path, "plain", local_job(phantom, count=100, rng_seed=47))
    _ok(ctl("track", job, "-o", tmp_path / "x.tck"))
    assert (tmp_path / "x.tck").read_bytes().startswith(b"mrtrix tracks\n")
    _ok(ctl("track", job, "-o", tmp_path / "x.TRX"))
    assert (tmp_path / "x.TRX").read_bytes().startswith(b"PK")
    _ok(ctl("track", job, "-o", tmp_path / "x.dat"))
    assert (tmp_path / "x.dat").read_bytes()[:5] == b"TRACK"

    doc = local_job(phantom, count=100, rng_seed=47)
    doc["output"] = {"format": "trk"}
    p = ctl("track", _job_file(tmp_path, "trk", doc), "-o", tmp_path / "y.tck")
    assert p.returncode == 2, p
    assert "tck" in p.stderr and "output.format is trk" in p.stderr, p.stderr
    assert not (tmp_path / "y.tck").exists() and not (tmp_path / "y.tck.tmp").exists()

    job_id = _ok(ctl("submit", job)).stdout.strip()
    assert wait_job(daemon.api, job_id, timeout=60)["status"] == "done"
    _ok(ctl("fetch", job_id, "-o", tmp_path / "f.tck"))
    assert (tmp_path / "f.tck").read_bytes().startswith(b"mrtrix tracks\n")
    p = ctl("fetch", job_id, "-o", tmp_path / "g.tck", "--format", "trx")
    assert p.returncode == 2 and "tck" in p.stderr and "trx" in p.stderr, p
    assert not (tmp_path / "g.tck").exists()


def test_status_and_list_show_the_fit_stage(ctl, daemon, phantom, tmp_path):
    """While a DWI job (the phantom's job_dwi.json, a model the daemon has not
    fitted yet) fits, `status` and `list` show its stage as people say it,
    e.g. "fitting CSD 40 %", not "0 of 0 seeds"."""
    doc = json.loads((phantom.dir / "job_dwi.json").read_text())
    doc["inputs"] = {k: str(phantom.dir / v) for k, v in doc["inputs"].items()}
    doc["seeds"]["roi"] = str(phantom.dir / doc["seeds"]["roi"])
    doc["seeds"]["count"] = 100
    doc["model"]["tau"] = 0.12          # not in the fit cache
    doc.pop("output")
    job_id = _ok(ctl("submit", _job_file(tmp_path, "dwi", doc))).stdout.strip()
    stage = re.compile(r"(loading the inputs|fitting DTI|estimating the response|fitting CSD|"
                       r"sampling the ODF) \d+ %")
    seen_status = seen_list = False
    while not (seen_status and seen_list):
        status = _ok(ctl("status", job_id)).stdout
        seen_status |= bool(re.search(r"^progress +" + stage.pattern + "$", status, re.M))
        listed = _ok(ctl("list")).stdout
        line = next(l for l in listed.splitlines() if l.startswith(job_id))
        seen_list |= bool(stage.search(line))
        if re.search(r"^status +(done|failed)$", status, re.M):
            break
    assert seen_status and seen_list, (seen_status, seen_list, status, listed)
    assert wait_job(daemon.api, job_id, timeout=120)["status"] == "done"


def test_progress_line_shows_time_left(tractctl, daemon, ctl, phantom, tmp_path):
    """On a terminal (standard error on a pty), `tractctl wait` draws a
    progress line that tells the time left once it can be estimated
    ("ETA M:SS"), from the pace of tracking."""
    job = _job_file(tmp_path, "eta", local_job(phantom, count=CANCEL_SEEDS, rng_seed=48))
    job_id = _ok(ctl("submit", job)).stdout.strip()
    env = daemon_env()
    env.pop("TRACTD_SOCKET", None)
    master, slave = pty.openpty()
    proc = subprocess.Popen([tractctl, "--socket", str(daemon.sock), "wait", job_id],
                            stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:             # EIO: tractctl closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0, drawn
    assert re.search(rb"\] +\d+% \d+:\d\d ETA \d+:\d\d  \d+/20000 seeds", drawn), drawn[-2000:]


# ------------------------------------------- track DWI OUTPUT (issue 20)
# `tractctl track DWI OUTPUT [OPTIONS]` composes its job from the table of
# options `tractd track` takes (common/track_opts.c) and runs it on the
# daemon: the bytes and the job of `tractd track` with the same options.
DWI_SEEDS = 300
EXIT_USAGE, EXIT_REJECTED, EXIT_LOCAL = 2, 3, 6


@pytest.fixture(scope="module")
def small_dwi(tractd, tmp_path_factory):
    """A small phantom's raw DWI: dwi.nii.gz, dwi.bval, dwi.bvec, mask.nii.gz,
    seed_roi.nii.gz."""
    d = tmp_path_factory.mktemp("small_dwi")
    subprocess.run([tractd, "phantom", "-q", "--dim", "24,24,16", d], check=True, timeout=300,
                   env=daemon_env())
    return d


def _dwi_args(d, output, *extra):
    return ["track", d / "dwi.nii.gz", output, "--mask", d / "mask.nii.gz", "--seed-roi",
            d / "seed_roi.nii.gz", "--seeds", DWI_SEEDS, "--rng-seed", 7, *extra]


def _tractd(tractd, *args, **kw):
    return subprocess.run([tractd, *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=daemon_env(), **kw)


def _fails(p, code, *words):
    assert p.returncode == code, f"$ {' '.join(map(str, p.args))}\nexit {p.returncode}\n{p.stderr}"
    for word in words:
        assert word in p.stderr, (word, p.stderr)


def test_track_dwi_is_tractd_track(ctl, tractctl, daemon, tractd, small_dwi, tmp_path):
    """The bytes `tractd track` writes with the same options; --print-job prints
    what `tractd track --print-job` prints, and that job, run from standard
    input, gives the same bytes again."""
    want = tmp_path / "tractd.trk"
    _ok(_tractd(tractd, *_dwi_args(small_dwi, want), "-q"))
    got = tmp_path / "tractctl.trk"
    _ok(ctl(*_dwi_args(small_dwi, got)))
    assert_same_trk(got.read_bytes(), want.read_bytes(), "tractctl track DWI OUTPUT")
    assert len(nib.streamlines.load(str(got)).streamlines) > 0

    printed = _ok(ctl(*_dwi_args(small_dwi, got), "--print-job")).stdout
    assert printed == _ok(_tractd(tractd, *_dwi_args(small_dwi, got), "--print-job")).stdout
    assert json.loads(printed)["inputs"]["bvals"] == str(small_dwi / "dwi.bval")
    env = daemon_env()
    env.pop("TRACTD_SOCKET", None)
    piped = tmp_path / "piped.trk"
    _ok(subprocess.run([tractctl, "--socket", str(daemon.sock), "track", "-", "-o", str(piped)],
                       input=printed, capture_output=True, text=True, timeout=300, env=env))
    assert_same_trk(piped.read_bytes(), want.read_bytes(), "the printed job, run")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["piped.trk", "tractctl.trk",
                                                         "tractd.trk"]


def test_track_dwi_finds_sidecars_by_name(ctl, small_dwi, tmp_path):
    """X.bval/X.bvec beside X.nii.gz (BIDS, FSL), else bvals/bvecs in its
    directory; a job on the BIDS names runs to the bytes of the original."""
    bids = tmp_path / "bids"
    bids.mkdir()
    for ext in ("nii.gz", "bval", "bvec"):
        (bids / f"sub-01_dwi.{ext}").write_bytes((small_dwi / f"dwi.{ext}").read_bytes())
    args = _dwi_args(small_dwi, tmp_path / "bids.trk")
    args[1] = bids / "sub-01_dwi.nii.gz"
    job = json.loads(_ok(ctl(*args, "--print-job")).stdout)
    assert job["inputs"]["bvals"] == str(bids / "sub-01_dwi.bval")
    assert job["inputs"]["bvecs"] == str(bids / "sub-01_dwi.bvec")
    _ok(ctl(*args))
    _ok(ctl(*_dwi_args(small_dwi, tmp_path / "orig.trk")))
    assert_same_trk((tmp_path / "bids.trk").read_bytes(), (tmp_path / "orig.trk").read_bytes(),
                    "the BIDS-named DWI")

    fsl = tmp_path / "fsl"
    fsl.mkdir()
    (fsl / "data.nii.gz").write_bytes((small_dwi / "dwi.nii.gz").read_bytes())
    (fsl / "bvals").write_bytes((small_dwi / "dwi.bval").read_bytes())
    (fsl / "bvecs").write_bytes((small_dwi / "dwi.bvec").read_bytes())
    args[1] = fsl / "data.nii.gz"
    job = json.loads(_ok(ctl(*args, "--print-job")).stdout)
    assert (job["inputs"]["bvals"], job["inputs"]["bvecs"]) == (str(fsl / "bvals"),
                                                                str(fsl / "bvecs"))


def test_track_dwi_errors(ctl, small_dwi, tmp_path):
    """No gradients: exit 6 naming what was looked for; an existing OUTPUT is
    kept without --force (2); values are the daemon's to refuse (3, naming
    the field); the usage of the two forms of track (2). Nothing is written."""
    (tmp_path / "scan.nii.gz").write_bytes((small_dwi / "dwi.nii.gz").read_bytes())
    args = _dwi_args(small_dwi, tmp_path / "x.trk")
    args[1] = tmp_path / "scan.nii.gz"
    _fails(ctl(*args), EXIT_LOCAL, "scan.bval", "scan.bvec", "bvals", "--bvals")

    kept = tmp_path / "kept.trk"
    kept.write_bytes(b"precious")
    _fails(ctl(*_dwi_args(small_dwi, kept)), EXIT_USAGE, "--force")
    assert kept.read_bytes() == b"precious"
    _ok(ctl(*_dwi_args(small_dwi, kept), "--force"))
    assert len(nib.streamlines.load(str(kept)).streamlines) > 0

    _fails(ctl(*_dwi_args(small_dwi, tmp_path / "a.trk"), "--max-angle", "120"),
           EXIT_REJECTED, "tracking.max_angle")
    _fails(ctl(*_dwi_args(small_dwi, tmp_path / "a.trk"), "--seeds", "many"),
           EXIT_REJECTED, "seeds.count")
    _fails(ctl(*_dwi_args(small_dwi, tmp_path / "a.vtk")), EXIT_USAGE, ".trk", ".tck")
    _fails(ctl("track", small_dwi / "dwi.nii.gz", tmp_path / "a.trk"), EXIT_USAGE,
           "--seed-roi", "--mask")
    _fails(ctl(*_dwi_args(small_dwi, tmp_path / "a.trk"), "-o", tmp_path / "b.trk"),
           EXIT_USAGE, "no -o")
    _fails(ctl("track", small_dwi / "dwi.nii.gz"), EXIT_USAGE, "DWI OUTPUT")
    _fails(ctl("track", tmp_path / "job.json", "--mask", small_dwi / "mask.nii.gz"),
           EXIT_USAGE, "--mask")
    _fails(ctl("status", "j-0123456789abcdef", "--seeds", "5"), EXIT_USAGE, "--seeds")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.trk", "scan.nii.gz"]


def test_track_dwi_new_options_reach_the_job(ctl, small_dwi, tmp_path):
    """--select, --step and --bvecs-convention set their fields (printed
    unchecked: whether jobspec knows them yet is the daemon's)."""
    job = json.loads(_ok(ctl(*_dwi_args(small_dwi, tmp_path / "n.trk"), "--select", "50",
                             "--step", "0.5", "--bvecs-convention", "voxel",
                             "--print-job")).stdout)
    assert job["seeds"]["select"] == 50
    assert job["tracking"]["step_mm"] == 0.5
    assert job["inputs"]["bvecs_convention"] == "voxel"


def test_track_help_has_tractd_tracks_options(ctl, tractd):
    """`tractctl track --help` lists every option line of `tractd track --help`
    (one table makes both)."""
    theirs = _tractd(tractd, "track", "--help").stdout
    table = theirs[theirs.index("Options of track"):theirs.index("Options of run")]
    lines = [line for line in table.splitlines() if line.startswith("      --")]
    assert len(lines) >= 18 and any("--bvecs-convention" in line for line in lines), lines
    ours = _ok(ctl("track", "--help")).stdout
    assert ours.startswith("Usage: tractctl track JOB.json"), ours[:100]
    missing = [line for line in lines if line not in ours.splitlines()]
    assert not missing, missing


def test_track_act_uploads_the_maps(ctl, daemon, phantom, references, tmp_path):
    """stopping's maps given as local paths are uploaded like the inputs
    (the daemon would refuse them as server-side paths): `tractctl track`
    of an act job writes the bytes of `tractd run`."""
    local = local_job(phantom, **SMALL, tracking={"return_all": False})
    local["stopping"] = {"criterion": "act", "include": str(phantom.path("include.nii.gz")),
                         "exclude": str(phantom.path("exclude.nii.gz"))}
    out = tmp_path / "act.trk"
    doc = json.loads(_ok(ctl("track", _job_file(tmp_path, "act", local), "-o", out,
                             "--json")).stdout)
    assert_same_trk(out.read_bytes(), references.trk(local), "tractctl track with stopping act")
    assert doc["result"]["stop_reasons"] == references.stats(local)["stop_reasons"], doc


def test_track_5tt_interface_uploads_the_maps(ctl, daemon, phantom, references, tmp_path):
    """stopping.five_tt and seeds.interface's 5TT given as local paths are
    uploaded too: `tractctl track` writes the bytes of `tractd run`."""
    five_tt = str(phantom.path("5tt.nii.gz"))
    local = local_job(phantom, **SMALL, tracking={"return_all": False})
    local["seeds"] = {"interface": {"five_tt": five_tt}, "count": SMALL["count"]}
    local["stopping"] = {"criterion": "act", "five_tt": five_tt}
    out = tmp_path / "interface.trk"
    _ok(ctl("track", _job_file(tmp_path, "interface", local), "-o", out))
    assert_same_trk(out.read_bytes(), references.trk(local), "tractctl track with 5TT")


def test_track_uploads_region_masks(ctl, daemon, phantom, references, tmp_path):
    """A mask region given as a local path is uploaded like the inputs:
    `tractctl track` of a job with regions writes the bytes of `tractd run`
    and reports its rejections."""
    local = local_job(phantom, **SMALL)
    local["regions"] = {"include": [str(phantom.path("include.nii.gz"))],
                        "exclude": [{"center": [0, 0, 0], "radius": 3}]}
    out = tmp_path / "regions.trk"
    doc = json.loads(_ok(ctl("track", _job_file(tmp_path, "regions", local), "-o", out,
                             "--json")).stdout)
    assert_same_trk(out.read_bytes(), references.trk(local), "tractctl track with regions")
    assert doc["result"]["rejected"] == references.stats(local)["rejected"], doc


def test_track_region_options_as_tractd(tractctl, tractd, small_dwi, tmp_path):
    """--include/--exclude are common/track_opts' options: tractctl track
    prints the regions `tractd track` prints, and names the option in its
    usage error."""
    out = tmp_path / "r.trk"
    args = _dwi_args(small_dwi, out, "--include", "0,0,0,4", "--exclude",
                     small_dwi / "mask.nii.gz", "--print-job")
    printed = _ok(subprocess.run([tractctl, *map(str, args)], capture_output=True, text=True,
                                 timeout=60, env=daemon_env())).stdout
    assert printed == _ok(_tractd(tractd, *args)).stdout
    assert json.loads(printed)["regions"]["exclude"] == [str(small_dwi / "mask.nii.gz")]
    bad = subprocess.run([tractctl, *map(str, _dwi_args(small_dwi, out, "--include", "1,2"))],
                         capture_output=True, text=True, timeout=60, env=daemon_env())
    _fails(bad, 2, "--include '1,2'")
