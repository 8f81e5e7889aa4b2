/* SPDX-License-Identifier: MIT */
/*
 * serve: `tractd serve`, the resident daemon (see serve.c). argv[0] is
 * "serve". Returns the process exit code: 0 after a clean stop, 1 when the
 * daemon could not start, 2 for usage errors, 3 for a bad configuration.
 */
#ifndef TRACTD_SERVE_H
#define TRACTD_SERVE_H

int serve_main(int argc, char **argv);

#endif
