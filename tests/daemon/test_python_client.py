"""The Python package (client/python, `tractd`) against a real daemon.

Here, beside the other daemon tests, to reuse their fixtures (the module's
daemon, the phantom, `tractd run` references, the recording proxy). The
package is installed once per session the way a user installs it, offline:
a fresh `python3 -m venv --system-site-packages` (Debian's numpy, nibabel,
DIPY 1.6) and `pip install --no-build-isolation --no-index` of a copy of
client/python; every check runs in that venv's Python, from outside the
source tree, so the installed package is what is tested. The test runner's
own site-packages (trx-python, tqdm) are added to it by a .pth file, as a
user's environment would have them.
"""
import json
import os
import shutil
import site
import subprocess
import sys
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from conftest import (Phantom, assert_length_distribution, assert_parity, format_table, run_cli,
                      summarize)

from .support import (PHANTOM_INPUTS, TEST_TOKEN, RecordingProxy, assert_same_trk, local_job,
                      short_tmpdir)

REPO = Path(__file__).resolve().parent.parent.parent
SYSTEM_PYTHON = os.environ.get("SYSTEM_PYTHON", "/usr/bin/python3")
FLOW = Path(__file__).resolve().parent / "python_client" / "gpu_streamlines_flow.py"
SCRIPT_TIMEOUT_S = 300


def install_in_fresh_venv(base, requirement, site_dirs, pth_name):
    """The Python of a fresh venv (system site packages) in base, in which
    site_dirs are importable through pth_name and `pip install requirement`
    (a path in the copy of client/python made under base, given as
    requirement.format(source)) ran offline and without build isolation."""
    source = base / "src"
    shutil.copytree(REPO / "client" / "python", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = base / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, pth_name).write_text("".join(d + "\n" for d in site_dirs))
    target = requirement.format(source)
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           "--no-build-isolation", "--no-index", target],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip install {target} failed:\n{proc.stdout}\n{proc.stderr}"
    return python


@pytest.fixture(scope="session")
def pyclient(tmp_path_factory):
    """The Python of a fresh venv with the package installed from a copy of
    client/python, offline and without build isolation; the test runner's
    own packages (trx, tqdm) importable beside it."""
    extras = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
    return install_in_fresh_venv(tmp_path_factory.mktemp("pyclient"), "{}", extras,
                                 "test-runner-extras.pth")


def run_py(python, code, env=None, args=(), cwd=None):
    """Runs code in the venv's Python (from a directory outside the source
    tree); returns the JSON its last stdout line prints."""
    full_env = dict(os.environ)
    full_env.pop("PYTHONPATH", None)
    full_env.update(env or {})
    proc = subprocess.run([str(python), "-c", code, *map(str, args)], capture_output=True,
                          text=True, timeout=SCRIPT_TIMEOUT_S, env=full_env,
                          cwd=cwd or short_tmpdir())
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def proxy(daemon):
    p = RecordingProxy(short_tmpdir() / "proxy.sock", daemon.sock)
    yield p
    p.close()


@pytest.fixture(scope="module")
def phantom(tractd, tmp_path_factory):
    """A small phantom (24x24x16) for this module: these tests check the
    client's plumbing, not tracking quality, and run DIPY fits besides."""
    outdir = tmp_path_factory.mktemp("small-phantom")
    run_cli(tractd, ["phantom", outdir, "--dim", "24,24,16"], check=True)
    return Phantom.from_dir(outdir)


@pytest.fixture(scope="module")
def job_file(phantom, tmp_path_factory):
    """The phantom's job with absolute local paths, as a file, and as a dict."""
    job = local_job(phantom, count=500, rng_seed=3)
    path = tmp_path_factory.mktemp("pyjob") / "job.json"
    path.write_text(json.dumps(job))
    return path, job


# The core with numpy (and so nibabel, dipy) made unimportable: it must need
# the standard library only.
STDLIB_ONLY_TRACK = """
import json, sys
sys.modules["numpy"] = None
import tractd
client = tractd.Client(sys.argv[1], **json.loads(sys.argv[2]))
job = client.track(sys.argv[3], output=sys.argv[4], progress=False)
print(json.dumps({"module": tractd.__file__, "status": job.info["status"],
                  "uploaded": client.uploaded}))
"""


def test_installed_package_tracks_as_tractd_run_on_the_socket(pyclient, daemon, job_file,
                                                              references, tmp_path):
    path, job = job_file
    out = tmp_path / "client.trk"
    doc = run_py(pyclient, STDLIB_ONLY_TRACK, args=(f"unix://{daemon.sock}", "{}", path, out))
    assert doc["status"] == "done"
    assert "site-packages" in doc["module"] and str(REPO) not in doc["module"], doc
    assert_same_trk(out.read_bytes(), references.trk(job), "Client.track on the socket")


def test_http_with_a_token(pyclient, daemon, job_file, references, tmp_path):
    path, job = job_file
    address = f"http://127.0.0.1:{daemon.port}"
    out = tmp_path / "tcp.trk"
    run_py(pyclient, STDLIB_ONLY_TRACK, args=(address, json.dumps({"token": TEST_TOKEN}), path, out))
    assert_same_trk(out.read_bytes(), references.trk(job), "Client.track over TCP")
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TEST_TOKEN}  \nsecond line\n")
    for kw, env in (({"token_file": str(token_file)}, {}), ({}, {"TRACTD_TOKEN": TEST_TOKEN})):
        doc = run_py(pyclient, "import json, sys, tractd\n"
                     "c = tractd.Client(sys.argv[1], **json.loads(sys.argv[2]))\n"
                     "print(json.dumps(c.device()['queue']))", env=env,
                     args=(address, json.dumps(kw)))
        assert "queued" in doc
    doc = run_py(pyclient, "import json, sys, tractd\n"
                 "try:\n    tractd.Client(sys.argv[1]).device(); print('{}')\n"
                 "except tractd.TractdError as e:\n"
                 "    print(json.dumps({'status': e.status, 'code': e.code}))",
                 env={"TRACTD_TOKEN": ""}, args=(address,))
    assert doc == {"status": 401, "code": "unauthorized"}


