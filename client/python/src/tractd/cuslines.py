"""GPUStreamlines' tracker API (cuslines) served by tractd.

`from tractd.cuslines import GPUTracker, ProbDirectionGetter, ...` in place
of `from cuslines import ...` runs GPUStreamlines' flow unchanged on the
daemon: the constructors take the same arguments, and generate_sft /
generate_trx run jobs (one per chunk of seeds) whose inputs (the ODF or DWI,
the stop map, bvals/bvecs) go as in-memory NIfTI and text, uploaded only
when the daemon lacks them. How each argument maps to the job (proto/job.schema.json):

  dataf, stop_map            inputs.odf (prob, ptt) or inputs.dwi (boot) on
                             ref_img's affine, and inputs.stop_map
  stop_threshold             tracking.fa_threshold (tractd stops at <= it,
                             GPUStreamlines at < it: alike but for ties)
  sphere_vertices            tracking.sphere.vertices
  sphere_edges, sphere_symm  checked: tractd takes the sphere's neighbours from
                             its convex hull (with the antipodes for a
                             hemisphere, which tractd detects), as DIPY's
                             spheres have them; other edges (judged when
                             scipy is installed), or a sphere_symm that
                             contradicts the vertices, raise ValueError
  max_angle (radians)        tracking.max_angle (degrees)
  step_size (voxels)         tracking.step_size
  min_pts, max_pts           tracking.min_length / max_length in mm, half a
                             step inside the point counts (isotropic voxels)
  relative_peak_thresh       tracking.relative_peak_threshold
  min_separation_angle       tracking.min_separation_angle (degrees)
  rng_seed                   seeds.rng_seed of every chunk (equal seeds,
                             equal results; the streams differ from
                             GPUStreamlines')
  rng_offset                 seeds.first_index of the first chunk: seed i of a
                             generate call draws as global seed
                             rng_offset + i, whichever chunk it falls in
  chunk_size x ngpus         seeds per job (GPUStreamlines' sweep): each
                             generate call runs one job per chunk, in turn,
                             and joins their results; chunk k's first_index
                             is rng_offset + its first seed's index, so the
                             result is the same whatever chunk_size; the
                             daemon picks its device(s) itself
  PTT probe_length, probe_quality  tracking.probe_length (their product, in
                             voxels) and probe_quality (+1: tractd counts the
                             current point); odf_lut_res and
                             target_short_step only at their defaults
  Boot from_dipy_opdt/csa    model {name, sh_order, sh_lambda, min_signal},
                             inputs.bvals/bvecs from the gradient table;
                             full_basis=True and the raw-matrix constructor
                             raise NotImplementedError
  set_compression_parameters output.positions (float32/float16) and, with
                             linearize, output.compress; TRX only, as in
                             GPUStreamlines
  seeds (N, 3), voxel coords seeds.points_file (each chunk an uploaded .npy,
                             so millions of seeds pass max_request_bytes),
                             space voxel

The tracker's extra keyword `client` picks the daemon (default Client()), and
its extra method generate_jobs yields each chunk's finished Job (results
streamed to files with Job.save, without DIPY or trx-python).
"""
from math import degrees, radians

import numpy as np

from ._client import Client

_TRACKING_SPHERE_EPS = 1e-6


class ProbDirectionGetter:
    """Probabilistic direction getter on an ODF (direction_getter "prob")."""

    name = "prob"

    def tracking(self):
        return {}


class PttDirectionGetter(ProbDirectionGetter):
    """Parallel transport tractography (direction_getter "ptt").
    probe_length: each probing step in voxels; probe_quality: the steps."""

    name = "ptt"

    def __init__(self, odf_lut_res=128, probe_length=0.25, target_short_step=0.025,
                 probe_quality=8):
        if odf_lut_res != 128:
            raise NotImplementedError("odf_lut_res: a CUDA texture layout; tractd samples "
                                      "the ODF itself (only the default 128 is accepted)")
        if target_short_step != 0.025:
            raise NotImplementedError("target_short_step: tractd has no short-step setting "
                                      "(only the default 0.025 is accepted)")
        if probe_length <= 0 or int(probe_quality) != probe_quality or probe_quality < 1:
            raise ValueError("probe_length must be > 0 and probe_quality a positive integer")
        self.probe_length = float(probe_length)
        self.probe_quality = int(probe_quality)

    def tracking(self):
        return {"probe_length": self.probe_length * self.probe_quality,
                "probe_quality": self.probe_quality + 1}


