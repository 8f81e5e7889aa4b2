"""MRtrix3 .mif files written from numpy for the tests, without MRtrix3:
header text ("mrtrix image" ... "END") and raw data, with a layout that
permutes and reverses the axes and a transform that differs from the affine,
chosen so that `mrconvert x.mif x.nii` would give back (data, affine)."""
import gzip

import numpy as np

MRTRIX_TYPES = {np.dtype("<f4"): "Float32LE", np.dtype(">f4"): "Float32BE",
                np.dtype("<f8"): "Float64LE", np.dtype(">i2"): "Int16BE",
                np.dtype("<u2"): "UInt16LE", np.dtype("u1"): "UInt8", np.dtype("i1"): "Int8"}


def write_mif(path, data, affine, perm=(1, 0, 2), reverse=(True, False, False),
              dtype="<f4", scheme=None, extra=""):
    """data: (x, y, z[, t]) as tractd (or nibabel) sees it on affine. MRtrix
    axis k is voxel axis perm[k], stored reversed where reverse[k]; the voxel
    axes stay in memory order x, y, z (after t, volume-contiguous, for 4D),
    which is the order mrconvert writes a NIfTI in. dtype "bit" packs a mask
    (MRtrix3's Bit, the high bit first). scheme: (n, 4) rows gx, gy, gz, b.
    A name ending in .gz is gzip'd."""
    data = np.asarray(data)
    affine = np.asarray(affine, dtype=np.float64)
    four_d = data.ndim == 4
    shape = data.shape[:3]
    dims, vox, cols, ranks = [], [], [], []
    translation = affine[:3, 3].copy()
    for k in range(3):
        a = perm[k]
        step = affine[:3, a] * (-1.0 if reverse[k] else 1.0)
        if reverse[k]:
            translation += affine[:3, a] * (shape[a] - 1)
        size = float(np.linalg.norm(step))
        dims.append(shape[a])
        vox.append(size)
        cols.append(step / size)
        ranks.append(("-" if reverse[k] else "+") + str(a + (1 if four_d else 0)))
    if four_d:
        dims.append(data.shape[3])
        vox.append(1.0)
        ranks.append("+0")
    # memory: t fastest, then x, y, z
    memory = data.transpose(2, 1, 0, 3) if four_d else data.transpose(2, 1, 0)
    if dtype == "bit":
        raw = np.packbits(np.ascontiguousarray(memory).ravel() != 0).tobytes()
        type_name = "Bit"
    else:
        raw = np.ascontiguousarray(memory, dtype=np.dtype(dtype)).tobytes()
        type_name = MRTRIX_TYPES[np.dtype(dtype)]
    lines = ["mrtrix image", "dim: " + ",".join(str(d) for d in dims),
             "vox: " + ",".join(repr(v) for v in vox), "layout: " + ",".join(ranks),
             f"datatype: {type_name}"]
    for r in range(3):
        lines.append("transform: " + ",".join(repr(float(c[r])) for c in cols)
                     + f",{translation[r]!r}")
    for row in (scheme if scheme is not None else []):
        lines.append("dw_scheme: " + ",".join(repr(float(x)) for x in row))
    text = "\n".join(lines) + "\n" + extra
    offset = len(text) + len("file: . 000000\nEND\n")
    offset += (4 - offset % 4) % 4
    head = (text + f"file: . {offset:06d}\nEND\n").encode()
    head += b"\0" * (offset - len(head))
    path = str(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(head + raw)
    return path


def world_scheme(bvals, bvecs, affine):
    """The dw_scheme of voxel-axis b-vectors (n, 3) on affine: directions
    through the affine's rotation (unit columns) into scanner space."""
    rot = affine[:3, :3] / np.linalg.norm(affine[:3, :3], axis=0)
    return np.column_stack([bvecs @ rot.T, bvals])
