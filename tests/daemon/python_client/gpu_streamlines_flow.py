"""GPUStreamlines' run_gpu_streamlines.py, its prob and boot paths, on the
phantom: the same steps and calls, adapted only in the import (tractd.cuslines
for cuslines) and in taking its paths and options from the command line.

    python gpu_streamlines_flow.py DWI BVALS BVECS MASK ROI --dg prob|boot|ptt \
        [--model opdt|csa|csd] --nseeds N --out PREFIX [--write-method trk|trx]

Writes PREFIX.trk or PREFIX.trx and PREFIX.npz (the arrays it tracked: data,
FA, seeds) so that the test can run the same job through `tractd run`.
"""
import argparse

import dipy.reconst.dti as dti
import nibabel as nib
import numpy as np
from dipy.core.gradients import gradient_table
from dipy.data import get_sphere
from dipy.io import read_bvals_bvecs
from dipy.io.streamline import save_tractogram
from dipy.reconst.csdeconv import ConstrainedSphericalDeconvModel, auto_response_ssst
from dipy.tracking import utils

from tractd.cuslines import BootDirectionGetter, GPUTracker, ProbDirectionGetter, PttDirectionGetter

parser = argparse.ArgumentParser()
for name in ("nifti_file", "bvals", "bvecs", "mask_nifti", "roi_nifti"):
    parser.add_argument(name)
parser.add_argument("--dg", default="boot", choices=["boot", "prob", "ptt"])
parser.add_argument("--model", default="default", choices=["default", "opdt", "csa", "csd"])
parser.add_argument("--nseeds", type=int, default=1000)
parser.add_argument("--out", required=True)
parser.add_argument("--write-method", default="trk", choices=["trk", "trx"])
parser.add_argument("--max-angle", type=float, default=60)
parser.add_argument("--min-signal", type=float, default=1.0)
parser.add_argument("--step-size", type=float, default=0.5)
parser.add_argument("--sh-order", type=int, default=4)
parser.add_argument("--fa-threshold", type=float, default=0.1)
parser.add_argument("--relative-peak-threshold", type=float, default=0.25)
parser.add_argument("--min-separation-angle", type=float, default=45)
parser.add_argument("--sm-lambda", type=float, default=0.006)
parser.add_argument("--seed-seed", type=int, default=0)
args = parser.parse_args()
if args.model == "default":
    args.model = "opdt" if args.dg == "boot" else "csd"

img = nib.load(args.nifti_file)
bvals, bvecs = read_bvals_bvecs(args.bvals, args.bvecs)
gtab = gradient_table(bvals, bvecs)
roi_data = nib.load(args.roi_nifti).get_fdata()
mask = nib.load(args.mask_nifti).get_fdata()
data = img.get_fdata()

FA = dti.TensorModel(gtab, fit_method="WLS").fit(data, mask=mask).fa
seed_mask = np.asarray(utils.random_seeds_from_mask(
    roi_data, seeds_count=args.nseeds, seed_count_per_voxel=False,
    random_seed=args.seed_seed, affine=np.eye(4)))
sphere = get_sphere("repulsion724")

if args.model == "opdt":
    dg = BootDirectionGetter.from_dipy_opdt(gtab, sphere, sh_order_max=args.sh_order,
                                            sh_lambda=args.sm_lambda, min_signal=args.min_signal)
elif args.model == "csa":
    dg = BootDirectionGetter.from_dipy_csa(gtab, sphere, sh_order_max=args.sh_order,
                                           sh_lambda=args.sm_lambda, min_signal=args.min_signal)
else:
    response, _ = auto_response_ssst(gtab, data, roi_radii=10, fa_thr=0.7)
    model = ConstrainedSphericalDeconvModel(gtab, response, sh_order=args.sh_order)
    data = model.fit(data, mask=(FA >= args.fa_threshold)).odf(sphere).clip(min=0)
    if args.dg == "ptt":
        data[FA < args.fa_threshold, :] = 0
        dg = PttDirectionGetter()
    else:
        dg = ProbDirectionGetter()

with GPUTracker(
    dg, data, FA, args.fa_threshold, sphere.vertices, sphere.edges,
    max_angle=args.max_angle * np.pi / 180, step_size=args.step_size,
    relative_peak_thresh=args.relative_peak_threshold,
    min_separation_angle=args.min_separation_angle * np.pi / 180,
    ngpus=1, rng_seed=0, chunk_size=25000,
) as gpu_tracker:
    if args.write_method == "trx":
        from trx.io import save as save_trx
        trx_file = gpu_tracker.generate_trx(seed_mask, img)
        n_sls = len(trx_file.streamlines)
        save_trx(trx_file, args.out + ".trx")
    else:
        sft = gpu_tracker.generate_sft(seed_mask, img)
        n_sls = len(sft.streamlines)
        save_tractogram(sft, args.out + ".trk")
np.savez(args.out + ".npz", data=data.astype(np.float32), fa=FA.astype(np.float32),
         seeds=seed_mask, affine=img.affine)
print(f"Generated {n_sls} streamlines from {seed_mask.shape[0]} seeds")
