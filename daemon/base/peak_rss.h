/* SPDX-License-Identifier: MIT */
/*
 * peak_rss: the process's peak resident memory (Linux's VmHWM), reset
 * between jobs so that a long-lived daemon can tell each job's peak. The
 * peak is the whole process's: the daemon's other threads count too. Owns
 * nothing; no locking, no logging.
 */
#ifndef TRACTD_PEAK_RSS_H
#define TRACTD_PEAK_RSS_H

#include <stdint.h>

/* Lowers the peak to the memory resident now (writes "5" to
 * /proc/self/clear_refs). 0, or a negative errno (an older kernel: the
 * peak then stays the process's since it started). */
int peak_rss_reset(void);

/* The peak in bytes from /proc/self/status into *bytes: 0, or a negative
 * errno (-ENOENT without procfs, -EINVAL when VmHWM is missing). */
int peak_rss_read(uint64_t *bytes);

#endif
