/* SPDX-License-Identifier: MIT */
/*
 * image: the format of an input image from its first bytes, and the reader
 * for it (see image.h).
 */
#include "formats/image.h"

#include <string.h>
#include <unistd.h>

int image_load_fd(int fd, const char *path, const char *field, struct volume *ret,
		  struct image_info *info, struct errbuf *err)
{
	bool mif = mif_detect_fd(fd);
	struct mif_scheme scheme = { 0 };
	int r = mif ? mif_load_fd(fd, path, field, ret, &scheme, err)
		    : volume_load_fd(fd, path, field, ret, err);

	if (r == 0 && info)
		*info = (struct image_info){ .mif = mif, .scheme = scheme };
	else
		mif_scheme_free(&scheme);
	return r;
}

int image_load(const char *path, const char *field, struct volume *ret, struct image_info *info,
	       struct errbuf *err)
{
	int fd, r = volume_open(path, field, &fd, err);

	if (r)
		return r;
	r = image_load_fd(fd, path, field, ret, info, err);
	close(fd);
	return r;
}

int image_probe_fd(int fd, const char *path, const char *field, int64_t dim[4],
		   size_t *stored_size, struct errbuf *err)
{
	if (mif_detect_fd(fd))
		return mif_probe_fd(fd, path, field, dim, stored_size, err);
	return volume_probe_fd(fd, path, field, dim, stored_size, err);
}

int image_probe(const char *path, const char *field, int64_t dim[4], size_t *stored_size,
		struct errbuf *err)
{
	int fd, r = volume_open(path, field, &fd, err);

	if (r)
		return r;
	r = image_probe_fd(fd, path, field, dim, stored_size, err);
	close(fd);
	return r;
}
