"""tractd on real scans: ../shared/data/real (its README.md; BSD-2, converted
with dcm2niix), found beside the repository by the `real_data` fixture, which
fails when it is missing.

Model: the jobs name none, so every scan is fitted as users' jobs are by
default: CSD of order 8, whose 45 coefficients neither scan's directions
determine (Prisma 20 directions at b = 2500, Canon 12 at b = 1500); they are
super-resolved by the non-negativity constraint, as DIPY and MRtrix3 fit
them (tests/parity/test_fit_dipy.py's prisma_pa case compares with DIPY).
Until this default was made to fit, such scans were refused, and these tests
named order 4 (Prisma) and 2 (Canon).

Bvecs: dcm2niix writes FSL-convention tables; tractd reads them along the
image's voxel axes (DIPY's convention). The two agree for an affine of
negative determinant, which every series here has, the sagittal (PSR) ones
included (test_affines_read_bvecs_as_fsl), so the files are passed unchanged.

FA and MD (test_fa_md_against_scanner): `tractd fit` against the scanner's
own maps (scanner_maps/FA x1000, ADC x1e-6 mm^2/s), in the mask's voxels where
the scanner wrote a value (it zeroes its own background: 153 voxels of the PA
mask). The maps are derived from the PA run (series 10's FA/ADC series,
same acquisition time): there tractd's Pearson r must be at least DIPY WLS's
(FA 0.964, MD vs ADC 0.996, the data README) less MARGIN_R; medians within
a tolerance. The AP run was phase-encoded the other way, so EPI distortion
moves its anatomy along y against the maps and voxelwise r is low for any
fit (FA 0.573 for tractd and DIPY alike; MD 0.702, DIPY's 0.01 because of two
voxels with a zero b0 where its MD is 9-10 mm^2/s): AP is compared by
quantiles (10th..90th percentile of FA and MD), with a floor on r that only
says the anatomy is the same.

Principal directions (test_canon_directions_agree_in_world_space): the peak
of tractd's fitted fODF (sh.nii.gz sampled on repulsion724) in each voxel,
turned into world (RAS+) axes by the affine's rotation; each series is
resampled onto 3000_DTI_PA-ortho's grid through the affines (nearest voxel;
FA trilinear) and |cos| with the reference is taken in white matter (FA above
WM_FA in both). The subject stayed still within about 2 degrees and 4 mm for
8000, 9000 and 11000 (rigid registration of the b0s), so those compare in
world space as they are; 15000 was acquired with the head turned (13 degrees,
5 mm by the registration), so it is first registered (rigid, mutual
information of the b0s, DIPY; ~3 s) and its directions turned back (median
|cos| 0.888 without). Negating one axis of the bvecs of 8000 or 9000 drops
their median |cos| to 0.59-0.71.

Corpus callosum (test_corpus_callosum_tracking): the seed ROI is the largest
connected set of voxels within MIDLINE_MM of the mid-sagittal plane (world x
at the median x of the brain mask) whose FA is above CC_FA and whose
principal direction is within about 25 degrees of world x. SEEDS seeds
there, the prob getter, every tracking parameter at its default (sphere
repulsion724, pmf_threshold 0.05, fa_threshold 0.1). Each streamline that
crosses the plane within the ROI's extent (in y and z, +-3 mm) must run
left-right there (the chord over CHORD_STEPS steps either side), and reach
into both hemispheres (its largest distance from the plane on each side).

The tracking job runs on the DWI cut to the mask's bounding box (Scan.
cropped_job; the streamlines are those of the whole grid within 2e-4 mm).

Figures measured when this was written, all seven series (prob on
repulsion100, which the lavapipe bug below leaves alone, stands in for
correct tracking; DIPY 1.6's prob getter on repulsion724, on tractd's SH of
Prisma PA, 300 seeds, is the reference):
  crossing at the ROI: 97-99 % of streamlines; |cos x| median 0.88 (15000)
    to 0.95 (DIPY 0.93);
  reach median (the smaller of the two sides) 17.6-19.9 mm (DIPY 18.5 mm);
    >= 20 mm on both sides in 35-49 % of crossing lines (DIPY 42 %).
  tractd on repulsion724 with the default model (order 8, super-resolved),
    lavapipe: 98-99 % cross at the ROI, |cos x| median 0.90 (15000) to 0.97,
    reach median 17.4-21.1 mm, >= 20 mm on both sides in 38-56 %.
Run with `pytest -s` to see the figures.
"""
import json
import time

