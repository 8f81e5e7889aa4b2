/* SPDX-License-Identifier: MIT */
/*
 * store: content-addressed storage of uploaded volumes on disk.
 *
 * Owns the directory <root>/volumes. A volume's id is "sha256:<64 hex>" of its
 * bytes as uploaded; it is stored as <hex>.nii, <hex>.nii.gz, <hex>.mif,
 * <hex>.mif.gz or <hex>.txt by its content (gzip magic -> .nii.gz or .mif.gz
 * by what it inflates to; NIfTI-1/-2 magic -> .nii; "mrtrix image" ->
 * .mif; "\x93NUMPY" -> .npy (seed points); printable text -> .txt; anything
 * else is refused), so that the name
 * says what the file holds. Uploads stream through a writer (data arrive in pieces from the
 * HTTP layer) into a temporary file that is renamed into place when complete,
 * so a half-written upload is never visible. Thread-safe: independent writers
 * may run concurrently. Does not log.
 */
#ifndef TRACTD_STORE_H
#define TRACTD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"

#define STORE_ID_LEN 71   /* "sha256:" + 64 hex digits */

enum store_kind { STORE_NIFTI, STORE_NIFTI_GZ, STORE_TEXT, STORE_MIF, STORE_MIF_GZ, STORE_NPY };

struct store;
struct store_writer;

struct store_entry {
	char id[STORE_ID_LEN + 1];
	uint64_t bytes;
	enum store_kind kind;
};

/* Opens (creating if needed, mode 0700) <root>/volumes and removes the
 * temporary files of uploads an earlier process did not finish. */
int store_open(const char *root, struct store **ret, struct errbuf *err);
void store_close(struct store *s);   /* accepts NULL */

/* Starts an upload limited to max_bytes. */
int store_writer_new(struct store *s, uint64_t max_bytes, struct store_writer **ret,
		     struct errbuf *err);
/* Appends data. -EFBIG past max_bytes; -ENOSPC when the disk (or quota)
 * is full; -EIO on other write errors. */
int store_writer_append(struct store_writer *w, const void *data, size_t len, struct errbuf *err);
/* Completes the upload: checks the kind (-EMEDIUMTYPE when unsupported, -EINVAL
 * when empty), moves the file into place (or drops it if the id exists) and
 * fills *ret. Returns 1 when the volume was new, 0 when it existed, or a
 * negative errno. Frees the writer in every case. */
int store_writer_finish(struct store_writer *w, struct store_entry *ret, struct errbuf *err);
/* Abandons an upload (client gone); removes the temporary file. Accepts NULL. */
void store_writer_abort(struct store_writer *w);

/* Looks an id up. Returns 0 and fills *ret (and, if path is not NULL, the
 * file's path into path[path_len]), -ENOENT when absent, -EINVAL for a
 * malformed id (message says the expected form). */
int store_lookup(struct store *s, const char *id, struct store_entry *ret, char *path,
		 size_t path_len, struct errbuf *err);

/* Owners: who uploaded a volume, kept as empty files
 * <root>/volumes/.owners/<owner>/<hex> (the content stays one copy; an
 * owner's list survives restarts). owner must be a safe file name (api.c's
 * owner names are). store_claim records it: 1 when owner had not uploaded
 * id before, 0 when it had, or a negative errno: -EDQUOT when a new claim
 * would take owner's volumes (store_list's bytes) past quota, checked with
 * the claim so that uploads finishing together cannot both pass (the file
 * then goes unless someone else claims it). store_claimed: whether
 * owner uploaded id. A claim made again is renewed: its expiry
 * (store_expire) starts over. Claims and forgets of one store are
 * serialised, so a volume's last claim and its file go together. */
int store_claim(struct store *s, const char *id, const char *owner, uint64_t quota,
		struct errbuf *err);
bool store_claimed(struct store *s, const char *id, const char *owner);

/* The volumes owner has claimed, into *ret (malloc'd, *n of them; free()
 * it), and the bytes they take, counting each once, into *bytes (either
 * may be NULL). A claim whose file is gone is skipped. 0 or -ENOMEM. */
int store_list(struct store *s, const char *owner, struct store_entry **ret, size_t *n,
	       uint64_t *bytes);

/* Forgets owner's claim on id; the volume's file goes with its last claim.
 * 0, or -ENOENT when owner had not claimed id (or id is malformed). */
int store_forget(struct store *s, const char *id, const char *owner);

/* Forgets every claim not renewed (uploaded again) for ttl seconds, as
 * store_forget does. */
void store_expire(struct store *s, uint64_t ttl);

/* "nifti", "nifti-gz", "text", "mif", "mif-gz", "npy". */
const char *store_kind_name(enum store_kind kind);

#endif
