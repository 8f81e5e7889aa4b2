/* SPDX-License-Identifier: MIT */
/*
 * log: leveled logging to stderr, with syslog priority prefixes when stderr
 * is the systemd journal.
 *
 * Only the top layers (main, engine) log at info and above; data modules
 * (volume, sphere, seeds, trk, gpu) log at debug only and report failures to
 * their caller through return codes and struct errbuf.
 */
#ifndef TRACTD_LOG_H
#define TRACTD_LOG_H

#include <stddef.h>

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);

/* Copies in to out (len bytes, NUL included), control characters (below
 * 0x20, and 0x7f) written as \xNN, so that a message is one line whatever
 * a client put into it; cut at an escape's boundary when out is full.
 * Returns the length written. log_msg escapes every message with it. */
size_t log_escape(const char *in, char *out, size_t len);

/* Each message is one line: control characters are escaped (log_escape). */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
