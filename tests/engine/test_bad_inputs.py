"""Invalid jobs, inputs and flags are refused with the documented exit code
and a message naming the field: `tractd: error: FIELD: REASON`.

Exit codes: 3 invalid job or input, 2 usage error (bad command-line flags).
Each case also runs against the ASan/UBSan build when TRACTD_ASAN names one
(leak detection on: all these cases should be refused before the Vulkan
driver is loaded).
"""
import gzip
import json
import re

import nibabel as nib
import numpy as np
import pytest

from conftest import run_cli, tractd_asan_path, write_job

EXIT_USAGE = 2
EXIT_INVALID = 3

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")
# No Vulkan driver for the ASan runs: `tractd run` opens its devices while it
# reads the inputs, and Mesa's lavapipe leaks at exit (see
# test_valid_job_accepted). A bad input is reported before any device is
# needed, so these runs check tractd's own error paths for leaks.
NO_VULKAN_DRIVER = {"VK_DRIVER_FILES": "/nonexistent/icd.json",
                    "VK_ICD_FILENAMES": "/nonexistent/icd.json"}
ASAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1",
    "UBSAN_OPTIONS": "print_stacktrace=1",
    **NO_VULKAN_DRIVER,
}


# ------------------------------------------------------------------ inputs, built once

class Inputs:
    """Broken input files made from the phantom, each built once per module."""

    def __init__(self, phantom, root):
        self.phantom = phantom
        self.root = root
        self._made = {}

    def _odf(self):
        img = self.phantom.odf_img
        return np.asarray(img.dataobj, dtype=np.float32), img.affine

    def get(self, name):
        if name not in self._made:
            path = self.root / name
            getattr(self, "_make_" + name.split(".")[0])(path)
            self._made[name] = path
        return str(self._made[name])

    def _make_odf_trunc_gz(self, path):            # gzip stream cut in half
        data = self.phantom.path("odf.nii.gz").read_bytes()
        path.write_bytes(data[:len(data) // 2])

    def _make_odf_trunc_nii(self, path):           # header intact, data cut in half
        data = gzip.decompress(self.phantom.path("odf.nii.gz").read_bytes())
        path.write_bytes(data[:len(data) // 2])

    def _make_odf_tiny_gz(self, path):             # not even a full header
        path.write_bytes(self.phantom.path("odf.nii.gz").read_bytes()[:100])

    def _make_odf_huge_claim(self, path):          # a 4 KB gzip whose header claims 6 PB
        head = bytearray(gzip.decompress(self.phantom.path("odf.nii.gz").read_bytes())[:352])
        dims = np.array([4, 16000, 16000, 16000, 362, 1, 1, 1], dtype="<i2")
        head[40:56] = dims.tobytes()                 # NIfTI-1 dim[0..7] at byte 40
        path.write_bytes(gzip.compress(bytes(head) + bytes(4096)))

    def _make_odf_wrong_nv(self, path):            # 100 volumes, sphere has 362
        odf, aff = self._odf()
        nib.save(nib.Nifti1Image(np.ascontiguousarray(odf[..., :100]), aff), str(path))

    def _make_odf_3d(self, path):
        odf, aff = self._odf()
        nib.save(nib.Nifti1Image(np.ascontiguousarray(odf[..., 0]), aff), str(path))

    def _make_odf_nan(self, path):
        odf, aff = self._odf()
        odf = odf.copy()
        odf[10, 10, 10, 5] = np.nan
        nib.save(nib.Nifti1Image(odf, aff), str(path))

    def _make_fa_shape(self, path):                # one x-slice fewer
        fa = self.phantom.fa.astype(np.float32)
        nib.save(nib.Nifti1Image(np.ascontiguousarray(fa[:-1]), self.phantom.affine), str(path))

    def _make_fa_affine(self, path):               # same shape, shifted by 10 mm
        aff = self.phantom.affine.copy()
        aff[:3, 3] += 10.0
        nib.save(nib.Nifti1Image(self.phantom.fa.astype(np.float32), aff), str(path))

    def _make_roi_empty(self, path):
        roi = np.zeros(self.phantom.shape, dtype=np.uint8)
        nib.save(nib.Nifti1Image(roi, self.phantom.affine), str(path))

    def _make_roi_shape(self, path):
        roi = self.phantom.roi.astype(np.uint8)[:, :-2]
        nib.save(nib.Nifti1Image(np.ascontiguousarray(roi), self.phantom.affine), str(path))


@pytest.fixture(scope="module")
def inputs(phantom, tmp_path_factory):
    return Inputs(phantom, tmp_path_factory.mktemp("bad_inputs"))


def base_job(phantom):
    """A valid job (100 ROI seeds, so a case that is wrongly accepted ends fast)."""
    return phantom.job_with(seeds={"roi": str(phantom.path("seed_roi.nii.gz")), "count": 100,
                                   "rng_seed": 0})


# ------------------------------------------------------------------ cases
# Each job case: (id, field expected in the message, function(job, inputs) -> job or str).
# A str is written verbatim as the job file (malformed JSON).

def _set(section, key, value):
    def edit(job, _inputs):
        job.setdefault(section, {})[key] = value
        return job
    return edit


def _input(key, name):
    def edit(job, inputs):
        job["inputs"][key] = inputs.get(name)
        return job
    return edit


def _roi(name):
    def edit(job, inputs):
        job["seeds"]["roi"] = inputs.get(name)
        return job
    return edit


def _points(points):
    def edit(job, _inputs):
        job["seeds"] = {"points": points, "space": "voxel"}
        return job
    return edit


def _path(key, path):
    def edit(job, _inputs):
        job["inputs"][key] = path
        return job
    return edit


_DELETE = object()


def _top(key, value):
    def edit(job, _inputs):
        if value is _DELETE:
            del job[key]
        else:
            job[key] = value
        return job
    return edit


JOB_CASES = [
    ("odf_truncated_gz", "inputs.odf", _input("odf", "odf_trunc_gz.nii.gz")),
    ("odf_truncated_nii", "inputs.odf", _input("odf", "odf_trunc_nii.nii")),
    ("odf_truncated_header", "inputs.odf", _input("odf", "odf_tiny_gz.nii.gz")),
    ("odf_gz_claims_petabytes", "inputs.odf", _input("odf", "odf_huge_claim.nii.gz")),
    ("odf_4th_dim_not_sphere", "inputs.odf", _input("odf", "odf_wrong_nv.nii.gz")),
    ("odf_3d", "inputs.odf", _input("odf", "odf_3d.nii.gz")),
    ("odf_nan", "inputs.odf", _input("odf", "odf_nan.nii.gz")),
    ("odf_missing", "inputs.odf", _path("odf", "/nonexistent/odf.nii.gz")),
    ("stop_map_missing", "inputs.stop_map", _path("stop_map", "/nonexistent/fa.nii.gz")),
    ("stop_map_other_shape", "inputs.stop_map", _input("stop_map", "fa_shape.nii.gz")),
    ("stop_map_other_affine", "inputs.stop_map", _input("stop_map", "fa_affine.nii.gz")),
    ("roi_empty", "seeds.roi", _roi("roi_empty.nii.gz")),
    ("roi_other_shape", "seeds.roi", _roi("roi_shape.nii.gz")),
    ("malformed_json", None, lambda job, _inputs: json.dumps(job)[:-20]),
    ("unknown_top_level_field", "bogus", _top("bogus", 1)),
    ("unknown_tracking_field", "tracking.step_sise", _set("tracking", "step_sise", 0.5)),
    ("missing_inputs", "inputs", _top("inputs", _DELETE)),
    ("unknown_direction_getter", "direction_getter", _top("direction_getter", "nope")),
    ("unknown_sphere", "tracking.sphere", _set("tracking", "sphere", "nosuchsphere")),
    ("step_size_negative", "tracking.step_size", _set("tracking", "step_size", -1)),
    ("max_angle_400", "tracking.max_angle", _set("tracking", "max_angle", 400)),
    ("fa_threshold_string", "tracking.fa_threshold", _set("tracking", "fa_threshold", "abc")),
    ("max_steps_0", "tracking.max_steps", _set("tracking", "max_steps", 0)),
    ("count_0", "seeds.count", _set("seeds", "count", 0)),
    ("count_1e12_int", "seeds.count", _set("seeds", "count", 10**12)),
    ("count_1e12_real", "seeds.count", _set("seeds", "count", 1e12)),
    ("count_fractional", "seeds.count", _set("seeds", "count", 2.5)),
    ("rng_seed_negative", "seeds.rng_seed", _set("seeds", "rng_seed", -1)),
    ("seed_point_outside", "seeds.points[0]", _points([[100.0, 0.0, 0.0]])),
    ("second_seed_point_outside", "seeds.points[1]",
     _points([[24.0, 24.0, 12.0], [0.0, -3.0, 0.0]])),
    ("seed_point_two_coordinates", "seeds.points[0]", _points([[1.0, 2.0]])),
]

# Flag cases: (id, args after the binary; JOB is replaced by a valid job file's path,
# the text that must appear in stderr). Usage errors start with "tractd:" (getopt's
# own messages included), not necessarily "tractd: error:".
FLAG_CASES = [
    ("unknown_flag", ["run", "JOB", "--bogus-flag"], "--bogus-flag"),
    ("chunk_seeds_zero", ["run", "JOB", "--max-chunk-seeds", "0"], "--max-chunk-seeds"),
    ("chunk_seeds_not_a_number", ["run", "JOB", "--max-chunk-seeds", "abc"], "--max-chunk-seeds"),
    ("binding_bytes_negative", ["run", "JOB", "--max-binding-bytes", "-5"], "--max-binding-bytes"),
    ("flag_missing_value", ["run", "JOB", "-o"], "o"),      # getopt: "requires an argument -- 'o'"
    ("run_without_job", ["run"], "run"),
    ("unknown_command", ["frobnicate"], "frobnicate"),
]


def _binaries():
    """The release binary always; the ASan build when TRACTD_ASAN names one."""
    return [pytest.param("release", id="release"),
            pytest.param("asan", id="asan",
                         marks=pytest.mark.skipif(tractd_asan_path() is None,
                                                  reason="TRACTD_ASAN not set or not executable"))]


@pytest.fixture(params=_binaries())
def binary(request, tractd):
    """(path, env) of the binary under test."""
    if request.param == "release":
        return tractd, None
    return tractd_asan_path(), ASAN_ENV


def _check(proc, binary_env, expect_rc, expect_texts, prefix="tractd: error:"):
    msg = f"exit {proc.returncode}, stderr:\n{proc.stderr}"
    if binary_env is not None:
        for marker in SANITIZER_MARKERS:
            assert marker not in proc.stderr, f"sanitizer report ({marker}): {msg}"
    assert proc.returncode == expect_rc, f"expected exit {expect_rc}; {msg}"
    assert prefix in proc.stderr, f"no {prefix!r} in stderr; {msg}"
    for text in expect_texts:
        if isinstance(text, re.Pattern):
            assert text.search(proc.stderr), f"stderr does not match {text.pattern!r}; {msg}"
        else:
            assert text in proc.stderr, f"stderr does not name {text!r}; {msg}"


@pytest.mark.parametrize("case_id,field,edit", JOB_CASES, ids=[c[0] for c in JOB_CASES])
def test_bad_job(binary, phantom, inputs, tmp_path, case_id, field, edit):
    path, env = binary
    job = edit(base_job(phantom), inputs)
    job_path = tmp_path / "job.json"
    if isinstance(job, str):
        job_path.write_text(job)
    else:
        write_job(job_path, job)
    out = tmp_path / "out.trk"
    proc = run_cli(path, ["run", job_path, "-o", out, "-q"], env=env)
    expect = []
    if field is not None:
        # The field itself or one of its members (a missing "inputs" may be
        # reported as "inputs.odf: is required").
        expect.append(re.compile(r"tractd: error: " + re.escape(field) + r"[:.\[]"))
    if case_id.endswith("_missing"):
        expect.append("/nonexistent/")              # the reason names the file
    _check(proc, env, EXIT_INVALID, expect)
    assert not out.exists() or out.stat().st_size == 0, \
        f"a refused job left output {out} ({out.stat().st_size} bytes)"


@pytest.mark.parametrize("case_id,args,text", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_bad_flags(binary, phantom, tmp_path, case_id, args, text):
    path, env = binary
    job_path = write_job(tmp_path / "job.json", base_job(phantom))
    args = [str(job_path) if a == "JOB" else a for a in args]
    proc = run_cli(path, args, env=env)
    _check(proc, env, EXIT_USAGE, [text], prefix="tractd:")


def test_phantom_unknown_flag(binary, tmp_path):
    path, env = binary
    proc = run_cli(path, ["phantom", "--bogus-flag", tmp_path / "ph"], env=env)
    _check(proc, env, EXIT_USAGE, ["--bogus-flag"], prefix="tractd:")
    assert not (tmp_path / "ph" / "job.json").exists()


def test_valid_job_accepted(binary, phantom, tmp_path):
    """Control: the unmodified base job runs (the failures above are the edits)."""
    path, env = binary
    if env is not None:
        # This one reaches the GPU; Mesa's lavapipe may leak at exit.
        env = {**{k: v for k, v in env.items() if k not in NO_VULKAN_DRIVER},
               "ASAN_OPTIONS": "detect_leaks=0"}
    job_path = write_job(tmp_path / "job.json", base_job(phantom))
    proc = run_cli(path, ["run", job_path, "-o", tmp_path / "out.trk", "-q"], env=env)
    for marker in SANITIZER_MARKERS:
        assert marker not in proc.stderr, f"sanitizer report ({marker}):\n{proc.stderr}"
    assert proc.returncode == 0, f"exit {proc.returncode}, stderr:\n{proc.stderr}"
    assert (tmp_path / "out.trk").stat().st_size > 1000
