/* SPDX-License-Identifier: MIT */
/*
 * tctl_interrupt: SIGINT, SIGTERM and SIGHUP (the terminal closed). The
 * first of them only sets a flag that transfers, loops and sleeps check, so
 * that `track` can cancel its job before it exits; a second one kills
 * tractctl as usual.
 */
#ifndef TCTL_INTERRUPT_H
#define TCTL_INTERRUPT_H

#include <stdbool.h>

/* Returns 0 or a negative errno. */
int interrupt_install(void);

/* The signal received, or 0. */
int interrupt_signal(void);

/* 128 + the signal, as a shell reports a process killed by it: 130 for
 * Ctrl-C, 143 for SIGTERM, 129 for SIGHUP. */
int interrupt_exit_code(void);

/* Sleeps; returns false at once when a signal arrives. */
bool interrupt_sleep_ms(long ms);

#endif
