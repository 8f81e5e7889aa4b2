/* SPDX-License-Identifier: MIT */
/*
 * tctl_volumes: `tractctl volumes`, the inputs that `track` and `submit`
 * uploaded, as the daemon keeps them for the user (proto/API.md): listed
 * with the bytes they take of the user's quota, or deleted by id. Volume
 * ids ("sha256:" and 64 hex digits) are checked before any request, so that
 * a typo is a usage error rather than a 404 after some were deleted.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tctl.h"
#include "tctl_job.h"
#include "tctl_msg.h"
#include "tctl_print.h"
#include "tctl_volumes.h"

#define VOLUMES_PATH "/v1/volumes"

static int list_volumes(struct http_client *c, const struct tctl_args *args)
{
	json_t *answer = NULL;
	int code = http_get_json(c, VOLUMES_PATH, &answer);

	if (code == TCTL_EXIT_OK && !json_is_array(json_object_get(answer, "volumes"))) {
		msg_error("the daemon's answer to GET " VOLUMES_PATH " has no \"volumes\" array");
		code = TCTL_EXIT_SERVER;
	}
	if (code == TCTL_EXIT_OK && args->json)
		code = print_json(answer);
	else if (code == TCTL_EXIT_OK)
		print_volume_list(answer);
	json_decref(answer);
	return code;
}

static int check_volume_ids(const struct tctl_args *args)
{
	char message[256];

	for (int i = 0; i < args->n_volume_ids; i++) {
		if (!job_is_volume_id(args->volume_ids[i])) {
			snprintf(message, sizeof(message), "'%.80s' is not a volume id (sha256: and 64 "
				 "hex digits, as 'tractctl volumes' lists them)", args->volume_ids[i]);
			return args_usage_error(CMD_VOLUMES, message);
		}
	}
	return TCTL_EXIT_OK;
}

/* 204, or an error that http_delete has reported. */
static int delete_volume(struct http_client *c, const char *id)
{
	char path[sizeof(VOLUMES_PATH "/") + VOLUME_ID_LEN];
	json_t *answer = NULL;
	int code;

	/* Volume ids need no escaping; escaped, their ':' would not be found. */
	snprintf(path, sizeof(path), VOLUMES_PATH "/%s", id);
	code = http_delete(c, path, &answer);
	json_decref(answer);
	if (code == TCTL_EXIT_OK)
		msg_info("volume %s deleted", id);
	return code;
}

/* Every id is tried, as rm does; the first failure is the exit status. */
static int delete_volumes(struct http_client *c, const struct tctl_args *args)
{
	int code = check_volume_ids(args), first_failure = TCTL_EXIT_OK;

	for (int i = 0; code == TCTL_EXIT_OK && i < args->n_volume_ids; i++) {
		int one = delete_volume(c, args->volume_ids[i]);

		if (first_failure == TCTL_EXIT_OK)
			first_failure = one;
	}
	return code != TCTL_EXIT_OK ? code : first_failure;
}

int cmd_volumes(struct http_client *c, const struct tctl_args *args)
{
	return args->volume_ids ? delete_volumes(c, args) : list_volumes(c, args);
}
