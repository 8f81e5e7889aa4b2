"""What users run first, run as they run it, on the default sphere (repulsion724):

- README's command lines under "Running a job", taken from README.md itself
  (only paths substituted, and the README job's seed count: see README_SEEDS);
- every job in proto/examples/: the valid ones through `tractd run EXAMPLE.json`
  as written, beside the inputs they name (the phantom README's
  `tractd phantom --sphere repulsion724` writes; wmfod.nii.gz is that phantom's
  CSD fit in MRtrix3's basis), the invalid-*.json ones failing with exit 3 and
  the field their error names;
- scripts/demo.sh, what `make demo` and scripts/quickstart.sh run.

Tractograms of the phantom are checked for whole streamlines along its long
bundles (conftest.assert_whole_streamlines): lavapipe once cut repulsion724
streamlines at ~60 steps while every test tracked small spheres.
"""
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from dipy.data import get_sphere
from dipy.reconst.shm import real_sh_descoteaux, real_sh_tournier

from conftest import RUN_TIMEOUT_S, Phantom, assert_whole_streamlines, run_cli

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
EXAMPLES = REPO_ROOT / "proto" / "examples"
DEMO_SCRIPT = REPO_ROOT / "scripts" / "demo.sh"

EXIT_OK = 0
EXIT_INVALID = 3

DEFAULT_SPHERE = "repulsion724"
DEFAULT_SPHERE_VERTICES = 724

# README's job asks for 100,000 seeds: 20 minutes on lavapipe (2000 seeds on
# repulsion724 track in 8-25 s on 2 shared cores). The tests run it with these
# many, nothing else changed.
README_SEEDS = 500

# README's `tractd run job.json --device 0,1` needs two Vulkan devices; lavapipe
# is one. Every other build/tractd line of the section runs here.
README_LINES_NOT_RUN = ("build/tractd run job.json --device 0,1",)
README_PHANTOM_DIR = "/tmp/ph"

# Each proto/examples/invalid-*.json and the field its error names (as in
# tests/unit/test_jobspec.c); None: a JSON syntax error, which names no field.
INVALID_EXAMPLES = {
    "invalid-both-seed-kinds.json": "seeds",
    "invalid-both-steps.json": "tracking.step_mm",
    "invalid-boot-on-odf.json": "direction_getter",
    "invalid-count-with-points.json": "seeds.count",
    "invalid-direction-getter.json": "direction_getter",
    "invalid-duplicate-key.json": None,
    "invalid-fractional-count.json": "seeds.count",
    "invalid-lengths.json": "tracking.min_length",
    "invalid-max-angle.json": "tracking.max_angle",
    "invalid-missing-stop-map.json": "inputs.stop_map",
    "invalid-odd-sh-order.json": "model.sh_order",
    "invalid-sh-without-basis.json": "inputs.sh_basis",
    "invalid-short-point.json": "seeds.points[1]",
    "invalid-sphere-name.json": "tracking.sphere",
    "invalid-two-inputs.json": "inputs",
    "invalid-unknown-field.json": "tracking.stepsize",
}
VALID_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.json")
                        if not p.name.startswith("invalid-"))

# The phantom's inputs the examples and README's job name (linked beside them).
PHANTOM_INPUTS = ("odf.nii.gz", "fa.nii.gz", "seed_roi.nii.gz", "dwi.nii.gz", "dwi.bval",
                  "dwi.bvec", "mask.nii.gz")
SH_ORDER = 8   # tractd fit's CSD (dwi-phantom.json's model)


# ------------------------------------------------------------------ README.md

def readme_section(heading):
    """The text of README's `## heading` section, up to the next `## `."""
    text = README.read_text()
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, f"README.md has no section '## {heading}'"
    return m.group(1)


def readme_block(heading, lang):
    """The first ```lang code block of README's section heading."""
    m = re.search(rf"^```{lang}\n(.*?)^```", readme_section(heading), re.S | re.M)
    assert m, f"README's '## {heading}' has no ```{lang} block"
    return m.group(1)


def readme_commands():
    """README's `build/tractd ...` lines under "Running a job", comments dropped."""
    lines = [line.split("#", 1)[0].strip()
             for line in readme_block("Running a job", "sh").splitlines()]
    return [line for line in lines if line.startswith("build/tractd ")]


def readme_command(pattern):
    """The one README command line matching the regular expression."""
    found = [line for line in readme_commands() if re.search(pattern, line)]
    assert len(found) == 1, f"README's command lines matching {pattern!r}: {found}"
    return found[0]


