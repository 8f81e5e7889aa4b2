/* SPDX-License-Identifier: MIT */
/*
 * npy: the reader of seed point files (seeds.points_file): a NumPy .npy
 * array of shape (N, 3), float32 or float64, little-endian, C or Fortran
 * order, format version 1.0, 2.0 or 3.0 -- what np.save writes for an
 * (N, 3) array. Points come back as doubles, x y z of point 0 first.
 * Messages name the caller's field and where the file is at fault, never
 * its contents. Owns only the array it returns; does not log.
 */
#ifndef TRACTD_NPY_H
#define TRACTD_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"

#define NPY_MAX_HEADER 65536u   /* np.save's headers are ~128 bytes */

/* Parses the len bytes of a .npy file (path only names it in messages).
 * 1 <= N <= max_points. On success *ret (3N doubles, the caller's to free)
 * and *n; else -EINVAL (or -ENOMEM) with err naming field. */
int npy_points_parse(const unsigned char *buf, size_t len, const char *path, const char *field,
		     uint64_t max_points, double **ret, uint64_t *n, struct errbuf *err);

/* npy_points_parse of the regular file open as fd, read from its start
 * (the descriptor a server job holds), or of path when fd < 0 (the CLI's). */
int npy_points_load(int fd, const char *path, const char *field, uint64_t max_points,
		    double **ret, uint64_t *n, struct errbuf *err);

#endif
