"""pyAFQ's GPU tractography call (AFQ/tractography/gputractography.py,
gpu_track, its prob path) on the phantom, adapted only in the import
(tractd.cuslines for cuslines) and in the ODF, which comes from DIPY's CSD
fit here rather than from pyAFQ's SH file: an ODF on the full (asymmetric
in pyAFQ's sense: sphere_symm left False) 724-direction sphere, a white-matter
partial-volume map as the stop map with its 0.5 threshold, min_pts and max_pts
from lengths in mm, and a float16 TRX.

    python pyafq_call.py DWI BVALS BVECS MASK SEED_ROI OUT.trx MINLEN_MM MAXLEN_MM CHUNK_SIZE
Prints one JSON line: {"n": streamlines, "points": [min, max], "dtype": ..., "min_pts",
"max_pts", "jobs": the jobs run}.
"""
import json
import sys
from math import radians

import dipy.reconst.dti as dti
import nibabel as nib
import numpy as np
from dipy.core.gradients import gradient_table
from dipy.data import get_sphere
from dipy.io import read_bvals_bvecs
from dipy.reconst.csdeconv import ConstrainedSphericalDeconvModel, auto_response_ssst
from dipy.tracking import utils

import tractd  # only to count the jobs the call ran
from tractd.cuslines import GPUTracker, ProbDirectionGetter

dwi_path, bval_path, bvec_path, mask_path, seed_path, out_path = sys.argv[1:7]
minlen, maxlen = float(sys.argv[7]), float(sys.argv[8])
step_size = 0.5            # mm, pyAFQ's default
max_angle = 30.0           # degrees
rng_seed = 7
ngpus, chunk_size = 1, int(sys.argv[9])

img = nib.load(dwi_path)
data = img.get_fdata()
gtab = gradient_table(*read_bvals_bvecs(bval_path, bvec_path))
mask = nib.load(mask_path).get_fdata()
fa = dti.TensorModel(gtab).fit(data, mask=mask).fa
response, _ = auto_response_ssst(gtab, data, roi_radii=10, fa_thr=0.7)
sphere = get_sphere("repulsion724")
data = ConstrainedSphericalDeconvModel(gtab, response, sh_order=6).fit(
    data, mask=mask > 0).odf(sphere).clip(min=0)
seed_img = nib.load(seed_path)
# A white-matter PVE map, as pyAFQ resamples from its PVE file.
wm_data = np.clip(2 * fa, 0, 1)

# From here on, pyAFQ's code (prob path).
minlen = int(minlen / step_size)
maxlen = int(maxlen / step_size)
R = seed_img.affine[0:3, 0:3]
vox_dim = np.mean(np.diag(np.linalg.cholesky(R.T.dot(R))))
step_size = step_size / vox_dim
wm_threshold = 0.5
seeds = np.asarray(utils.random_seeds_from_mask(
    seed_img.get_fdata() > 0, seeds_count=300, seed_count_per_voxel=False,
    random_seed=rng_seed, affine=np.eye(4)))
dg = ProbDirectionGetter()
jobs_before = len(tractd.Client().jobs())
with GPUTracker(
    dg,
    data,
    wm_data,
    wm_threshold,
    sphere.vertices,
    sphere.edges,
    max_angle=radians(max_angle),
    step_size=step_size,
    min_pts=minlen,
    max_pts=maxlen,
    ngpus=ngpus,
    rng_seed=rng_seed,
    chunk_size=chunk_size,
) as gpu_tracker:
    gpu_tracker.set_compression_parameters(pos_dtype=np.float16)
    trx = gpu_tracker.generate_trx(seeds, seed_img)

lengths = np.asarray(trx.streamlines._lengths)
print(json.dumps({"n": int(len(lengths)), "points": [int(lengths.min()), int(lengths.max())],
                  "dtype": str(trx.streamlines._data.dtype), "min_pts": minlen, "max_pts": maxlen,
                  "jobs": len(tractd.Client().jobs()) - jobs_before}))
trx.close()
