/* SPDX-License-Identifier: MIT */
/*
 * tctl_cmd: the commands of tractctl. Each returns an exit code (tctl.h).
 */
#ifndef TCTL_CMD_H
#define TCTL_CMD_H

#include "tctl_args.h"
#include "tctl_http.h"

int cmd_track(struct http_client *c, const struct tctl_args *args);
int cmd_submit(struct http_client *c, const struct tctl_args *args);
int cmd_status(struct http_client *c, const struct tctl_args *args);
int cmd_list(struct http_client *c, const struct tctl_args *args);
int cmd_wait(struct http_client *c, const struct tctl_args *args);
int cmd_fetch(struct http_client *c, const struct tctl_args *args);
int cmd_cancel(struct http_client *c, const struct tctl_args *args);
int cmd_delete(struct http_client *c, const struct tctl_args *args);
int cmd_device(struct http_client *c, const struct tctl_args *args);

#endif
