/* SPDX-License-Identifier: MIT */
/*
 * bench-encode: the output encoders alone, on the CPU (no GPU): N synthetic
 * streamlines of realistic lengths (20 to 100 points, 60 on average, a
 * random walk of half-voxel steps in an HCP-sized grid) written as TRK, TCK
 * and TRX float16 to /dev/null and to a file, line by line (the writer's
 * own per-streamline calls) and through output_write_lines on 1 and on all
 * threads. Prints seconds, MB/s of output, streamlines/s, the CPU
 * seconds of all threads (which a busy machine does not inflate) and the
 * seconds of those in output_writer_finish (TRX: the entries after the
 * positions and the zip's directory).
 * Usage: bench-encode [STREAMLINES [DIR [FORMATS]]]  (default 1000000,
 * $TMPDIR or /tmp, all; FORMATS: names of the first column, comma-separated,
 * e.g. trx-f16; 830000 streamlines are 50 M points)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/parallel.h"
#include "base/timing.h"
#include "formats/output.h"

#define POOL_LINES 4096
#define MAX_POINTS 100

static const int64_t grid[3] = { 145, 174, 145 };
static const double affine[4][4] = {
	{ -1.25, 0, 0, 90 }, { 0, 1.25, 0, -126 }, { 0, 0, 1.25, -72 }, { 0, 0, 0, 1 }
};

/* Distinct streamlines the lines reuse: encoding cost does not depend on
 * which points, and 1 M distinct ones would take 720 MB. */
struct pool {
	float points[POOL_LINES][MAX_POINTS * 3];
	uint32_t n[POOL_LINES];
};

static uint64_t next_random(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

static void fill_pool(struct pool *p)
{
	uint64_t s = 42;

	for (int i = 0; i < POOL_LINES; i++) {
		float *q = p->points[i];

		p->n[i] = 20 + (uint32_t)(next_random(&s) % 81);
		for (int c = 0; c < 3; c++)
			q[c] = (float)(next_random(&s) % (uint64_t)grid[c]);
		for (uint32_t k = 1; k < p->n[i]; k++)
			for (int c = 0; c < 3; c++)
				q[3 * k + (uint32_t)c] = q[3 * (k - 1) + (uint32_t)c] +
					((float)(next_random(&s) % 1000) / 1000.0f - 0.5f);
	}
}

static void pool_line(void *userdata, uint64_t i, unsigned part, struct output_line *line)
{
	const struct pool *p = userdata;

	(void)part;
	line->points_vox = p->points[i % POOL_LINES];
	line->n = p->n[i % POOL_LINES];
	line->dps.seed_index = (uint32_t)i;
}

struct variant {
	const char *name;
	enum output_format format;
	struct output_options opts;
};

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds to write n lines to path with threads encoders (0: line by line);
 * *cpu gets the CPU seconds of all threads, *finish the seconds of
 * output_writer_finish, *bytes the file's size. */
static double run(const struct variant *v, const struct pool *p, uint64_t n, size_t threads,
		  const char *path, double *cpu, double *finish, long *bytes)
{
	FILE *f = fopen(path, "w+b");
	struct output_writer *w = NULL;
	struct output_write_stats st = { 0 };
	double t0 = timing_now(), c0 = cpu_now(), t, t_finish;
	int r;

	if (!f || output_writer_new(v->format, f, grid, affine, &v->opts, &w, NULL) < 0) {
		fprintf(stderr, "bench-encode: cannot open %s: %s\n", path, strerror(errno));
		exit(1);
	}
	if (threads == 0) {
		r = 0;
		for (uint64_t i = 0; r == 0 && i < n; i++) {
			struct output_line line = { 0 };

			pool_line((void *)p, i, 0, &line);
			r = output_write_streamline_dps(w, line.points_vox, line.n, &line.dps);
		}
	} else {
		r = output_write_lines(w, n, pool_line, (void *)p, threads, &st);
	}
	t_finish = timing_now();
	if (output_writer_finish(w) < 0 || r < 0) {
		fprintf(stderr, "bench-encode: writing %s failed\n", path);
		exit(1);
	}
	t = timing_now() - t0;
	*finish = timing_now() - t_finish;
	*cpu = cpu_now() - c0;
	*bytes = ftell(f);
	fclose(f);
	return t;
}

/* Whether name is one of list's comma-separated names. */
static bool listed(const char *list, const char *name)
{
	size_t len = strlen(name);

	for (const char *at = list; at; at = strchr(at, ',') ? strchr(at, ',') + 1 : NULL)
		if (strncmp(at, name, len) == 0 && (at[len] == ',' || at[len] == '\0'))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	const struct variant variants[] = {
		{ "trk", OUTPUT_TRK, { 0 } },
		{ "tck", OUTPUT_TCK, { 0 } },
		{ "trx-f16", OUTPUT_TRX, { .positions = TRX_POSITIONS_FLOAT16 } },
	};
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
	const char *dir = argc > 2 ? argv[2] : getenv("TMPDIR");
	const char *formats = argc > 3 ? argv[3] : NULL;
	size_t all = parallel_parts(UINT64_MAX, 1);
	struct pool *p = malloc(sizeof(*p));
	char file[4096];

	if (!p || n == 0)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);   /* each row as it is measured */
	snprintf(file, sizeof(file), "%s/bench-encode.out", dir && *dir ? dir : "/tmp");
	fill_pool(p);
	printf("encoders, %llu streamlines (20-100 points), %zu CPUs; 'lines' = one call per "
	       "streamline\n", (unsigned long long)n, all);
	printf("%-8s %-10s %-8s %10s %9s %12s %9s %9s\n", "format", "to", "threads", "seconds",
	       "MB/s", "lines/s", "cpu_s", "finish_s");
	for (size_t k = 0; k < sizeof(variants) / sizeof(variants[0]); k++) {
		const size_t threads[] = { 0, 1, all };
		long bytes = 0;

		if (formats && !listed(formats, variants[k].name))
			continue;

		for (size_t t = 0; t < 3; t++) {
			const char *targets[] = { file, "/dev/null" };

			if (t == 2 && all == 1)
				break;
			for (int d = 0; d < 2; d++) {
				long b;
				double cpu, fin;
				double s = run(&variants[k], p, n, threads[t], targets[d], &cpu, &fin, &b);
				char label[16];

				if (d == 0)
					bytes = b;
				snprintf(label, sizeof(label), t == 0 ? "lines" : "%zu", threads[t]);
				printf("%-8s %-10s %-8s %10.3f %9.0f %12.0f %9.3f %9.3f\n",
				       variants[k].name, d ? "/dev/null" : "file", label, s,
				       (double)bytes / s / 1e6, (double)n / s, cpu, fin);
			}
		}
	}
	unlink(file);
	free(p);
	return 0;
}
