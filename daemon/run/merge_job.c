/* SPDX-License-Identifier: MIT */
/* merge_job: the merge command's flow (see merge_job.h). */
#include "run/merge_job.h"

#include <errno.h>
#include <sys/stat.h>

#include "base/log.h"
#include "formats/merge.h"

/* Writing OUT over a part would destroy it before it is read. */
static int check_out_is_no_part(const char *out, const char *const *parts, size_t n,
				struct errbuf *err)
{
	struct stat o, p;

	if (stat(out, &o) != 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (stat(parts[i], &p) == 0 && p.st_dev == o.st_dev && p.st_ino == o.st_ino)
			return errbuf_set(err, -EINVAL, "OUT", "%s is also a part (%s)", out,
					  parts[i]);
	return 0;
}

int merge_job_run(const char *out, const char *const *parts, size_t n, struct errbuf *err)
{
	struct merge_result res;
	int r = check_out_is_no_part(out, parts, n, err);

	if (r == 0)
		r = merge_parts(out, parts, n, &res, err);
	if (r == 0)
		log_info("merged %u shards of %s: %llu seeds, %llu streamlines into %s",
			 (unsigned)res.shards, res.format, (unsigned long long)res.seeds,
			 (unsigned long long)res.streamlines, out);
	return r;
}
