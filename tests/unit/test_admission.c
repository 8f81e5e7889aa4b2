/* SPDX-License-Identifier: MIT */
/* Unit tests for admission.c: server jobs' rules, the seed limit, inputs
 * named by volume id (another user's is unknown), server paths without
 * data_roots, and the upload budget under the quota. No HTTP, no GPU. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/admission.h"
#include "tmpdir.h"

/* A text "volume": the store keeps any bytes; admission only opens it. */
static const char bvals[] = "0 1000 1000 1000 1000 1000 1000\n";

struct fixture {
	char root[64];
	struct admission_config cfg;
	struct identity alice, bob;
	char id[80];          /* alice's upload of bvals */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct store_writer *w;
	struct store_entry e;

	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_admission.XXXXXX");
	assert_non_null(mkdtemp(f->root));
	assert_int_equal(store_open(f->root, &f->cfg.store, NULL), 0);
	f->cfg.max_seeds_per_job = 1000;
	f->cfg.max_job_host_memory = UINT64_C(1) << 30;
	f->cfg.max_upload_bytes = 100;
	f->cfg.max_volume_bytes_per_user = 64;
	snprintf(f->alice.name, sizeof(f->alice.name), "alice");
	snprintf(f->bob.name, sizeof(f->bob.name), "bob");
	assert_int_equal(store_writer_new(f->cfg.store, 1000, &w, NULL), 0);
	assert_int_equal(store_writer_append(w, bvals, strlen(bvals), NULL), 0);
	assert_true(store_writer_finish(w, &e, NULL) >= 0);
	assert_int_equal(store_claim(f->cfg.store, e.id, "alice", UINT64_MAX, NULL), 1);
	snprintf(f->id, sizeof(f->id), "%s", e.id);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	store_close(f->cfg.store);
	assert_int_equal(tmpdir_remove(f->root), 0);
	free(f);
	return 0;
}

/* Parses a job whose inputs are a DWI set named by ids or paths. */
static void parse(const char *doc, struct jobspec *spec)
{
	struct errbuf err = { 0 };

	if (jobspec_parse(doc, strlen(doc), NULL, spec, &err) != 0)
		fail_msg("%s: %s", err.field, err.message);
}

static enum api_error admit(struct fixture *f, const struct identity *who, const char *doc,
			    struct errbuf *err)
{
	struct jobspec spec = { 0 };
	enum api_error e;

	parse(doc, &spec);
	memset(err, 0, sizeof(*err));
	e = admission_check_job(&f->cfg, &spec, who, err);
	jobspec_free(&spec);
	return e;
}

static void test_server_job_rules(void **state)
{
	struct fixture *f = *state;
	struct errbuf err;

	assert_int_equal(admit(f, &f->alice, "{\"inputs\": {\"odf\": \"sha256:"
			       "0000000000000000000000000000000000000000000000000000000000000000\","
			       "\"stop_map\": \"sha256:00000000000000000000000000000000000000000"
			       "00000000000000000000000\"}, \"seeds\": {\"points\": [[1, 1, 1]]},"
			       "\"output\": {\"path\": \"/tmp/x.trk\"}}", &err),
			 ERR_INVALID_PARAMETER);
	assert_string_equal(err.field, "output.path");
	assert_int_equal(admit(f, &f->alice, "{\"inputs\": {\"odf\": \"/a.nii\", \"stop_map\": "
			       "\"/b.nii\"}, \"seeds\": {\"points\": [[1, 1, 1]]}, \"output\": "
			       "{\"format\": \"tck\", \"save_seeds\": true}}", &err),
			 ERR_INVALID_PARAMETER);
	assert_string_equal(err.field, "output.save_seeds");
}

