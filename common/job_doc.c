/* SPDX-License-Identifier: MIT */
/*
 * job_doc: job documents composed or adjusted on the command line (output
 * format from an extension, dotted-path fields, gradients found by name),
 * for tractd and tractctl. Owns nothing past a call.
 */
#include "common/job_doc.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/tractogram_formats.h"

int job_doc_fail(struct job_doc_error *err, int code, const char *field, const char *fmt, ...)
{
	va_list ap;

	snprintf(err->field, sizeof(err->field), "%s", field);
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return code;
}

/* The names jobspec takes for output.format. */
const char *job_doc_format_of(const char *path)
{
#define FORMAT_NAME(id, name) name,
	static const char *const formats[] = { TRACTOGRAM_FORMATS(FORMAT_NAME) };
#undef FORMAT_NAME
	const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');

	if (!dot || (slash && dot < slash))
		return NULL;
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (strcasecmp(dot + 1, formats[i]) == 0)
			return formats[i];
	return NULL;
}

int job_doc_set_format(json_t *doc, const char *format, const char **named)
{
	json_t *output = json_object_get(doc, "output"), *set;

	if (!json_is_object(doc) || (output && !json_is_object(output)))
		return 0;
	set = json_object_get(output, "format");
	/* Not a string: jobspec names the field. */
	if (json_is_string(set) && strcmp(json_string_value(set), format) != 0) {
		*named = json_string_value(set);
		return -EEXIST;
	}
	if (set)
		return 0;
	if (!output) {
		output = json_object();
		if (!output || json_object_set_new(doc, "output", output) < 0)
			return -ENOMEM;
	}
	return json_object_set_new(output, "format", json_string(format)) < 0 ? -ENOMEM : 1;
}

int job_doc_set(json_t *doc, const char *key, json_t *value, struct job_doc_error *err)
{
	char part[256];
	const char *p = key;
	json_t *at = doc;

	for (;;) {
		size_t n = strcspn(p, ".");
		json_t *next;

		if (n == 0 || n >= sizeof(part)) {
			json_decref(value);
			return job_doc_fail(err, -EINVAL, key, "not a field path (dotted names)");
		}
		memcpy(part, p, n);
		part[n] = '\0';
		if (p[n] == '\0')
			return json_object_set_new(at, part, value) < 0 ?
				       job_doc_fail(err, -ENOMEM, "", "out of memory") : 0;
		next = json_object_get(at, part);
		if (!next) {
			next = json_object();
			if (!next || json_object_set_new(at, part, next) < 0) {
				json_decref(value);
				return job_doc_fail(err, -ENOMEM, "", "out of memory");
			}
		} else if (!json_is_object(next)) {
			json_decref(value);
			return job_doc_fail(err, -EINVAL, key, "%.*s is not an object",
					  (int)(p - key + n), key);
		}
		at = next;
		p += n + 1;
	}
}

int job_doc_set_text(json_t *doc, const char *key, const char *text, struct job_doc_error *err)
{
	json_t *value = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);

	if (!value)
		value = json_string(text);
	if (!value)
		return job_doc_fail(err, -ENOMEM, "", "out of memory");
	return job_doc_set(doc, key, value, err);
}

int job_doc_assign(json_t *doc, const char *assignment, struct job_doc_error *err)
{
	const char *eq = strchr(assignment, '=');
	char key[512];

	if (!eq || eq == assignment || (size_t)(eq - assignment) >= sizeof(key))
		return job_doc_fail(err, -EINVAL, "", "--set %s: expected KEY=VALUE", assignment);
	memcpy(key, assignment, (size_t)(eq - assignment));
	key[eq - assignment] = '\0';
	return job_doc_set_text(doc, key, eq + 1, err);
}

/* Both files exist: the pair is taken whole or not at all. */
static bool pair_exists(const char *bvals, const char *bvecs)
{
	return access(bvals, F_OK) == 0 && access(bvecs, F_OK) == 0;
}

/* X of X.nii.gz or X.nii into stem, or "" for another name. */
static void sidecar_stem(const char *dwi, char stem[PATH_MAX])
{
	static const char *const suffixes[] = { ".nii.gz", ".nii" };
	size_t len = strlen(dwi);

	stem[0] = '\0';
	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		size_t n = strlen(suffixes[i]);
		if (len > n && len - n < PATH_MAX && strcmp(dwi + len - n, suffixes[i]) == 0) {
			memcpy(stem, dwi, len - n);
			stem[len - n] = '\0';
			return;
		}
	}
}

/* Whether dwi is named as an MRtrix3 image, which carries its gradients. */
static bool named_mif(const char *dwi)
{
	static const char *const suffixes[] = { ".mif", ".mif.gz" };
	size_t len = strlen(dwi);

	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		size_t n = strlen(suffixes[i]);
		if (len > n && strcasecmp(dwi + len - n, suffixes[i]) == 0)
			return true;
	}
	return false;
}

int job_doc_find_gradients(const char *dwi, char **bvals, char **bvecs, struct job_doc_error *err)
{
	char stem[PATH_MAX], dir[PATH_MAX], sidecars[2][PATH_MAX], beside[2][PATH_MAX];
	const char *slash = strrchr(dwi, '/');
	bool named = false;

	*bvals = *bvecs = NULL;
	if (named_mif(dwi))
		return 0;
	sidecar_stem(dwi, stem);
	/* "" for a DWI in the root: "/bvals" then. */
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - dwi) : 1, slash ? dwi : ".");
	if (stem[0] && (size_t)snprintf(sidecars[0], PATH_MAX, "%s.bval", stem) < PATH_MAX &&
	    (size_t)snprintf(sidecars[1], PATH_MAX, "%s.bvec", stem) < PATH_MAX)
		named = true;
	if ((size_t)snprintf(beside[0], PATH_MAX, "%s/bvals", dir) >= PATH_MAX ||
	    (size_t)snprintf(beside[1], PATH_MAX, "%s/bvecs", dir) >= PATH_MAX)
		return job_doc_fail(err, -ENAMETOOLONG, "inputs.dwi", "%s: name too long", dwi);
	if (named && pair_exists(sidecars[0], sidecars[1])) {
		*bvals = strdup(sidecars[0]);
		*bvecs = strdup(sidecars[1]);
	} else if (pair_exists(beside[0], beside[1])) {
		*bvals = strdup(beside[0]);
		*bvecs = strdup(beside[1]);
	} else if (named) {
		return job_doc_fail(err, -ENOENT, "inputs.bvals", "no gradients found for %s: looked "
				  "for %s and %s, then %s and %s (give --bvals and --bvecs)", dwi,
				  sidecars[0], sidecars[1], beside[0], beside[1]);
	} else {
		return job_doc_fail(err, -ENOENT, "inputs.bvals", "no gradients found for %s: looked "
				  "for %s and %s (give --bvals and --bvecs)", dwi, beside[0],
				  beside[1]);
	}
	if (!*bvals || !*bvecs) {
		free(*bvals);
		free(*bvecs);
		*bvals = *bvecs = NULL;
		return job_doc_fail(err, -ENOMEM, "", "out of memory");
	}
	return 0;
}
