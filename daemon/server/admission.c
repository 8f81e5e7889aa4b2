/* SPDX-License-Identifier: MIT */
/*
 * admission: what may enter the daemon (see admission.h).
 */
#include "server/admission.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "job/inputs.h"

static char **slot_path(struct jobspec *spec, enum jobspec_file_slot slot)
{
	if (slot == JOBSPEC_SLOT_SEED_ROI)
		return &spec->seed_roi_path;
	if (slot == JOBSPEC_SLOT_SEED_POINTS)
		return &spec->seed_points_path;
	return jobspec_input_slot(spec, &jobspec_input_files[slot]);
}

static const char *slot_field(enum jobspec_file_slot slot)
{
	if (slot == JOBSPEC_SLOT_SEED_ROI)
		return "seeds.roi";
	if (slot == JOBSPEC_SLOT_SEED_POINTS)
		return "seeds.points_file";
	return jobspec_input_files[slot].field;
}

/* A server-side path: opened now, as the user who submits the job, if it
 * resolves to a regular file under the data roots. The job reads that
 * descriptor, never the name again. A missing file, one outside the roots
 * and one the user may not read get the same answer, so that a client
 * cannot probe which files exist elsewhere on the server. */
static enum api_error open_server_path(const struct admission_config *cfg,
				       struct jobspec *spec, enum jobspec_file_slot slot,
				       const struct identity *who, struct errbuf *err)
{
	const char *roots = cfg->data_roots, *path = *slot_path(spec, slot);
	const char *field = slot_field(slot);
	int fd, r = -ENOENT;

	if (!roots[0]) {
		errbuf_set(err, -EINVAL, field, "server-side paths are disabled (no data_roots): "
			   "upload the file (POST /v1/volumes) and use its id");
		return ERR_SERVER_PATHS_DISABLED;
	}
	if (path[0] != '/') {
		errbuf_set(err, -EINVAL, field, "server-side paths must be absolute, got '%.200s'",
			   path);
		return ERR_SERVER_PATHS_DISABLED;
	}
	if (who->has_account)
		r = infile_open_beneath(roots, path, &who->account, &fd);
	if (r == -EINVAL) {
		errbuf_set(err, r, field, "'%.200s' is not a regular file", path);
		return ERR_INVALID_PARAMETER;
	}
	if (r == -EPERM) {
		errbuf_set(err, r, field, "server-side paths need the daemon to run as root: it "
			   "opens them as the user who submits the job");
		return ERR_SERVER_PATHS_DISABLED;
	}
	/* Queued jobs hold their files open: out of descriptors is for now. */
	if (r == -EMFILE || r == -ENFILE) {
		errbuf_set(err, r, field, "the server holds too many open files (queued jobs keep "
			   "theirs): try again later");
		return ERR_QUEUE_FULL;
	}
	if (r < 0) {
		errbuf_set(err, r, field, "'%.200s' is not an existing file inside the data roots "
			   "(%.200s), or not permitted", path, roots);
		return ERR_SERVER_PATHS_DISABLED;
	}
	jobspec_hold_fd(spec, slot, fd);
	return API_OK;
}

/* A volume id: the store's file, opened now (by the daemon, whose store it
 * is) for the owner of the upload or an admin. */
static enum api_error open_stored_volume(const struct admission_config *cfg,
					 struct jobspec *spec, enum jobspec_file_slot slot,
					 const struct identity *who, struct errbuf *err)
{
	char **path = slot_path(spec, slot), resolved[1200];
	const char *field = slot_field(slot);
	struct store_entry entry;
	int fd = -1;
	int r = store_lookup(cfg->store, *path, &entry, resolved, sizeof(resolved), err);

	/* Another user's upload is unknown to this one (see get_volume). */
	if (r == 0 && !who->admin && !store_claimed(cfg->store, *path, who->name))
		r = -ENOENT;
	if (r < 0 && r != -ENOENT) {
		/* A malformed id: the store's message says the expected form. */
		snprintf(err->field, sizeof(err->field), "%s", field);
		return ERR_INVALID_PARAMETER;
	}
	if (r == 0)
		r = infile_open(resolved, &fd);
	if (r == -ENOENT) {
		errbuf_set(err, r, field, "no volume %s on this server: upload it first", *path);
		return ERR_UNKNOWN_VOLUME;
	}
	if (r < 0) {
		errbuf_set(err, r, field, "cannot open volume %s: %s", *path, strerror(-r));
		return ERR_INTERNAL;
	}
	jobspec_hold_fd(spec, slot, fd);
	return API_OK;
}

