/* SPDX-License-Identifier: MIT */
#include "base/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A formatted message longer than this is cut; escaped, it may grow 4x. */
#define LOG_MESSAGE_MAX 2048

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

size_t log_escape(const char *in, char *out, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	if (len == 0)
		return 0;
	for (; *in; in++) {
		unsigned char c = (unsigned char)*in;
		bool plain = c >= 0x20 && c != 0x7f;

		/* Whole characters only: a cut escape would read as another. */
		if (o + (plain ? 1 : 4) >= len)
			break;
		if (plain) {
			out[o++] = (char)c;
			continue;
		}
		out[o++] = '\\';
		out[o++] = 'x';
		out[o++] = hex[c >> 4];
		out[o++] = hex[c & 15];
	}
	out[o] = '\0';
	return o;
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
	char message[LOG_MESSAGE_MAX], escaped[4 * LOG_MESSAGE_MAX];
	va_list ap;

	if (level > current_level)
		return;
	va_start(ap, fmt);
	/* A failed format (EOVERFLOW) leaves message unset: log the format. */
	if (vsnprintf(message, sizeof(message), fmt, ap) < 0)
		snprintf(message, sizeof(message), "%s", fmt);
	va_end(ap);
	/* Messages carry what clients sent (file names, URLs, job fields): a
	 * newline in them must not start a line that looks like ours. */
	log_escape(message, escaped, sizeof(escaped));
	if (to_journal())
		fprintf(stderr, "<%d>%s\n", syslog_priority[level], escaped);
	else
		fprintf(stderr, "tractd: %s: %s\n", prefix[level], escaped);
}