class BootDirectionGetter:
    """Residual bootstrap on the raw DWI (direction_getter "boot"), made by
    from_dipy_opdt or from_dipy_csa."""

    name = "boot"

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "BootDirectionGetter(model_type, min_signal, H, R, ...): tractd builds these "
            "matrices from the gradient table itself; use BootDirectionGetter.from_dipy_opdt "
            "or .from_dipy_csa")

    @classmethod
    def _make(cls, model, gtab, sphere, sh_order_max, full_basis, sh_lambda, min_signal):
        if full_basis:
            raise NotImplementedError("full_basis: tractd fits OPDT/CSA in DIPY's symmetric "
                                      "legacy descoteaux07 basis only")
        dg = object.__new__(cls)
        dg.model = {"name": model, "sh_order": int(sh_order_max),
                    "sh_lambda": float(sh_lambda), "min_signal": float(min_signal)}
        dg.bvals = np.asarray(gtab.bvals, dtype=np.float64)
        dg.bvecs = np.asarray(gtab.bvecs, dtype=np.float64)
        dg.sphere_vertices = np.asarray(sphere.vertices, dtype=np.float64)
        return dg

    @classmethod
    def from_dipy_opdt(cls, gtab, sphere, sh_order_max=6, full_basis=False, sh_lambda=0.006,
                       min_signal=1):
        return cls._make("opdt", gtab, sphere, sh_order_max, full_basis, sh_lambda, min_signal)

    @classmethod
    def from_dipy_csa(cls, gtab, sphere, sh_order_max=6, full_basis=False, sh_lambda=0.006,
                      min_signal=1):
        return cls._make("csa", gtab, sphere, sh_order_max, full_basis, sh_lambda, min_signal)

    def tracking(self):
        return {}


def _hull_edges(vertices, symmetric):
    """Edges of the convex hull of the vertices (and their antipodes, folded
    back onto the vertices, for a hemisphere), as a set of sorted pairs."""
    from scipy.spatial import ConvexHull
    n = len(vertices)
    points = np.concatenate([vertices, -vertices]) if symmetric else vertices
    edges = set()
    for a, b, c in ConvexHull(points).simplices % n:
        for i, j in ((a, b), (b, c), (a, c)):
            if i != j:
                edges.add((min(i, j), max(i, j)))
    return edges


def _has_antipodes(vertices):
    unit = vertices / np.linalg.norm(vertices, axis=1, keepdims=True)
    return bool(np.any(unit @ unit.T < -1 + _TRACKING_SPHERE_EPS))


def _check_sphere(vertices, edges, symmetric):
    if vertices.ndim != 2 or vertices.shape[1] != 3:
        raise ValueError(f"sphere_vertices: an (N, 3) array, got shape {vertices.shape}")
    if symmetric == _has_antipodes(vertices):
        raise ValueError("sphere_symm: says the vertices are " +
                         ("a hemisphere" if symmetric else "a full sphere") +
                         " but they " + ("contain antipodal pairs" if symmetric
                                         else "have no antipodal pair (a hemisphere)"))
    given = {(min(i, j), max(i, j)) for i, j in np.asarray(edges, dtype=np.int64).reshape(-1, 2)}
    try:
        hull = _hull_edges(vertices, symmetric)
    except ImportError:   # no scipy: tractd never reads the edges, they go unchecked
        return
    if given != hull:
        raise ValueError("sphere_edges: not the edges of the convex hull of sphere_vertices, "
                         "which is the neighbourhood tractd uses (as DIPY's spheres have it)")


def _voxel_size(affine):
    sizes = np.linalg.norm(np.asarray(affine, dtype=np.float64)[:3, :3], axis=0)
    if np.ptp(sizes) > 1e-3 * sizes.max():
        raise NotImplementedError(f"min_pts, max_pts: point counts become lengths in mm only "
                                  f"on isotropic voxels, these are {sizes.tolist()} mm")
    return float(sizes.mean())


