"""`tractd run` opens its devices on a thread of its own while it reads the
inputs (daemon/run/device_open.c), and still reports bad inputs before a bad
device, as when it opened them after loading."""
import json

from conftest import run_cli, write_job


def _job(phantom, **inputs):
    job = json.loads(json.dumps(phantom.job))
    job["inputs"].update(inputs)
    job["seeds"]["count"] = 50
    for key in ("odf", "stop_map"):
        job["inputs"][key] = str(phantom.dir / job["inputs"][key])
    job["seeds"]["roi"] = str(phantom.dir / job["seeds"]["roi"])
    return job


def test_devices_open_while_inputs_load(tractd, phantom, tmp_path):
    """The debug log says the devices opened while the inputs loaded, and the
    run's output is whole."""
    path = write_job(tmp_path / "job.json", _job(phantom))
    proc = run_cli(tractd, ["-v", "run", path, "-o", tmp_path / "out.trk"], check=True)
    assert "device(s) opened in" in proc.stderr and "while the inputs loaded" in proc.stderr, \
        proc.stderr
    assert (tmp_path / "out.trk").stat().st_size > 1000


def test_bad_inputs_reported_before_bad_device(tractd, phantom, tmp_path):
    """A missing ODF and a device that does not exist: the input's error
    (exit 3), not the device's; with good inputs, the device's (exit 1)."""
    bad = write_job(tmp_path / "bad.json", _job(phantom, odf=str(tmp_path / "missing.nii")))
    proc = run_cli(tractd, ["-q", "run", bad, "-o", tmp_path / "out.trk", "--device", "63"])
    assert proc.returncode == 3 and "inputs.odf" in proc.stderr, proc.stderr
    good = write_job(tmp_path / "good.json", _job(phantom))
    proc = run_cli(tractd, ["-q", "run", good, "-o", tmp_path / "out.trk", "--device", "63"])
    assert proc.returncode == 1 and "device" in proc.stderr, proc.stderr