def run_line(tractd, line, cwd, env, paths=None):
    """Runs a command line as a user's shell does, in cwd, with build/tractd
    replaced by $TRACTD and each path of paths {written: here} replaced."""
    cmd = line.replace("build/tractd", shlex.quote(tractd), 1)
    for written, here in (paths or {}).items():
        cmd = cmd.replace(written, shlex.quote(str(here)))
    try:
        return subprocess.run(["sh", "-c", cmd], cwd=cwd, env=env, capture_output=True,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"timed out after {RUN_TIMEOUT_S} s: {cmd}\nstderr:\n{e.stderr}",
                    pytrace=False)


def assert_ok(proc, what):
    assert proc.returncode == EXIT_OK, (
        f"{what}: exit {proc.returncode}\nstderr:\n{proc.stderr.decode(errors='replace')}")


@pytest.fixture(scope="module")
def user_env(tmp_path_factory):
    """The environment with a pipeline cache of this module's own (tractd's default
    $XDG_CACHE_HOME/tractd/pipelines.bin, kept out of the user's home)."""
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("xdg_cache"))}


@pytest.fixture(scope="module")
def readme_phantom(tractd, tmp_path_factory, user_env):
    """README's `build/tractd phantom --sphere repulsion724 /tmp/ph`, /tmp/ph a
    temporary directory: the inputs of README's job and of the examples."""
    line = readme_command(r" phantom ")
    assert README_PHANTOM_DIR in line, line
    out = tmp_path_factory.mktemp("readme") / "ph"
    assert_ok(run_line(tractd, line, out.parent, user_env, {README_PHANTOM_DIR: out}), line)
    return Phantom.from_dir(out)


def link_inputs(phantom, directory):
    """Links the phantom's input files into directory (the jobs' relative paths)."""
    for name in PHANTOM_INPUTS:
        (directory / name).symlink_to(phantom.path(name))


@pytest.fixture(scope="module")
def readme_job_dir(readme_phantom, tmp_path_factory):
    """A directory holding README's job as job.json (README_SEEDS seeds) beside
    the phantom's inputs it names."""
    job = json.loads(readme_block("Running a job", "json"))
    job["seeds"]["count"] = README_SEEDS
    d = tmp_path_factory.mktemp("readme_job")
    (d / "job.json").write_text(json.dumps(job, indent=1))
    link_inputs(readme_phantom, d)
    return d


def test_readme_commands_all_run():
    """Every build/tractd line of README's "Running a job" is run by a test here
    (a new line needs one)."""
    tested = [r" phantom ", r"^build/tractd run job\.json$", r" run job\.json -o - ",
              r" fit job\.json -o fit/$", r" fit job\.json -o fit/ --odf$",
              r" devices$", r" --help$", r" run - < job\.json$", r" track dwi\.nii\.gz "]
    lines = readme_commands()
    untested = [line for line in lines if line not in README_LINES_NOT_RUN
                and not any(re.search(p, line) for p in tested)]
    assert not untested, f"README command lines no test runs: {untested}"
    for pattern in tested:
        readme_command(pattern)


def test_readme_phantom(readme_phantom):
    """`tractd phantom --sphere repulsion724 DIR`: an ODF of 724 volumes and jobs on
    that sphere."""
    assert readme_phantom.odf_img.shape[3] == DEFAULT_SPHERE_VERTICES, readme_phantom.odf_img.shape
    for job in ("job.json", "job_dwi.json", "job_boot.json", "job_ptt.json"):
        doc = json.loads(readme_phantom.path(job).read_text())
        assert doc["tracking"]["sphere"] == DEFAULT_SPHERE, (job, doc["tracking"])


def test_readme_job_sphere():
    """README's job tracks on the default sphere."""
    job = json.loads(readme_block("Running a job", "json"))
    assert job["tracking"].get("sphere", DEFAULT_SPHERE) == DEFAULT_SPHERE, job["tracking"]


def test_readme_run(tractd, readme_phantom, readme_job_dir, user_env):
    """`tractd run job.json` writes output.path with whole streamlines;
    `tractd run job.json -o - > tracks.trk` writes the same bytes to standard output."""
    d = readme_job_dir
    out = d / json.loads((d / "job.json").read_text())["output"]["path"]
    line = readme_command(r"^build/tractd run job\.json$")
    assert_ok(run_line(tractd, line, d, user_env), line)
    found = assert_whole_streamlines(out, readme_phantom, label=line)
    print(f"\n== {line}: {found}")
    first = out.read_bytes()
    out.unlink()

    line = readme_command(r" run job\.json -o - ")
    proc = run_line(tractd, line, d, user_env)
    assert_ok(proc, line)
    assert out.is_file(), f"{line} wrote no {out.name}"
    assert out.read_bytes() == first, f"{line} wrote other bytes than `tractd run job.json`"