class Tracker:
    """GPUStreamlines' GPUTracker on tractd: same constructor, context manager,
    set_compression_parameters, generate_sft and generate_trx (see the module
    documentation for how each argument maps to the job)."""

    def __init__(self, dg, dataf, stop_map, stop_threshold, sphere_vertices, sphere_edges,
                 sphere_symm=False, max_angle=radians(60), step_size=0.5, min_pts=0,
                 max_pts=np.inf, relative_peak_thresh=0.25, min_separation_angle=radians(45),
                 ngpus=1, rng_seed=0, rng_offset=0, chunk_size=25000, *, client=None):
        if not isinstance(dg, (ProbDirectionGetter, BootDirectionGetter)):
            raise TypeError("dg: a tractd.cuslines direction getter "
                            f"(Prob, Ptt or Boot), not {type(dg).__name__}")
        if int(rng_offset) != rng_offset or rng_offset < 0:
            raise ValueError(f"rng_offset: a global seed index >= 0, got {rng_offset}")
        if int(ngpus) < 1 or int(chunk_size) < 1:
            raise ValueError("ngpus and chunk_size must be >= 1")
        dataf = np.asarray(dataf)
        stop_map = np.asarray(stop_map)
        if dataf.ndim != 4 or stop_map.shape != dataf.shape[:3]:
            raise ValueError(f"dataf must be 4D and stop_map 3D on its grid, got "
                             f"{dataf.shape} and {stop_map.shape}")
        vertices = np.asarray(sphere_vertices, dtype=np.float64)
        _check_sphere(vertices, sphere_edges, bool(sphere_symm))
        if isinstance(dg, BootDirectionGetter):
            if dg.sphere_vertices.shape != vertices.shape or not np.allclose(dg.sphere_vertices,
                                                                             vertices):
                raise ValueError("sphere_vertices: not the sphere given to the "
                                 "BootDirectionGetter (tractd samples both on one sphere)")
        elif len(vertices) != dataf.shape[3]:
            raise ValueError(f"Number of sphere vertices ({len(vertices)}) must match last "
                             f"dimension of dataf ({dataf.shape[3]}), because dataf should be "
                             "an ODF when using prob or ptt tracking")
        self.dg = dg
        self.dataf, self.stop_map = dataf, stop_map
        self.stop_threshold = float(stop_threshold)
        self.sphere_vertices = vertices
        self.max_angle, self.step_size = float(max_angle), float(step_size)
        self.min_pts, self.max_pts = min_pts, max_pts
        self.relative_peak_thresh = float(relative_peak_thresh)
        self.min_separation_angle = float(min_separation_angle)
        self.ngpus, self.chunk_size = int(ngpus), int(chunk_size)
        self.rng_seed, self.rng_offset = int(rng_seed), int(rng_offset)
        self.client = client if client is not None else Client()
        self.pos_dtype, self.linearize = np.float32, False
        self.tol_error, self.max_segment_length = 0.1, 10
        self.last_job = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return False

    def set_compression_parameters(self, pos_dtype=np.float32, linearize=False, tol_error=0.1,
                                   max_segment_length=10):
        """TRX output: positions as pos_dtype (float32 or float16) and, with
        linearize, compressed within tol_error mm, segments at most
        max_segment_length mm (DIPY's compress_streamlines)."""
        if np.dtype(pos_dtype) not in (np.dtype(np.float32), np.dtype(np.float16)):
            raise NotImplementedError(f"pos_dtype: tractd writes TRX positions as float32 or "
                                      f"float16, not {np.dtype(pos_dtype)}")
        self.pos_dtype, self.linearize = pos_dtype, bool(linearize)
        self.tol_error, self.max_segment_length = float(tol_error), float(max_segment_length)

    def _lengths(self, affine):
        """tracking.min_length / max_length from the point counts: a
        streamline of n points is (n - 1) steps long; the limits sit half a
        step inside so that whole counts are judged as GPUStreamlines does."""
        tracking = {}
        if self.min_pts <= 1 and not np.isfinite(self.max_pts):
            return tracking
        step_mm = self.step_size * _voxel_size(affine)
        if self.min_pts > 1:
            tracking["min_length"] = (self.min_pts - 1.5) * step_mm
        if np.isfinite(self.max_pts):
            if self.max_pts < 2 or self.max_pts < self.min_pts:
                raise ValueError(f"max_pts: {self.max_pts} keeps no streamline")
            tracking["max_length"] = (self.max_pts - 0.5) * step_mm
        return tracking

    def _base_job(self, ref_img, output):
        """The job without its seeds: inputs uploaded (each only when the
        daemon lacks it), tracking and output mapped."""
        affine = ref_img.affine
        client = self.client
        stop_map = client.upload(self.stop_map.astype(np.float32), "inputs.stop_map", affine)
        tracking = {
            "sphere": {"vertices": self.sphere_vertices.tolist()},
            "fa_threshold": self.stop_threshold,
            "step_size": self.step_size,
            "max_angle": degrees(self.max_angle),
            "relative_peak_threshold": self.relative_peak_thresh,
            "min_separation_angle": degrees(self.min_separation_angle),
            **self._lengths(affine), **self.dg.tracking()}
        job = {"direction_getter": self.dg.name, "tracking": tracking, "output": output}
        if isinstance(self.dg, BootDirectionGetter):
            job["inputs"] = {
                "dwi": client.upload(self.dataf.astype(np.float32), "inputs.dwi", affine),
                "bvals": client.upload(self.dg.bvals, "inputs.bvals"),
                "bvecs": client.upload(self.dg.bvecs, "inputs.bvecs"),
                "stop_map": stop_map}
            job["model"] = self.dg.model
        else:
            job["inputs"] = {"odf": client.upload(self.dataf.astype(np.float32), "inputs.odf",
                                                  affine),
                             "stop_map": stop_map}
        return job

    def _run(self, seeds, ref_img, output):
        """One job per chunk of chunk_size x ngpus seeds (GPUStreamlines'
        sweep), each numbered from rng_offset + its first seed's index
        (seeds.first_index) so that every seed draws as it would in one job;
        yields each finished Job in order."""
        seeds = np.asarray(seeds, dtype=np.float64)
        if seeds.ndim != 2 or seeds.shape[1] != 3 or len(seeds) == 0:
            raise ValueError(f"seeds: an (N, 3) array of voxel coordinates, got {seeds.shape}")
        base = self._base_job(ref_img, output)
        size = self.chunk_size * self.ngpus
        for start in range(0, len(seeds), size):
            # The array goes as seeds.points_file (Client.submit).
            job = dict(base, seeds={"points": seeds[start:start + size], "space": "voxel",
                                    "rng_seed": self.rng_seed,
                                    "first_index": self.rng_offset + start})
            self.last_job = self.client.submit(job)
            yield self.last_job.wait(progress=None)

    def generate_jobs(self, seeds, ref_img, format="trx"):
        """tractd's own: tracks from seeds (voxel coordinates) and yields the
        finished Job of each chunk in turn, which generate_sft ("trk") and
        generate_trx ("trx": set_compression_parameters' positions and
        compression) join; Job.save streams each result to a file."""
        if format not in ("trk", "tck", "trx"):
            raise ValueError(f"format: trk, tck or trx, not {format!r}")
        output = {"format": format}
        if format == "trx":
            output["positions"] = ("float16" if np.dtype(self.pos_dtype) == np.float16
                                   else "float32")
            if self.linearize:
                output["compress"] = {"tolerance_mm": self.tol_error,
                                      "max_segment_mm": self.max_segment_length}
        return self._run(seeds, ref_img, output)

    def generate_sft(self, seeds, ref_img):
        """Tracks from seeds (voxel coordinates); a StatefulTractogram on
        ref_img in voxel space, as GPUStreamlines returns it."""
        from dipy.io.stateful_tractogram import Space, StatefulTractogram
        from nibabel.streamlines import ArraySequence
        lines = ArraySequence()
        for job in self.generate_jobs(seeds, ref_img, "trk"):
            lines.extend(job.to_sft().streamlines)
        out = StatefulTractogram(lines, ref_img, Space.RASMM)
        out.to_vox()
        return out

    def generate_trx(self, seeds, ref_img):
        """Tracks from seeds (voxel coordinates); a TrxFile (RAS+ mm) with
        positions of set_compression_parameters' dtype."""
        parts = [job.to_trx() for job in self.generate_jobs(seeds, ref_img)]
        if len(parts) == 1:
            return parts[0]
        from trx.trx_file_memmap import concatenate
        try:
            return concatenate(parts)
        finally:
            for part in parts:
                part.close()


GPUTracker = Tracker

__all__ = ["Tracker", "GPUTracker", "ProbDirectionGetter", "PttDirectionGetter",
           "BootDirectionGetter"]
