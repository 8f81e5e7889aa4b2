/* SPDX-License-Identifier: MIT */
/*
 * volume_cache: the worker's warm volumes, LRU under a GPU and a host
 * budget (see volume_cache.h). Worker thread only.
 */
#include "server/volume_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/timing.h"
#include "engine/resident.h"

struct volume_cache {
	struct volume_cache_config cfg;
	struct volume_cache_entry *entries;
	size_t n_entries;
	uint64_t clock;             /* counts uses, for last_used */
	struct volume_cache_usage usage;
};

/* The open file itself, not a name that may since lead elsewhere: which
 * file it is, and its size and change times. A slot the job does not use
 * is "-"; one not held open (-EBADF) leaves the job uncached. */
static int append_file_key(char *key, size_t len, const struct jobspec *spec,
			   enum jobspec_file_slot slot, const char *path)
{
	int fd = jobspec_opened_fd(spec, slot);
	size_t used = strlen(key);
	struct stat st;

	if (!path) {
		strncat(key, "-\n", len - used - 1);
		return 0;
	}
	if (fd < 0)
		return -EBADF;
	if (fstat(fd, &st) < 0)
		return -errno;
	snprintf(key + used, len - used, "%llu:%llu:%lld:%lld.%09ld:%lld.%09ld\n",
		 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
		 (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
		 (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
	return 0;
}

/* The files inputs_load reads: the inputs, then the regions' masks. */
static int append_files_key(char *key, size_t len, const struct jobspec *spec)
{
	int r = 0;

	for (size_t i = 0; r == 0 && i < JOBSPEC_INPUT_FILES; i++)
		r = append_file_key(key, len, spec, (enum jobspec_file_slot)i,
				    jobspec_input_path(spec, &jobspec_input_files[i]));
	for (int k = 0; r == 0 && k < spec->n_region_masks; k++)
		r = append_file_key(key, len, spec,
				    (enum jobspec_file_slot)(JOBSPEC_SLOT_REGION_MASK + k),
				    spec->region_mask_path[k]);
	return r;
}

/* What a fit depends on besides its files. fa_threshold masks the CSD fit;
 * bvecs_convention turns the directions (and whether the job chose it is
 * logged from the cached inputs); whether sh_basis was named decides
 * whether a NIfTI sh loads at all. */
static void append_model_key(char *key, size_t len, const struct jobspec *spec)
{
	const struct jobspec_model *m = &spec->model;
	size_t used = strlen(key);

	if (spec->input_kind == JOBSPEC_INPUT_DWI) {
		snprintf(key + used, len - used, "bvecs %d %d\n", (int)spec->bvecs_convention,
			 (int)spec->bvecs_convention_given);
		used = strlen(key);
	}
	if (spec->input_kind == JOBSPEC_INPUT_SH)
		snprintf(key + used, len - used, "sh %d %d %d\n", (int)spec->sh_basis,
			 (int)spec->sh_frame, (int)spec->sh_basis_given);
	else if (spec->input_kind == JOBSPEC_INPUT_DWI && spec->direction_getter == JOBSPEC_DG_BOOT)
		/* The FA of the stop map is fitted regardless of the threshold. */
		snprintf(key + used, len - used, "boot %d %d %.17g\n", (int)m->name, m->sh_order,
			 m->sh_lambda);
	else if (spec->input_kind == JOBSPEC_INPUT_DWI)
		snprintf(key + used, len - used, "csd %d %.17g %.17g %d %.17g %.17g %d %.17g %.17g "
			 "%.17g %.17g\n", m->sh_order, m->lambda, m->tau, m->roi_radius,
			 m->response_fa, spec->fa_threshold, m->response_given,
			 m->response_evals[0], m->response_evals[1], m->response_evals[2],
			 m->response_s0);
}

/* What makes two jobs' volumes interchangeable: the files (the open files'
 * identity, size and times, so a server-side file that changed is read
 * again; the regions' masks after the inputs, as inputs_load reads them),
 * the
 * model parameters of a fit, and the sphere. Fitted inputs are cached like
 * uploaded ones: a second job on one subject fits nothing. */
static char *cache_key(const struct jobspec *spec)
{
	size_t len = (JOBSPEC_INPUT_FILES + JOBSPEC_MAX_REGION_MASKS + 1) * 4200 + 512;
	char *key;

	/* Vertex lists: the job goes uncached rather than hashing them. */
	if (!spec->sphere_name)
		return NULL;
	key = calloc(1, len);
	if (!key)
		return NULL;
	if (append_files_key(key, len, spec) < 0) {
		free(key);
		return NULL;
	}
	append_model_key(key, len, spec);
	/* The same files held another way are another entry. */
	snprintf(key + strlen(key), len - strlen(key), "odf_storage %d\n", (int)spec->odf_storage);
	strncat(key, spec->sphere_name, len - strlen(key) - 1);
	return key;
}

struct volume_cache *volume_cache_new(const struct volume_cache_config *cfg)
{
	struct volume_cache *cache = calloc(1, sizeof(*cache));

	if (cache)
		cache->cfg = *cfg;
	return cache;
}

static void entry_free(struct volume_cache *cache, struct volume_cache_entry *e)
{
	for (size_t i = 0; i < *cache->cfg.n_gpus; i++)
		resident_free(cache->cfg.gpus[i], e->residents[i]);
	inputs_free(e->inputs);
	free(e->users);
	free(e->key);
}

/* Whether owner used e before; records that it has now. Out of memory the
 * owner stays unrecorded, and its next use reads as its first again: that
 * costs it a cache hit in its statistics, and tells it nothing of others. */
static bool entry_seen_by(struct volume_cache_entry *e, const char *owner)
{
	char (*grown)[JOB_OWNER_LEN + 1];

	for (size_t i = 0; i < e->n_users; i++)
		if (strcmp(e->users[i], owner) == 0)
			return true;
	grown = realloc(e->users, sizeof(*grown) * (e->n_users + 1));
	if (grown) {
		e->users = grown;
		snprintf(grown[e->n_users++], sizeof(*grown), "%s", owner);
	}
	return false;
}

static void evict(struct volume_cache *cache, size_t i)
{
	cache->usage.bytes -= cache->entries[i].bytes;
	cache->usage.host_bytes -= cache->entries[i].host_bytes;
	cache->usage.entries--;
	cache->cfg.changed(cache->cfg.userdata, &cache->usage);
	entry_free(cache, &cache->entries[i]);
	cache->entries[i] = cache->entries[--cache->n_entries];
}

/* Whether e fits the cache's budgets once room is made: GPU memory, and
 * host memory for the inputs' copies (max_job_host_memory, so that the warm
 * volumes and a running job's together stay within what the daemon may use;
 * 0: no bound). */
static bool can_hold(const struct volume_cache *cache, const struct volume_cache_entry *e)
{
	uint64_t host = cache->cfg.max_job_host_memory;

	return e->bytes <= cache->cfg.gpu_budget && (!host || e->host_bytes <= host);
}

static bool room_for(const struct volume_cache *cache, const struct volume_cache_entry *e)
{
	uint64_t host = cache->cfg.max_job_host_memory;

	return cache->usage.bytes + e->bytes <= cache->cfg.gpu_budget &&
	       (!host || cache->usage.host_bytes + e->host_bytes <= host);
}

/* Evicts the least recently used entry but the one keyed keep (NULL:
 * none); false when there is no other. why goes to the log. */
static bool evict_lru(struct volume_cache *cache, const char *keep, const char *why)
{
	size_t lru = cache->n_entries;

	for (size_t i = 0; i < cache->n_entries; i++)
		if (cache->entries[i].key != keep && (lru == cache->n_entries ||
		    cache->entries[i].last_used < cache->entries[lru].last_used))
			lru = i;
	if (lru == cache->n_entries)
		return false;
	log_debug("cache: evicting %llu bytes (%s)", (unsigned long long)cache->entries[lru].bytes,
		  why);
	evict(cache, lru);
	return true;
}

/* Makes room for e by evicting least recently used entries. */
static void make_room(struct volume_cache *cache, const struct volume_cache_entry *e)
{
	while (!room_for(cache, e) && evict_lru(cache, NULL, "the cache's budget"))
		;
}

/* Whether gpu_memory_limit leaves a job its budget (resident_budget) on
 * every device, beside held bytes of its own warm inputs. Without a limit
 * gpu_memory_free has no bound, and it always does. */
static bool limit_leaves_budget(const struct volume_cache *cache, uint64_t held)
{
	for (size_t i = 0; i < *cache->cfg.n_gpus; i++) {
		struct gpu_ctx *gpu = cache->cfg.gpus[i];
		uint64_t budget = resident_budget(gpu_get_limits(gpu), cache->cfg.gpu_memory_budget);

		if (budget > held && gpu_memory_free(gpu) < budget - held)
			return false;
	}
	return true;
}

/* Under gpu_memory_limit, other jobs' warm volumes give way to a job (the
 * one keyed keep, holding held bytes of warm inputs; NULL and 0 before its
 * upload), least recently used first, until the limit leaves it its
 * budget: it then picks the storage and gets the work room it would get
 * alone, and fails naming gpu_memory_limit only when it could not fit
 * alone. With the default budget (half the limit) and cache (a quarter)
 * nothing goes; settings whose sum passes the limit make it evict. */
static void give_way_to_job(struct volume_cache *cache, const char *keep, uint64_t held)
{
	while (!limit_leaves_budget(cache, held) && evict_lru(cache, keep, "gpu_memory_limit"))
		;
}

static struct volume_cache_entry *find(struct volume_cache *cache, const char *key)
{
	for (size_t i = 0; key && i < cache->n_entries; i++)
		if (strcmp(cache->entries[i].key, key) == 0)
			return &cache->entries[i];
	return NULL;
}

/* Keeps fresh when it fits the budgets; false when it stays the job's. */
static bool insert(struct volume_cache *cache, const struct volume_cache_entry *fresh)
{
	struct volume_cache_entry *grown;

	if (!fresh->key || !can_hold(cache, fresh))
		return false;
	make_room(cache, fresh);
	grown = realloc(cache->entries, sizeof(*grown) * (cache->n_entries + 1));
	if (!grown)
		return false;
	cache->entries = grown;
	cache->entries[cache->n_entries++] = *fresh;
	cache->usage.bytes += fresh->bytes;
	cache->usage.host_bytes += fresh->host_bytes;
	cache->usage.entries++;
	cache->cfg.changed(cache->cfg.userdata, &cache->usage);
	return true;
}

/* A hit is a reuse by the same owner; another owner's first use of a warm
 * entry counts as a miss, overall and for that owner, so that no counter
 * moves differently when someone else has run the same inputs. */
static void reuse(struct volume_cache *cache, struct volume_cache_entry *hit, const char *owner,
		  struct volume_cache_use *use, struct engine_stats *timing)
{
	bool seen = entry_seen_by(hit, owner);

	cache->cfg.counted(cache->cfg.userdata, owner, seen);
	/* Loaded for someone else: this owner is told what loading cost,
	 * as if its job had loaded them (the job's wall time still tells;
	 * see README, "Security"). */
	if (!seen) {
		timing->load_seconds = hit->load_seconds;
		timing->upload_seconds = hit->upload_seconds;
	}
	hit->last_used = ++cache->clock;
	use->volumes = *hit;
	use->owned = false;
}

int volume_cache_acquire(struct volume_cache *cache, const struct jobspec *spec,
			 const char *owner, const struct fit_options *fit,
			 struct volume_cache_use *use, struct engine_stats *timing,
			 struct errbuf *err)
{
	char *key = cache_key(spec);
	struct volume_cache_entry *hit = find(cache, key);
	struct volume_cache_entry fresh = { .key = key };
	struct resident_upload up = { .odf_storage = spec->odf_storage,
				      .memory_budget = cache->cfg.gpu_memory_budget, .fit = fit };
	double t0, t1;
	int r;

	if (hit) {
		give_way_to_job(cache, hit->key, hit->bytes);
		/* Evictions move entries: the hit is found again. */
		reuse(cache, find(cache, key), owner, use, timing);
		free(key);
		return 0;
	}
	cache->cfg.counted(cache->cfg.userdata, owner, false);
	t0 = timing_now();
	r = inputs_check_host_memory(spec, cache->cfg.max_job_host_memory, err);
	if (r == 0)
		r = inputs_load(spec, fit, &fresh.inputs, err);
	t1 = timing_now();
	timing->load_seconds = t1 - t0;
	if (r == 0)
		give_way_to_job(cache, NULL, 0);
	if (r == 0)
		r = resident_new_all(cache->cfg.gpus, *cache->cfg.n_gpus, fresh.inputs, &up,
				     fresh.residents, err);
	timing->upload_seconds = timing_now() - t1;
	if (r < 0) {
		entry_free(cache, &fresh);
		return r;
	}
	fresh.bytes = resident_bytes(fresh.residents[0]);
	fresh.host_bytes = inputs_host_bytes(fresh.inputs);
	fresh.last_used = ++cache->clock;
	fresh.load_seconds = timing->load_seconds;
	fresh.upload_seconds = timing->upload_seconds;
	entry_seen_by(&fresh, owner);
	use->owned = !insert(cache, &fresh);
	use->volumes = fresh;
	return 0;
}

void volume_cache_release(struct volume_cache *cache, struct volume_cache_use *use)
{
	if (use->owned)
		entry_free(cache, &use->volumes);
	use->owned = false;
}

void volume_cache_clear(struct volume_cache *cache)
{
	while (cache->n_entries > 0)
		evict(cache, cache->n_entries - 1);
}

void volume_cache_free(struct volume_cache *cache)
{
	if (!cache)
		return;
	volume_cache_clear(cache);
	free(cache->entries);
	free(cache);
}
