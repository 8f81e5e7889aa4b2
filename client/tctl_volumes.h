/* SPDX-License-Identifier: MIT */
/*
 * tctl_volumes: `tractctl volumes`, the user's uploaded volumes on the
 * daemon (proto/API.md, GET and DELETE /v1/volumes). Returns an exit code.
 */
#ifndef TCTL_VOLUMES_H
#define TCTL_VOLUMES_H

#include "tctl_args.h"
#include "tctl_http.h"

/* Lists the volumes, or deletes args->volume_ids. */
int cmd_volumes(struct http_client *c, const struct tctl_args *args);

#endif
