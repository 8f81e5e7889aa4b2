#!/usr/bin/env python3
"""pyAFQ's GPU tracking call on tractd, timed (issue 21; `make bench-pyafq`).

Builds an HCP-sized-ish input with `tractd phantom` (--dim, --voxel-size), starts
a daemon on a private socket (or reaches one: --address), and runs
tractd.cuslines.GPUTracker as pyAFQ's gpu_track calls GPUStreamlines' (prob
path): an ODF on the full 724-direction sphere (repulsion724, sphere_symm
False), the white-matter partial-volume map as stop map at --stop-threshold,
min_pts / max_pts from --min-length / --max-length in mm and the step in mm,
max_angle 30 degrees, float16 TRX, seeds in every WM voxel (PVE > 0.5) at
--seeds-per-voxel, sent in chunks of --chunk-size seeds (each an uploaded .npy,
seeds.points_file, numbered from rng_offset: seeds.first_index).

generate_trx's jobs run twice through generate_jobs, timed chunk by chunk: the
first time uploads the ODF and the stop map, the second finds them on the
daemon (HEAD only), as a later pyAFQ call on the same subject would; then
generate_trx itself, as pyAFQ calls it, when trx-python is installed. Prints
seeds, streamlines and the wall time of each phase, and a last JSON line with
the same figures.

Needs python3 with numpy and nibabel only (no DIPY, no scipy: the sphere's
vertices and faces are read from daemon/models/sphere_data.c); the tractd
client is taken from client/python/src unless it is installed.

    python3 bench/pyafq_call.py [--dim 96,114,96] [--voxel-size 1.5] [--tractd build/tractd]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from math import radians
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def require_packages():
    missing = []
    for name in ("numpy", "nibabel"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        sys.exit(f"bench/pyafq_call.py: python3 lacks {' and '.join(missing)}, which it needs "
                 "(besides the standard library): `python3 -m pip install numpy nibabel` or "
                 "`apt install python3-numpy python3-nibabel`")
    try:
        import tractd  # noqa: F401  (installed)
    except ImportError:
        sys.path.insert(0, str(REPO / "client" / "python" / "src"))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", default="96,114,96", help="phantom grid NX,NY,NZ (default 96,114,96)")
    p.add_argument("--voxel-size", type=float, default=1.5, help="isotropic mm (default 1.5)")
    p.add_argument("--seeds-per-voxel", type=int, default=1,
                   help="random seeds in each WM voxel (pyAFQ's n_seeds; default 1)")
    p.add_argument("--chunk-size", type=int, default=25000,
                   help="seeds per job (GPUStreamlines' chunk_size; default 25000)")
    p.add_argument("--min-length", type=float, default=50, help="mm (default 50)")
    p.add_argument("--max-length", type=float, default=250, help="mm (default 250)")
    p.add_argument("--step", type=float, default=0.5, help="step in mm (default 0.5)")
    p.add_argument("--stop-threshold", type=float, default=0.5,
                   help="on the WM partial-volume stop map (default 0.5)")
    p.add_argument("--tractd", default=str(REPO / "build" / "tractd"))
    p.add_argument("--address", help="a running daemon (unix:///path or http://host:port); "
                   "default: start `tractd serve` on a private socket")
    p.add_argument("--workdir", help="where the phantom goes (kept, and reused when its "
                   "job.json is there); default: a temporary directory")
    p.add_argument("--out", help="also save the TRX of the last call here")
    return p.parse_args()


def repulsion724():
    """(vertices, edges) of tractd's repulsion724 (DIPY's), from sphere_data.c."""
    import numpy as np
    text = (REPO / "daemon" / "models" / "sphere_data.c").read_text()

    def table(name):
        body = re.search(r"repulsion724_%s\[\d+\]\[3\] = \{(.*?)\n\};" % name, text, re.S).group(1)
        return [re.findall(r"-?[0-9][0-9.e+-]*", row) for row in re.findall(r"\{([^{}]*)\}", body)]
    vertices = np.array(table("vertices"), dtype=np.float64)
    faces = np.array(table("faces"), dtype=np.int64)
    edges = np.unique(np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]],
                                              faces[:, [0, 2]]]), axis=1), axis=0)
    return vertices, edges


class Phases:
    """Wall time of each phase, in order."""

    def __init__(self):
        self.seconds = {}

    def run(self, name, fn, *args):
        t0 = time.perf_counter()
        result = fn(*args)
        self.seconds[name] = time.perf_counter() - t0
        print(f"  {name:<34} {self.seconds[name]:9.2f} s", flush=True)
        return result


def make_phantom(args, workdir):
    if not (workdir / "job.json").exists():
        subprocess.run([args.tractd, "-q", "phantom", str(workdir), "--dim", args.dim,
                        "--voxel-size", str(args.voxel_size), "--sphere", "repulsion724",
                        "--uncompressed", "--no-dwi"], check=True)


def start_daemon(args, workdir):
    """tractd serve with a fresh store (the first call uploads the inputs);
    the compiled kernels are kept with the phantom: a second run skips compiling."""
    run_dir = Path(tempfile.mkdtemp(prefix="tractd-bench-"))
    sock = run_dir / "tractd.sock"
    log = open(workdir / "daemon.log", "w")
    proc = subprocess.Popen([args.tractd, "serve", "--state-dir", str(run_dir / "state"),
                             "--listen-unix", str(sock), "--set",
                             f"pipeline_cache={workdir / 'pipeline-cache'}"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"tractd serve did not start: see {workdir / 'daemon.log'}")
        time.sleep(0.05)
    return proc, f"unix://{sock}", run_dir


def load_inputs(workdir, seeds_per_voxel):
    """The ODF, the WM map and seeds in every WM voxel, as pyAFQ has them."""
    import nibabel as nib
    import numpy as np
    odf_img = nib.load(workdir / "odf.nii")
    wm_img = nib.load(workdir / "wm.nii")
    wm = np.asanyarray(wm_img.dataobj, dtype=np.float32)
    voxels = np.repeat(np.argwhere(wm > 0.5), seeds_per_voxel, axis=0)
    seeds = voxels + np.random.default_rng(7).uniform(-0.5, 0.5, voxels.shape)
    return np.asanyarray(odf_img.dataobj, dtype=np.float32), wm, seeds, wm_img


def have_trx():
    try:
        import trx.trx_file_memmap  # noqa: F401
    except ImportError:
        return False
    return True


def chunked(tracker, seeds, seed_img):
    """generate_trx's jobs one by one (generate_jobs): the wall time from one
    chunk's end to the next one's (its seeds' upload, submit, tracking),
    each TRX's fetch, and the streamlines."""
    track_s, fetch_s, n, jobs = [], 0.0, 0, tracker.generate_jobs(seeds, seed_img)
    while True:
        t0 = time.perf_counter()
        job = next(jobs, None)
        if job is None:
            break
        t1 = time.perf_counter()
        job.read()
        fetch_s += time.perf_counter() - t1
        track_s.append(t1 - t0)
        n += job.info["result"]["streamlines"]
    return {"streamlines": n, "jobs": len(track_s), "track_s": track_s, "fetch_s": fetch_s}


def pyafq_trx(tracker, seeds, seed_img, out):
    """generate_trx exactly as pyAFQ calls it (needs trx-python)."""
    trx = tracker.generate_trx(seeds, seed_img)
    n = len(trx.streamlines)
    if out:
        from trx.trx_file_memmap import save
        save(trx, out)
    trx.close()
    return n


def main():
    args = parse_args()
    require_packages()
    import numpy as np
    import tractd
    from tractd.cuslines import GPUTracker, ProbDirectionGetter

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="pyafq-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    phases = Phases()
    print(f"pyAFQ-style call on a {args.dim} phantom at {args.voxel_size} mm ({workdir})")
    phases.run("phantom (tractd phantom)", make_phantom, args, workdir)
    daemon = run_dir = None
    address = args.address
    if address is None:
        daemon, address, run_dir = phases.run("daemon start", start_daemon, args, workdir)
    try:
        data, wm, seeds, seed_img = phases.run("load ODF, WM map; seeds", load_inputs, workdir,
                                               args.seeds_per_voxel)
        vertices, edges = repulsion724()
        client = tractd.Client(address)
        # From here on, pyAFQ's code (gpu_track, prob path).
        minlen = int(args.min_length / args.step)
        maxlen = int(args.max_length / args.step)
        R = seed_img.affine[0:3, 0:3]
        vox_dim = np.mean(np.diag(np.linalg.cholesky(R.T.dot(R))))
        step_size = args.step / vox_dim
        tracker = phases.run("GPUTracker(...)", lambda: GPUTracker(
            ProbDirectionGetter(), data, wm, args.stop_threshold, vertices, edges,
            max_angle=radians(30), step_size=step_size, min_pts=minlen, max_pts=maxlen,
            ngpus=1, rng_seed=7, chunk_size=args.chunk_size, client=client))
        tracker.set_compression_parameters(pos_dtype=np.float16)
        first = phases.run("chunks, inputs uploaded", chunked, tracker, seeds, seed_img)
        held = phases.run("chunks, inputs held", chunked, tracker, seeds, seed_img)
        if have_trx():
            phases.run("generate_trx (pyAFQ's call, as is)", pyafq_trx, tracker, seeds,
                       seed_img, args.out)
        else:
            print("  (no trx-python: generate_trx itself not run; its jobs are the chunks')")
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=60)
            shutil.rmtree(run_dir, ignore_errors=True)
    figures = {"inputs upload (first chunk, uploaded - held)":
               first["track_s"][0] - held["track_s"][0],
               "seeds upload + tracking (all chunks, held)": sum(held["track_s"]),
               "TRX fetch (all chunks, held)": held["fetch_s"]}
    print(f"seeds {len(seeds)}, streamlines {held['streamlines']}, {held['jobs']} jobs of at "
          f"most {args.chunk_size} seeds")
    for key, value in figures.items():
        print(f"  {key:<48} {value:9.2f} s")
    print(json.dumps({"dim": args.dim, "voxel_size": args.voxel_size, "seeds": len(seeds),
                      "streamlines": held["streamlines"], "jobs": held["jobs"],
                      "phases_s": {k: round(v, 3) for k, v in {**phases.seconds,
                                                                **figures}.items()}}))


if __name__ == "__main__":
    main()