/* Opens every input file of the job (see open_server_path and
 * open_stored_volume): all of them now, so that the job needs no name
 * again and fails here, at submission, for a file it could not read. */
static enum api_error open_inputs(const struct admission_config *cfg, struct jobspec *spec,
				  const struct identity *who, struct errbuf *err)
{
	enum api_error e = API_OK;

	for (int slot = 0; !e && slot < JOBSPEC_SLOTS; slot++) {
		const char *path = *slot_path(spec, (enum jobspec_file_slot)slot);
		if (!path)
			continue;
		e = strncmp(path, "sha256:", 7) == 0
			? open_stored_volume(cfg, spec, (enum jobspec_file_slot)slot, who, err)
			: open_server_path(cfg, spec, (enum jobspec_file_slot)slot, who, err);
	}
	return e;
}

/* max_seeds_per_job, as far as the document tells: seeds.count, or the
 * explicit points. Per-voxel seeding multiplies by the ROI's voxels, which
 * only the worker knows (the runner checks the total again). The count
 * seeds.select defaults to is a bound the runner lowers to the limit. */
static enum api_error check_seed_limit(const struct admission_config *cfg,
				       const struct jobspec *spec, struct errbuf *err)
{
	uint64_t limit = cfg->max_seeds_per_job;
	bool points = spec->seed_kind == JOBSPEC_SEEDS_POINTS;
	uint64_t n = points ? spec->n_seed_points : spec->seed_count;

	if (!limit || n <= limit || spec->seed_count_from_select)
		return API_OK;
	errbuf_set(err, -E2BIG, points ? "seeds.points" : "seeds.count", "%llu %s over the limit "
		   "of %llu seeds per job (max_seeds_per_job)", (unsigned long long)n,
		   points ? "seed points are" : (spec->seed_per_voxel ? "seeds per voxel are"
								       : "seeds are"),
		   (unsigned long long)limit);
	return ERR_LIMIT_EXCEEDED;
}

/* max_job_host_memory, from the resolved inputs' headers: refused before
 * the job is queued, so that a small file declaring a huge image never gets
 * to allocate it. An unreadable header is the input's fault (422). */
static enum api_error check_host_memory(const struct admission_config *cfg,
					const struct jobspec *spec, struct errbuf *err)
{
	int r = inputs_check_host_memory(spec, cfg->max_job_host_memory, err);

	if (r == 0)
		return API_OK;
	return errbuf_kind(err, r) == ERR_KIND_LIMIT ? ERR_LIMIT_EXCEEDED : ERR_INVALID_INPUT;
}

/* The rules of server jobs beyond jobspec's: results are fetched, not
 * written to a path, and a job has one result file. */
static enum api_error check_server_job(const struct jobspec *spec, struct errbuf *err)
{
	if (spec->output_path) {
		errbuf_set(err, -EINVAL, "output.path", "is not allowed in server jobs: fetch the "
			   "result from /v1/jobs/ID/tractogram");
		return ERR_INVALID_PARAMETER;
	}
	/* TCK seeds would be a second result file, which jobs do not have. */
	if (spec->save_seeds && spec->output_format == OUTPUT_TCK) {
		errbuf_set(err, -EINVAL, "output.save_seeds", "is not available for tck in server "
			   "jobs: use \"trk\" or \"trx\", or fetch ?format=tck from one of those");
		return ERR_INVALID_PARAMETER;
	}
	return API_OK;
}

enum api_error admission_check_job(const struct admission_config *cfg, struct jobspec *spec,
				   const struct identity *who, struct errbuf *err)
{
	enum api_error e = check_server_job(spec, err);

	if (!e)
		e = check_seed_limit(cfg, spec, err);
	if (!e)
		e = open_inputs(cfg, spec, who, err);
	if (!e)
		e = check_host_memory(cfg, spec, err);
	return e;
}

/* An upload may take what is left of its owner's quota, and no more than
 * max_upload_bytes: whichever is less bounds the writer. */
int admission_upload_limit(const struct admission_config *cfg, const struct identity *who,
			   uint64_t *max, bool *quota_binds, struct errbuf *err)
{
	uint64_t used = 0, quota = cfg->max_volume_bytes_per_user, left;

	if (store_list(cfg->store, who->name, NULL, NULL, &used) < 0)
		return errbuf_set(err, -EIO, "", "cannot count the volumes of %s", who->name);
	left = used < quota ? quota - used : 0;
	if (left == 0)
		return -EDQUOT;
	*quota_binds = left < cfg->max_upload_bytes;
	*max = *quota_binds ? left : cfg->max_upload_bytes;
	return 0;
}