def test_readme_run_stdin_and_track(tractd, readme_phantom, readme_job_dir, user_env):
    """`tractd run - < job.json` writes output.path from here, the bytes of `tractd
    run job.json`; `tractd track dwi.nii.gz tracks.tck ...` writes a TCK with whole
    streamlines, its gradients found beside the DWI (dwi.bval, dwi.bvec)."""
    d = readme_job_dir
    out = d / json.loads((d / "job.json").read_text())["output"]["path"]
    assert_ok(run_line(tractd, "build/tractd run job.json -o ref.trk", d, user_env), "ref")
    line = readme_command(r" run - < job\.json$")
    assert_ok(run_line(tractd, line, d, user_env), line)
    assert out.read_bytes() == (d / "ref.trk").read_bytes(), f"{line} wrote other bytes"
    out.unlink()

    line = readme_command(r" track dwi\.nii\.gz ")
    assert_ok(run_line(tractd, line, d, user_env), line)
    tck = nib.streamlines.load(str(d / "tracks.tck"))
    assert isinstance(tck, nib.streamlines.TckFile) and len(tck.streamlines) > 0, line


def test_readme_fit(tractd, readme_phantom, readme_job_dir, user_env):
    """`tractd fit job.json -o fit/` writes FA, MD, the CSD's SH and the response;
    with --odf also the ODF on the job's sphere (724 volumes)."""
    d = readme_job_dir
    line = readme_command(r" fit job\.json -o fit/$")
    assert_ok(run_line(tractd, line, d, user_env), line)
    names = sorted(p.name for p in (d / "fit").iterdir())
    assert names == ["fa.nii.gz", "md.nii.gz", "response.json", "sh.nii.gz"], names
    fa = nib.load(str(d / "fit" / "fa.nii.gz"))
    assert fa.shape == readme_phantom.shape
    fa = np.asarray(fa.dataobj)
    assert np.all((fa >= 0) & (fa <= 1)) and fa.max() > 0.5, (fa.min(), fa.max())
    n_sh = (SH_ORDER + 1) * (SH_ORDER + 2) // 2
    assert nib.load(str(d / "fit" / "sh.nii.gz")).shape == (*readme_phantom.shape, n_sh)

    line = readme_command(r" fit job\.json -o fit/ --odf$")
    assert_ok(run_line(tractd, line, d, user_env), line)
    odf = nib.load(str(d / "fit" / "odf.nii.gz"))
    assert odf.shape == (*readme_phantom.shape, DEFAULT_SPHERE_VERTICES), odf.shape


def test_readme_devices_and_help(tractd, tmp_path, user_env):
    """`tractd devices` lists at least one device by index; `tractd --help` prints usage."""
    line = readme_command(r" devices$")
    proc = run_line(tractd, line, tmp_path, user_env)
    assert_ok(proc, line)
    assert re.search(rb"^0\t", proc.stdout, re.M), proc.stdout
    line = readme_command(r" --help$")
    proc = run_line(tractd, line, tmp_path, user_env)
    assert_ok(proc, line)
    assert proc.stdout.startswith(b"Usage: tractd"), proc.stdout[:200]


# ------------------------------------------------------------------ proto/examples

def sh_descoteaux_legacy_to_tournier(coef, order):
    """SH coefficients from DIPY's descoteaux07 legacy basis to MRtrix3's
    tournier07: least squares over repulsion724 (the same order-n function
    space, so exact to rounding)."""
    sphere = get_sphere(DEFAULT_SPHERE)
    b_from = real_sh_descoteaux(order, sphere.theta, sphere.phi, legacy=True)[0]
    b_to = real_sh_tournier(order, sphere.theta, sphere.phi, legacy=False)[0]
    return coef @ (np.linalg.pinv(b_to) @ b_from).T


@pytest.fixture(scope="module")
def examples_dir(tractd, readme_phantom, tmp_path_factory, user_env):
    """proto/examples/*.json copied beside the inputs they name: the phantom's, and
    wmfod.nii.gz: `tractd fit dwi-phantom.json`'s CSD in tournier07 (MRtrix3's
    basis; the phantom's axes are RAS+, so its world frame is the voxel frame)."""
    d = tmp_path_factory.mktemp("examples")
    for p in EXAMPLES.glob("*.json"):
        (d / p.name).write_bytes(p.read_bytes())
    link_inputs(readme_phantom, d)
    affine = readme_phantom.affine
    assert np.allclose(affine[:3, :3], np.diag(np.diag(affine[:3, :3]))) and \
        np.all(np.diag(affine)[:3] > 0), affine
    run_cli(tractd, ["fit", d / "dwi-phantom.json", "-o", d / "fit"], env=user_env, check=True)
    sh = nib.load(str(d / "fit" / "sh.nii.gz"))
    coef = sh_descoteaux_legacy_to_tournier(np.asarray(sh.dataobj, dtype=np.float64), SH_ORDER)
    nib.save(nib.Nifti1Image(coef.astype(np.float32), sh.affine), str(d / "wmfod.nii.gz"))
    return d


