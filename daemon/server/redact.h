/* SPDX-License-Identifier: MIT */
/*
 * redact: what clients are told never names the server's own files. Error
 * messages of the store, the spool and the engine name the paths they
 * failed on, which is what the log wants; a client sees uploaded volumes as
 * the ids it knows (sha256:<hex>) and anything else under state_dir as
 * "<state_dir>".
 */
#ifndef TRACTD_REDACT_H
#define TRACTD_REDACT_H

#include <stddef.h>

/* Copies in to out (len bytes, NUL included; cut if longer): each stored
 * volume's path (".../volumes/<64 hex>[.nii[.gz]]") as "sha256:<hex>", then
 * each remaining occurrence of state_dir (empty: none) as "<state_dir>". */
void redact_server_paths(const char *in, const char *state_dir, char *out, size_t len);

#endif
