"""DIPY's tracking functions (dipy.tracking.tracker, DIPY >= 1.10) as tractd
jobs: `from tractd.dipy import probabilistic_tracking` in place of DIPY's.

Each call is one job, run before the call returns; the result is an iterator
over the streamlines in world (RAS+ mm) coordinates, as DIPY's generator
yields them, or (streamline, seed) pairs with save_seeds. How arguments map
(proto/job.schema.json):

  seed_positions (world mm)   seeds.points_file (an uploaded .npy), space "ras"
  sc                          inputs.stop_map and tracking.fa_threshold: exact
                              for this module's ThresholdStoppingCriterion and
                              BinaryStoppingCriterion (DIPY's, remembering their
                              map); DIPY's own two classes keep their map out of
                              Python's reach, so it is read back by asking
                              check_point at every voxel centre: a binary map,
                              exact for BinaryStoppingCriterion, for
                              ThresholdStoppingCriterion exact at voxel centres
                              only (a warning says so). Other criteria (ACT, CMC)
                              raise NotImplementedError
  affine                      the NIfTI affine of every array sent
  sf + sphere                 inputs.odf and tracking.sphere.vertices
  sh, basis_type, legacy      inputs.sh, sh_basis (descoteaux07 / tournier07,
                              _legacy with legacy=True), sh_frame "voxel" (DIPY
                              fits in the voxel axes); sphere or DIPY's
                              default_sphere for tracking.sphere
  min_len, max_len (mm)       tracking.min_length, max_length; max_steps from
                              max_len / step (DIPY bounds each half by it too)
  step_size (mm), voxel_size  tracking.step_size = step_size / voxel size
                              (isotropic voxels only)
  max_angle, pmf_threshold    tracking.max_angle, pmf_threshold
  random_seed                 seeds.rng_seed (tractd's streams, not DIPY's)
  (one streamline per seed)   tracking.relative_peak_threshold 1.0: from the
                              largest ODF peak at the seed, as DIPY's tracker
                              (peaks_from_positions, npeaks=1)
  save_seeds                  output.save_seeds
  ptt: probe_length, probe_radius (mm, as step_size), probe_quality,
  probe_count                 the tracking fields of the same names
  bootstrap: data, model      inputs.dwi with bvals/bvecs from model.gtab;
                              model {opdt|csa, sh_order, sh_lambda, min_signal}:
                              smooth exact with this module's OpdtModel and
                              CsaOdfModel; DIPY's own accepted at the default
                              0.006 only (checked on their fit matrices)
  nbr_threads, seed_buffer_fraction   accepted, not sent (the daemon's GPU)
  client (keyword)            the daemon (default tractd.Client())

Refused by name: pam, seed_directions, return_all=False,
data_support_exponent other than 1, and deterministic_tracking,
closestpeak_tracking, eudx_tracking and pft_tracking (tractd has prob, ptt
and boot).
"""
import math
import warnings

import numpy as np
from dipy.reconst import shm as _shm
from dipy.tracking import stopping_criterion as _dipy_sc

from ._client import Client

MAX_STEPS = 10000     # job.schema.json: tracking.max_steps maximum


class ThresholdStoppingCriterion(_dipy_sc.ThresholdStoppingCriterion):
    """DIPY's ThresholdStoppingCriterion that remembers its map, so that tractd
    gets the metric map itself (DIPY's keeps it out of Python's reach)."""

    def __init__(self, metric_map, threshold):
        self.tractd_stop = (np.asarray(metric_map, dtype=np.float32), float(threshold))


class BinaryStoppingCriterion(_dipy_sc.BinaryStoppingCriterion):
    """DIPY's BinaryStoppingCriterion that remembers its mask."""

    def __init__(self, mask):
        self.tractd_stop = ((np.asarray(mask) > 0).astype(np.uint8), 0.0)


def _probe_criterion(sc, shape):
    """The voxels where DIPY's criterion goes on tracking (check_point at
    each voxel centre: TRACKPOINT is 1)."""
    keep = np.zeros(shape, dtype=np.uint8)
    point = np.zeros(3)
    for index in np.ndindex(*shape):
        point[:] = index
        keep[index] = sc.check_point(point) == 1
    return keep