SUBMIT_TWICE = """
import json, sys, tractd
client = tractd.Client(sys.argv[1])
first = client.submit(sys.argv[2]); first.wait(progress=False)
sent_first = list(client.uploaded)
open(sys.argv[3], "w").write("first done")
second = client.submit(sys.argv[2]); second.wait(progress=False)
print(json.dumps({"first": sent_first, "second": client.uploaded[len(sent_first):],
                  "streamlines": len(second.to_sft().streamlines),
                  "result": second.info["result"]["streamlines"]}))
"""


def test_uploads_are_skipped_when_the_daemon_holds_the_content(pyclient, daemon, proxy, phantom,
                                                               tmp_path):
    # Content of this test's own (a seed count of its own changes no volume,
    # so a ROI of its own): the first submit must send it.
    roi = nib.load(str(phantom.path(PHANTOM_INPUTS["roi"])))
    mask = np.asarray(roi.dataobj).copy()
    mask[mask.nonzero()[0][0], :, :] = 0
    nib.save(nib.Nifti1Image(mask, roi.affine), str(tmp_path / "roi.nii"))
    job = local_job(phantom, count=300)
    job["seeds"]["roi"] = "roi.nii"     # relative: against the job file's directory
    (tmp_path / "job.json").write_text(json.dumps(job))
    marker = tmp_path / "first"
    proxy.clear()
    doc = run_py(pyclient, SUBMIT_TWICE, args=(f"unix://{proxy.listen_path}",
                                               tmp_path / "job.json", marker))
    requests = proxy.recorded()
    assert doc["second"] == [] and len(doc["first"]) >= 1, doc
    assert doc["streamlines"] == doc["result"] > 0, doc
    heads = [r for r in requests if r.startswith("HEAD /v1/volumes/")]
    posts = [r for r in requests if r == "POST /v1/volumes"]
    assert len(heads) == 6, requests        # three inputs, asked about twice
    assert len(posts) == len(doc["first"]), requests


FAILS = """
import json, sys, tractd
client = tractd.Client(sys.argv[1])
job = json.load(open(sys.argv[2]))
out = {}
bad = dict(job, tracking={"max_angle": 120}, seeds=dict(job["seeds"], count=100))
try:
    client.submit(bad)
except tractd.JobFailed as e:
    out["refused"] = [e.field, e.code, e.job_id, e.status]
job["seeds"] = dict(job["seeds"], count=50, per_voxel=True)
handle = client.submit(job)
try:
    handle.wait(progress=False)
except tractd.JobFailed as e:
    out["failed"] = [e.field, e.code, e.job_id == handle.id, str(e).startswith("job j-")]
print(json.dumps(out))
"""


def test_a_failed_job_raises_with_its_field(pyclient, daemon_factory, job_file):
    d = daemon_factory(sets=["max_seeds_per_job=1000"], tcp=False)
    doc = run_py(pyclient, FAILS, args=(f"unix://{d.sock}", job_file[0]))
    assert doc["refused"] == ["tracking.max_angle", "invalid_parameter", None, 400], doc
    assert doc["failed"] == ["seeds.count", "limit_exceeded", True, True], doc


ARRAYS = """
import json, sys
import nibabel as nib, numpy as np
import tractd
client = tractd.Client(sys.argv[1])
job = json.load(open(sys.argv[2]))
odf = nib.load(job["inputs"]["odf"])
job["inputs"]["odf"] = np.asanyarray(odf.dataobj)            # an array, on fa's affine
job["inputs"]["stop_map"] = nib.load(job["inputs"]["stop_map"])   # an image
job["seeds"]["roi"] = np.asanyarray(nib.load(job["seeds"]["roi"]).dataobj) > 0  # bool array
handle = client.track(job, progress=False)
handle.save(sys.argv[3])
trx = handle.to_trx()
print(json.dumps({"trx": len(trx.streamlines), "n": handle.info["result"]["streamlines"],
                  "sft": len(handle.to_sft().streamlines)}))
trx.close()
"""


def test_array_and_image_inputs(pyclient, daemon, job_file, references, tmp_path):
    path, job = job_file
    out = tmp_path / "arrays.trk"
    doc = run_py(pyclient, ARRAYS, args=(f"unix://{daemon.sock}", path, out))
    assert doc["trx"] == doc["sft"] == doc["n"] > 0, doc
    assert_same_trk(out.read_bytes(), references.trk(job), "arrays sent as NIfTI in memory")


CANCEL = """
import json, sys, tractd
client = tractd.Client(sys.argv[1])
job = json.load(open(sys.argv[2]))
job["seeds"]["count"] = 500000
handle = client.submit(job)
handle.cancel()
out = {}
try:
    handle.wait(progress=False)
except tractd.JobFailed as e:
    out["code"] = e.code
handle.delete()
try:
    handle.status()
except tractd.TractdError as e:
    out["after_delete"] = e.status
print(json.dumps(out))
"""


def test_cancel_and_delete(pyclient, daemon, job_file):
    doc = run_py(pyclient, CANCEL, args=(f"unix://{daemon.sock}", job_file[0]))
    assert doc == {"code": "cancelled", "after_delete": 404}


# ----------------------------------------------------------------- tractd.cuslines

