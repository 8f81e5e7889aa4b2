/* SPDX-License-Identifier: MIT */
/*
 * tctl_output: the tractogram file. Written to FILE.tmp and renamed to FILE
 * only on success, so that a failed or interrupted transfer never leaves a
 * truncated tractogram under the name asked for, nor replaces an older one;
 * "-" is standard output, which is flushed but cannot be taken back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tctl.h"
#include "tctl_msg.h"
#include "tctl_output.h"

static void release(struct output *out)
{
	free(out->path);
	free(out->tmp_path);
	*out = (struct output){ 0 };
}

int output_open(struct output *out, const char *path)
{
	*out = (struct output){ 0 };
	if (strcmp(path, "-") == 0) {
		out->stream = stdout;
		return TCTL_EXIT_OK;
	}
	out->path = strdup(path);
	if (!out->path || asprintf(&out->tmp_path, "%s.tmp", path) < 0) {
		out->tmp_path = NULL;
		release(out);
		msg_error("out of memory");
		return TCTL_EXIT_LOCAL;
	}
	out->stream = fopen(out->tmp_path, "wb");
	if (!out->stream) {
		msg_error("cannot create %s: %s", out->tmp_path, strerror(errno));
		release(out);
		return TCTL_EXIT_LOCAL;
	}
	return TCTL_EXIT_OK;
}

const char *output_name(const struct output *out)
{
	return out->path ? out->path : "standard output";
}

int output_commit(struct output *out)
{
	int failed_errno = 0;

	if (!out->path) {
		if (fflush(stdout) != 0) {
			msg_error("cannot write to standard output: %s", strerror(errno));
			return TCTL_EXIT_LOCAL;
		}
		return TCTL_EXIT_OK;
	}
	/* fclose reports what buffered writes could not do (a full disk). */
	if (fclose(out->stream) != 0 || rename(out->tmp_path, out->path) < 0)
		failed_errno = errno;
	out->stream = NULL;
	if (failed_errno) {
		msg_error("cannot write %s: %s", out->path, strerror(failed_errno));
		if (unlink(out->tmp_path) < 0 && errno != ENOENT)
			msg_note("could not remove %s either: %s", out->tmp_path, strerror(errno));
	}
	release(out);
	return failed_errno ? TCTL_EXIT_LOCAL : TCTL_EXIT_OK;
}

void output_discard(struct output *out)
{
	if (!out->path)
		return;
	/* The transfer failed already; a close error adds nothing to report. */
	(void)fclose(out->stream);
	if (unlink(out->tmp_path) < 0)
		msg_note("could not remove %s: %s", out->tmp_path, strerror(errno));
	release(out);
}