def _stop_map(sc, shape):
    remembered = getattr(sc, "tractd_stop", None)
    if remembered is not None:
        return remembered
    if type(sc) is _dipy_sc.BinaryStoppingCriterion:
        return _probe_criterion(sc, shape), 0.0
    if type(sc) is _dipy_sc.ThresholdStoppingCriterion:
        warnings.warn("sc: DIPY's ThresholdStoppingCriterion hides its map; tractd gets it "
                      "as a binary mask from check_point at voxel centres, so stopping "
                      "between voxels differs. Use tractd.dipy.ThresholdStoppingCriterion "
                      "for the map itself.", stacklevel=3)
        return _probe_criterion(sc, shape), 0.0
    raise NotImplementedError(f"sc: tractd stops on a map and a threshold; "
                              f"{type(sc).__name__} cannot be mapped")


def _voxel_size(affine, voxel_size):
    sizes = (np.linalg.norm(np.asarray(affine, dtype=np.float64)[:3, :3], axis=0)
             if voxel_size is None else np.broadcast_to(np.asarray(voxel_size, float), (3,)))
    if np.ptp(sizes) > 1e-3 * sizes.max():
        raise NotImplementedError(f"voxel_size: tractd's steps are in voxels; anisotropic "
                                  f"voxels {sizes.tolist()} have no single step")
    return float(sizes.mean())


def _sh_basis(basis_type, legacy):
    name = basis_type or "descoteaux07"
    if name not in ("descoteaux07", "tournier07"):
        raise NotImplementedError(f"basis_type: descoteaux07 or tournier07, not {name!r}")
    return name + ("_legacy" if legacy else "")


def _refuse(seed_directions, pam, return_all):
    if seed_directions is not None:
        raise NotImplementedError("seed_directions: tractd starts from the ODF's peaks at the seed")
    if pam is not None:
        raise NotImplementedError("pam: tractd tracks an ODF, SH or DWI, not peaks; pass sf or sh")
    if not return_all:
        raise NotImplementedError("return_all: tractd returns every streamline (False cannot be "
                                  "mapped)")


def _track(direction_getter, seed_positions, sc, affine, *, odf_inputs, sphere, min_len, max_len,
           step_size, voxel_size, max_angle, pmf_threshold, random_seed, save_seeds, client,
           tracking=None, model=None):
    client = client if client is not None else Client()
    affine = np.asarray(affine, dtype=np.float64)
    voxel = _voxel_size(affine, voxel_size)
    step = step_size / voxel
    shape = odf_inputs.pop("_shape")
    stop_map, threshold = _stop_map(sc, shape)
    seeds = np.asarray(seed_positions, dtype=np.float64).reshape(-1, 3)
    inputs = {k: client.upload(v, f"inputs.{k}", affine) if not isinstance(v, str) else v
              for k, v in odf_inputs.items()}
    inputs["stop_map"] = client.upload(stop_map, "inputs.stop_map", affine)
    job = {"inputs": inputs, "direction_getter": direction_getter,
           # An array: Client.submit sends it as seeds.points_file (.npy).
           "seeds": {"points": seeds, "space": "ras", "rng_seed": int(random_seed)},
           "tracking": {"fa_threshold": threshold, "step_size": step,
                        "max_angle": float(max_angle), "pmf_threshold": float(pmf_threshold),
                        "min_length": float(min_len), "max_length": float(max_len),
                        "max_steps": min(MAX_STEPS, max(1, math.ceil(max_len / step_size))),
                        # DIPY's tracker starts one streamline per seed, from
                        # the largest ODF peak there (peaks_from_positions,
                        # npeaks=1); tractd's default tracks every peak above
                        # a quarter of the largest.
                        "relative_peak_threshold": 1.0,
                        **(tracking or {})},
           "output": {"format": "trk", "save_seeds": bool(save_seeds)}}
    if sphere is not None:
        job["tracking"]["sphere"] = {"vertices": np.asarray(sphere.vertices, float).tolist()}
    if model is not None:
        job["model"] = model
    handle = client.submit(job)
    handle.wait(progress=None)
    sft = handle.to_sft()
    lines = (np.asarray(s, dtype=np.float64) for s in sft.streamlines)
    if save_seeds:
        seeds_out = sft.data_per_streamline["seeds"]
        return zip(lines, (np.asarray(s, dtype=np.float64) for s in seeds_out))
    return lines