def flow(pyclient, daemon, phantom, out, *args):
    p = phantom.path
    return subprocess.run(
        [str(pyclient), str(FLOW), p("dwi.nii.gz"), p("dwi.bval"), p("dwi.bvec"), p("mask.nii.gz"),
         p(PHANTOM_INPUTS["roi"]), "--nseeds", "200", "--out", str(out), *args],
        capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S, cwd=short_tmpdir(),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TRACTD_SOCKET": str(daemon.sock)})


def reference_job(tmp_path, arrays, dg, phantom):
    """The job tractd.cuslines should have sent, written by hand from the
    arrays the flow tracked, on the phantom's own files where it used them."""
    from dipy.data import get_sphere
    affine = arrays["affine"]
    nib.save(nib.Nifti1Image(arrays["fa"], affine), str(tmp_path / "fa.nii"))
    job = {"direction_getter": dg,
           "seeds": {"points": arrays["seeds"].tolist(), "space": "voxel", "rng_seed": 0},
           "tracking": {"sphere": {"vertices": get_sphere("repulsion724").vertices.tolist()},
                        "fa_threshold": 0.1, "step_size": 0.5, "max_angle": 60,
                        "relative_peak_threshold": 0.25, "min_separation_angle": 45}}
    if dg == "boot":
        job["inputs"] = {"dwi": str(phantom.path("dwi.nii.gz")), "bvals": str(phantom.path("dwi.bval")),
                         "bvecs": str(phantom.path("dwi.bvec")), "stop_map": str(tmp_path / "fa.nii")}
        job["model"] = {"name": "opdt", "sh_order": 4, "sh_lambda": 0.006, "min_signal": 1.0}
    else:
        nib.save(nib.Nifti1Image(arrays["data"], affine), str(tmp_path / "odf.nii"))
        job["inputs"] = {"odf": str(tmp_path / "odf.nii"), "stop_map": str(tmp_path / "fa.nii")}
    return job


@pytest.mark.parametrize("dg", ["prob", "boot"])
def test_cuslines_runs_gpu_streamlines_example_flow(pyclient, daemon, phantom, references,
                                                   tmp_path, dg):
    out = tmp_path / f"cuslines_{dg}"
    proc = flow(pyclient, daemon, phantom, out, "--dg", dg)
    assert proc.returncode == 0, proc.stderr
    assert "Generated" in proc.stdout, proc.stdout
    with np.load(str(out) + ".npz") as arrays:
        job = reference_job(tmp_path, arrays, dg, phantom)
    got = nib.streamlines.load(str(out) + ".trk").streamlines
    want = nib.streamlines.load(_ref_path(references, job, tmp_path)).streamlines
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=1e-3)


def _ref_path(references, job, tmp_path):
    path = tmp_path / "reference.trk"
    path.write_bytes(references.trk(job))
    return str(path)


