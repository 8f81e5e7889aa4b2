/* SPDX-License-Identifier: MIT */
/* errbuf: a failure's field, message and kind (see errbuf.h). */
#include "base/errbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[] = {
	[ERR_KIND_UNTIED] = "untied",
	[ERR_KIND_INPUT] = "input",
	[ERR_KIND_MEMORY] = "memory",
	[ERR_KIND_DEVICE] = "device",
	[ERR_KIND_TOO_LARGE] = "too_large",
	[ERR_KIND_LIMIT] = "limit",
	[ERR_KIND_OUTPUT] = "output",
	[ERR_KIND_STORAGE] = "storage",
	[ERR_KIND_SHUTDOWN] = "shutdown",
	[ERR_KIND_INTERRUPTED] = "interrupted",
};

enum { N_KINDS = sizeof(kind_names) / sizeof(kind_names[0]) };

static int vset(struct errbuf *err, enum err_kind kind, int code, const char *field,
		const char *fmt, va_list ap)
{
	if (!err)
		return code;
	snprintf(err->field, sizeof(err->field), "%s", field ? field : "");
	if (fmt)
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
	else
		err->message[0] = '\0';
	err->kind = kind;
	return code;
}

int errbuf_set(struct errbuf *err, int code, const char *field, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vset(err, field && *field ? ERR_KIND_INPUT : ERR_KIND_UNTIED, code, field, fmt, ap);
	va_end(ap);
	return r;
}

int errbuf_set_kind(struct errbuf *err, enum err_kind kind, int code, const char *field,
		    const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vset(err, kind, code, field, fmt, ap);
	va_end(ap);
	return r;
}

void errbuf_reclassify(struct errbuf *err, enum err_kind kind)
{
	if (err)
		err->kind = kind;
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

enum err_kind errbuf_kind(const struct errbuf *err, int code)
{
	if (code == -ENOMEM)
		return ERR_KIND_MEMORY;
	return err ? err->kind : ERR_KIND_UNTIED;
}

const char *errbuf_kind_name(enum err_kind kind)
{
	return (unsigned)kind < N_KINDS ? kind_names[kind] : kind_names[ERR_KIND_UNTIED];
}

int errbuf_kind_from_name(const char *name, enum err_kind *kind)
{
	for (size_t k = 0; k < N_KINDS; k++)
		if (strcmp(kind_names[k], name) == 0) {
			*kind = (enum err_kind)k;
			return 0;
		}
	return -EINVAL;
}
