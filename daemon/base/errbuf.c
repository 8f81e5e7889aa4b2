/* SPDX-License-Identifier: MIT */
#include "base/errbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int errbuf_set(struct errbuf *err, int code, const char *field, const char *fmt, ...)
{
	if (!err)
		return code;
	snprintf(err->field, sizeof(err->field), "%s", field ? field : "");
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
		va_end(ap);
	} else {
		err->message[0] = '\0';
	}
	return code;
}

void errbuf_prefix_field(struct errbuf *err, const char *prefix)
{
	/* Room for both parts; the result is cut to the field's size. */
	char joined[2 * sizeof(err->field) + 2];

	if (!err || !prefix || !*prefix)
		return;
	if (err->field[0])
		snprintf(joined, sizeof(joined), "%.127s.%s", prefix, err->field);
	else
		snprintf(joined, sizeof(joined), "%.127s", prefix);
	snprintf(err->field, sizeof(err->field), "%.127s", joined);
}
