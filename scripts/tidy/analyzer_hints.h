/* SPDX-License-Identifier: MIT */
/*
 * analyzer_hints: what clang-tidy's static analyzer cannot see across files,
 * said to it alone (`make check-tidy` includes this before each daemon file
 * but errbuf.c; no build includes it).
 *
 * The analyzer reads one file at a time, so it does not know that errbuf_set
 * returns the code it is given: on every `return errbuf_set(err, -EINVAL, ...)`
 * it would follow the caller on as if that had succeeded. The macros below make
 * the call's value the code, as errbuf.c does.
 */
#ifndef TRACTD_ANALYZER_HINTS_H
#define TRACTD_ANALYZER_HINTS_H

#include "base/errbuf.h"

#define errbuf_set(err, code, ...) (errbuf_set((err), (code), __VA_ARGS__), (code))
#define errbuf_set_kind(err, kind, code, ...) \
	(errbuf_set_kind((err), (kind), (code), __VA_ARGS__), (code))

#endif