def test_cuslines_takes_pyafq_call(pyclient, daemon, phantom, tmp_path):
    """pyAFQ's call shape: 724-direction full sphere, a WM PVE stop map at 0.5,
    min_pts/max_pts from mm (10 and 15 mm: both limits bite on the phantom),
    float16 TRX; chunks of 100 of its 300 seeds: three jobs, one TRX."""
    p = phantom.path
    proc = subprocess.run(
        [str(pyclient), str(FLOW.with_name("pyafq_call.py")), p("dwi.nii.gz"), p("dwi.bval"),
         p("dwi.bvec"), p("mask.nii.gz"), p(PHANTOM_INPUTS["roi"]), tmp_path / "afq.trx", "10", "15", "100"],
        capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S, cwd=short_tmpdir(),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TRACTD_SOCKET": str(daemon.sock)})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["dtype"] == "float16" and doc["n"] > 0 and doc["jobs"] == 3, doc
    assert doc["min_pts"] <= doc["points"][0] and doc["points"][1] <= doc["max_pts"], doc


CHUNKS = """
import json, sys
import nibabel as nib, numpy as np
from dipy.data import get_sphere
import tractd
from tractd.cuslines import GPUTracker, ProbDirectionGetter

odf, fa, roi = (nib.load(p) for p in sys.argv[1:4])
sphere = get_sphere("symmetric362")
rng = np.random.default_rng(4)
voxels = np.argwhere(np.asanyarray(roi.dataobj) > 0)
seeds = voxels[rng.integers(len(voxels), size=300)] + rng.uniform(-0.5, 0.5, (300, 3))
client = tractd.Client()

def generate(points, chunk_size, rng_offset=0):
    jobs = len(client.jobs())
    with GPUTracker(ProbDirectionGetter(), np.asanyarray(odf.dataobj), fa.get_fdata(), 0.1,
                    sphere.vertices, sphere.edges, rng_seed=9, rng_offset=rng_offset,
                    chunk_size=chunk_size, client=client) as tracker:
        sft = tracker.generate_sft(points, odf)
    return sft.streamlines, tracker.last_job, len(client.jobs()) - jobs

def same(a, b):
    return (len(a) > 0 and np.array_equal(a._lengths, b._lengths)
            and a.get_data().tobytes() == b.get_data().tobytes())

whole, _, jobs_whole = generate(seeds, 300)
chunked, last_chunk, jobs_chunked = generate(seeds, 70)
halves, second_half, _ = generate(seeds, 150)
tail, tail_job, _ = generate(seeds[150:], 300, rng_offset=150)
print(json.dumps({"jobs": [jobs_whole, jobs_chunked], "n": len(whole),
                  "chunk_size_70": same(whole, chunked), "chunk_size_150": same(whole, halves),
                  "rng_offset": same(second_half.to_sft().streamlines,
                                     tail_job.to_sft().streamlines),
                  "offset_0_differs": not same(tail, generate(seeds[150:], 300)[0])}))
"""


def test_cuslines_chunks_and_rng_offset_give_the_same_bytes(pyclient, daemon, phantom):
    """Each chunk is numbered from rng_offset + its first seed's index
    (seeds.first_index): the same seeds give the same streamlines, byte for
    byte, whatever chunk_size, and a tracker with rng_offset K on seeds[K:]
    tracks them as the chunk starting at K does."""
    doc = run_py(pyclient, CHUNKS, env={"TRACTD_SOCKET": str(daemon.sock)},
                 args=(phantom.path("odf.nii.gz"), phantom.path("fa.nii.gz"),
                       phantom.path(PHANTOM_INPUTS["roi"])))
    assert doc["jobs"] == [1, 5] and doc["n"] > 0, doc
    assert doc["chunk_size_70"] and doc["chunk_size_150"] and doc["rng_offset"], doc
    assert doc["offset_0_differs"], doc


POINTS_FILE = """
import json, sys
import numpy as np
import tractd
client = tractd.Client(sys.argv[1])
job = json.load(open(sys.argv[2]))
seeds = np.load(sys.argv[3])
out = {}
try:
    client.submit(dict(job, seeds={"points": seeds.tolist(), "rng_seed": 3}))
except tractd.TractdError as e:
    out["inline"] = e.status
job["seeds"] = {"points": seeds, "rng_seed": 3, "first_index": 0}
client.track(job, output=sys.argv[4], progress=False)
# The same array saved by this numpy: the same bytes, already uploaded.
np.save(sys.argv[3] + ".again.npy", seeds)
job["seeds"] = {"points_file": sys.argv[3] + ".again.npy", "rng_seed": 3}
before = list(client.uploaded)
client.track(job, output=sys.argv[5], progress=False)
out["uploads_again"] = client.uploaded[len(before):]
job["seeds"] = {"points_file": seeds[:, :2], "rng_seed": 3}
try:
    client.submit(job)
except ValueError as e:
    out["bad_shape"] = str(e).split(":")[0]
print(json.dumps(out))
"""


def test_seed_arrays_pass_max_request_bytes_as_a_points_file(pyclient, daemon_factory, phantom,
                                                             references, tmp_path):
    """An (N, 3) array in seeds.points goes as an uploaded .npy
    (seeds.points_file): 3000 points, ~170 kB of JSON, pass a daemon whose
    max_request_bytes (16 KiB) refuses them inline, and track as `tractd
    run` of the inline points; a .npy path is uploaded once (same content)."""
    d = daemon_factory(sets=["max_request_bytes=16K"], tcp=False)
    rng = np.random.default_rng(8)
    seeds = rng.uniform([2, 2, 2], [21, 21, 13], size=(3000, 3))
    np.save(tmp_path / "seeds.npy", seeds)
    job = local_job(phantom, count=1, rng_seed=3)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    out_array, out_file = tmp_path / "array.trk", tmp_path / "file.trk"
    doc = run_py(pyclient, POINTS_FILE, args=(f"unix://{d.sock}", path, tmp_path / "seeds.npy",
                                               out_array, out_file))
    assert doc == {"inline": 413, "uploads_again": [], "bad_shape": "seeds.points_file"}, doc
    job["seeds"] = {"points": seeds.tolist(), "rng_seed": 3}
    want = references.trk(job)
    assert_same_trk(out_array.read_bytes(), want, "seeds.points array as a points_file")
    assert_same_trk(out_file.read_bytes(), want, "seeds.points_file path")


# ----------------------------------------------------------------- tractd.dipy

DIPY_API = """
import json, sys, warnings
import nibabel as nib, numpy as np
from dipy.data import get_sphere
from dipy.tracking.stopping_criterion import ThresholdStoppingCriterion as DipyThreshold
from dipy.tracking.utils import random_seeds_from_mask
import tractd
from dipy.core.gradients import gradient_table
from dipy.io import read_bvals_bvecs
from dipy.reconst.shm import OpdtModel as DipyOpdt
from tractd.dipy import (ThresholdStoppingCriterion, bootstrap_tracking, deterministic_tracking,
                         probabilistic_tracking)

odf, fa, roi = (nib.load(p) for p in sys.argv[1:4])
seeds = random_seeds_from_mask(np.asanyarray(roi.dataobj) > 0, odf.affine, seeds_count=300,
                               seed_count_per_voxel=False,
                               random_seed=1)
kw = dict(sf=np.asanyarray(odf.dataobj), sphere=get_sphere("symmetric362"), step_size=0.5,
          max_angle=60, min_len=5, max_len=200, random_seed=5)
pairs = list(probabilistic_tracking(seeds, ThresholdStoppingCriterion(fa.get_fdata(), 0.1),
                                    odf.affine, save_seeds=True, **kw))
lines = [p[0] for p in pairs]
np.savez(sys.argv[4], seeds=seeds, points=np.concatenate(lines),
         counts=[len(s) for s in lines], line_seeds=np.array([p[1] for p in pairs]))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    probed = list(probabilistic_tracking(seeds, DipyThreshold(fa.get_fdata(), 0.1), odf.affine, **kw))
out = {"warned": [str(w.message)[:40] for w in caught], "probed": len(probed)}
def refused_as(call):
    try:
        call()
    except NotImplementedError as e:
        return str(e).split(":")[0]
out["refused"] = [refused_as(lambda: deterministic_tracking(seeds, None, odf.affine)),
                  refused_as(lambda: probabilistic_tracking(seeds, None, odf.affine,
                                                            return_all=False, **kw))]
dwi = nib.load(sys.argv[5])
gtab = gradient_table(*read_bvals_bvecs(sys.argv[6], sys.argv[7]))
boot = list(bootstrap_tracking(seeds[:40], ThresholdStoppingCriterion(fa.get_fdata(), 0.1),
                               odf.affine, data=dwi.get_fdata(), model=DipyOpdt(gtab, 4),
                               sphere=get_sphere("repulsion724"), step_size=0.5, max_angle=60,
                               min_len=5, max_len=200, random_seed=5))
np.savez(sys.argv[8], points=np.concatenate(boot), counts=[len(s) for s in boot])
out["smooth"] = refused_as(lambda: bootstrap_tracking(seeds[:1], None, odf.affine, data=dwi.get_fdata(),
                                                      model=DipyOpdt(gtab, 4, smooth=0.01)))
print(json.dumps(out))
"""


def test_dipy_probabilistic_tracking_as_a_job(pyclient, daemon, phantom, references, tmp_path):
    """tractd.dipy.probabilistic_tracking and bootstrap_tracking give the
    streamlines (and seeds) of the jobs their arguments map to, run by
    `tractd run`."""
    from dipy.data import get_sphere
    out, out_boot = tmp_path / "dipy_api.npz", tmp_path / "dipy_boot.npz"
    doc = run_py(pyclient, DIPY_API, env={"TRACTD_SOCKET": str(daemon.sock)},
                 args=(phantom.path("odf.nii.gz"), phantom.path("fa.nii.gz"),
                       phantom.path(PHANTOM_INPUTS["roi"]), out, phantom.path("dwi.nii.gz"),
                       phantom.path("dwi.bval"), phantom.path("dwi.bvec"), out_boot))
    assert doc["refused"] == ["deterministic_tracking", "return_all"], doc
    assert doc["smooth"] == "model", doc
    assert doc["warned"] == ["sc: DIPY's ThresholdStoppingCriterion hi"] and doc["probed"] > 0, doc
    got = np.load(out)
    job = {"inputs": {"odf": str(phantom.path("odf.nii.gz")), "stop_map": str(phantom.path("fa.nii.gz"))},
           "seeds": {"points": got["seeds"].tolist(), "space": "ras", "rng_seed": 5},
           "tracking": {"sphere": {"vertices": get_sphere("symmetric362").vertices.tolist()},
                        "fa_threshold": 0.1, "step_size": 0.5, "max_angle": 60,
                        "pmf_threshold": 0.1, "min_length": 5, "max_length": 200, "max_steps": 400,
                        "relative_peak_threshold": 1.0},
           "output": {"save_seeds": True}}
    want = nib.streamlines.load(_ref_path(references, job, tmp_path))
    assert list(got["counts"]) == [len(s) for s in want.streamlines] and len(got["counts"]) > 0
    np.testing.assert_allclose(got["points"], want.streamlines.get_data(), atol=1e-4)
    np.testing.assert_allclose(got["line_seeds"], want.tractogram.data_per_streamline["seeds"],
                               atol=1e-4)
    job.update(direction_getter="boot", output={},
               inputs={"dwi": str(phantom.path("dwi.nii.gz")), "bvals": str(phantom.path("dwi.bval")),
                       "bvecs": str(phantom.path("dwi.bvec")), "stop_map": job["inputs"]["stop_map"]},
               model={"name": "opdt", "sh_order": 4, "sh_lambda": 0.006, "min_signal": 1e-5})
    job["seeds"]["points"] = job["seeds"]["points"][:40]
    job["tracking"]["sphere"] = {"vertices": get_sphere("repulsion724").vertices.tolist()}
    boot = np.load(out_boot)
    want = nib.streamlines.load(_ref_path(references, job, tmp_path)).streamlines
    assert list(boot["counts"]) == [len(s) for s in want] and len(want) > 0
    np.testing.assert_allclose(boot["points"], want.get_data(), atol=1e-4)


# ----------------------------------------------------------------- without a daemon

RULES = """
import json, os, sys, tempfile
import numpy as np
from math import radians
from dipy.data import get_sphere
import tractd
from tractd.cuslines import BootDirectionGetter, PttDirectionGetter, ProbDirectionGetter, Tracker

out = {}
run = tempfile.mkdtemp()
os.environ.pop("TRACTD_SOCKET", None)
os.environ["XDG_RUNTIME_DIR"] = run
out["no_user_socket"] = tractd.default_socket()
open(os.path.join(run, "tractd.sock"), "w").close()
out["user_socket"] = tractd.default_socket() == os.path.join(run, "tractd.sock")
os.environ["TRACTD_SOCKET"] = "/x/y.sock"
out["env_socket"] = tractd.Client().address

def refused(call):
    try:
        call()
    except (ValueError, NotImplementedError, TypeError) as e:
        return f"{type(e).__name__}: {str(e).split(':')[0]}"
    return "accepted"

s = get_sphere("repulsion724")
odf, fa = np.zeros((4, 4, 4, len(s.vertices))), np.zeros((4, 4, 4))
def tracker(**kw):
    args = dict(dg=ProbDirectionGetter(), dataf=odf, stop_map=fa, stop_threshold=0.1,
                sphere_vertices=s.vertices, sphere_edges=s.edges, client=tractd.Client("unix:///none"))
    args.update(kw)
    return Tracker(**args)
out["refused"] = [refused(c) for c in (
    lambda: tractd.Client("unix:///x.sock", token="t"),
    lambda: tracker(rng_offset=-5),
    lambda: tracker(sphere_edges=s.edges[:-1]),
    lambda: tracker(sphere_symm=True),
    lambda: tracker(dataf=odf[..., :100]),
    lambda: BootDirectionGetter.from_dipy_opdt(None, s, full_basis=True),
    lambda: BootDirectionGetter("OPDT", 1, None, None, None, None, None, None),
    lambda: PttDirectionGetter(odf_lut_res=64),
    lambda: tracker().set_compression_parameters(pos_dtype=np.float64),
    lambda: tracker(),
)]
print(json.dumps(out))
"""


def test_address_rules_and_refused_arguments(pyclient):
    """The default socket as tractctl finds it, and every argument that cannot
    be mapped refused by name (no daemon needed)."""
    doc = run_py(pyclient, RULES)
    assert doc["no_user_socket"] == "/run/tractd/tractd.sock"
    assert doc["user_socket"] is True and doc["env_socket"] == "/x/y.sock"
    assert doc["refused"] == [
        "ValueError: token", "ValueError: rng_offset", "ValueError: sphere_edges",
        "ValueError: sphere_symm", "ValueError: Number of sphere vertices (724) must match last "
        "dimension of dataf (100), because dataf should be an ODF when using prob or ptt tracking",
        "NotImplementedError: full_basis", "NotImplementedError: BootDirectionGetter(model_type, "
        "min_signal, H, R, ...)", "NotImplementedError: odf_lut_res",
        "NotImplementedError: pos_dtype", "accepted"], doc


# ----------------------------------------------------------------- tractd.dipy against DIPY

# tractd.dipy's functions against DIPY 1.12.1's own (dipy.tracking.tracker, in
# build/venv-dipy: $TRACTD_DIPY_PYTHON, the dipy_python fixture) on the same
# phantom files, world seeds and arguments, each side run by
# python_client/dipy_tracking_side.py. The random streams differ (numpy's vs
# Philox), so the comparison is statistical, as in tests/parity/ and with its
# tolerances: streamlines per seed within 5 % (both start one streamline per
# seed, from the largest peak), lengths by a two-sample KS test at alpha
# 0.001, the valid-connection fraction (both ends in one bundle's two end
# zones) and each bundle's share of the streamlines within 5 points.
SIDE = FLOW.with_name("dipy_tracking_side.py")
PARITY_DIM = "32,32,16"        # smaller than the parity tests' 48x48x24: seconds a side
PARITY_SEED_PLACEMENT = 1234
TOL_PER_SEED_REL = 0.05
KS_ALPHA = 0.001
TOL_FRACTION_ABS = 0.05

# DIPY's probabilistic_tracking: 2000 seeds, ~2000 streamlines (KS bound
# ~0.06). Measured (tractd / DIPY): 38.7 / 38.7 points mean, valid 54.2 /
# 54.4 %, 1.009 / 0.997 streamlines a seed, KS 0.011.
PROB_SEEDS = 2000
PROB_ARGS = {"function": "probabilistic_tracking", "fa_threshold": 0.1, "sphere": "symmetric362",
             "step_size": 0.5, "max_angle": 60, "pmf_threshold": 0.05, "min_len": 2,
             "max_len": 250, "random_seed": 42}
# ptt_tracking at 20 degrees (DIPY's default 10 barely bends on the phantom).
# DIPY stores each half's points one step further out than its PTT position
# (tests/parity/test_ptt_dipy.py): 2 points fewer a line for the same path,
# so the KS test lets lengths shift by 2 points. Measured at 1500 seeds: 36.7
# / 34.7 points, 17.8 / 17.9 mm, valid 59.6 / 57.1 %.
PTT_SEEDS = 1000
PTT_ARGS = {"function": "ptt_tracking", "fa_threshold": 0.1, "sphere": "symmetric362",
            "step_size": 0.5, "max_angle": 20, "pmf_threshold": 0.05, "probe_length": 2.0,
            "probe_quality": 7, "min_len": 2, "max_len": 250, "random_seed": 42}
PTT_LENGTH_SHIFT = 2


@pytest.fixture(scope="module")
def parity_phantoms(tractd, tmp_path_factory):
    """The same phantom on a 1 mm and a 2 mm grid: {voxel size: Phantom}."""
    out = {}
    for size in (1, 2):
        outdir = tmp_path_factory.mktemp(f"parity-phantom-{size}mm")
        run_cli(tractd, ["phantom", outdir, "--dim", PARITY_DIM, "--voxel-size", str(size)],
                check=True)
        out[size] = Phantom.from_dir(outdir)
    return out


def track_side(python, side, phantom, n_seeds, args, workdir, env=None):
    """Runs dipy_tracking_side.py; returns (streamlines in voxel coordinates,
    the submitted job or None, seconds)."""
    from dipy.tracking.utils import random_seeds_from_mask
    seeds = random_seeds_from_mask(phantom.roi, phantom.affine, seeds_count=n_seeds,
                                   seed_count_per_voxel=False, random_seed=PARITY_SEED_PLACEMENT)
    workdir = Path(workdir)
    np.save(workdir / "seeds.npy", seeds)
    (workdir / "args.json").write_text(json.dumps(args))
    out = workdir / f"{side}.npz"
    t0 = time.perf_counter()
    proc = subprocess.run([str(python), str(SIDE), side, phantom.path("odf.nii.gz"),
                           phantom.path("fa.nii.gz"), workdir / "seeds.npy", workdir / "args.json",
                           out], capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S,
                          cwd=short_tmpdir(), env={k: v for k, v in os.environ.items()
                                                   if k != "PYTHONPATH"} | (env or {}))
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, f"{side} side failed:\n{proc.stderr[-3000:]}"
    data = np.load(out)
    lines = np.split(data["points"], np.cumsum(data["counts"])[:-1]) if len(data["counts"]) else []
    to_voxel = np.linalg.inv(phantom.affine)
    job = json.loads(str(data["job"])) if "job" in data else None
    return [nib.affines.apply_affine(to_voxel, s) for s in lines], job, seconds


def compare_with_dipy(pyclient, dipy_python, daemon, phantom, n_seeds, args, workdir, shift=0):
    """Both sides on phantom; asserts the parity figures; returns the
    summaries and the job tractd.dipy submitted."""
    common = dict(labels=phantom.labels, bundles=phantom.bundles, affine=phantom.affine)
    res, jobs = {}, {}
    for side, python, env in (("dipy", dipy_python, None),
                              ("tractd", pyclient, {"TRACTD_SOCKET": str(daemon.sock)})):
        lines, jobs[side], seconds = track_side(python, side, phantom, n_seeds, args, workdir, env)
        res[side] = summarize(lines, n_seeds, **common)
        res[side]["seconds"] = seconds
    print(f"\n== {args['function']}: tractd.dipy vs DIPY 1.12.1, {n_seeds} seeds\n"
          + format_table(res, ["streamlines", "per_seed", "mean_len_pts", "median_len_pts",
                               "mean_len_mm", "valid_fraction", "seconds"]))
    assert_parity(res, "per_seed", TOL_PER_SEED_REL, relative=True)
    assert_length_distribution(res, KS_ALPHA, shift=shift)
    assert_parity(res, "valid_fraction", TOL_FRACTION_ABS, relative=False)
    shares = {side: {name: k / res[side]["streamlines"] for name, k in res[side]["per_bundle"].items()}
              for side in res}
    off = {name: (round(shares["tractd"][name], 4), round(shares["dipy"][name], 4))
           for name in shares["dipy"] if abs(shares["tractd"][name] - shares["dipy"][name]) > TOL_FRACTION_ABS}
    assert not off, f"bundle shares (tractd, DIPY) differ by more than {TOL_FRACTION_ABS}: {off}"
    return res, jobs["tractd"]


def test_dipy_probabilistic_tracking_agrees_with_dipy(pyclient, dipy_python, daemon,
                                                      parity_phantoms, tmp_path):
    compare_with_dipy(pyclient, dipy_python, daemon, parity_phantoms[1], PROB_SEEDS, PROB_ARGS,
                      tmp_path)


def test_dipy_ptt_tracking_agrees_with_dipy(pyclient, dipy_python, daemon, parity_phantoms,
                                            tmp_path):
    compare_with_dipy(pyclient, dipy_python, daemon, parity_phantoms[1], PTT_SEEDS, PTT_ARGS,
                      tmp_path, shift=PTT_LENGTH_SHIFT)


DIPY_PTT_PARAMETERS = """
import json, sys
import numpy as np
from dipy.tracking.tracker_parameters import generate_tracking_parameters
a = json.loads(sys.argv[1])
p = generate_tracking_parameters("ptt", min_len=a["min_len"], max_len=a["max_len"],
    step_size=a["step_size"], voxel_size=np.full(3, float(sys.argv[2])), max_angle=a["max_angle"],
    pmf_threshold=a["pmf_threshold"], random_seed=1, probe_length=a["probe_length"],
    probe_radius=0.0, probe_quality=a["probe_quality"], probe_count=1, data_support_exponent=1,
    return_all=True)
print(json.dumps({"step_voxels": p.step_size / p.average_voxel_size,
                  "probe_length_voxels": p.ptt.probe_length / p.average_voxel_size,
                  "probe_quality": p.ptt.probe_quality, "max_nbr_pts": p.max_nbr_pts}))
"""


def test_dipy_ptt_millimetres_on_a_2mm_grid(pyclient, dipy_python, daemon, parity_phantoms,
                                            tmp_path):
    """ptt_tracking's step_size, probe_length and lengths are in mm: on the
    phantom's 2 mm grid with every mm argument doubled, tractd.dipy sends the
    voxel figures DIPY derives from the same arguments (its
    generate_tracking_parameters) and tracks the very streamlines (in voxels)
    of the 1 mm grid. DIPY's own ptt_tracking is not scale-free in 1.12.1
    (measured, 1500 seeds, same seeds in voxels: 1 mm 34.7 points, 57 % valid;
    2 mm 31.6 points, 50 % valid): it is compared on the 1 mm grid only."""
    mm = dict(PTT_ARGS, step_size=2 * PTT_ARGS["step_size"], probe_length=2 * PTT_ARGS["probe_length"],
              min_len=2 * PTT_ARGS["min_len"], max_len=2 * PTT_ARGS["max_len"])
    dipy = json.loads(subprocess.run([dipy_python, "-c", DIPY_PTT_PARAMETERS, json.dumps(mm), "2"],
                                     capture_output=True, text=True, check=True).stdout)
    env = {"TRACTD_SOCKET": str(daemon.sock)}
    (tmp_path / "1mm").mkdir()
    (tmp_path / "2mm").mkdir()
    lines_1mm, _, _ = track_side(pyclient, "tractd", parity_phantoms[1], 300, PTT_ARGS,
                                 tmp_path / "1mm", env)
    lines_2mm, job, _ = track_side(pyclient, "tractd", parity_phantoms[2], 300, mm,
                                   tmp_path / "2mm", env)
    t = job["tracking"]
    assert t["step_size"] == pytest.approx(dipy["step_voxels"]), (t, dipy)
    assert t["probe_length"] == pytest.approx(dipy["probe_length_voxels"]), (t, dipy)
    assert t["probe_quality"] == dipy["probe_quality"] and t["max_steps"] == dipy["max_nbr_pts"], (t, dipy)
    assert [len(s) for s in lines_2mm] == [len(s) for s in lines_1mm] and lines_1mm
    np.testing.assert_allclose(np.concatenate(lines_2mm), np.concatenate(lines_1mm), atol=1e-3)


# ----------------------------------------------------------------- tractd.nipype

NIPYPE_PYTHON = os.environ.get("TRACTD_NIPYPE_PYTHON", str(REPO / "build" / "venv-nipype" / "bin" / "python"))


@pytest.fixture(scope="session")
def pyclient_nipype(tmp_path_factory):
    """A fresh venv in which `pip install client/python[nipype]` finds nipype
    installed (build/venv-nipype's site-packages, by a .pth file) and installs
    offline. Skips when `make venv-nipype` (part of `make check`) was not run."""
    if not os.access(NIPYPE_PYTHON, os.X_OK):
        pytest.skip(f"no nipype venv at {NIPYPE_PYTHON}: run `make venv-nipype`")
    nipype_site = subprocess.run([NIPYPE_PYTHON, "-c", "import sysconfig; "
                                  "print(sysconfig.get_path('purelib'))"],
                                 check=True, capture_output=True, text=True).stdout.strip()
    return install_in_fresh_venv(tmp_path_factory.mktemp("pyclient-nipype"), "{}[nipype]",
                                 [nipype_site], "nipype-venv.pth")


NIPYPE_WORKFLOW = """
import json, sys
from nipype import Node, Workflow
from tractd.nipype import Track

job = json.load(open(sys.argv[2]))
track = Node(Track(address=sys.argv[1], odf=job["inputs"]["odf"], stop_map=job["inputs"]["stop_map"],
                   seed_roi=job["seeds"]["roi"], seed_count=job["seeds"]["count"],
                   rng_seed=job["seeds"]["rng_seed"], tracking=job.get("tracking", {}),
                   output_format="trk"), name="tractd")
wf = Workflow(name="tractography", base_dir=sys.argv[3])
wf.add_nodes([track])
def run():
    return list(wf.run().nodes())[0].result.outputs
out = run()
track.inputs.address = sys.argv[1] + "?"   # not hashed: the cached result stands
again = run()
spec = Track().inputs
print(json.dumps({"out_file": out.out_file, "job_id": out.job_id, "streamlines": out.streamlines,
                  "rerun_job_id": again.job_id,
                  "inputs": sorted(spec.copyable_trait_names()),
                  "outputs": sorted(Track.output_spec().copyable_trait_names())}))
"""


def test_nipype_track_node_in_a_workflow(pyclient_nipype, daemon, job_file, references, tmp_path):
    """A one-node nipype Workflow with tractd.nipype.Track writes the bytes
    `tractd run` writes for the same job; run again with another (unhashed)
    address, nipype reuses the node's result; inputs and outputs are declared."""
    path, job = job_file
    doc = run_py(pyclient_nipype, NIPYPE_WORKFLOW, args=(f"unix://{daemon.sock}", path, tmp_path))
    assert doc["job_id"].startswith("j-") and doc["streamlines"] > 0, doc
    assert doc["rerun_job_id"] == doc["job_id"], doc                # cached by nipype, no new job
    assert Path(doc["out_file"]).parent.name == "tractd", doc      # in the node's directory
    assert_same_trk(Path(doc["out_file"]).read_bytes(), references.trk(job), "nipype Track node")
    for name in ("odf", "sh", "dwi", "bvals", "bvecs", "mask", "stop_map", "seed_roi",
                 "direction_getter", "step_size", "max_angle", "output_format", "address", "token"):
        assert name in doc["inputs"], (name, doc["inputs"])
    assert doc["outputs"] == ["job_id", "out_file", "streamlines"], doc


def _uploaded_fields(pyclient, doc):
    """The fields of doc the Python client would upload, in its order."""
    code = ("import json, sys; from tractd import _inputs; "
            "print(json.dumps([f for f, _, _ in _inputs.input_fields(json.loads(sys.argv[1]))]))")
    out = subprocess.run([str(pyclient), "-c", code, json.dumps(doc)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return json.loads(out)


def test_stopping_maps_are_uploaded_fields(pyclient):
    """The maps of "stopping" are volumes the client uploads, as tractctl does;
    its criterion is not."""
    doc = {"inputs": {"odf": "odf.nii", "stop_map": "fa.nii"}, "seeds": {"roi": "roi.nii"},
           "stopping": {"criterion": "cmc", "wm": "wm.nii", "gm": "gm.nii", "csf": "csf.nii"}}
    assert _uploaded_fields(pyclient, doc) == ["inputs.odf", "inputs.stop_map", "seeds.roi",
                                               "stopping.wm", "stopping.gm", "stopping.csf"]


def test_interface_maps_are_uploaded_fields(pyclient):
    """seeds.interface's tissue maps and stopping.five_tt are volumes too."""
    doc = {"inputs": {"odf": "odf.nii", "stop_map": "fa.nii"},
           "seeds": {"interface": {"wm": "wm.nii", "gm": "gm.nii"}, "count": 10},
           "stopping": {"criterion": "act", "five_tt": "5tt.nii"}}
    assert _uploaded_fields(pyclient, doc) == ["inputs.odf", "inputs.stop_map",
                                               "seeds.interface.wm", "seeds.interface.gm",
                                               "stopping.five_tt"]


def test_region_masks_are_uploaded_fields(pyclient):
    """The mask images among "regions" are volumes the client uploads, as
    tractctl does; spheres are not."""
    sphere = {"center": [0, 0, 0], "radius": 2}
    doc = {"inputs": {"odf": "odf.nii", "stop_map": "fa.nii"}, "seeds": {"roi": "roi.nii"},
           "regions": {"include": [sphere, "gm.nii"], "exclude": ["csf.nii", sphere]}}
    assert _uploaded_fields(pyclient, doc) == ["inputs.odf", "inputs.stop_map", "seeds.roi",
                                               "regions.include[1]", "regions.exclude[0]"]


# ----------------------------------------------------------------- bench/pyafq_call.py

BENCH = REPO / "bench" / "pyafq_call.py"


def test_pyafq_bench_runs_small_and_names_missing_packages(tractd, tmp_path):
    """The lead's GPU timing script, at a lavapipe size: the pyAFQ call in
    chunks, with the phases and a JSON summary; without numpy it says so."""
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--dim", "24,24,16", "--min-length", "10",
         "--max-length", "30", "--chunk-size", "400", "--tractd", str(tractd),
         "--workdir", str(tmp_path / "bench")],
        capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S, cwd=short_tmpdir())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["seeds"] > 400 and doc["streamlines"] > 0, doc
    assert doc["jobs"] == -(-doc["seeds"] // 400), doc
    assert "generate_trx (pyAFQ's call, as is)" in doc["phases_s"], doc
    blocked = subprocess.run(
        [sys.executable, "-c", "import runpy, sys; sys.modules['numpy'] = None; "
         f"sys.argv = ['pyafq_call.py']; runpy.run_path({str(BENCH)!r}, run_name='__main__')"],
        capture_output=True, text=True, timeout=60)
    assert blocked.returncode == 1 and "lacks numpy" in blocked.stderr, blocked.stderr
