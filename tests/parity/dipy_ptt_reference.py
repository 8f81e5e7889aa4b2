"""DIPY's PTT on given seeds, run by conftest's dipy_ptt_track (the PTT parity
tests) with the interpreter of build/venv-dipy (DIPY 1.12.1 from
tests/requirements-dipy.txt; the main test venv keeps Debian's DIPY 1.6, which
has no PTT).

    dipy_ptt_reference.py IN.npz OUT.npz

IN.npz: sf (x, y, z, NV float64: the ODF as tractd's ptt samples it), fa,
vertices (NV x 3), seeds and directions (n x 3, one row per streamline, voxel
coordinates), params (a JSON string: ptt_tracking's keyword arguments, min_len
and max_len in mm as DIPY >= 1.12 takes them, and fa_threshold). OUT.npz:
points (all streamlines' points, voxel coordinates) and counts (points per
streamline), in seed order.
"""
import json
import sys

import numpy as np
from dipy.core.sphere import Sphere
from dipy.tracking.stopping_criterion import ThresholdStoppingCriterion
from dipy.tracking.tracker import ptt_tracking


def main(src, dst):
    data = np.load(src)
    params = json.loads(str(data["params"]))
    sc = ThresholdStoppingCriterion(np.ascontiguousarray(data["fa"], dtype=float),
                                    params.pop("fa_threshold"))
    sphere = Sphere(xyz=np.asarray(data["vertices"], dtype=float))
    # Identity affine: DIPY tracks in voxel coordinates, as tractd does, and
    # its step_size and probe lengths are then in voxels too.
    lines = ptt_tracking(np.asarray(data["seeds"], dtype=float), sc, np.eye(4),
                         seed_directions=np.asarray(data["directions"], dtype=float),
                         sf=np.ascontiguousarray(data["sf"], dtype=float), sphere=sphere,
                         return_all=True, **params)
    lines = [np.asarray(s, dtype=np.float64) for s in lines]
    counts = np.array([len(s) for s in lines], dtype=np.int64)
    points = np.concatenate(lines) if lines else np.zeros((0, 3))
    np.savez(dst, points=points, counts=counts)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
