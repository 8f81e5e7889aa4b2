/* SPDX-License-Identifier: MIT */
/*
 * tractogram_formats: the one list of the tractogram formats tractd writes,
 * in the order of enum output_format (daemon/formats/output.h). The names are
 * output.format's values and -o's extensions on both command lines.
 * X(ID, NAME) is expanded once per format.
 */
#ifndef TRACTD_COMMON_TRACTOGRAM_FORMATS_H
#define TRACTD_COMMON_TRACTOGRAM_FORMATS_H

#define TRACTOGRAM_FORMATS(X) X(TRK, "trk") X(TCK, "tck") X(TRX, "trx")

#endif
