"""Scoring of tractograms on a phantom, shared by the tests (conftest.py
re-exports it) and bench/constraints.py: TRK loading into voxel coordinates,
lengths, endpoint labels, valid and invalid connections and bundle coverage.
numpy and nibabel only (no DIPY, no pytest), so that a bench can import it.
Voxel space as the engine's: voxel centres at integer coordinates.
"""
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np


# --------------------------------------------------------------------------- TRK loading

@dataclass
class Trk:
    """A loaded TRK: streamlines in voxel coordinates (float64) and the header."""
    path: Path
    header: dict
    affine: np.ndarray        # voxel -> RAS mm, from the header
    streamlines: list         # [ (n_i, 3) float64 arrays ], voxel coordinates

    def __len__(self):
        return len(self.streamlines)


def load_trk(path):
    """Loads a TRK with nibabel (points in RAS mm) and maps them to voxel
    coordinates with the inverse of the header's voxel-to-RAS affine."""
    tf = nib.streamlines.load(str(path), lazy_load=False)
    header = dict(tf.header)
    affine = np.asarray(header[nib.streamlines.Field.VOXEL_TO_RASMM], dtype=np.float64)
    inv = np.linalg.inv(affine)
    lines = [nib.affines.apply_affine(inv, np.asarray(s, dtype=np.float64))
             for s in tf.streamlines]
    return Trk(path=Path(path), header=header, affine=affine, streamlines=lines)


# --------------------------------------------------------------------------- metrics

def drop_single_points(streamlines):
    """Streamlines with at least 2 points (DIPY's return_all=True yields 1-point
    lines for seeds without directions; tractd never writes them)."""
    return [s for s in streamlines if len(s) >= 2]


def lengths_points(streamlines):
    return np.array([len(s) for s in streamlines], dtype=np.int64)


def lengths_mm(streamlines, affine):
    """Arc length in mm of voxel-coordinate streamlines under affine."""
    lin = np.asarray(affine, dtype=np.float64)[:3, :3]
    return np.array([np.linalg.norm(np.diff(s, axis=0) @ lin.T, axis=1).sum()
                     for s in streamlines])


def voxel_of(points, shape):
    """Nearest voxel (round half up) of each point; (-1, -1, -1) when outside."""
    idx = np.floor(np.asarray(points, dtype=np.float64) + 0.5).astype(np.int64)
    inside = np.all((idx >= 0) & (idx < np.asarray(shape)), axis=-1)
    idx[~inside] = -1
    return idx, inside


def endpoint_labels(streamlines, labels):
    """(n, 2) label of both endpoints of each streamline (0 when out of volume)."""
    if not streamlines:
        return np.zeros((0, 2), dtype=np.int64)
    ends = np.array([[s[0], s[-1]] for s in streamlines])           # (n, 2, 3)
    idx, inside = voxel_of(ends, labels.shape)
    out = np.zeros(ends.shape[:2], dtype=np.int64)
    out[inside] = labels[idx[inside][:, 0], idx[inside][:, 1], idx[inside][:, 2]]
    return out


def connection_stats(streamlines, labels, bundles):
    """Valid connections: both endpoints in the two end zones of one bundle;
    invalid ones: both endpoints in end zones, but not one bundle's two.
    Returns {"n", "valid", "valid_fraction", "invalid", "invalid_fraction",
    "per_bundle": {name: count}}."""
    ends = np.sort(endpoint_labels(streamlines, labels), axis=1)
    per_bundle = {}
    valid = 0
    for b, entry in enumerate(bundles):
        k = int(np.sum((ends[:, 0] == 2 * b + 1) & (ends[:, 1] == 2 * b + 2)))
        per_bundle[entry["name"]] = k
        valid += k
    invalid = int(np.sum((ends[:, 0] > 0) & (ends[:, 1] > 0))) - valid
    n = len(streamlines)
    return {"n": n, "valid": valid, "valid_fraction": valid / n if n else 0.0,
            "invalid": invalid, "invalid_fraction": invalid / n if n else 0.0,
            "per_bundle": per_bundle}


def one_step_further(lines):
    """Each line with both ends one step further along its end segments: the
    point where it stopped, in the include map, which neither DIPY nor tractd
    keeps (DIPY's rule); so that an end zone reached counts as connected."""
    out = []
    for x in lines:
        x = np.asarray(x, np.float64)
        if len(x) >= 2:
            x = np.vstack([2 * x[0] - x[1], x, 2 * x[-1] - x[-2]])
        out.append(x)
    return out


def coverage(streamlines, mask):
    """The fraction of mask's voxels (a boolean volume: the bundles) that a
    point of some streamline falls in (nearest voxel)."""
    visited = np.zeros(mask.shape, bool)
    for s in streamlines:
        idx, inside = voxel_of(s, mask.shape)
        idx = idx[inside]
        visited[idx[:, 0], idx[:, 1], idx[:, 2]] = True
    total = int(mask.sum())
    return float((visited & mask).sum()) / total if total else 0.0