import nibabel as nib
import numpy as np
import pytest
from dipy.data import get_sphere
from dipy.reconst.shm import sh_to_sf
from scipy import ndimage

from conftest import run_cli, write_job

# The fODF is compared in DIPY's legacy descoteaux07 basis on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:The legacy descoteaux07 SH basis")

PRISMA = "prisma_xa30"
CANON = "canon_oblique"
PRISMA_SH_ORDER = 8             # the default model's order, fitted super-resolved
CANON_SH_ORDER = 8
# name -> (data set, file stem, sh_order)
SCANS = {
    "prisma_PA": (PRISMA, "dwi_PA", PRISMA_SH_ORDER),
    "prisma_AP": (PRISMA, "dwi_AP", PRISMA_SH_ORDER),
    "canon_3000": (CANON, "3000_DTI_PA-ortho", CANON_SH_ORDER),
    "canon_8000": (CANON, "8000_DTI_PA-ALL_20d", CANON_SH_ORDER),
    "canon_9000": (CANON, "9000_SAG_DTI_PA-ortho", CANON_SH_ORDER),
    "canon_11000": (CANON, "11000_SAG_DTI_PA-ALL_20d", CANON_SH_ORDER),
    "canon_15000": (CANON, "15000_DTI_PA-ortho-HT-VT", CANON_SH_ORDER),
}
CANON_REFERENCE = "canon_3000"
CANON_REGISTERED = ("canon_15000",)       # head turned: compared after registration

SPHERE = get_sphere("repulsion724")

# FA and MD against the scanner (PA), DIPY WLS's r less MARGIN_R.
DIPY_R_FA, DIPY_R_MD = 0.964, 0.996
MARGIN_R = 0.01
TOL_MEDIAN_FA = 0.01          # absolute (measured: 0.2203 vs 0.2220)
TOL_MEDIAN_MD_REL = 0.02      # relative (0.6748e-3 vs 0.6750e-3)
# AP against PA's maps: quantiles, and a floor on r (measured FA 0.573, MD 0.702).
QUANTILES = (10, 25, 50, 75, 90)
TOL_QUANTILE_FA = 0.02        # absolute (measured at most 0.008)
TOL_QUANTILE_MD_REL = 0.05    # relative (measured at most 2.5 %)
AP_FLOOR_R_FA, AP_FLOOR_R_MD = 0.5, 0.6

# Directions across the Canon series (measured median |cos|: 8000 0.961,
# 9000 0.917, 11000 0.962, 15000 registered 0.986; 0.59-0.71 with one bvec
# axis flipped).
WM_FA = 0.4
MIN_MEDIAN_COS = 0.85
MIN_WM_VOXELS = 1000

# Corpus callosum.
MIDLINE_MM = 4.5              # half-width of the slab about the mid-sagittal plane
CC_FA = 0.4
CC_COS_X = 0.9                # |principal direction . x| in the ROI
MIN_ROI_VOXELS = 30           # measured 48 (15000) to 197
SEEDS = 200
CHORD_STEPS = 3               # the crossing's direction: chord over +-3 steps (+-4.5 mm)
ROI_BOX_MM = 3.0
MIN_CROSSING_FRACTION = 0.7   # measured 0.97-0.99 (repulsion100)
MIN_MEDIAN_COS_X = 0.8        # measured 0.88-0.95
MIN_MEDIAN_REACH_MM = 14.0    # measured 17.6-19.9
REACH_MM = 20.0
MIN_REACH_FRACTION = 0.2      # measured 0.35-0.49


# --------------------------------------------------------------------------- fits

