/* SPDX-License-Identifier: MIT */
/*
 * tctl_msg: everything tractctl writes to standard error. Errors, notes and
 * informational lines (the last silenced by -q), all prefixed "tractctl: ",
 * and one self-overwriting progress line that is drawn only on a terminal,
 * so that logs and pipes never receive control characters.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "tctl_msg.h"

#define PREFIX "tractctl: "

static bool quiet;
static bool progress_enabled;
static bool progress_drawn;

void msg_init(bool be_quiet)
{
	quiet = be_quiet;
	progress_enabled = !be_quiet && isatty(STDERR_FILENO);
}

/* Every message first erases the progress line, so that it does not end up
 * glued to the end of a half-drawn bar. */
static void print_line(const char *kind, const char *fmt, va_list ap)
{
	msg_progress_end();
	fputs(PREFIX, stderr);
	fputs(kind, stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void msg_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	print_line("error: ", fmt, ap);
	va_end(ap);
}

void msg_note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	print_line("", fmt, ap);
	va_end(ap);
}

void msg_info(const char *fmt, ...)
{
	va_list ap;

	if (quiet)
		return;
	va_start(ap, fmt);
	print_line("", fmt, ap);
	va_end(ap);
}

bool msg_progress_enabled(void)
{
	return progress_enabled;
}

/* A line wider than the terminal wraps, and "\r" would then return to the
 * start of its last row only: cut it to fit instead. */
static size_t terminal_room(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_col <= sizeof(PREFIX))
		return SIZE_MAX;
	return ws.ws_col - sizeof(PREFIX);
}

void msg_progress(const char *fmt, ...)
{
	char line[512];
	size_t room;
	va_list ap;

	if (!progress_enabled)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	room = terminal_room();
	if (strlen(line) > room)
		line[room] = '\0';
	fprintf(stderr, "\r" PREFIX "%s\033[K", line);
	progress_drawn = true;
}

void msg_progress_end(void)
{
	if (!progress_drawn)
		return;
	fputs("\r\033[K", stderr);
	progress_drawn = false;
}

const char *msg_size(uint64_t bytes, char buf[MSG_SIZE_LEN])
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double value = (double)bytes / 1024.0;
	unsigned long long tenths;
	size_t unit = 0;

	if (bytes < 1024) {
		snprintf(buf, MSG_SIZE_LEN, "%u B", (unsigned)bytes);
		return buf;
	}
	while (value >= 1024.0 && unit + 1 < sizeof(units) / sizeof(units[0])) {
		value /= 1024.0;
		unit++;
	}
	/* In integer tenths, so that the compiler sees the text fits. */
	tenths = (unsigned long long)(value * 10.0 + 0.5);
	snprintf(buf, MSG_SIZE_LEN, "%llu.%llu %s", tenths / 10, tenths % 10, units[unit]);
	return buf;
}
