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

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
