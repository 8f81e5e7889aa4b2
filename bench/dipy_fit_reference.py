#!/usr/bin/env python3
"""DIPY's time for the fit `tractd fit` does, as a reference for make bench.

Usage: dipy_fit_reference.py DWI BVAL BVEC MASK

Loads the same files as the phantom's job_dwi.json and runs DIPY's steps for
that job: a WLS tensor fit (FA), auto_response_ssst (roi_radii 10, fa_thr 0.7)
and CSD of order 8 where FA >= 0.1 inside the mask. Prints one JSON object:
seconds per stage (load, dti, response, csd), the voxel counts and the DIPY
version. The phantom the benchmark uses has one shell, so all volumes are
fitted, as tractd does with a single shell (it keeps b0s and the lowest shell).
"""
import contextlib
import json
import logging
import os
import sys
import time
import warnings

# Warnings would clutter the benchmark's output; only the JSON goes to stdout.
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)

import nibabel as nib  # noqa: E402
import numpy as np  # noqa: E402
import dipy  # noqa: E402
from dipy.core.gradients import gradient_table  # noqa: E402
from dipy.io import read_bvals_bvecs  # noqa: E402
from dipy.reconst.csdeconv import (ConstrainedSphericalDeconvModel,  # noqa: E402
                                   auto_response_ssst)
from dipy.reconst.dti import TensorModel  # noqa: E402

SH_ORDER = 8
FA_THRESHOLD = 0.1
ROI_RADII = 10
RESPONSE_FA = 0.7


def csd_model(gtab, response):
    """sh_order was renamed sh_order_max in DIPY 1.9."""
    try:
        return ConstrainedSphericalDeconvModel(gtab, response, sh_order_max=SH_ORDER)
    except TypeError:
        return ConstrainedSphericalDeconvModel(gtab, response, sh_order=SH_ORDER)


@contextlib.contextmanager
def quiet_stderr():
    """DIPY's voxel loop draws a tqdm progress bar on stderr with no switch
    to turn it off (1.6), so stderr goes to /dev/null while it runs; it is
    restored before any exception reaches the top level."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def main(argv):
    if len(argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    dwi_path, bval_path, bvec_path, mask_path = argv[1:]
    np.seterr(all="ignore")
    seconds = {}

    start = time.perf_counter()
    data = nib.load(dwi_path).get_fdata()
    mask = nib.load(mask_path).get_fdata() > 0
    bvals, bvecs = read_bvals_bvecs(bval_path, bvec_path)
    gtab = gradient_table(bvals, bvecs)
    seconds["load"] = time.perf_counter() - start

    start = time.perf_counter()
    fa = TensorModel(gtab).fit(data, mask=mask).fa
    fa[np.isnan(fa)] = 0.0
    seconds["dti"] = time.perf_counter() - start

    start = time.perf_counter()
    response, _ = auto_response_ssst(gtab, data, roi_radii=ROI_RADII, fa_thr=RESPONSE_FA)
    seconds["response"] = time.perf_counter() - start

    start = time.perf_counter()
    csd_mask = (fa >= FA_THRESHOLD) & mask
    with quiet_stderr():
        csd_model(gtab, response).fit(data, mask=csd_mask)
    seconds["csd"] = time.perf_counter() - start

    json.dump({"seconds": seconds, "mask_voxels": int(mask.sum()),
               "fitted_voxels": int(csd_mask.sum()), "volumes": int(data.shape[3]),
               "dipy": dipy.__version__}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
