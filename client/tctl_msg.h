/* SPDX-License-Identifier: MIT */
/*
 * tctl_msg: everything tractctl writes to standard error. Errors, notes and
 * informational lines (the last silenced by -q), all prefixed "tractctl: ",
 * and one self-overwriting progress line that is drawn only on a terminal.
 */
#ifndef TCTL_MSG_H
#define TCTL_MSG_H

#include <stdbool.h>
#include <stdint.h>

#define MSG_SIZE_LEN 32

#define MSG_PRINTF __attribute__((format(printf, 1, 2)))

/* quiet: errors only. Decides once whether progress lines are drawn. */
void msg_init(bool quiet);

/* "tractctl: error: ..." */
void msg_error(const char *fmt, ...) MSG_PRINTF;
/* "tractctl: ..." even with -q: hints that belong to an error. */
void msg_note(const char *fmt, ...) MSG_PRINTF;
/* "tractctl: ..." unless -q. */
void msg_info(const char *fmt, ...) MSG_PRINTF;

/* Whether progress lines are drawn (stderr is a terminal and not -q). */
bool msg_progress_enabled(void);
/* Replaces the progress line, cut to the terminal's width. */
void msg_progress(const char *fmt, ...) MSG_PRINTF;
/* Erases the progress line, if one is drawn. */
void msg_progress_end(void);

/* "512 B", "1.4 GiB": a byte count for people. Returns buf. */
const char *msg_size(uint64_t bytes, char buf[MSG_SIZE_LEN]);

#endif
