/* SPDX-License-Identifier: MIT */
/*
 * tctl_interrupt: SIGINT, SIGTERM and SIGHUP (the terminal closed). The
 * first of them only sets a flag that transfers, loops and sleeps check, so
 * that `track` can cancel its job and remove its temporary file before it
 * exits; SA_RESETHAND makes a second one kill tractctl as usual, which is
 * the way out should the cancel request itself hang.
 */
#include <errno.h>
#include <signal.h>
#include <time.h>

#include "tctl_interrupt.h"

static volatile sig_atomic_t received_signal;

static void on_signal(int sig)
{
	received_signal = sig;
}

int interrupt_install(void)
{
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESETHAND };

	if (sigemptyset(&sa.sa_mask) < 0 || sigaction(SIGINT, &sa, NULL) < 0 ||
	    sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGHUP, &sa, NULL) < 0)
		return -errno;
	return 0;
}

int interrupt_signal(void)
{
	return received_signal;
}

int interrupt_exit_code(void)
{
	return 128 + received_signal;
}

bool interrupt_sleep_ms(long ms)
{
	struct timespec left = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	/* A signal ends nanosleep with EINTR, so the flag is seen at once;
	 * other signals (SIGWINCH, SIGCHLD) only resume the sleep. */
	while (!received_signal && nanosleep(&left, &left) < 0 && errno == EINTR)
		continue;
	return !received_signal;
}
