/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static enum log_level current_level = LOG_LEVEL_INFO;

void log_set_level(enum log_level level)
{
	current_level = level;
}

enum log_level log_get_level(void)
{
	return current_level;
}

/* Under systemd, stderr is a journal stream (JOURNAL_STREAM is set): a
 * "<N>" syslog priority prefix gives each line its level in the journal. */
static bool to_journal(void)
{
	static int journal = -1;

	if (journal < 0)
		journal = getenv("JOURNAL_STREAM") != NULL;
	return journal;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const prefix[] = {
		[LOG_LEVEL_ERROR] = "error", [LOG_LEVEL_WARN] = "warning",
		[LOG_LEVEL_INFO] = "info", [LOG_LEVEL_DEBUG] = "debug",
	};
	static const int syslog_priority[] = {
		[LOG_LEVEL_ERROR] = 3, [LOG_LEVEL_WARN] = 4, [LOG_LEVEL_INFO] = 6, [LOG_LEVEL_DEBUG] = 7,
	};
	va_list ap;

	if (level > current_level)
		return;
	if (to_journal())
		fprintf(stderr, "<%d>", syslog_priority[level]);
	else
		fprintf(stderr, "tractd: %s: ", prefix[level]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