static void test_seed_limit(void **state)
{
	struct fixture *f = *state;
	struct errbuf err;

	assert_int_equal(admit(f, &f->alice, "{\"inputs\": {\"odf\": \"/a.nii\", \"stop_map\": "
			       "\"/b.nii\"}, \"seeds\": {\"roi\": \"/r.nii\", \"count\": 1001}}",
			       &err), ERR_LIMIT_EXCEEDED);
	assert_string_equal(err.field, "seeds.count");
	assert_non_null(strstr(err.message, "max_seeds_per_job"));
	/* seeds.select's default count (1000 x 5) is a bound the runner lowers
	 * to the limit: the job gets past the seed limit (to its inputs, which
	 * are server paths this configuration refuses). */
	assert_int_not_equal(admit(f, &f->alice, "{\"inputs\": {\"odf\": \"/a.nii\", "
				   "\"stop_map\": \"/b.nii\"}, \"seeds\": {\"roi\": \"/r.nii\", "
				   "\"select\": 5}}", &err), ERR_LIMIT_EXCEEDED);
	assert_string_not_equal(err.field, "seeds.count");
	/* A count given is the user's: refused as before. */
	assert_int_equal(admit(f, &f->alice, "{\"inputs\": {\"odf\": \"/a.nii\", \"stop_map\": "
			       "\"/b.nii\"}, \"seeds\": {\"roi\": \"/r.nii\", \"count\": 1001, "
			       "\"select\": 5}}", &err), ERR_LIMIT_EXCEEDED);
	assert_string_equal(err.field, "seeds.count");
	/* A shard's seeds count, not its job's: 4000 in 4 shards get past the
	 * limit, in 3 shards (1334 in shard 0) do not. */
	assert_int_not_equal(admit(f, &f->alice, "{\"inputs\": {\"odf\": \"/a.nii\", "
				   "\"stop_map\": \"/b.nii\"}, \"seeds\": {\"roi\": \"/r.nii\", "
				   "\"count\": 4000, \"shard\": \"3/4\"}}", &err), ERR_LIMIT_EXCEEDED);
	assert_string_not_equal(err.field, "seeds.count");
	assert_int_equal(admit(f, &f->alice, "{\"inputs\": {\"odf\": \"/a.nii\", \"stop_map\": "
			       "\"/b.nii\"}, \"seeds\": {\"roi\": \"/r.nii\", \"count\": 4000, "
			       "\"shard\": \"0/3\"}}", &err), ERR_LIMIT_EXCEEDED);
	assert_string_equal(err.field, "seeds.count");
	assert_non_null(strstr(err.message, "shard 0/3 tracks 1333 of the job's 4000 seeds"));
	assert_non_null(strstr(err.message, "max_seeds_per_job"));
}

/* A volume id is alice's, not bob's: bob is told it does not exist, as an
 * id nobody uploaded; server paths are off without data_roots. */
static void test_inputs(void **state)
{
	struct fixture *f = *state;
	char doc[512];
	struct errbuf err;

	snprintf(doc, sizeof(doc), "{\"inputs\": {\"odf\": \"/a.nii\", \"stop_map\": \"/b.nii\"},"
		 " \"seeds\": {\"points\": [[1, 1, 1]]}}");
	assert_int_equal(admit(f, &f->alice, doc, &err), ERR_SERVER_PATHS_DISABLED);
	assert_string_equal(err.field, "inputs.odf");
	snprintf(doc, sizeof(doc), "{\"inputs\": {\"odf\": \"%s\", \"stop_map\": \"%s\"},"
		 " \"seeds\": {\"points\": [[1, 1, 1]]}}", f->id, f->id);
	assert_int_equal(admit(f, &f->bob, doc, &err), ERR_UNKNOWN_VOLUME);
	assert_string_equal(err.field, "inputs.odf");
	/* alice's own id opens; its header is no NIfTI, which the host-memory
	 * check reads: the input's fault. */
	assert_int_equal(admit(f, &f->alice, doc, &err), ERR_INVALID_INPUT);
	assert_string_equal(err.field, "inputs.odf");
	/* The regions' masks are opened like the inputs, named by region. */
	snprintf(doc, sizeof(doc), "{\"inputs\": {\"odf\": \"%s\", \"stop_map\": \"%s\"},"
		 " \"seeds\": {\"points\": [[1, 1, 1]]}, \"regions\": {\"exclude\": [\"/c.nii\"]}}",
		 f->id, f->id);
	assert_int_equal(admit(f, &f->alice, doc, &err), ERR_SERVER_PATHS_DISABLED);
	assert_string_equal(err.field, "regions.exclude[0]");
	snprintf(doc, sizeof(doc), "{\"inputs\": {\"odf\": \"%s\", \"stop_map\": \"%s\"},"
		 " \"seeds\": {\"points\": [[1, 1, 1]]}, \"regions\": {\"include\": "
		 "[{\"center\": [0, 0, 0], \"radius\": 1}, \"sha256:%064d\"]}}", f->id, f->id, 1);
	assert_int_equal(admit(f, &f->alice, doc, &err), ERR_UNKNOWN_VOLUME);
	assert_string_equal(err.field, "regions.include[1]");
}

/* max_upload_bytes bounds an upload until less than it is left of the
 * quota; nothing left is -EDQUOT. */
static void test_upload_limit(void **state)
{
	struct fixture *f = *state;
	uint64_t max = 0;
	bool binds = true;

	f->cfg.max_volume_bytes_per_user = 1000;
	assert_int_equal(admission_upload_limit(&f->cfg, &f->alice, &max, &binds, NULL), 0);
	assert_true(max == 100 && !binds);
	f->cfg.max_volume_bytes_per_user = strlen(bvals) + 10;
	assert_int_equal(admission_upload_limit(&f->cfg, &f->alice, &max, &binds, NULL), 0);
	assert_true(max == 10 && binds);
	f->cfg.max_volume_bytes_per_user = strlen(bvals);
	assert_int_equal(admission_upload_limit(&f->cfg, &f->alice, &max, &binds, NULL), -EDQUOT);
	assert_int_equal(admission_upload_limit(&f->cfg, &f->bob, &max, &binds, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_server_job_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seed_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_inputs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upload_limit, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
