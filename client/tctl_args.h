/* SPDX-License-Identifier: MIT */
/*
 * tctl_args: the command line. One option table (with track DWI OUTPUT's
 * from common/track_opts), the help texts, and every usage error; what it
 * hands on is a command that can run as it is.
 */
#ifndef TCTL_ARGS_H
#define TCTL_ARGS_H

#include <limits.h>
#include <stdbool.h>

#include "common/track_opts.h"

/* args_parse's answer when the command should run (otherwise: an exit code). */
#define ARGS_RUN (-1)

enum tctl_command {
	CMD_HELP,
	CMD_TRACK,
	CMD_SUBMIT,
	CMD_STATUS,
	CMD_LIST,
	CMD_WAIT,
	CMD_FETCH,
	CMD_CANCEL,
	CMD_DELETE,
	CMD_VOLUMES,
	CMD_DEVICE,
	CMD_COUNT,
};

struct tctl_args {
	enum tctl_command command;
	const char *operand;       /* JOB.json or ID; NULL for commands without one, and for
				    * track DWI OUTPUT */
	const char *dwi;           /* track DWI OUTPUT: DWI; NULL for track JOB.json */
	const char *track_output;  /* track DWI OUTPUT: OUTPUT */
	struct track_request track;   /* track DWI OUTPUT's options (common/track_opts.h) */
	char **volume_ids;         /* `volumes delete ID...`: the ids; NULL for the list */
	int n_volume_ids;
	const char *output;        /* -o FILE, "-" for standard output; NULL when not given */
	const char *format;        /* fetch --format: trk, tck or trx; NULL: the job's own */
	const char *server_url;    /* --server; NULL to use socket_path */
	const char *socket_path;   /* the daemon's Unix socket, when server_url is NULL */
	const char *token;         /* bearer token for server_url: --token, --token-file or
				    * $TRACTD_TOKEN; NULL for none */
	long connect_timeout_ms;
	bool json;
	bool quiet;
	bool wait;                 /* fetch --wait: until the job has ended */
	char socket_buf[PATH_MAX]; /* storage for a socket path built from the environment */
	char token_buf[1024];      /* storage for a token read from --token-file */
};

/* Fills *ret and returns ARGS_RUN, or prints help, the version or a usage
 * error and returns the exit code. */
int args_parse(int argc, char **argv, struct tctl_args *ret);

/* Reports a usage error found after parsing; returns TCTL_EXIT_USAGE. */
int args_usage_error(enum tctl_command command, const char *message);

#endif