def _odf_inputs(sh, sf, sphere, basis_type, legacy):
    from dipy.data import default_sphere
    if (sh is None) == (sf is None):
        raise ValueError("sh, sf: give exactly one of them")
    if sf is not None:
        if sphere is None:
            raise ValueError("A sphere should be defined when using SF (an ODF).")
        sf = np.asarray(sf, dtype=np.float32)
        return {"odf": sf, "_shape": sf.shape[:3]}, sphere
    sh = np.asarray(sh, dtype=np.float32)
    return ({"sh": sh, "sh_basis": _sh_basis(basis_type, legacy), "sh_frame": "voxel",
             "_shape": sh.shape[:3]}, sphere or default_sphere)


def probabilistic_tracking(seed_positions, sc, affine, *, seed_directions=None, sh=None,
                           pam=None, sf=None, min_len=2, max_len=500, step_size=0.2,
                           voxel_size=None, max_angle=20, pmf_threshold=0.1, sphere=None,
                           basis_type=None, legacy=True, nbr_threads=0, random_seed=0,
                           seed_buffer_fraction=1.0, return_all=True, save_seeds=False,
                           client=None):
    """DIPY's probabilistic_tracking on tractd (direction_getter "prob")."""
    _refuse(seed_directions, pam, return_all)
    inputs, sphere = _odf_inputs(sh, sf, sphere, basis_type, legacy)
    return _track("prob", seed_positions, sc, affine, odf_inputs=inputs, sphere=sphere,
                  min_len=min_len, max_len=max_len, step_size=step_size, voxel_size=voxel_size,
                  max_angle=max_angle, pmf_threshold=pmf_threshold, random_seed=random_seed,
                  save_seeds=save_seeds, client=client)


def ptt_tracking(seed_positions, sc, affine, *, seed_directions=None, sh=None, pam=None,
                 sf=None, min_len=2, max_len=500, step_size=0.5, voxel_size=None, max_angle=10,
                 pmf_threshold=0.1, probe_length=1.5, probe_radius=0, probe_quality=7,
                 probe_count=1, data_support_exponent=1, sphere=None, basis_type=None,
                 legacy=True, nbr_threads=0, random_seed=0, seed_buffer_fraction=1.0,
                 return_all=True, save_seeds=False, client=None):
    """DIPY's ptt_tracking on tractd (direction_getter "ptt")."""
    _refuse(seed_directions, pam, return_all)
    if data_support_exponent != 1:
        raise NotImplementedError("data_support_exponent: tractd's PTT uses 1 only")
    inputs, sphere = _odf_inputs(sh, sf, sphere, basis_type, legacy)
    voxel = _voxel_size(affine, voxel_size)
    tracking = {"probe_length": probe_length / voxel, "probe_radius": probe_radius / voxel,
                "probe_quality": int(probe_quality), "probe_count": int(probe_count)}
    return _track("ptt", seed_positions, sc, affine, odf_inputs=inputs, sphere=sphere,
                  min_len=min_len, max_len=max_len, step_size=step_size, voxel_size=voxel_size,
                  max_angle=max_angle, pmf_threshold=pmf_threshold, random_seed=random_seed,
                  save_seeds=save_seeds, client=client, tracking=tracking)


DEFAULT_SMOOTH = 0.006   # DIPY's OpdtModel / CsaOdfModel smooth


def _model_class(model):
    for cls, name in ((_shm.OpdtModel, "opdt"), (_shm.CsaOdfModel, "csa")):
        if isinstance(model, cls):
            return cls, name
    raise NotImplementedError(f"model: tractd bootstraps OpdtModel or CsaOdfModel, not "
                              f"{type(model).__name__}")


