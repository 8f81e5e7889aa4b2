"""The phantom's raw DWI series, read the way a user's pipeline reads it:
nibabel for the images, dipy.io.read_bvals_bvecs for the FSL tables, and a
DIPY tensor fit (WLS) that has to agree with the phantom's own ground truth:

- FA in single-bundle voxels matches the analytic fa.nii.gz (noise-free: to
  float precision; at the default SNR 30: median error < 0.03);
- FA outside the bundles (isotropic tissue) is low;
- the principal eigenvector in single-bundle voxels lies within 10 degrees of
  the bundle direction, taken as the phantom ODF's largest vertex;
- the mask is the grid less a one-voxel border;
- a two-shell phantom has b0s and two distinct shells of unit directions.
- Stanford HARDI's scheme (--b0s 10 --directions 150 --bvalue 2000) reads
  back as 10 b0s and 150 distinct directions at b=2000.

Single-bundle voxels are those whose analytic FA is the single-fibre FA:
crossing and kissing voxels mix two directions, which lowers it (and a DTI
fit of their mixed signal is not the FA of the mean tensor).
"""
import nibabel as nib
import numpy as np
import pytest
from dipy.core.gradients import gradient_table
from dipy.core.sphere import Sphere
from dipy.data import get_sphere
from dipy.io import read_bvals_bvecs
from dipy.reconst.dti import TensorModel

from conftest import run_cli

DEFAULT_SHAPE = (48, 48, 24)
B0_COUNT = 6
SHELL_DIRECTIONS = 64
SHELL_BVALUES = (1000, 2000)

# The phantom's single-fibre tensor (mm^2/s) and its FA.
LAMBDA_PARALLEL = 1.7e-3
LAMBDA_PERPENDICULAR = 0.3e-3
# fa.nii.gz is float32.
SINGLE_FA_MATCH = 1e-5

# Tolerances (measured at the time of writing: noise-free max 2.4e-8, SNR 30
# median 0.009; outside FA medians 4e-13 noise-free, 0.047 at SNR 30).
TOL_FA_NOISE_FREE = 1e-4      # every single-bundle voxel
TOL_FA_MEDIAN_SNR30 = 0.03    # median over single-bundle voxels
MAX_OUTSIDE_FA_NOISE_FREE = 1e-3
MAX_OUTSIDE_FA_MEDIAN_SNR30 = 0.1
MAX_ANGLE_DEG = 10.0
MIN_SINGLE_VOXELS = 5000


def single_fibre_fa():
    ev = np.array([LAMBDA_PARALLEL, LAMBDA_PERPENDICULAR, LAMBDA_PERPENDICULAR])
    return np.sqrt(1.5 * np.sum((ev - ev.mean()) ** 2) / np.sum(ev ** 2))


class Dwi:
    """One generated phantom, its DWI, tables and a DIPY WLS tensor fit."""

    def __init__(self, outdir):
        self.dir = outdir
        self.img = nib.load(str(outdir / "dwi.nii.gz"))
        self.data = np.asarray(self.img.get_fdata(), dtype=np.float64)
        self.bvals, self.bvecs = read_bvals_bvecs(str(outdir / "dwi.bval"),
                                                  str(outdir / "dwi.bvec"))
        self.gtab = gradient_table(self.bvals, self.bvecs)
        self.fa_true = np.asarray(nib.load(str(outdir / "fa.nii.gz")).get_fdata())
        self.mask = np.asarray(nib.load(str(outdir / "mask.nii.gz")).get_fdata())
        self.fit = TensorModel(self.gtab, fit_method="WLS").fit(self.data)
        self.single = np.abs(self.fa_true - single_fibre_fa()) < SINGLE_FA_MATCH
        self.outside = self.fa_true == 0


def make_phantom(tractd, outdir, *args):
    run_cli(tractd, ["phantom", "-q", *args, outdir], check=True)
    return Dwi(outdir)


@pytest.fixture(scope="module")
def noisy(tractd, tmp_path_factory):
    """The default phantom: one shell, SNR 30."""
    return make_phantom(tractd, tmp_path_factory.mktemp("dwi_snr30"))


@pytest.fixture(scope="module")
def noise_free(tractd, tmp_path_factory):
    return make_phantom(tractd, tmp_path_factory.mktemp("dwi_clean"), "--snr", "0")


def bundle_directions(outdir, voxels):
    """Unit direction of the phantom ODF's largest vertex at each voxel."""
    odf = np.asarray(nib.load(str(outdir / "odf.nii.gz")).dataobj, dtype=np.float32)
    vertices = get_sphere("symmetric362").vertices
    return vertices[np.argmax(odf[voxels], axis=-1)]


