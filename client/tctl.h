/* SPDX-License-Identifier: MIT */
/*
 * tctl: what every part of tractctl shares: its version and its exit codes.
 * The exit codes are an interface for scripts, documented in
 * `tractctl --help`; every function that can fail returns one of them.
 */
#ifndef TCTL_H
#define TCTL_H

#define TCTL_VERSION "0.1.0"

enum tctl_exit {
	TCTL_EXIT_OK = 0,
	TCTL_EXIT_JOB_FAILED = 1,   /* the job failed or was cancelled */
	TCTL_EXIT_USAGE = 2,
	TCTL_EXIT_REJECTED = 3,     /* the server answered 4xx */
	TCTL_EXIT_SERVER = 4,       /* 5xx, or an answer tractctl cannot use */
	TCTL_EXIT_CONNECT = 5,      /* no connection to the daemon */
	TCTL_EXIT_LOCAL = 6,        /* a local file cannot be read or written */
};

#endif
