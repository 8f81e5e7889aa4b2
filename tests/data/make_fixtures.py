#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes the tiny NIfTI fixtures used by tests/unit/test_volume.c.

Run from anywhere with /usr/bin/python3 (needs nibabel); files go next to
this script. Voxel values follow formulas that the C tests recompute, so no
expected-value files are needed:
  dtype_<name>.nii   raw = (i*12 + j*4 + k) for unsigned types, minus 12 for
                     signed ones; shape (2, 3, 4); scl_slope 2, scl_inter 1
  int16_scaled.nii   raw = i*100 + j*10 + k - 50; shape (3, 4, 5);
                     scl_slope 0.5, scl_inter -3; oblique sform
  int16_bigendian.nii  the same image with a big-endian header and data
  nifti2_4d.nii.gz   NIfTI-2 float32, value = i*1000 + j*100 + k*10 + t;
                     shape (3, 4, 2, 5)
  qform_only.nii     float32, value = i + j + k; qform code 1, sform code 0
  mask_uint8.nii     uint8 (i + j + k) % 2; no qform/sform (pixdim fallback)
  nan_4d.nii         float32 zeros with NaN at voxel (2, 1, 3), volume 1
  float32_bigendian_4d.nii  big-endian float32, value = i*100000 + j*10000 +
                     k*1000 + t; shape (5, 3, 4, 70): more volumes than the
                     reader takes at once
  five_d.nii         shape (2, 2, 2, 1, 3): five used dimensions
  five_d_trailing1.nii shape (2, 2, 2, 3, 1): accepted as 4D
  complex64.nii      complex data (rejected)
  zero_dim.nii       mask_uint8.nii with dim[2] patched to 0
  *_negative_pixdim.nii  qform_only.nii / mask_uint8.nii with pixdim[2] /
                     pixdim[1] negated; nibabel loads them with abs(pixdim)
  truncated.nii      int16_scaled.nii missing its last 20 bytes
  truncated.nii.gz   gzip of a larger image cut in half
