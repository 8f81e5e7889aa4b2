/* SPDX-License-Identifier: MIT */
/*
 * redact: stored volumes named by their ids, other paths under state_dir as
 * "<state_dir>", the rest of a message unchanged, and cut safely.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "server/redact.h"

#define HEX "40f434252a3a4a80b2f5699eb133ca9e52eed81e07adf51150863a5e8b30e2fd"
#define STATE "/var/lib/tractd"

static void test_volumes_as_ids(void **state)
{
	char out[512];

	(void)state;
	redact_server_paths(STATE "/volumes/" HEX ".nii.gz has 1 volumes but the sphere has 362",
			    STATE, out, sizeof(out));
	assert_string_equal(out, "sha256:" HEX " has 1 volumes but the sphere has 362");
	redact_server_paths("cannot read '" STATE "/volumes/" HEX ".nii': truncated", STATE, out,
			    sizeof(out));
	assert_string_equal(out, "cannot read 'sha256:" HEX "': truncated");
}

static void test_other_state_paths_hidden(void **state)
{
	char out[512];

	(void)state;
	redact_server_paths("cannot write " STATE "/spool/j-0123.trk: No space left; cannot sync "
			    STATE "/volumes: I/O error", STATE, out, sizeof(out));
	assert_string_equal(out, "cannot write <state_dir>/spool/j-0123.trk: No space left; "
			    "cannot sync <state_dir>/volumes: I/O error");
	assert_null(strstr(out, STATE));
}

static void test_client_text_kept(void **state)
{
	const char *in = "'/data/sub-01/dwi.nii.gz' is not an existing file inside the data roots "
			 "(/data)";
	char out[512];

	(void)state;
	redact_server_paths(in, STATE, out, sizeof(out));
	assert_string_equal(out, in);
	redact_server_paths(in, "", out, sizeof(out));
	assert_string_equal(out, in);
	redact_server_paths(in, "/", out, sizeof(out));   /* never every slash */
	assert_string_equal(out, in);
}

static void test_cut(void **state)
{
	char out[16];

	(void)state;
	redact_server_paths("see " STATE "/spool/x and more", STATE, out, sizeof(out));
	assert_string_equal(out, "see <state_dir>");
	redact_server_paths("0123456789abcdefghij", STATE, out, sizeof(out));
	assert_string_equal(out, "0123456789abcde");
	redact_server_paths("x", STATE, out, 0);   /* writes nothing */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_volumes_as_ids),
		cmocka_unit_test(test_other_state_paths_hidden),
		cmocka_unit_test(test_client_text_kept),
		cmocka_unit_test(test_cut),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