class Scan:
    """One real series: its files, `tractd fit`'s outputs and derived maps."""

    def __init__(self, name, root):
        dataset, stem, self.sh_order = SCANS[name]
        self.name = name
        self.dir = root / dataset
        self.stem = stem
        self.dwi = self.dir / f"{stem}.nii.gz"
        self.mask_path = self.dir / f"{stem}_mask.nii.gz"
        img = nib.load(str(self.dwi))
        self.affine = img.affine
        self.mask = np.asarray(nib.load(str(self.mask_path)).dataobj) > 0

    def job(self):
        """The fit's job: the default model, bvecs as dcm2niix wrote them."""
        return {"inputs": {"dwi": str(self.dwi), "bvals": str(self.dir / f"{self.stem}.bval"),
                           "bvecs": str(self.dir / f"{self.stem}.bvec"),
                           "mask": str(self.mask_path)},
                "seeds": {"points": [[0, 0, 0]]}}

    def fit(self, tractd, workdir):
        out = workdir / "fit"
        job = write_job(workdir / "fit.json", self.job())
        t0 = time.perf_counter()
        run_cli(tractd, ["fit", job, "-o", out, "-q"], check=True)
        self.fit_s = time.perf_counter() - t0
        load = lambda n: np.asarray(nib.load(str(out / n)).dataobj, dtype=np.float64)
        self.fa, self.md, self.sh = load("fa.nii.gz"), load("md.nii.gz"), load("sh.nii.gz")
        resp = json.loads((out / "response.json").read_text())
        assert (resp["sh_basis"], resp["sh_frame"], resp["sh_order"]) == \
            ("descoteaux07_legacy", "voxel", self.sh_order), resp
        self.response = {"evals": resp["evals"], "s0": resp["s0"]}
        assert self.sh.shape == self.fa.shape + ((self.sh_order + 1) * (self.sh_order + 2) // 2,)
        # The mid-sagittal plane: world x at the median of the brain mask's voxels.
        self.midline_x = float(np.median(self.world(np.argwhere(self.mask))[:, 0]))

    def world(self, ijk):
        return nib.affines.apply_affine(self.affine, ijk)

    @property
    def rotation(self):
        """Voxel axes -> world (RAS+) axes, unit columns."""
        lin = self.affine[:3, :3]
        return lin / np.linalg.norm(lin, axis=0)

    def directions(self, sel):
        """World unit vectors along the fODF peak (repulsion724) in the voxels sel."""
        odf = sh_to_sf(self.sh[sel], SPHERE, sh_order=self.sh_order)
        return SPHERE.vertices[np.argmax(odf, axis=1)] @ self.rotation.T

    def b0(self):
        return np.asarray(nib.load(str(self.dwi)).dataobj[..., 0], dtype=np.float64)

    def cropped_job(self, workdir, roi):
        """A tracking job on the DWI, mask and seed ROI cut to the mask's bounding
        box (and a voxel), uncompressed: the same data in the same world space on
        about half the grid, which halves the ODF that tractd samples on the
        sphere and uploads (every voxel of the grid, fitted or not: 6 s of a 7 s
        job on the full Canon grid on lavapipe). The fit's response is given,
        since the estimate looks at the centre of the grid, which the cut moves."""
        ijk = np.argwhere(self.mask)
        lo = np.maximum(ijk.min(axis=0) - 1, 0)
        hi = np.minimum(ijk.max(axis=0) + 2, self.mask.shape)
        box = tuple(slice(a, b) for a, b in zip(lo, hi))
        affine = self.affine @ nib.affines.from_matvec(np.eye(3), lo)
        paths = {}
        for key, data in (("dwi", np.asarray(nib.load(str(self.dwi)).dataobj)[box]),
                          ("mask", self.mask[box].astype(np.uint8)),
                          ("roi", roi[box].astype(np.uint8))):
            paths[key] = workdir / f"crop_{key}.nii"
            nib.save(nib.Nifti1Image(data, affine), str(paths[key]))
        job = self.job()
        job["inputs"].update(dwi=str(paths["dwi"]), mask=str(paths["mask"]))
        job["model"] = {"response": self.response}   # the default model, response given
        job["seeds"] = {"roi": str(paths["roi"]), "count": SEEDS, "rng_seed": 0}
        return job


class Fits:
    """`tractd fit` once per scan, on first use."""

    def __init__(self, tractd, root, tmp_path_factory):
        self.tractd, self.root, self.tmp = tractd, root, tmp_path_factory
        self._scans = {}

    def __getitem__(self, name):
        if name not in self._scans:
            scan = Scan(name, self.root)
            scan.workdir = self.tmp.mktemp(name)
            scan.fit(self.tractd, scan.workdir)
            print(f"\n{name}: fitted in {scan.fit_s:.2f} s")
            self._scans[name] = scan
        return self._scans[name]


@pytest.fixture(scope="module")
def fits(tractd, real_data, tmp_path_factory):
    return Fits(tractd, real_data, tmp_path_factory)


def _pearson(a, b):
    return float(np.corrcoef(a, b)[0, 1])


# --------------------------------------------------------------------------- inputs

@pytest.mark.parametrize("name", list(SCANS))
def test_affines_read_bvecs_as_fsl(real_data, name):
    """FSL's bvec convention (dcm2niix) and the voxel-axes one tractd reads
    differ by an x flip only where the affine's determinant is positive; every
    series here has a negative one (LAS, and PSR for the sagittal ones), so the
    tables are passed unchanged. A series with a positive determinant would need
    its first bvec row negated before tractd reads it."""
    scan = Scan(name, real_data)
    det = float(np.linalg.det(scan.affine[:3, :3]))
    axes = "".join(nib.aff2axcodes(scan.affine))
    print(f"{name}: {axes}, det {det:.1f}")
    assert det < 0, f"{name}: affine {axes} has determinant {det:.3g} > 0: convert its bvecs"


# --------------------------------------------------------------------------- FA and MD

@pytest.mark.parametrize("run", ["PA", "AP"])
def test_fa_md_against_scanner(fits, real_data, run):
    scan = fits[f"prisma_{run}"]
    maps = real_data / PRISMA / "scanner_maps"
    s_fa = np.asarray(nib.load(str(maps / "FA.nii.gz")).dataobj, dtype=np.float64) / 1000
    s_adc = np.asarray(nib.load(str(maps / "ADC.nii.gz")).dataobj, dtype=np.float64) * 1e-6
    assert s_fa.shape == scan.fa.shape and np.allclose(
        nib.load(str(maps / "FA.nii.gz")).affine, scan.affine, atol=1e-3)
    sel = scan.mask & (s_fa > 0) & (s_adc > 0)
    r_fa, r_md = _pearson(scan.fa[sel], s_fa[sel]), _pearson(scan.md[sel], s_adc[sel])
    med = (np.median(scan.fa[sel]), np.median(s_fa[sel]),
           np.median(scan.md[sel]), np.median(s_adc[sel]))
    q_fa = np.percentile(scan.fa[sel], QUANTILES), np.percentile(s_fa[sel], QUANTILES)
    q_md = np.percentile(scan.md[sel], QUANTILES), np.percentile(s_adc[sel], QUANTILES)
    msg = (f"{scan.name}, {sel.sum()} voxels: FA r {r_fa:.4f}, median {med[0]:.4f} "
           f"(scanner {med[1]:.4f}); MD vs ADC r {r_md:.4f}, median {1e3 * med[2]:.4f}e-3 "
           f"(scanner {1e3 * med[3]:.4f}e-3 mm^2/s)\n"
           f"  FA percentiles {QUANTILES}: {np.round(q_fa[0], 3)} "
           f"(scanner {np.round(q_fa[1], 3)})\n"
           f"  MD percentiles: {np.round(1e3 * q_md[0], 3)}e-3 "
           f"(scanner {np.round(1e3 * q_md[1], 3)}e-3)")
    print(msg)
    assert sel.sum() > 40000, msg
    if run == "PA":
        assert r_fa >= DIPY_R_FA - MARGIN_R, msg
        assert r_md >= DIPY_R_MD - MARGIN_R, msg
        assert abs(med[0] - med[1]) <= TOL_MEDIAN_FA, msg
        assert abs(med[2] - med[3]) <= TOL_MEDIAN_MD_REL * med[3], msg
    else:
        assert r_fa >= AP_FLOOR_R_FA and r_md >= AP_FLOOR_R_MD, msg
        assert np.max(np.abs(q_fa[0] - q_fa[1])) <= TOL_QUANTILE_FA, msg
        assert np.max(np.abs(q_md[0] - q_md[1]) / q_md[1]) <= TOL_QUANTILE_MD_REL, msg


# --------------------------------------------------------------------------- directions

def _register_rigid(static, moving):
    """World (RAS+) mm map from static's to moving's scanner position: rigid,
    mutual information of the b0s (DIPY), coarse levels only."""
    from dipy.align.imaffine import AffineRegistration, MutualInformationMetric
    from dipy.align.transforms import RigidTransform3D
    reg = AffineRegistration(metric=MutualInformationMetric(32), level_iters=[50, 10],
                             sigmas=[2.0, 1.0], factors=[4, 2], verbosity=0)
    return reg.optimize(static.b0(), moving.b0(), RigidTransform3D(), None,
                        static.affine, moving.affine).affine


def _agreement(ref, scan, world_map):
    """|cos| between ref's principal directions and scan's, in ref's white-matter
    voxels; world_map takes ref's world points to scan's (identity unless
    registered), and scan's directions are turned back by its rotation."""
    ijk = np.argwhere(ref.mask & (ref.fa > WM_FA))
    pts = nib.affines.apply_affine(np.linalg.inv(scan.affine) @ world_map, ref.world(ijk))
    fa = ndimage.map_coordinates(scan.fa, pts.T, order=1, cval=0.0)
    near = np.rint(pts).astype(np.int64)
    inside = np.all((near >= 0) & (near < scan.fa.shape), axis=1)
    near[~inside] = 0
    keep = inside & (fa > WM_FA) & scan.mask[tuple(near.T)]
    d_ref = ref.directions(tuple(ijk[keep].T))
    sel = np.zeros(scan.fa.shape, dtype=bool)
    sel[tuple(near[keep].T)] = True
    d_scan = np.zeros(scan.fa.shape + (3,))
    d_scan[sel] = scan.directions(sel)
    d_scan = d_scan[tuple(near[keep].T)] @ world_map[:3, :3]      # R^T d
    return np.abs(np.sum(d_ref * d_scan, axis=1))


@pytest.mark.parametrize("name", [n for n in SCANS if n.startswith("canon_")
                                  and n != CANON_REFERENCE])
def test_canon_directions_agree_in_world_space(fits, name):
    ref, scan = fits[CANON_REFERENCE], fits[name]
    world_map = np.eye(4)
    note = ""
    if name in CANON_REGISTERED:
        t0 = time.perf_counter()
        world_map = _register_rigid(ref, scan)
        rot = np.degrees(np.arccos(np.clip((np.trace(world_map[:3, :3]) - 1) / 2, -1, 1)))
        unregistered = np.median(_agreement(ref, scan, np.eye(4)))
        note = (f"; registered in {time.perf_counter() - t0:.1f} s: {rot:.1f} deg, "
                f"{np.linalg.norm(world_map[:3, 3]):.1f} mm (median |cos| unregistered "
                f"{unregistered:.3f})")
    cos = _agreement(ref, scan, world_map)
    msg = (f"{name} vs {CANON_REFERENCE}: {len(cos)} WM voxels (FA > {WM_FA} in both), "
           f"|cos| median {np.median(cos):.3f}, 25th pct {np.percentile(cos, 25):.3f}, "
           f"> 0.9 in {np.mean(cos > 0.9):.3f}{note}")
    print(msg)
    assert len(cos) >= MIN_WM_VOXELS, msg
    assert np.median(cos) >= MIN_MEDIAN_COS, msg


# --------------------------------------------------------------------------- corpus callosum

def corpus_callosum_roi(scan):
    """The mid-sagittal voxels of high FA whose principal direction runs along
    world x, largest connected set."""
    world_x = scan.world(np.indices(scan.fa.shape).reshape(3, -1).T)[:, 0].reshape(scan.fa.shape)
    cand = scan.mask & (np.abs(world_x - scan.midline_x) <= MIDLINE_MM) & (scan.fa > CC_FA)
    d = np.zeros(scan.fa.shape + (3,))
    d[cand] = scan.directions(cand)
    cand &= np.abs(d[..., 0]) > CC_COS_X
    labels, n = ndimage.label(cand)
    if n == 0:
        return cand
    sizes = ndimage.sum(cand, labels, range(1, n + 1))
    return labels == 1 + int(np.argmax(sizes))


def crossing_figures(streamlines, x0, roi_world):
    """Per streamline crossing x = x0 within the ROI's y-z extent (+-ROI_BOX_MM):
    |chord . x| over +-CHORD_STEPS steps about the crossing, and the reach
    (largest distance from the plane) on each side."""
    lo, hi = roi_world.min(axis=0) - ROI_BOX_MM, roi_world.max(axis=0) + ROI_BOX_MM
    cos, reach = [], []
    for s in streamlines:
        x = s[:, 0] - x0
        for i in np.nonzero(np.signbit(x[:-1]) != np.signbit(x[1:]))[0]:
            p = (s[i] + s[i + 1]) / 2
            if np.all(p[1:] >= lo[1:]) and np.all(p[1:] <= hi[1:]):
                chord = s[min(len(s) - 1, i + 1 + CHORD_STEPS)] - s[max(0, i - CHORD_STEPS)]
                cos.append(abs(chord[0]) / np.linalg.norm(chord))
                reach.append((x.max(), -x.min()))
                break
    return np.array(cos), np.array(reach).reshape(-1, 2)


@pytest.mark.parametrize("name", list(SCANS))
def test_corpus_callosum_tracking(fits, tractd, name):
    scan = fits[name]
    roi = corpus_callosum_roi(scan)
    roi_world = scan.world(np.argwhere(roi))
    assert roi.sum() >= MIN_ROI_VOXELS, (
        f"{name}: corpus callosum ROI of {roi.sum()} voxels only (midline x {scan.midline_x:.1f})")
    job = scan.cropped_job(scan.workdir, roi)
    job.update(direction_getter="prob", tracking={})   # every default: repulsion724, pmf 0.05
    path = write_job(scan.workdir / "cc.json", job)
    trk = scan.workdir / "cc.trk"
    t0 = time.perf_counter()
    run_cli(tractd, ["run", path, "-o", trk, "-q"], check=True)
    run_s = time.perf_counter() - t0
    lines = [np.asarray(s, dtype=np.float64)
             for s in nib.streamlines.load(str(trk)).streamlines]      # RAS+ mm
    points = np.array([len(s) for s in lines] or [0])
    cos, reach = crossing_figures(lines, scan.midline_x, roi_world)
    both = reach.min(axis=1) if len(reach) else np.zeros(0)
    frac_cross = len(cos) / len(lines) if lines else 0.0
    msg = (f"{name}: ROI {roi.sum()} voxels about x = {scan.midline_x:.1f} mm, centre "
           f"{np.round(roi_world.mean(axis=0), 1)}; {len(lines)} streamlines in {run_s:.1f} s "
           f"(points median {np.median(points):.0f}, max {points.max()}), "
           f"{frac_cross:.2f} cross the plane at the ROI: |cos x| median "
           f"{np.median(cos) if len(cos) else 0:.3f}; reach on both sides median "
           f"{np.median(both) if len(both) else 0:.1f} mm, >= {REACH_MM:.0f} mm in "
           f"{np.mean(both >= REACH_MM) if len(both) else 0:.2f}")
    print(msg)
    assert len(lines) >= SEEDS // 2, msg
    assert frac_cross >= MIN_CROSSING_FRACTION, msg
    assert np.median(cos) >= MIN_MEDIAN_COS_X, msg
    assert np.median(both) >= MIN_MEDIAN_REACH_MM, msg
    assert np.mean(both >= REACH_MM) >= MIN_REACH_FRACTION, msg