"""
import gzip
import os
import struct

import nibabel as nib
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

OBLIQUE = np.array([[1.8, 0.3, -0.2, -40.0],
                    [-0.25, 1.9, 0.4, 12.5],
                    [0.1, -0.35, 2.2, 7.0],
                    [0.0, 0.0, 0.0, 1.0]])

DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32",
          "uint64", "int64", "float32", "float64"]


def path(name):
    return os.path.join(HERE, name)


def grid(shape):
    return np.indices(shape)


def save(img, name):
    img.to_filename(path(name))


def dtype_fixtures():
    i, j, k = grid((2, 3, 4))
    for name in DTYPES:
        raw = i * 12 + j * 4 + k
        if not name.startswith("uint"):
            raw = raw - 12
        img = nib.Nifti1Image(raw.astype(name), np.diag([2.0, 2.0, 2.0, 1.0]), dtype=name)
        img.header.set_slope_inter(2.0, 1.0)
        save(img, f"dtype_{name}.nii")


def int16_scaled():
    i, j, k = grid((3, 4, 5))
    raw = (i * 100 + j * 10 + k - 50).astype(np.int16)
    img = nib.Nifti1Image(raw, OBLIQUE)
    img.header.set_slope_inter(0.5, -3.0)
    save(img, "int16_scaled.nii")
    big_header = nib.Nifti1Header(endianness=">")
    big_header.set_data_dtype(">i2")
    big = nib.Nifti1Image(raw.astype(">i2"), OBLIQUE, big_header)
    big.header.set_slope_inter(0.5, -3.0)
    save(big, "int16_bigendian.nii")


def nifti2_4d():
    i, j, k, t = grid((3, 4, 2, 5))
    data = (i * 1000 + j * 100 + k * 10 + t).astype(np.float32)
    affine = np.array([[-1.5, 0, 0, 30.0], [0, -2.0, 0, 20.0], [0, 0, 2.5, -10.0], [0, 0, 0, 1]])
    save(nib.Nifti2Image(data, affine), "nifti2_4d.nii.gz")


def qform_only():
    i, j, k = grid((3, 4, 5))
    img = nib.Nifti1Image((i + j + k).astype(np.float32), None)
    # 30 degrees about z, z axis flipped (qfac -1), anisotropic voxels.
    c, s = np.cos(np.pi / 6), np.sin(np.pi / 6)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, -1.0]])
    affine = np.eye(4)
    affine[:3, :3] = rot @ np.diag([1.25, 1.5, 2.0])
    affine[:3, 3] = [10.0, -20.0, 30.0]
    img.header.set_qform(affine, code=1)
    img.header.set_sform(None, code=0)
    save(img, "qform_only.nii")


def mask_uint8():
    i, j, k = grid((4, 3, 2))
    img = nib.Nifti1Image(((i + j + k) % 2).astype(np.uint8), None)
    img.header.set_zooms((2.0, 3.0, 4.0))
    img.header.set_qform(None, code=0)
    img.header.set_sform(None, code=0)
    save(img, "mask_uint8.nii")


def nan_4d():
    data = np.zeros((3, 4, 5, 2), np.float32)
    data[2, 1, 3, 1] = np.nan
    save(nib.Nifti1Image(data, np.eye(4)), "nan_4d.nii")


def float32_bigendian_4d():
    i, j, k, t = np.indices((5, 3, 4, 70))
    header = nib.Nifti1Header(endianness=">")
    header.set_data_dtype(">f4")
    data = (i * 100000 + j * 10000 + k * 1000 + t).astype(">f4")
    save(nib.Nifti1Image(data, np.eye(4), header), "float32_bigendian_4d.nii")


def five_d():
    save(nib.Nifti1Image(np.ones((2, 2, 2, 1, 3), np.float32), np.eye(4)), "five_d.nii")
    save(nib.Nifti1Image(np.ones((2, 2, 2, 3, 1), np.float32), np.eye(4)), "five_d_trailing1.nii")


def complex64():
    save(nib.Nifti1Image(np.ones((2, 2, 2), np.complex64), np.eye(4)), "complex64.nii")


def patched_copy(source, name, fmt, offset, value):
    with open(path(source), "rb") as f:
        blob = bytearray(f.read())
    struct.pack_into(fmt, blob, offset, value)
    with open(path(name), "wb") as f:
        f.write(blob)


def patched_headers():
    # Little-endian NIfTI-1 offsets: dim[] at 40 (int16), pixdim[] at 76 (float32).
    patched_copy("mask_uint8.nii", "zero_dim.nii", "<h", 40 + 2 * 2, 0)
    patched_copy("mask_uint8.nii", "mask_negative_pixdim.nii", "<f", 76 + 4 * 1, -2.0)
    patched_copy("qform_only.nii", "qform_negative_pixdim.nii", "<f", 76 + 4 * 2, -1.5)


def truncated():
    with open(path("int16_scaled.nii"), "rb") as f:
        blob = f.read()
    with open(path("truncated.nii"), "wb") as f:
        f.write(blob[:-20])
    big = nib.Nifti1Image(np.arange(16 * 16 * 16, dtype=np.float32).reshape(16, 16, 16), np.eye(4))
    big.to_filename(path("tmp_big.nii"))
    with open(path("tmp_big.nii"), "rb") as f:
        packed = gzip.compress(f.read(), mtime=0)
    os.remove(path("tmp_big.nii"))
    with open(path("truncated.nii.gz"), "wb") as f:
        f.write(packed[: len(packed) // 2])


def main():
    dtype_fixtures()
    int16_scaled()
    nifti2_4d()
    qform_only()
    mask_uint8()
    nan_4d()
    float32_bigendian_4d()
    five_d()
    complex64()
    patched_headers()
    truncated()


if __name__ == "__main__":
    main()