def test_shape_grid_and_tables(noisy):
    assert noisy.data.shape == DEFAULT_SHAPE + (B0_COUNT + SHELL_DIRECTIONS,)
    assert noisy.img.get_data_dtype() == np.float32
    odf_img = nib.load(str(noisy.dir / "odf.nii.gz"))
    np.testing.assert_allclose(noisy.img.affine, odf_img.affine, atol=1e-6)
    assert np.sum(noisy.bvals == 0) == B0_COUNT
    assert np.all(noisy.bvals[noisy.bvals > 0] == SHELL_BVALUES[0])
    weighted = noisy.bvecs[noisy.bvals > 0]
    np.testing.assert_allclose(np.linalg.norm(weighted, axis=1), 1.0, atol=1e-12)
    assert np.all(noisy.bvecs[noisy.bvals == 0] == 0)
    # The DWI has no empty background: every sample carries signal.
    assert np.all(noisy.data > 0)


def test_mask_border(noisy):
    expected = np.zeros(DEFAULT_SHAPE)
    expected[1:-1, 1:-1, 1:-1] = 1
    np.testing.assert_array_equal(noisy.mask, expected)


def test_fa_noise_free(noise_free):
    single = noise_free.single
    assert single.sum() > MIN_SINGLE_VOXELS
    error = np.abs(noise_free.fit.fa[single] - noise_free.fa_true[single])
    assert error.max() < TOL_FA_NOISE_FREE, error.max()
    outside = noise_free.fit.fa[noise_free.outside]
    assert np.median(outside) < MAX_OUTSIDE_FA_NOISE_FREE, np.median(outside)


def test_fa_at_snr30(noisy):
    single = noisy.single
    error = np.abs(noisy.fit.fa[single] - noisy.fa_true[single])
    assert np.median(error) < TOL_FA_MEDIAN_SNR30, np.median(error)
    outside = noisy.fit.fa[noisy.outside]
    assert np.median(outside) < MAX_OUTSIDE_FA_MEDIAN_SNR30, np.median(outside)


@pytest.mark.parametrize("which", ["noise_free", "noisy"])
def test_principal_direction(which, request):
    """Every single-bundle voxel's first eigenvector is the bundle's axis."""
    dwi = request.getfixturevalue(which)
    voxels = np.nonzero(dwi.single)
    truth = bundle_directions(dwi.dir, voxels)
    evec = dwi.fit.evecs[voxels][..., 0]          # (n, 3): eigenvector of the largest eigenvalue
    cosine = np.clip(np.abs(np.sum(evec * truth, axis=1)), 0.0, 1.0)
    angle = np.degrees(np.arccos(cosine))
    assert angle.max() < MAX_ANGLE_DEG, (angle.max(), np.median(angle))


def test_two_shells(tractd, tmp_path):
    """--shells 2: b0s and two shells of distinct unit directions, and the
    tensor fit over both still recovers the single-bundle FA."""
    dwi = make_phantom(tractd, tmp_path / "two", "--shells", "2", "--snr", "inf")
    assert dwi.data.shape[3] == B0_COUNT + 2 * SHELL_DIRECTIONS
    shells = np.unique(dwi.bvals[dwi.bvals > 0])
    np.testing.assert_array_equal(shells, SHELL_BVALUES)
    assert np.sum(dwi.bvals == 0) == B0_COUNT
    assert len(dwi.gtab.bvals[~dwi.gtab.b0s_mask]) == 2 * SHELL_DIRECTIONS
    for b in SHELL_BVALUES:
        assert np.sum(dwi.bvals == b) == SHELL_DIRECTIONS
    weighted = dwi.bvecs[dwi.bvals > 0]
    np.testing.assert_allclose(np.linalg.norm(weighted, axis=1), 1.0, atol=1e-12)
    # No axis is sampled twice: the second shell's set is a rotated one.
    axes = Sphere(xyz=weighted)
    cosines = np.abs(axes.vertices @ axes.vertices.T) - np.eye(len(weighted))
    assert cosines.max() < np.cos(np.radians(1.0))
    error = np.abs(dwi.fit.fa[dwi.single] - dwi.fa_true[dwi.single])
    assert error.max() < TOL_FA_NOISE_FREE, error.max()


def test_stanford_scheme(tractd, tmp_path):
    """--b0s 10 --directions 150 --bvalue 2000, Stanford HARDI's scheme: DIPY
    reads 160 volumes, 10 b0s and one shell of 150 distinct unit directions,
    and the tensor fit recovers the single-bundle FA."""
    dwi = make_phantom(tractd, tmp_path / "stanford", "--b0s", "10", "--directions", "150",
                       "--bvalue", "2000", "--snr", "inf")
    assert dwi.data.shape == DEFAULT_SHAPE + (160,)
    assert np.sum(dwi.gtab.b0s_mask) == 10
    np.testing.assert_array_equal(np.unique(dwi.bvals[dwi.bvals > 0]), [2000])
    weighted = dwi.bvecs[dwi.bvals > 0]
    np.testing.assert_allclose(np.linalg.norm(weighted, axis=1), 1.0, atol=1e-12)
    cosines = np.abs(weighted @ weighted.T) - np.eye(len(weighted))
    assert cosines.max() < np.cos(np.radians(1.0))
    error = np.abs(dwi.fit.fa[dwi.single] - dwi.fa_true[dwi.single])
    assert error.max() < TOL_FA_NOISE_FREE, error.max()
