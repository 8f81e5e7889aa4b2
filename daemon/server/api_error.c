/* SPDX-License-Identifier: MIT */
/*
 * api_error: the codes and statuses of proto/errors.def (see api_error.h).
 */
#include "server/api_error.h"

const char *api_error_code(enum api_error e)
{
	switch (e) {
	case API_OK:
		break;
#define X(name, code, status) case name: return code;
#include "errors.def"
#undef X
	}
	return "internal";
}

unsigned api_error_status(enum api_error e)
{
	switch (e) {
	case API_OK:
		break;
#define X(name, code, status) case name: return status;
#include "errors.def"
#undef X
	}
	return 500;
}
