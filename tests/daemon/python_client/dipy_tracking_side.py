"""One side of the tractd.dipy / DIPY parity tests (test_python_client.py):
DIPY's own tracking function (run with build/venv-dipy's Python, DIPY 1.12.1)
or tractd.dipy's (run with the Python the package is installed in), on the
same files, seeds and arguments.

    dipy_tracking_side.py dipy|tractd ODF FA SEEDS.npy ARGS.json OUT.npz

ODF (an SF on ARGS' sphere; clipped at 0 here, as DIPY's SimplePmfGen wants
it and tractd does anyway) and FA are NIfTI files, tracked on their affine;
SEEDS holds world (RAS+ mm) seed positions. ARGS: "function" (the name in
dipy.tracking.tracker / tractd.dipy), "fa_threshold" (a
ThresholdStoppingCriterion on FA), "sphere" (a DIPY sphere name) and the
function's keyword arguments. OUT.npz: points (world mm) and counts
(points per streamline), and for tractd the job document it submitted (job,
a JSON string).
"""
import json
import sys

import nibabel as nib
import numpy as np
from dipy.data import get_sphere


def main(side, odf_path, fa_path, seeds_path, args_path, out_path):
    if side == "dipy":
        from dipy.tracking import tracker
        from dipy.tracking.stopping_criterion import ThresholdStoppingCriterion
    else:
        import tractd
        import tractd.dipy as tracker
        from tractd.dipy import ThresholdStoppingCriterion
        submitted = []
        submit = tractd.Client.submit

        def recording_submit(client, job, *args, **kwargs):
            submitted.append(json.loads(json.dumps(job, default=str)))
            return submit(client, job, *args, **kwargs)
        tractd.Client.submit = recording_submit
    args = json.loads(open(args_path).read())
    function = getattr(tracker, args.pop("function"))
    odf, fa = nib.load(odf_path), nib.load(fa_path)
    sc = ThresholdStoppingCriterion(fa.get_fdata(), args.pop("fa_threshold"))
    lines = [np.asarray(s, dtype=np.float64)
             for s in function(np.load(seeds_path), sc, odf.affine,
                               sf=np.clip(odf.get_fdata(), 0, None),
                               sphere=get_sphere(args.pop("sphere")), **args)]
    extra = {} if side == "dipy" else {"job": json.dumps(submitted[0])}
    np.savez(out_path, points=np.concatenate(lines) if lines else np.zeros((0, 3)),
             counts=np.array([len(s) for s in lines], dtype=np.int64), **extra)


if __name__ == "__main__":
    main(*sys.argv[1:7])
