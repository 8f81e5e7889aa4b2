/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static enum log_level current_level = LOG_LEVEL_INFO;

void log_set_level(enum log_level level)
{
	current_level = level;
}

enum log_level log_get_level(void)
{
	return current_level;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const prefix[] = {
		[LOG_LEVEL_ERROR] = "error", [LOG_LEVEL_WARN] = "warning",
		[LOG_LEVEL_INFO] = "info", [LOG_LEVEL_DEBUG] = "debug",
	};
	va_list ap;

	if (level > current_level)
		return;
	fprintf(stderr, "tractd: %s: ", prefix[level]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
