/* SPDX-License-Identifier: MIT */
/*
 * fuzz_spool: libFuzzer harness for the job records the daemon reloads from
 * its spool at start (spool_record_parse(), daemon/server/spool.c): a corrupt or
 * foreign file must be refused, never crash the daemon.
 *
 * Input layout: the record file's bytes. A record that parses is written
 * back (spool_record_write() into a private temporary directory) and read
 * again, which must give the same job. Built by `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/spool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/fuzz_spool.XXXXXX";

/* Each round trip removes its record: the directory is empty at exit. */
static void remove_dir(void)
{
	rmdir(dir);
}

/* The record file of id written into dir, read back whole. */
static char *read_back(const char *id, size_t *len)
{
	char path[128];
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof(path), "%s/%s.job", dir, id);
	f = fopen(path, "rb");
	if (!f)
		abort();
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
		abort();
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		abort();
	fclose(f);
	unlink(path);
	*len = (size_t)n;
	return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	struct spool_record rec, again;
	struct errbuf err = { 0 };
	char *text;
	size_t len;

	if (!ready) {
		if (!mkdtemp(dir))
			abort();
		atexit(remove_dir);
		ready = 1;
	}
	if (spool_record_parse((const char *)data, size, NULL, &rec, &err) < 0)
		return 0;
	/* What parses round-trips: written, read back, the same job. */
	if (spool_record_write(dir, &rec.info, rec.spec_json, &err) < 0)
		abort();
	text = read_back(rec.info.id, &len);
	if (spool_record_parse(text, len, rec.info.id, &again, &err) < 0)
		abort();
	if (again.info.state != rec.info.state || again.info.bytes != rec.info.bytes ||
	    again.info.created != rec.info.created || again.info.error_code != rec.info.error_code ||
	    strcmp(again.info.error.message, rec.info.error.message) != 0 ||
	    (again.spec_json == NULL) != (rec.spec_json == NULL) ||
	    (rec.spec_json && strcmp(again.spec_json, rec.spec_json) != 0))
		abort();
	free(text);
	free(rec.spec_json);
	free(again.spec_json);
	return 0;
}
