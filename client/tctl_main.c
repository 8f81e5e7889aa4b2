/* SPDX-License-Identifier: MIT */
/*
 * tctl_main: tractctl, the command-line client of tractd. Parses the command
 * line (tctl_args.c), connects (tctl_http.c) and dispatches to the command
 * (tctl_cmd.c, tctl_volumes.c); the exit status is the command's (tctl.h), unless standard
 * output could not be written.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tctl.h"
#include "tctl_args.h"
#include "tctl_cmd.h"
#include "tctl_http.h"
#include "tctl_interrupt.h"
#include "tctl_msg.h"
#include "tctl_volumes.h"

typedef int (*command_fn)(struct http_client *c, const struct tctl_args *args);

/* CMD_HELP never gets here: args_parse answers it. */
static const command_fn commands[CMD_COUNT] = {
	[CMD_TRACK] = cmd_track,
	[CMD_SUBMIT] = cmd_submit,
	[CMD_STATUS] = cmd_status,
	[CMD_LIST] = cmd_list,
	[CMD_WAIT] = cmd_wait,
	[CMD_FETCH] = cmd_fetch,
	[CMD_CANCEL] = cmd_cancel,
	[CMD_DELETE] = cmd_delete,
	[CMD_VOLUMES] = cmd_volumes,
	[CMD_DEVICE] = cmd_device,
};

/* Results on standard output are buffered: a full disk or a closed pipe
 * shows only when it is flushed. */
static int flush_stdout(int code)
{
	if (fflush(stdout) == 0)
		return code;
	msg_error("cannot write to standard output: %s", strerror(errno));
	return code == TCTL_EXIT_OK ? TCTL_EXIT_LOCAL : code;
}

int main(int argc, char **argv)
{
	struct tctl_args args;
	struct http_client *client = NULL;
	int code = args_parse(argc, argv, &args);
	struct http_target target = { .socket_path = args.socket_path,
				      .server_url = args.server_url,
				      .token = args.token,
				      .connect_timeout_ms = args.connect_timeout_ms };

	if (code != ARGS_RUN)
		return flush_stdout(code);
	msg_init(args.quiet);
	if (interrupt_install() < 0) {
		msg_error("cannot handle signals: %s", strerror(errno));
		return TCTL_EXIT_LOCAL;
	}
	code = http_client_open(&target, &client);
	if (code == TCTL_EXIT_OK)
		code = commands[args.command](client, &args);
	http_client_close(client);
	return flush_stdout(code);
}
