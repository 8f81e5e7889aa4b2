/* SPDX-License-Identifier: MIT */
/*
 * api_error: the API's error codes and their HTTP statuses, from the one
 * table proto/errors.def (proto/API.md says when each is used). Owns
 * nothing; no locking, no logging.
 */
#ifndef TRACTD_API_ERROR_H
#define TRACTD_API_ERROR_H

/* 0 is no error: the first code of the table is not used as a value of 0. */
enum api_error {
	API_OK = 0,
#define X(name, code, status) name,
#include "errors.def"
#undef X
};

/* "invalid_input" etc.; "internal" for API_OK, which is no error. */
const char *api_error_code(enum api_error e);

/* The HTTP status of e: 400..599; 500 for API_OK. */
unsigned api_error_status(enum api_error e);

#endif