def test_invalid_examples_listed():
    """Every proto/examples/invalid-*.json is in INVALID_EXAMPLES and vice versa."""
    on_disk = sorted(p.name for p in EXAMPLES.glob("invalid-*.json"))
    assert on_disk == sorted(INVALID_EXAMPLES)


def test_examples_default_sphere():
    """The valid examples track on the default sphere (the one users' jobs get),
    so that running them tests it."""
    pinned = {}
    for name in VALID_EXAMPLES:
        sphere = json.loads((EXAMPLES / name).read_text()).get("tracking", {}).get("sphere")
        if sphere not in (None, DEFAULT_SPHERE):
            pinned[name] = sphere
    assert not pinned, f"examples on another sphere than {DEFAULT_SPHERE}: {pinned}"


@pytest.mark.parametrize("name", VALID_EXAMPLES)
def test_valid_example(tractd, readme_phantom, examples_dir, user_env, name):
    """`tractd run EXAMPLE.json` as written exits 0 and writes its output.path with
    whole streamlines along the phantom's long bundles."""
    job = json.loads((examples_dir / name).read_text())
    out = examples_dir / job["output"]["path"]
    line = f"build/tractd run {name}"
    assert_ok(run_line(tractd, line, examples_dir, user_env), line)
    found = assert_whole_streamlines(out, readme_phantom, label=name)
    print(f"\n== {name}: {found}")


@pytest.mark.parametrize("name", sorted(INVALID_EXAMPLES))
def test_invalid_example(tractd, examples_dir, user_env, name):
    """`tractd run invalid-*.json` exits 3 with an error naming the example's field."""
    proc = run_line(tractd, f"build/tractd run {name}", examples_dir, user_env)
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode == EXIT_INVALID, f"{name}: exit {proc.returncode}\n{stderr}"
    field = INVALID_EXAMPLES[name]
    want = (rf"^tractd: error: {re.escape(field)}: " if field is not None
            else r"^tractd: error: invalid JSON")
    assert re.search(want, stderr, re.M), f"{name}: stderr does not match {want!r}:\n{stderr}"


# ------------------------------------------------------------------ the demo

def test_demo_is_what_users_run():
    """`make demo` runs scripts/demo.sh on build/tractd, and the quick start runs
    `make demo`: the script test_demo runs is the demo users see."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    m = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert m and "scripts/demo.sh $(BUILD)/tractd" in m.group(1), "Makefile's demo target"
    assert re.search(r"^make demo$", (REPO_ROOT / "scripts" / "quickstart.sh").read_text(), re.M)


def test_demo(tractd, tmp_path, user_env):
    """scripts/demo.sh TRACTD OUTDIR (what `make demo` runs, OUTDIR for build/demo)
    exits 0, tracks on the default sphere, its TRK holds the streamlines its
    statistics count, and they are whole along the phantom's long bundles."""
    outdir = tmp_path / "demo"
    proc = subprocess.run(["sh", str(DEMO_SCRIPT), tractd, str(outdir)], capture_output=True,
                          timeout=RUN_TIMEOUT_S, env=user_env, cwd=REPO_ROOT)
    assert_ok(proc, "scripts/demo.sh")
    tracking = json.loads((outdir / "job_dwi.json").read_text()).get("tracking", {})
    assert tracking.get("sphere", DEFAULT_SPHERE) == DEFAULT_SPHERE, (
        f"the demo's job tracks on {tracking['sphere']}, not on the default {DEFAULT_SPHERE}")
    stats = json.loads((outdir / "stats.json").read_text())
    trk = nib.streamlines.load(str(outdir / "tracks.trk"))
    assert stats["streamlines"] > 0 and len(trk.streamlines) == stats["streamlines"], (
        stats["streamlines"], len(trk.streamlines))
    found = assert_whole_streamlines(outdir / "tracks.trk", Phantom.from_dir(outdir),
                                     label="scripts/demo.sh")
    print(f"\n== demo: {found}")
