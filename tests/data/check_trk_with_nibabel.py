#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Checks that nibabel reads a TRK file as the expected world-space streamlines.

usage: check_trk_with_nibabel.py TRK EXPECTED_JSON [--atol MM]

EXPECTED_JSON holds a list of streamlines, each a list of [x, y, z] points in
RAS+ mm (affine @ [i, j, k, 1] of the voxel points given to the writer).
Exits 0 when nibabel.streamlines.load returns the same number of streamlines
with the same points within atol (default 1e-3 mm), 1 otherwise.
"""
import argparse
import json
import sys

import nibabel as nib
import numpy as np


def mismatch(trk_path, expected, atol):
    """Returns a description of the first difference, or None."""
    tractogram = nib.streamlines.load(trk_path).tractogram
    got = list(tractogram.streamlines)
    if len(got) != len(expected):
        return f"{len(got)} streamlines, expected {len(expected)}"
    for index, (points, want) in enumerate(zip(got, expected)):
        want = np.asarray(want, dtype=np.float64).reshape(-1, 3)
        if points.shape != want.shape:
            return f"streamline {index}: shape {points.shape}, expected {want.shape}"
        error = np.abs(points - want)
        if error.size and error.max() > atol:
            worst = np.unravel_index(np.argmax(error), error.shape)
            return (f"streamline {index} point {worst[0]}: {points[worst[0]].tolist()}, "
                    f"expected {want[worst[0]].tolist()}")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trk")
    parser.add_argument("expected_json")
    parser.add_argument("--atol", type=float, default=1e-3)
    args = parser.parse_args()
    with open(args.expected_json) as f:
        expected = json.load(f)
    problem = mismatch(args.trk, expected, args.atol)
    if problem:
        print(f"{args.trk}: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
