/* SPDX-License-Identifier: MIT */
/*
 * image: an input image in either format a job may give, told apart by its
 * content (not its name: uploads are stored by content): MRtrix3 when it
 * starts "mrtrix image" (mif.h, .mif and .mif.gz), NIfTI-1/-2 otherwise
 * (volume.h, .nii and .nii.gz). Owns nothing past a call; does not log.
 */
#ifndef TRACTD_IMAGE_H
#define TRACTD_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errbuf.h"
#include "formats/mif.h"
#include "formats/volume.h"

/* What an image carries besides its voxels. */
struct image_info {
	bool mif;                   /* read as an MRtrix3 image */
	struct mif_scheme scheme;   /* its dw_scheme (empty for NIfTI and for a .mif without one) */
};

/* volume_load_fd or mif_load_fd by fd's content; *info (when not NULL)
 * says which, with the gradient table (free info->scheme with
 * mif_scheme_free). Errors as theirs. */
int image_load_fd(int fd, const char *path, const char *field, struct volume *ret,
		  struct image_info *info, struct errbuf *err);
/* The same for path, opened as the calling user (volume_open). */
int image_load(const char *path, const char *field, struct volume *ret, struct image_info *info,
	       struct errbuf *err);

/* volume_probe_fd or mif_probe_fd by fd's content. */
int image_probe_fd(int fd, const char *path, const char *field, int64_t dim[4],
		   size_t *stored_size, struct errbuf *err);
/* The same for path, opened as the calling user. */
int image_probe(const char *path, const char *field, int64_t dim[4], size_t *stored_size,
		struct errbuf *err);

#endif