def _model_smooth(model, cls, order):
    """The model's smooth: remembered by this module's classes; DIPY's keep it
    only inside their fit matrices, so theirs is accepted when those equal a
    model's of the default smooth, and refused otherwise."""
    remembered = getattr(model, "tractd_smooth", None)
    if remembered is not None:
        return remembered
    default = cls(model.gtab, order, smooth=DEFAULT_SMOOTH, min_signal=model.min_signal)
    def matrices(m):   # OPDT keeps a pair, CSA one matrix
        return m._fit_matrix if isinstance(m._fit_matrix, tuple) else (m._fit_matrix,)
    if all(np.allclose(a, b) for a, b in zip(matrices(model), matrices(default))):
        return DEFAULT_SMOOTH
    raise NotImplementedError("model: DIPY's models keep smooth out of reach; for a smooth "
                              "other than 0.006 use tractd.dipy.OpdtModel or CsaOdfModel")


def _boot_model(model):
    cls, name = _model_class(model)
    order = getattr(model, "sh_order_max", None) or getattr(model, "sh_order", None)
    if order is None:
        raise NotImplementedError("model: this DIPY's model hides its SH order")
    return {"name": name, "sh_order": int(order),
            "sh_lambda": float(_model_smooth(model, cls, order)),
            "min_signal": float(model.min_signal)}


def _remembering_smooth(cls):
    """A DIPY reconstruction model class whose instances remember smooth."""
    class Remembering(cls):
        def __init__(self, gtab, *args, smooth=DEFAULT_SMOOTH, **kwargs):
            super().__init__(gtab, *args, smooth=smooth, **kwargs)
            self.tractd_smooth = float(smooth)
    Remembering.__name__ = Remembering.__qualname__ = cls.__name__
    Remembering.__doc__ = f"DIPY's {cls.__name__}, remembering smooth for tractd."
    return Remembering


OpdtModel = _remembering_smooth(_shm.OpdtModel)
CsaOdfModel = _remembering_smooth(_shm.CsaOdfModel)


def bootstrap_tracking(seed_positions, sc, affine, *, seed_directions=None, data=None,
                       model=None, sh=None, sf=None, min_len=2, max_len=500, step_size=0.5,
                       voxel_size=None, max_angle=60, pmf_threshold=0.1, sphere=None,
                       basis_type=None, legacy=True, nbr_threads=0, random_seed=0,
                       seed_buffer_fraction=1.0, return_all=True, save_seeds=False,
                       client=None):
    """DIPY's bootstrap_tracking on tractd (direction_getter "boot"): data is the
    DWI, model an OpdtModel or CsaOdfModel whose gtab gives bvals/bvecs."""
    from dipy.data import default_sphere
    _refuse(seed_directions, None, return_all)
    if sh is not None or sf is not None:
        raise NotImplementedError("sh, sf: tractd's bootstrap refits the raw DWI (data=)")
    if data is None or model is None:
        raise ValueError("data, model: bootstrap tracking needs the DWI and its model")
    data = np.asarray(data, dtype=np.float32)
    gtab = model.gtab
    inputs = {"dwi": data, "bvals": np.asarray(gtab.bvals, float),
              "bvecs": np.asarray(gtab.bvecs, float), "_shape": data.shape[:3]}
    return _track("boot", seed_positions, sc, affine, odf_inputs=inputs,
                  sphere=sphere or default_sphere, min_len=min_len, max_len=max_len,
                  step_size=step_size, voxel_size=voxel_size, max_angle=max_angle,
                  pmf_threshold=pmf_threshold, random_seed=random_seed, save_seeds=save_seeds,
                  client=client, model=_boot_model(model))


def _not_in_tractd(name):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"{name}: tractd tracks with prob, ptt and boot only "
                                  "(probabilistic_tracking, ptt_tracking, bootstrap_tracking)")
    refuse.__name__ = name
    refuse.__doc__ = f"DIPY's {name}: not served by tractd (raises NotImplementedError)."
    return refuse


deterministic_tracking = _not_in_tractd("deterministic_tracking")
closestpeak_tracking = _not_in_tractd("closestpeak_tracking")
eudx_tracking = _not_in_tractd("eudx_tracking")
pft_tracking = _not_in_tractd("pft_tracking")

__all__ = ["probabilistic_tracking", "ptt_tracking", "bootstrap_tracking",
           "deterministic_tracking", "closestpeak_tracking", "eudx_tracking", "pft_tracking",
           "ThresholdStoppingCriterion", "BinaryStoppingCriterion", "OpdtModel", "CsaOdfModel"]
