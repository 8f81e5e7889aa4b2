/* SPDX-License-Identifier: MIT */
/*
 * main: the tractd command line. Parses arguments, turns module errors into
 * messages and exit codes, and wires jobspec -> runner (fresh inputs, its
 * own devices) -> tractogram for `tractd run` (a job file or standard
 * input) and `tractd track` (a job composed from options by common/'s
 * track_opts, the table tractctl's track shares),
 * jobspec -> engine inputs -> NIfTI maps for `tractd fit`; `tractd phantom`
 * and `tractd devices` are thin wrappers.
 *
 * Exit codes (stable, documented in README and --help):
 *   0 success, 1 runtime failure (GPU, I/O, memory), 2 usage error,
 *   3 invalid job or input data.
 */
#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "base/errbuf.h"
#include "engine/gpu.h"
#include "job/shard.h"
#include "job/inputs.h"
#include "job/jobspec.h"
#include "base/log.h"
#include "demo/phantom.h"
#include "engine/resident.h"
#include "run/device_open.h"
#include "run/merge_job.h"
#include "run/runner.h"
#include "models/shbasis.h"
#include "server/serve.h"
#include "engine/stats_json.h"
#include "base/timing.h"
#include "common/job_doc.h"
#include "common/track_opts.h"

#define TRACTD_VERSION "0.1.0"

enum exit_code { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_INVALID = 3 };

static const char intro_text[] =
"Usage: tractd COMMAND [OPTIONS] [ARGS]\n"
"\n"
"GPU tractography on Vulkan: probabilistic streamline tracking of an ODF,\n"
"of SH coefficients (DIPY or MRtrix3 bases) or of raw DWI (fitted here: DTI\n"
"for the FA stopping map, CSD for the fibre ODF), written as TRK, TCK or TRX.\n"
"\n"
"Commands:\n"
"  serve                run the resident daemon (HTTP API; see tractd serve --help)\n"
"  run JOB.json         run one tracking job (format: proto/job.schema.json;\n"
"                       '-': read it from standard input)\n"
"  track DWI OUTPUT     track raw DWI without a job file (see tractd track --help)\n"
"  fit JOB.json         fit the job's models only and write them (-o DIR)\n"
"  merge OUT PART...    join the outputs of a job's shards (--shard) into OUT,\n"
"                       byte-identical to the whole job's output\n"
"  phantom OUTDIR       write the built-in synthetic phantom and a job for it\n"
"  devices              list the Vulkan devices tractd can use\n"
"  warmup               compile the GPU kernels of the default configurations\n"
"                       into the cache (see tractd warmup --help)\n"
"\n";

static const char run_usage[] =
"Usage: tractd run JOB.json [OPTIONS]\n"
"\n"
"Runs one tracking job (proto/job.schema.json); JOB.json '-' reads it from\n"
"standard input, its relative paths then relative to the current directory.\n"
"\n";

static const char run_text[] =
"Options of run (and of track, which writes OUTPUT instead of -o):\n"
"  -o, --output FILE          write the tractogram to FILE ('-': standard output);\n"
"                             a .trk, .tck or .trx extension picks the format\n"
"                             (the job's output.format must not name another);\n"
"                             default: the job's output.path\n"
"  -d, --device LIST          use these Vulkan devices: indices or UUIDs as\n"
"                             `tractd devices` lists them, comma-separated; the\n"
"                             seed chunks are shared out between them and the\n"
"                             output is the same as on one device; default: the\n"
"                             best one (discrete > integrated > virtual > CPU)\n"
"      --stats-json FILE      write counts and phase timings as JSON\n"
"      --shard K/N            track shard K of N (K from 0: 0/4 .. 3/4) of the\n"
"                             job's seeds (seeds.shard); join the outputs with\n"
"                             `tractd merge OUT PART...`\n"
"      --gpu-memory-budget B  GPU memory one job may use (bytes; K, M, G suffixes);\n"
"                             default: half the device memory (of --gpu-memory)\n"
"      --gpu-memory B         run as if each device had B bytes of memory: all\n"
"                             that tractd allocates on it (inputs, work and\n"
"                             transfer buffers) stays within B; default: none\n"
"      --max-chunk-seeds N    seeds per GPU chunk at most (default: from the limits)\n"
"      --max-dispatch-steps N  streamline steps one GPU submit runs at most\n"
"                             (default 4194304; bounds a submit's duration, and\n"
"                             how often progress moves within a chunk)\n"
"      --readback-bytes B     host memory of each of the two buffers tracked\n"
"                             points are read back through (default 128M; a\n"
"                             batch that does not fit goes in pieces)\n"
"      --max-binding-bytes B  lower the device's storage-buffer range (testing)\n"
"      --max-alloc-bytes B    lower the device's allocation size limit, which\n"
"                             bounds volume pages and work buffers (testing)\n"
"      --pipeline-cache FILE  Vulkan pipeline cache, and the kernels' SPIR-V in\n"
"                             spirv/ beside it ('none' to disable); default:\n"
"                             $CACHE_DIRECTORY/pipelines.bin (systemd's, as the\n"
"                             daemon), else $XDG_CACHE_HOME/tractd/pipelines.bin\n"
"      --threads N            CPU threads for model fitting (default: all CPUs)\n"
"\n";

static const char track_usage[] =
"Usage: tractd track DWI OUTPUT [OPTIONS]\n"
"\n"
"Tracks raw DWI (NIfTI) into OUTPUT without a job file: the job is composed\n"
"from the options (`tractd run`'s defaults otherwise) and run as `tractd run`\n"
"runs it. The gradients are found beside DWI: X.bval and X.bvec for X.nii.gz\n"
"or X.nii, else bvals and bvecs in its directory. OUTPUT's extension (.trk,\n"
".tck or .trx) picks the format.\n"
"\n";

/* Its lines are common/track_opts.c's, shared with `tractctl track`. */
static const char track_text[] =
"Options of track (the options of run apply too); unset fields keep the\n"
"defaults of a job without them (README's tables):\n";

static const char merge_usage[] =
"Usage: tractd merge OUT PART... [OPTIONS]\n"
"\n"
"Joins the outputs of one job's shards (tractd run --shard K/N, or jobs with\n"
"seeds.shard) into OUT, byte-identical to the output of the whole job. PARTs\n"
"(TRK, TCK or TRX, with a TCK job's PART.seeds.txt beside them) may come in\n"
"any order; every shard of the job must be given once, all run on the same\n"
"input files (their records hold a sampled digest of them). Exit status 3\n"
"when they are not one job's whole set, 1 when OUT cannot be written.\n"
"\n"
"Options of merge:\n"
"      --part-stats FILE      a shard's statistics (tractd run --shard K/N\n"
"                             --stats-json FILE); once per shard, any order\n"
"      --stats-json FILE      write the whole job's statistics, summed from\n"
"                             the --part-stats files (all shards needed)\n"
"\n";

static const char fit_usage[] =
"Usage: tractd fit JOB.json -o DIR [OPTIONS]\n"
"\n"
"Fits the job's models only and writes them.\n"
"\n";

static const char fit_text[] =
"Options of fit:\n"
"  -o, --output DIR           directory for the results (created if missing);\n"
"                             a dwi job writes fa.nii.gz, md.nii.gz, sh.nii.gz\n"
"                             (CSD, descoteaux07_legacy basis, voxel axes) and\n"
"                             response.json\n"
"      --odf                  also write odf.nii.gz: the ODF the tracker samples\n"
"                             (one volume per tracking.sphere vertex)\n"
"      --threads N            CPU threads (default: all CPUs)\n"
"\n";

static const char phantom_usage[] =
"Usage: tractd phantom OUTDIR [OPTIONS]\n"
"\n"
"Writes the built-in synthetic phantom (ODF, FA, seed ROI; DWI as dwi.nii.gz,\n"
"dwi.bval, dwi.bvec and mask.nii.gz; tissue maps for stopping act and cmc as\n"
"include, exclude, wm, gm and csf .nii.gz, and as MRtrix3's 5TT image 5tt.nii.gz)\n"
"and jobs for it into OUTDIR (job_act_5tt.json: ACT on the 5TT; job_interface.json:\n"
"seeds on its white/grey-matter interface).\n"
"\n";

static const char phantom_text[] =
"Options of phantom:\n"
"      --dim NX,NY,NZ         grid size (default 48,48,24)\n"
"      --voxel-size MM        isotropic voxel size (default 1)\n"
"      --sphere NAME          repulsion724, repulsion100 or symmetric362 (default)\n"
"      --seeds N              seeds.count of the generated job (default 2000)\n"
"      --uncompressed         write .nii instead of .nii.gz\n"
"      --snr X                DWI signal-to-noise ratio, S0 over the Rician sigma\n"
"                             (default 30; 0 or inf: noise-free)\n"
"      --shells 1|2           DWI shells: one at --bvalue, or a second one at twice\n"
"                             it with the same directions turned (default 1)\n"
"      --b0s N                DWI b=0 volumes, spread through the series (1 to 100;\n"
"                             default 6)\n"
"      --directions N         DWI gradient directions per shell (6 to 1000; default\n"
"                             64); Stanford HARDI: --b0s 10 --directions 150\n"
"                             --bvalue 2000\n"
"      --bvalue B             DWI b-value of the first shell in s/mm^2 (over 50, at\n"
"                             most 20000; default 1000)\n"
"      --no-dwi               skip the DWI series (dwi.*, mask, job_dwi/job_boot.json)\n"
"\n";

static const char warmup_usage[] =
"Usage: tractd warmup [OPTIONS]\n"
"\n"
"Compiles the GPU kernels of the default configurations (prob and ptt on an\n"
"ODF, SH or DWI input sampled on the default sphere, repulsion724) into the\n"
"caches, so that the first such job does not wait for the compiler: tracks a\n"
"small phantom with each getter in a temporary directory, then removes it.\n"
"The caches: --pipeline-cache (tractd's, with the SPIR-V beside it) and the\n"
"driver's own (Mesa: $XDG_CACHE_HOME/mesa_shader_cache). Run it as the user\n"
"who runs the jobs (README: the daemon's service).\n"
"\n"
"Options of warmup: --device, --pipeline-cache, --gpu-memory-budget and\n"
"--gpu-memory, as run.\n"
"\n";

static const char common_text[] =
"Common options:\n"
"  -q, --quiet                errors only\n"
"  -v, --verbose              debug messages (planning, compilation, chunks)\n"
"  -h, --help                 this text (after a command: that command's)\n"
"  -V, --version              version\n"
"\n"
"Exit status: 0 success, 1 runtime failure (GPU, I/O, memory), 2 usage error,\n"
"3 invalid job or input data. Errors are printed as 'tractd: error: FIELD: REASON'.\n";

static const char example_text[] =
"\n"
"Examples:\n"
"  tractd phantom /tmp/ph && tractd run /tmp/ph/job.json -o /tmp/ph/tracks.trk\n"
"  tractd track /tmp/ph/dwi.nii.gz /tmp/ph/tracks.tck --mask /tmp/ph/mask.nii.gz\n";

static void print_track_options(void)
{
	fputs(track_text, stdout);
	track_opts_print_help(stdout);
	fputs("\n", stdout);
}

/* `tractd COMMAND --help`: that command's usage and options; else all. */
static int print_help(const char *command)
{
	if (command && strcmp(command, "run") == 0) {
		printf("%s%s%s", run_usage, run_text, common_text);
	} else if (command && strcmp(command, "track") == 0) {
		fputs(track_usage, stdout);
		print_track_options();
		printf("%s%s", run_text, common_text);
	} else if (command && strcmp(command, "fit") == 0) {
		printf("%s%s%s", fit_usage, fit_text, common_text);
	} else if (command && strcmp(command, "merge") == 0) {
		printf("%s%s", merge_usage, common_text);
	} else if (command && strcmp(command, "phantom") == 0) {
		printf("%s%s%s", phantom_usage, phantom_text, common_text);
	} else if (command && strcmp(command, "warmup") == 0) {
		printf("%s%s", warmup_usage, common_text);
	} else {
		printf("%s%s", intro_text, run_text);
		print_track_options();
		printf("%s%s%s%s", fit_text, phantom_text, common_text, example_text);
	}
	return EXIT_OK;
}

enum option_id {
	OPT_STATS_JSON = 256,
	OPT_BUDGET,
	OPT_GPU_MEMORY,
	OPT_MAX_CHUNK_SEEDS,
	OPT_MAX_DISPATCH_STEPS,
	OPT_READBACK,
	OPT_MAX_BINDING,
	OPT_MAX_ALLOC,
	OPT_PIPELINE_CACHE,
	OPT_DIM,
	OPT_VOXEL_SIZE,
	OPT_UNCOMPRESSED,
	OPT_THREADS,
	OPT_ODF,
	OPT_SNR,
	OPT_SHELLS,
	OPT_B0S,
	OPT_DIRECTIONS,
	OPT_BVALUE,
	OPT_NO_DWI,
	OPT_SHARD,
	OPT_PART_STATS,
	OPT_TRACK,   /* + enum track_opt: track's options (common/track_opts.h) */
};

/* The options of every command but track's, which track_opts adds. */
static const struct option own_options[] = {
	{ "output", required_argument, NULL, 'o' },
	{ "device", required_argument, NULL, 'd' },
	{ "stats-json", required_argument, NULL, OPT_STATS_JSON },
	{ "shard", required_argument, NULL, OPT_SHARD },
	{ "part-stats", required_argument, NULL, OPT_PART_STATS },
	{ "gpu-memory-budget", required_argument, NULL, OPT_BUDGET },
	{ "gpu-memory", required_argument, NULL, OPT_GPU_MEMORY },
	{ "max-chunk-seeds", required_argument, NULL, OPT_MAX_CHUNK_SEEDS },
	{ "max-dispatch-steps", required_argument, NULL, OPT_MAX_DISPATCH_STEPS },
	{ "readback-bytes", required_argument, NULL, OPT_READBACK },
	{ "max-binding-bytes", required_argument, NULL, OPT_MAX_BINDING },
	{ "max-alloc-bytes", required_argument, NULL, OPT_MAX_ALLOC },
	{ "pipeline-cache", required_argument, NULL, OPT_PIPELINE_CACHE },
	{ "dim", required_argument, NULL, OPT_DIM },
	{ "voxel-size", required_argument, NULL, OPT_VOXEL_SIZE },
	{ "uncompressed", no_argument, NULL, OPT_UNCOMPRESSED },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "odf", no_argument, NULL, OPT_ODF },
	{ "snr", required_argument, NULL, OPT_SNR },
	{ "shells", required_argument, NULL, OPT_SHELLS },
	{ "b0s", required_argument, NULL, OPT_B0S },
	{ "directions", required_argument, NULL, OPT_DIRECTIONS },
	{ "bvalue", required_argument, NULL, OPT_BVALUE },
	{ "no-dwi", no_argument, NULL, OPT_NO_DWI },
	{ "quiet", no_argument, NULL, 'q' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
};

#define N_OWN_OPTIONS (sizeof(own_options) / sizeof(own_options[0]))

/* own_options, then track's, then getopt's terminator (all zero). */
static struct option long_options[N_OWN_OPTIONS + TRACK_OPT_COUNT + 1];

static void build_long_options(void)
{
	memcpy(long_options, own_options, sizeof(own_options));
	track_opts_getopt(long_options + N_OWN_OPTIONS, OPT_TRACK);
}

/* What tractd run's progress output last showed (show_progress), and where
 * the compiled kernels are kept (say_compiling). */
struct progress_view {
	bool terminal;            /* stderr is one: a self-overwriting line */
	int shown;                /* percent drawn, or tenths logged; -1: none yet */
	const char *pipeline_cache;   /* NULL: --pipeline-cache none */
};

struct cli {
	bool help;
	const char *output;
	struct gpu_device_choice devices[GPU_MAX_DEVICES];   /* none: the best one */
	size_t n_devices;
	const char *stats_json;
	const char *shard;          /* --shard K/N, or NULL */
	struct merge_stats merge;   /* merge's --stats-json and --part-stats */
	const char *pipeline_cache;
	char default_cache[PATH_MAX];
	struct gpu_options gpu;
	struct engine_options engine;
	struct progress_view progress;
	struct fit_options fit;
	bool write_odf;
	struct phantom_params phantom;
	struct track_request track;
};

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "tractd: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'tractd --help'.\n");
	return EXIT_USAGE;
}

static void report_field(const char *field, const char *message)
{
	if (field[0])
		fprintf(stderr, "tractd: error: %s: %s\n", field, message);
	else
		fprintf(stderr, "tractd: error: %s\n", message);
}

static void report(const struct errbuf *err)
{
	report_field(err->field, err->message);
}

/* A job_doc failure (common/job_doc.h): the command line's is a usage
 * error (2), an input's invalid (3), memory a runtime failure (1). */
static int job_doc_exit(int r, const struct job_doc_error *err)
{
	if (r == -EINVAL || r == -EEXIST) {
		if (!err->field[0])
			return usage_error("%s", err->message);
		report_field(err->field, err->message);
		return EXIT_USAGE;
	}
	report_field(err->field, err->message);
	return r == -ENOMEM ? EXIT_RUNTIME : EXIT_INVALID;
}

/* Input problems, unreadable or truncated files and a limit the job goes
 * over included, are the user's to fix (3); the device, its limits, memory
 * and problems writing the output files are runtime failures (1). The
 * output's options (format, save_seeds, positions, compression) are part of
 * the job: invalid ones are the user's too. */
static int exit_code_for(int r, const struct errbuf *err)
{
	switch (errbuf_kind(err, r)) {
	case ERR_KIND_UNTIED:
	case ERR_KIND_INPUT:
	case ERR_KIND_LIMIT:
		return EXIT_INVALID;
	case ERR_KIND_MEMORY:
	case ERR_KIND_DEVICE:
	case ERR_KIND_TOO_LARGE:
	case ERR_KIND_OUTPUT:
	case ERR_KIND_STORAGE:
	case ERR_KIND_SHUTDOWN:
	case ERR_KIND_INTERRUPTED:
		break;
	}
	return EXIT_RUNTIME;
}

/* Parses a byte count with an optional K/M/G suffix (powers of 1024). */
static int parse_size(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;
	int shift = 0;

	errno = 0;
	if (*s == '-')
		return -EINVAL;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (*end == 'K' || *end == 'k')
		shift = 10;
	else if (*end == 'M' || *end == 'm')
		shift = 20;
	else if (*end == 'G' || *end == 'g')
		shift = 30;
	if (shift)
		end++;
	if (*end || v > (UINT64_MAX >> shift))
		return -EINVAL;
	*ret = (uint64_t)v << shift;
	return 0;
}

static int parse_dims(const char *s, int64_t dim[3])
{
	long long a, b, c;
	int used = 0;

	if (sscanf(s, "%lld,%lld,%lld%n", &a, &b, &c, &used) != 3 || s[used] != '\0')
		return -EINVAL;
	dim[0] = a;
	dim[1] = b;
	dim[2] = c;
	return 0;
}

/* Any number strtod reads, "inf" included; the range is the caller's. */
static int parse_double(const char *s, double *ret)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_positive_double(const char *s, double *ret)
{
	double v;

	if (parse_double(s, &v) < 0 || !(v > 0.0))
		return -EINVAL;
	*ret = v;
	return 0;
}

/* An int; the range is the caller's. */
static int parse_int(const char *s, int *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < INT_MIN || v > INT_MAX)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

/* The daemon's default first (conf.c: systemd's CacheDirectory=), so that
 * `tractd warmup` in the service's environment fills the daemon's cache. */
static void set_default_cache(struct cli *cli)
{
	const char *unit = getenv("CACHE_DIRECTORY");
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

	if (unit && *unit == '/')
		snprintf(cli->default_cache, sizeof(cli->default_cache), "%s/pipelines.bin", unit);
	else if (xdg && *xdg)
		snprintf(cli->default_cache, sizeof(cli->default_cache), "%s/tractd/pipelines.bin", xdg);
	else if (home && *home)
		snprintf(cli->default_cache, sizeof(cli->default_cache),
			 "%s/.cache/tractd/pipelines.bin", home);
	cli->pipeline_cache = cli->default_cache[0] ? cli->default_cache : NULL;
}

/* --device LIST: comma-separated indices or UUIDs; one may repeat, which
 * opens a second logical device on the same GPU. */
static int parse_devices(struct cli *cli, const char *arg)
{
	struct errbuf err = { 0 };

	if (gpu_parse_devices(arg, cli->devices, &cli->n_devices, &err) < 0 || !cli->n_devices)
		return usage_error("invalid --device '%s' (indices or UUIDs from `tractd devices`, "
				   "separated by commas)", arg);
	return -1;
}

/* A track option; --sphere and --seeds are phantom's too. Returns -1 to
 * continue, or an exit code. */
static int parse_track_option(struct cli *cli, enum track_opt opt, const char *arg)
{
	struct job_doc_error err = { 0 };
	int r;

	if (opt == TRACK_OPT_SPHERE)
		cli->phantom.sphere = arg;
	if (opt == TRACK_OPT_SEEDS && parse_size(arg, &cli->phantom.seed_count) < 0)
		return usage_error("invalid --seeds '%s'", arg);
	r = track_request_take(&cli->track, opt, arg, &err);
	return r < 0 ? job_doc_exit(r, &err) : -1;
}

/* --shard K/N, checked here so that a typo is a usage error; run_job_text
 * gives it to the job as seeds.shard (track: also to the document it
 * prints). */
static int parse_shard(struct cli *cli, const char *arg)
{
	struct errbuf err = { 0 };
	struct shard shard;

	if (shard_parse(arg, &shard, &err) < 0)
		return usage_error("invalid --shard '%s' (K/N: shard K of N, K from 0)", arg);
	cli->shard = arg;
	return -1;
}

/* Returns -1 to continue, or an exit code. */
static int parse_option(struct cli *cli, int opt, const char *arg)
{
	switch (opt) {
	case 'o': cli->output = arg; return -1;
	case 'd':
		return parse_devices(cli, arg);
	case OPT_STATS_JSON: cli->stats_json = arg; cli->merge.out = arg; return -1;
	case OPT_PART_STATS:
		if (cli->merge.n_parts == MERGE_MAX_PART_STATS)
			return usage_error("%s", "too many --part-stats");
		cli->merge.parts[cli->merge.n_parts++] = arg;
		return -1;
	case OPT_SHARD:
		return parse_shard(cli, arg);
	case OPT_BUDGET:
		if (parse_size(arg, &cli->engine.memory_budget) < 0 || !cli->engine.memory_budget)
			return usage_error("invalid --gpu-memory-budget '%s'", arg);
		return -1;
	case OPT_GPU_MEMORY:
		if (parse_size(arg, &cli->gpu.memory_limit) < 0 || !cli->gpu.memory_limit)
			return usage_error("invalid --gpu-memory '%s'", arg);
		return -1;
	case OPT_MAX_CHUNK_SEEDS:
		if (parse_size(arg, &cli->engine.max_chunk_seeds) < 0 || !cli->engine.max_chunk_seeds)
			return usage_error("invalid --max-chunk-seeds '%s'", arg);
		return -1;
	case OPT_MAX_DISPATCH_STEPS:
		if (parse_size(arg, &cli->engine.max_dispatch_steps) < 0 ||
		    !cli->engine.max_dispatch_steps)
			return usage_error("invalid --max-dispatch-steps '%s'", arg);
		return -1;
	case OPT_READBACK:
		if (parse_size(arg, &cli->engine.readback_bytes) < 0 || !cli->engine.readback_bytes)
			return usage_error("invalid --readback-bytes '%s'", arg);
		return -1;
	case OPT_MAX_BINDING:
		if (parse_size(arg, &cli->gpu.max_binding_bytes) < 0 || cli->gpu.max_binding_bytes < 4096)
			return usage_error("invalid --max-binding-bytes '%s' (at least 4096)", arg);
		return -1;
	case OPT_MAX_ALLOC:
		if (parse_size(arg, &cli->gpu.max_alloc_bytes) < 0 || cli->gpu.max_alloc_bytes < 4096)
			return usage_error("invalid --max-alloc-bytes '%s' (at least 4096)", arg);
		return -1;
	case OPT_PIPELINE_CACHE:
		cli->pipeline_cache = strcmp(arg, "none") == 0 ? NULL : arg;
		return -1;
	case OPT_DIM:
		if (parse_dims(arg, cli->phantom.dim) < 0)
			return usage_error("invalid --dim '%s' (expected NX,NY,NZ)", arg);
		return -1;
	case OPT_VOXEL_SIZE:
		if (parse_positive_double(arg, &cli->phantom.voxel_mm) < 0)
			return usage_error("invalid --voxel-size '%s'", arg);
		return -1;
	case OPT_UNCOMPRESSED: cli->phantom.compress = 0; return -1;
	case OPT_THREADS:
		if (parse_int(arg, &cli->fit.threads) < 0 || cli->fit.threads < 1 ||
		    cli->fit.threads > 256)
			return usage_error("invalid --threads '%s' (1 to 256)", arg);
		return -1;
	case OPT_ODF: cli->write_odf = true; return -1;
	/* Numbers out of range are phantom_generate's to reject, naming the field. */
	case OPT_SNR:
		if (parse_double(arg, &cli->phantom.snr) < 0)
			return usage_error("invalid --snr '%s' (a number, or inf)", arg);
		return -1;
	case OPT_SHELLS:
		if (parse_int(arg, &cli->phantom.shells) < 0)
			return usage_error("invalid --shells '%s' (1 or 2)", arg);
		return -1;
	case OPT_B0S:
		if (parse_int(arg, &cli->phantom.b0_count) < 0)
			return usage_error("invalid --b0s '%s' (1 to 100)", arg);
		return -1;
	case OPT_DIRECTIONS:
		if (parse_int(arg, &cli->phantom.directions) < 0)
			return usage_error("invalid --directions '%s' (6 to 1000)", arg);
		return -1;
	case OPT_BVALUE:
		if (parse_double(arg, &cli->phantom.bvalue) < 0)
			return usage_error("invalid --bvalue '%s' (over 50, at most 20000)", arg);
		return -1;
	case OPT_NO_DWI: cli->phantom.write_dwi = 0; return -1;
	case 'q': log_set_level(LOG_LEVEL_ERROR); return -1;
	case 'v': log_set_level(LOG_LEVEL_DEBUG); return -1;
	case 'h': cli->help = true; return -1;
	case 'V': printf("tractd %s\n", TRACTD_VERSION); return EXIT_OK;
	default:
		if (opt >= OPT_TRACK && opt < OPT_TRACK + TRACK_OPT_COUNT)
			return parse_track_option(cli, (enum track_opt)(opt - OPT_TRACK), arg);
		return usage_error("%s", "invalid option");
	}
}

/* Each kernel's seconds on the devices' clocks, null where a device keeps none. */
static json_t *device_seconds_json(const struct engine_stats *s)
{
	json_t *doc = json_object();

	for (int k = 0; doc && k < ENGINE_KERNELS; k++)
		if (json_object_set_new(doc, engine_kernel_key((enum engine_kernel)k),
					s->device_seconds[k] < 0.0 ? json_null() :
					json_real(s->device_seconds[k])) < 0) {
			json_decref(doc);
			doc = NULL;
		}
	return doc;
}

/* Peak memory: the host's from the kernel (ru_maxrss, KiB), the GPU's as
 * the buffers tractd allocated (driver overhead not included). */
static int write_stats_json(const char *path, const struct engine_stats *s,
			    const struct engine_device *devs, size_t n_devs, const struct shard *shard)
{
	struct rusage usage = { 0 };
	uint64_t gpu_peak = 0;
	json_t *doc;
	int r;

	getrusage(RUSAGE_SELF, &usage);
	for (size_t i = 0; i < n_devs; i++)
		if (gpu_peak_buffer_bytes(devs[i].gpu) > gpu_peak)
			gpu_peak = gpu_peak_buffer_bytes(devs[i].gpu);
	/* The CLI's own members: the device facts and the timings under "seconds". */
	doc = stats_json_new(s, json_pack("{s:I, s:I, s:s, s:I, s:s, s:I, s:I, s:I, "
					  "s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:o}}",
					  "pieces", (json_int_t)s->pieces,
					  "submits", (json_int_t)s->submits,
					  "device", gpu_get_limits(devs[0].gpu)->device_name,
					  "devices", (json_int_t)n_devs,
					  "odf_storage", s->odf_storage,
					  "gpu_input_bytes", (json_int_t)s->gpu_input_bytes,
					  "gpu_peak_bytes", (json_int_t)gpu_peak,
					  "host_peak_bytes", (json_int_t)usage.ru_maxrss * 1024,
					  "seconds",
					  "load", s->load_seconds, "upload", s->upload_seconds,
					  "compile", s->compile_seconds, "track", s->track_seconds,
					  "kernels", s->kernel_seconds, "encode", s->encode_seconds,
					  "write", s->write_seconds, "device", device_seconds_json(s)));
	/* A shard's statistics are its own; merge sums them by this record. */
	if (doc && shard->count &&
	    json_object_set_new(doc, "shard", json_pack("{s:I, s:I}", "index",
							  (json_int_t)shard->index, "count",
							  (json_int_t)shard->count)) < 0) {
		json_decref(doc);
		doc = NULL;
	}
	if (!doc)
		return -ENOMEM;
	r = json_dump_file(doc, path, JSON_INDENT(2));
	json_decref(doc);
	return r < 0 ? -EIO : 0;
}

/* Output goes to FILE.tmp and is renamed into place only when the job
 * succeeded, so a failed job never leaves a truncated tractogram behind.
 * A TCK job's seeds (output.save_seeds) go the same way to FILE.seeds.txt:
 * a name derived from the output, so -o and output.path both place it
 * without another option, and it sits next to the tractogram it indexes.
 * stdout ("-"), and a path that names no regular file (/dev/null, a FIFO),
 * are written in place: FILE.tmp would be a new regular file, renamed over
 * the device at the end (and /dev/ is no place to create one). */
struct output_file {
	FILE *f;
	bool in_place;          /* written where it is, no FILE.tmp */
	char tmp[PATH_MAX];
	const char *path;
	FILE *seeds;            /* NULL unless a TCK job saves seeds */
	char seeds_tmp[PATH_MAX];
	char seeds_path[PATH_MAX];
};

/* Whether path exists as something other than a regular file. */
static bool names_no_regular_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && !S_ISREG(st.st_mode);
}

static int output_open(struct output_file *o, const char *path)
{
	o->path = path;
	if (strcmp(path, "-") == 0) {
		o->f = stdout;
		o->in_place = true;
		return 0;
	}
	if (names_no_regular_file(path)) {
		o->f = fopen(path, "wb");
		o->in_place = true;
		return o->f ? 0 : -errno;
	}
	if (snprintf(o->tmp, sizeof(o->tmp), "%s.tmp", path) >= (int)sizeof(o->tmp))
		return -ENAMETOOLONG;
	o->f = fopen(o->tmp, "wb");
	return o->f ? 0 : -errno;
}

/* Opens FILE.seeds.txt.tmp when the job writes TCK seeds; stdout has no
 * name to put the seeds file beside, so that job is refused as invalid. */
static int seeds_open(struct output_file *o, const struct jobspec *spec, struct errbuf *err)
{
	if (!spec->save_seeds || spec->output_format != OUTPUT_TCK)
		return 0;
	if (o->in_place)
		return errbuf_set(err, -EINVAL, "output.save_seeds", "a TCK job writes its seeds to "
				  "OUTPUT.seeds.txt, which needs a regular output file, not %s",
				  o->f == stdout ? "stdout" : o->path);
	if (snprintf(o->seeds_path, sizeof(o->seeds_path), "%s.seeds.txt", o->path) >=
		    (int)sizeof(o->seeds_path) ||
	    snprintf(o->seeds_tmp, sizeof(o->seeds_tmp), "%s.tmp", o->seeds_path) >=
		    (int)sizeof(o->seeds_tmp))
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -ENAMETOOLONG, "output.path",
				       "%s: name too long", o->path);
	o->seeds = fopen(o->seeds_tmp, "w");
	if (!o->seeds)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -errno, "output.path",
				       "cannot create %s: %s", o->seeds_tmp, strerror(errno));
	return 0;
}

/* Closes the seeds file and, on success, moves it into place; r is the
 * tractogram's result so far, so that a failure keeps neither file. */
static int seeds_close(struct output_file *o, bool success)
{
	int r = 0;

	if (!o->seeds)
		return 0;
	if (fclose(o->seeds) != 0)
		r = -EIO;
	o->seeds = NULL;
	if (success && r == 0 && rename(o->seeds_tmp, o->seeds_path) < 0)
		r = -errno;
	if (!success || r < 0)
		unlink(o->seeds_tmp);
	return r;
}

static int output_close(struct output_file *o, bool success)
{
	int r = 0;

	if (o->f == stdout)
		return fflush(stdout) == 0 ? 0 : -EIO;
	if (o->in_place)
		return fclose(o->f) == 0 ? 0 : -EIO;
	if (fclose(o->f) != 0)
		r = -EIO;
	/* The seeds first: a tractogram in place without its seeds would look whole. */
	if (r == 0) {
		int sr = seeds_close(o, success);
		r = sr < 0 ? sr : r;
	} else {
		(void)seeds_close(o, false);
	}
	if (success && r == 0 && rename(o->tmp, o->path) < 0)
		r = -errno;
	if (!success || r < 0)
		unlink(o->tmp);
	return r;
}

/* Tracking progress: on a terminal one self-overwriting line, redrawn when
 * the percentage changes or a chunk is written; in a log (stderr not a
 * terminal, -v) a line per tenth of the seeds, as MRtrix3 shows progress. */
static bool show_progress(void *userdata, const struct engine_progress *p)
{
	struct progress_view *view = userdata;
	int percent = (int)(100 * p->seeds_done / p->seeds_total);
	int shown = view->terminal ? percent : percent / 10;

	if (shown == view->shown && !(view->terminal && p->written))
		return true;
	view->shown = shown;
	if (!view->terminal) {
		log_info("tracking %3d%% (%llu/%llu seeds, %llu streamlines written)", percent,
			 (unsigned long long)p->seeds_done, (unsigned long long)p->seeds_total,
			 (unsigned long long)p->streamlines);
		return true;
	}
	fprintf(stderr, "\rtractd: tracking %3d%% (%llu/%llu seeds, %llu streamlines)%s", percent,
		(unsigned long long)p->seeds_done, (unsigned long long)p->seeds_total,
		(unsigned long long)p->streamlines, p->seeds_done == p->seeds_total ? "\n" : "");
	return true;
}

static bool show_fit_progress(void *userdata, const char *stage, double fraction)
{
	(void)userdata;
	fprintf(stderr, "\rtractd: fitting %-8s %3d%%%s", stage, (int)(100.0 * fraction),
		fraction >= 1.0 ? "\n" : "");
	return true;
}

/* The first run of a configuration compiles for seconds (lavapipe: longer,
 * in the first submits too): said at info so that it is not taken for a hang. */
static void say_compiling(void *userdata, const char *device_name)
{
	const struct progress_view *view = userdata;

	if (view->pipeline_cache)
		log_info("compiling the GPU kernels for %s (first run of this configuration; "
			 "cached beside %s)...", device_name, view->pipeline_cache);
	else
		log_info("compiling the GPU kernels for %s (no cache: --pipeline-cache none)...",
			 device_name);
}

static void enable_progress(struct cli *cli)
{
	cli->progress = (struct progress_view){ .terminal = isatty(STDERR_FILENO), .shown = -1,
						.pipeline_cache = cli->pipeline_cache };
	cli->engine.compiling = say_compiling;
	cli->engine.progress_userdata = &cli->progress;
	if (cli->progress.terminal ? log_get_level() < LOG_LEVEL_INFO :
				     log_get_level() < LOG_LEVEL_DEBUG)
		return;
	cli->engine.progress = show_progress;
	if (cli->progress.terminal)
		cli->fit.progress = show_fit_progress;
}

/* Why the streamlines stopped, as tckgen's "Termination reason
 * probabilities", on one line: "stop reasons of 32 streamline ends: ...,
 * left the image 32 (100.0%), ...; 0 seed(s) without an initial direction".
 * Unknown reasons, a kernel fault, and the anatomical ones (stopping act and
 * cmc, regions) only when there were some. */
static void log_stop_reasons(const struct engine_stats *s)
{
	char line[512];
	uint64_t ends = engine_stop_ends(s);
	size_t o = 0;

	for (int k = 0; k < ENGINE_STOP_REASONS && o < sizeof(line); k++) {
		uint64_t n = s->stop_reasons[k];
		bool only_when_some = k == ENGINE_STOP_UNKNOWN || k == ENGINE_STOP_INCLUDE ||
				      k == ENGINE_STOP_EXCLUDE || k == ENGINE_STOP_EXCLUDE_REGION;
		if (only_when_some && n == 0)
			continue;
		o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%s %llu (%.1f%%)", o ? ", " : "",
				      engine_stop_words((enum engine_stop)k), (unsigned long long)n,
				      ends ? 100.0 * (double)n / (double)ends : 0.0);
	}
	log_info("stop reasons of %llu streamline ends: %s; %llu seed(s) without an initial "
		 "direction", (unsigned long long)ends, line,
		 (unsigned long long)s->seeds_without_direction);
}

/* The kernels' time on the devices' clocks, beside "kernels" (the host's
 * wait for them): the gap is submits, waits and the host's work between. */
static void log_device_seconds(const struct engine_stats *s)
{
	if (s->device_seconds[ENGINE_KERNEL_TRACK] < 0.0)
		return;
	log_info("on the device: init %.3f s, track %.3f s, compact %.3f s",
		 s->device_seconds[ENGINE_KERNEL_INIT], s->device_seconds[ENGINE_KERNEL_TRACK],
		 s->device_seconds[ENGINE_KERNEL_COMPACT]);
}

static void log_summary(const struct engine_stats *s, const char *device, size_t n_devices,
			const char *path)
{
	double total = s->load_seconds + s->upload_seconds + s->compile_seconds + s->track_seconds +
		       s->encode_seconds + s->write_seconds;

	log_info("%llu streamlines (%llu points) from %llu seeds in %.2f s on %s%s -> %s",
		 (unsigned long long)s->streamlines, (unsigned long long)s->points,
		 (unsigned long long)s->seeds, total, device,
		 n_devices > 1 ? " and other devices" : "", path);
	log_info("phases: load %.3f s, upload %.3f s, compile %.3f s, track %.3f s (kernels %.3f s), "
		 "encode %.3f s, write %.3f s; %llu chunk(s), %llu batch(es)", s->load_seconds,
		 s->upload_seconds, s->compile_seconds, s->track_seconds, s->kernel_seconds,
		 s->encode_seconds, s->write_seconds,
		 (unsigned long long)s->chunks, (unsigned long long)s->batches);
	log_device_seconds(s);
	log_stop_reasons(s);
	if (s->has_regions)
		log_info("regions rejected %llu streamline(s) that entered an exclude region and "
			 "%llu that missed an include region",
			 (unsigned long long)s->rejected_exclude_region,
			 (unsigned long long)s->rejected_include_missing);
}

/* Everything a CLI job holds, released in one place; also the runner's
 * source and output (fresh inputs, devices opened for this job). */
struct cli_job {
	struct cli *cli;
	struct jobspec spec;
	struct inputs *inputs;
	struct engine_device devices[GPU_MAX_DEVICES];
	struct resident *residents[GPU_MAX_DEVICES];   /* devices[i].resident */
	size_t n_devices;         /* opened */
	struct device_open opening;   /* the devices, opened while the inputs load */
	double load_started;
	const char *path;         /* of the tractogram: -o, or the job's output.path */
	struct output_file out;
};

/* The runner's device_done: this job's inputs on the device, and the run's
 * work buffers it kept as spares, go while the writer finishes the file
 * (0.2 s of freeing on an H100 for the HCP-sized ODF); the device itself
 * closes in cli_job_free. */
static void release_device_inputs(void *userdata, size_t device)
{
	struct cli_job *j = userdata;
	struct gpu_ctx *gpu = j->devices[device].gpu;
	double t0 = timing_now();

	resident_free(gpu, j->residents[device]);
	j->residents[device] = NULL;
	j->devices[device].resident = NULL;
	gpu_drop_spares(gpu);
	log_debug("device %zu: its inputs and spare buffers freed in %.3f s once it tracked "
		  "no more", device, timing_now() - t0);
}

static void cli_job_free(struct cli_job *j)
{
	double t0 = timing_now(), t1, t2;

	device_open_cancel(&j->opening);
	/* One after the other: NVIDIA's driver frees two devices' memory no
	 * faster on two threads (0.88 s for two H100s either way). */
	for (size_t i = 0; i < j->n_devices; i++) {
		resident_free(j->devices[i].gpu, j->residents[i]);
		gpu_close(j->devices[i].gpu);
	}
	t1 = timing_now();
	inputs_free(j->inputs);
	jobspec_free(&j->spec);
	t2 = timing_now();
	log_debug("inputs and devices released in %.3f s (the devices %.3f s, the inputs %.3f s)",
		  t2 - t0, t1 - t0, t2 - t1);
}

/* Takes the devices of --device (or the best one), opened while the inputs
 * loaded, and uploads the inputs to all of them at once. */
static int open_devices(struct cli *cli, struct cli_job *j, struct errbuf *err)
{
	struct resident_upload up = { .odf_storage = j->spec.odf_storage,
				      .memory_budget = cli->engine.memory_budget, .fit = &cli->fit,
				      .odf_stream = inputs_odf_stream(j->inputs) };
	struct gpu_ctx *gpus[GPU_MAX_DEVICES];
	double t0 = timing_now(), took;
	int r = device_open_finish(&j->opening, gpus, &j->n_devices, &took, err);

	log_debug("%zu device(s) opened in %.3f s while the inputs loaded (waited %.3f s for "
		  "them)", j->n_devices, took, timing_now() - t0);

	for (size_t i = 0; i < j->n_devices; i++)
		j->devices[i].gpu = gpus[i];
	if (r == 0)
		r = resident_new_all(gpus, j->n_devices, j->inputs, &up, j->residents, err);
	for (size_t i = 0; r == 0 && i < j->n_devices; i++)
		j->devices[i].resident = j->residents[i];
	return r;
}

/* Which model order was fitted and why, for a dwi job. */
static void log_fit(const struct inputs *in)
{
	const struct fit_result *f = inputs_fit(in);
	char what[300];

	if (f && fit_describe(f, what, sizeof(what)))
		log_info("%s", what);
}

/* How a dwi job's gradients were read; a warning where the job left the
 * bvecs convention open and it matters. */
static void log_gradients(const struct inputs *in)
{
	char what[400];
	bool warn;

	if (!inputs_describe_gradients(in, what, sizeof(what), &warn))
		return;
	if (warn)
		log_warn("%s", what);
	else
		log_info("%s", what);
}

/* The runner's source, reading fresh, while another thread opens the
 * devices: bad data still fails first (the devices' errors wait for the
 * upload). */
static int load_inputs(void *userdata, const struct jobspec *spec, struct inputs **inputs,
		       struct engine_stats *timing, struct errbuf *err)
{
	struct cli_job *j = userdata;
	int r;

	j->load_started = timing_now();
	j->cli->gpu.pipeline_cache_path = j->cli->pipeline_cache;
	device_open_start(&j->opening, &j->cli->gpu, j->cli->devices, j->cli->n_devices);
	r = inputs_load_streamed(spec, &j->cli->fit, &j->inputs, err);
	if (r == 0) {
		log_gradients(j->inputs);
		log_fit(j->inputs);
		/* A GPU takes longer to open than the inputs to load. */
		resident_prepare(j->inputs);
	}
	*inputs = j->inputs;
	timing->load_seconds = timing_now() - j->load_started;
	return r;
}

/* Then the devices and the uploads. The load time runs until here, so that
 * it counts the seeds too; an ODF read while it is uploaded counts in the
 * upload time. */
static int upload_inputs(void *userdata, const struct jobspec *spec, const struct inputs *inputs,
			 struct engine_device devs[GPU_MAX_DEVICES], size_t *n_devs,
			 struct engine_stats *timing, struct errbuf *err)
{
	struct cli_job *j = userdata;
	double t0 = timing_now();
	int r;

	(void)spec;
	(void)inputs;
	timing->load_seconds = t0 - j->load_started;
	r = open_devices(j->cli, j, err);
	timing->upload_seconds = timing_now() - t0;
	for (size_t i = 0; r == 0 && i < j->n_devices; i++)
		devs[i] = j->devices[i];
	*n_devs = r == 0 ? j->n_devices : 0;
	return r;
}

static int open_output(void *userdata, const struct jobspec *spec, FILE **tracks, FILE **seeds,
		       struct errbuf *err)
{
	struct cli_job *j = userdata;
	int r = output_open(&j->out, j->path);

	if (r < 0)
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, r, "output.path", "cannot create %s: %s",
				       j->path, strerror(-r));
	*tracks = j->out.f;
	r = seeds_open(&j->out, spec, err);
	*seeds = j->out.seeds;
	return r;
}

/* Runs the job document text (relative paths from base_dir; NULL: the
 * current directory) into out_path, or the job's output.path for NULL. */
static int run_job_text(struct cli *cli, const char *text, size_t len, const char *base_dir,
			const char *out_path)
{
	struct cli_job j = { .cli = cli };
	struct runner_job run = {
		.spec = &j.spec,
		.source = { .load = load_inputs, .upload = upload_inputs,
			    .device_done = release_device_inputs, .userdata = &j },
		.output = { open_output, &j },
	};
	struct errbuf err = { 0 };
	struct engine_stats stats = { 0 };
	const char *path;
	int r, code = EXIT_OK;

	r = jobspec_parse(text, len, base_dir, &j.spec, &err);
	if (r == 0 && cli->shard)
		r = jobspec_set_shard(&j.spec, cli->shard, &err);
	if (r < 0) {
		jobspec_free(&j.spec);
		report(&err);
		return exit_code_for(r, &err);
	}
	path = out_path ? out_path : j.spec.output_path;
	if (!path) {
		jobspec_free(&j.spec);
		return usage_error("%s", "no output: give -o FILE or output.path in the job");
	}
	j.path = path;
	enable_progress(cli);
	run.engine = cli->engine;
	r = runner_run(&run, &stats, &err);
	if (r < 0) {
		report(&err);
		code = exit_code_for(r, &err);
	}
	/* An output that could not be opened has nothing to close. */
	r = j.out.f ? output_close(&j.out, code == EXIT_OK) : 0;
	if (r < 0 && code == EXIT_OK) {
		fprintf(stderr, "tractd: error: output.path: cannot write %s: %s\n", path, strerror(-r));
		code = EXIT_RUNTIME;
	}
	if (code == EXIT_OK) {
		log_summary(&stats, gpu_get_limits(j.devices[0].gpu)->device_name, j.n_devices, path);
		if (cli->stats_json &&
		    write_stats_json(cli->stats_json, &stats, j.devices, j.n_devices,
				     &j.spec.shard) < 0) {
			fprintf(stderr, "tractd: error: cannot write %s\n", cli->stats_json);
			code = EXIT_RUNTIME;
		}
	}
	cli_job_free(&j);
	return code;
}

/* -o's extension (.trk, .tck, .trx) sets output.format where the job names
 * none, in *text; naming another one is a usage error. A document jobspec
 * cannot read is left for it to name the fault. */
static int format_from_extension(const char *out_path, char **text, size_t *len)
{
	const char *wanted = job_doc_format_of(out_path), *named = NULL;
	char message[PATH_MAX + 128];
	json_t *doc;
	char *dumped = NULL;
	int r;

	if (!wanted)
		return EXIT_OK;
	doc = json_loadb(*text, *len, JSON_REJECT_DUPLICATES, NULL);
	if (!doc)
		return EXIT_OK;
	r = job_doc_set_format(doc, wanted, &named);
	if (r == -EEXIST)
		snprintf(message, sizeof(message), "-o %s asks for %s by its extension, but the "
			 "job's output.format is %s", out_path, wanted, named);
	if (r == 1)
		dumped = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (r == -EEXIST)
		return usage_error("%s", message);
	if (r == -ENOMEM || (r == 1 && !dumped)) {
		fprintf(stderr, "tractd: error: out of memory\n");
		return EXIT_RUNTIME;
	}
	if (dumped) {
		free(*text);
		*text = dumped;
		*len = strlen(dumped);
	}
	return EXIT_OK;
}

static int run_job(struct cli *cli, const char *job_path)
{
	struct errbuf err = { 0 };
	char *text = NULL, *base_dir = NULL;
	size_t len = 0;
	int code, r = jobspec_read(job_path, &text, &len, &base_dir, &err);

	if (r < 0) {
		report(&err);
		return exit_code_for(r, &err);
	}
	code = cli->output ? format_from_extension(cli->output, &text, &len) : EXIT_OK;
	if (code == EXIT_OK)
		code = run_job_text(cli, text, len, base_dir, cli->output);
	free(text);
	free(base_dir);
	return code;
}

/* Prints the job after jobspec has read it well, so that a printed job
 * runs. */
static int print_job(const char *text)
{
	struct jobspec spec;
	struct errbuf err = { 0 };
	int r = jobspec_parse(text, strlen(text), NULL, &spec, &err);

	jobspec_free(&spec);
	if (r < 0) {
		report(&err);
		return exit_code_for(r, &err);
	}
	printf("%s\n", text);
	return fflush(stdout) == 0 ? EXIT_OK : EXIT_RUNTIME;
}

static int run_track(struct cli *cli, const char *dwi, const char *output)
{
	struct job_doc_error err = { 0 };
	int code, r;
	json_t *doc;
	char *text;

	if (cli->output)
		return usage_error("%s", "track writes its second argument, OUTPUT: no -o");
	r = track_job_compose(&cli->track, dwi, output, &doc, &err);
	if (r == 0 && cli->shard && (r = job_doc_set_text(doc, "seeds.shard", cli->shard, &err)) < 0)
		json_decref(doc);
	if (r < 0)
		return job_doc_exit(r, &err);
	text = json_dumps(doc, TRACK_JOB_DUMP_FLAGS);
	json_decref(doc);
	if (!text) {
		fprintf(stderr, "tractd: error: out of memory\n");
		return EXIT_RUNTIME;
	}
	code = cli->track.print_job ? print_job(text) :
				      run_job_text(cli, text, strlen(text), NULL, output);
	free(text);
	return code;
}

static int save_map(const char *dir, const char *name, const struct volume *v, struct errbuf *err)
{
	char path[PATH_MAX];

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return errbuf_set_kind(err, ERR_KIND_OUTPUT, -ENAMETOOLONG, "output",
				       "path too long: %s/%s", dir, name);
	return volume_save(path, v, err);
}

static int save_response(const char *dir, const struct fit_result *f, struct errbuf *err)
{
	char path[PATH_MAX];
	const struct csd_response *r = &f->response;
	json_t *doc = json_pack("{s:[f,f,f], s:f, s:I, s:I, s:I, s:i, s:I, s:b, s:s, s:s}",
				"evals", r->evals[0], r->evals[1], r->evals[2], "s0", r->s0,
				"response_voxels", (json_int_t)r->voxels,
				"fitted_voxels", (json_int_t)f->fitted_voxels,
				"failed_voxels", (json_int_t)f->failed_voxels,
				"sh_order", sh_order_from_ncoef(f->sh.dim[3]),
				"directions", (json_int_t)f->directions,
				"super_resolved", (int)(f->directions < (size_t)f->sh.dim[3]),
				"sh_basis", sh_basis_name(SH_DESCOTEAUX07_LEGACY), "sh_frame", "voxel");
	int r_dump;

	if (!doc)
		return errbuf_set(err, -ENOMEM, "", "out of memory");
	snprintf(path, sizeof(path), "%s/response.json", dir);
	r_dump = json_dump_file(doc, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
	json_decref(doc);
	return r_dump == 0 ? 0 : errbuf_set_kind(err, ERR_KIND_OUTPUT, -EIO, "output",
						 "cannot write %s", path);
}

/* Writes the maps of f (NULL: none) and odf (NULL: none) into dir. */
static int save_fit(const char *dir, const struct fit_result *f, const struct volume *odf,
		    struct errbuf *err)
{
	int r = 0;

	if (f) {
		r = save_map(dir, "fa.nii.gz", &f->fa, err);
		if (r == 0)
			r = save_map(dir, "md.nii.gz", &f->md, err);
		if (r == 0)
			r = save_map(dir, "sh.nii.gz", &f->sh, err);
		if (r == 0)
			r = save_response(dir, f, err);
		if (r == 0)
			log_info("response: evals %.3g %.3g %.3g mm^2/s, S0 %.4g (%zu voxels); CSD in "
				 "%zu voxels", f->response.evals[0], f->response.evals[1],
				 f->response.evals[2], f->response.s0, f->response.voxels,
				 f->fitted_voxels);
	}
	if (r == 0 && odf)
		r = save_map(dir, "odf.nii.gz", odf, err);
	return r;
}

/* Only what will be written is computed: without --odf, a dwi job is
 * fitted but its ODF not sampled on the sphere. */
static int fit_and_save(const struct cli *cli, const struct jobspec *spec, double *fitted_at,
			struct errbuf *err)
{
	struct inputs *in = NULL;
	struct fit_result fit = { 0 };
	int r;

	if (cli->write_odf) {
		struct volume odf = { 0 };
		r = inputs_load(spec, &cli->fit, &in, err);
		if (r == 0)
			r = inputs_odf(in, &cli->fit, &odf, err);
		*fitted_at = timing_now();
		if (r == 0)
			r = save_fit(cli->output, inputs_fit(in), &odf, err);
		volume_free(&odf);
		inputs_free(in);
		return r;
	}
	r = inputs_fit_dwi(spec, &cli->fit, &fit, err);
	*fitted_at = timing_now();
	if (r == 0)
		r = save_fit(cli->output, &fit, NULL, err);
	fit_result_free(&fit);
	return r;
}

static int run_fit(struct cli *cli, const char *job_path)
{
	struct jobspec spec;
	struct errbuf err = { 0 };
	double t0 = timing_now(), t_fitted = t0;
	int r;

	if (!cli->output)
		return usage_error("%s", "fit needs -o DIR");
	r = jobspec_load_file(job_path, &spec, &err);
	if (r == 0 && spec.input_kind != JOBSPEC_INPUT_DWI && !cli->write_odf)
		r = errbuf_set(&err, -EINVAL, "inputs", "has no dwi to fit; with an odf or sh "
			       "input only --odf has something to write");
	if (r == 0 && spec.direction_getter == JOBSPEC_DG_BOOT)
		r = errbuf_set(&err, -EINVAL, "direction_getter", "\"boot\" fits its model anew "
			       "at every step of tracking: there is no volume to write (fit a "
			       "prob job for CSD maps)");
	if (r == 0 && mkdir(cli->output, 0777) < 0 && errno != EEXIST)
		r = errbuf_set_kind(&err, ERR_KIND_OUTPUT, -errno, "output",
				    "cannot create %s: %s", cli->output, strerror(errno));
	enable_progress(cli);
	if (r == 0)
		r = fit_and_save(cli, &spec, &t_fitted, &err);
	/* The fit stages log their own times; what the load took is the rest. */
	if (r == 0)
		log_debug("fit inputs: loaded and fitted in %.3f s; results written in %.3f s",
			  t_fitted - t0, timing_now() - t_fitted);
	jobspec_free(&spec);
	if (r < 0) {
		report(&err);
		return exit_code_for(r, &err);
	}
	log_info("fit written to %s in %.2f s", cli->output, timing_now() - t0);
	return EXIT_OK;
}

static int run_phantom(struct cli *cli, const char *outdir)
{
	struct errbuf err = { 0 };
	int r = phantom_generate(&cli->phantom, outdir, &err);

	if (r < 0) {
		report(&err);
		return exit_code_for(r, &err);
	}
	log_info("phantom written to %s; track it with: tractd run %s/job.json", outdir, outdir);
	return EXIT_OK;
}

static int list_devices(void)
{
	struct errbuf err = { 0 };

	if (gpu_list_devices(stdout, &err) < 0) {
		report(&err);
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

/* Removes a file or an emptied directory of the warm-up's scratch tree. */
static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	if (remove(path) < 0)
		log_warn("cannot remove %s: %s", path, strerror(errno));
	return 0;
}

/* The phantom's jobs of each getter the warm-up compiles for, on the job's
 * default sphere: the kernels are specialised by sphere, getter and storage. */
static int warm_up_in(struct cli *cli, const char *dir)
{
	static const char *const jobs[] = { "job.json", "job_ptt.json" };
	struct phantom_params p = cli->phantom;
	struct errbuf err = { 0 };
	char job[PATH_MAX + 16], out[PATH_MAX + 16];   /* dir + a file name of the list */
	const char *given_output;
	int code = EXIT_OK;

	p.dim[0] = p.dim[1] = 24;
	p.dim[2] = 16;
	p.sphere = "repulsion724";
	p.seed_count = 32;
	p.write_dwi = 0;
	p.compress = 0;   /* a streamed ODF: a GPU compiles its transpose too (odf_transpose.h) */
	if (phantom_generate(&p, dir, &err) < 0) {
		report(&err);
		return exit_code_for(-EIO, &err);
	}
	snprintf(out, sizeof(out), "%s/warmup.trk", dir);
	given_output = cli->output;
	cli->output = out;
	for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]) && code == EXIT_OK; i++) {
		snprintf(job, sizeof(job), "%s/%s", dir, jobs[i]);
		code = run_job(cli, job);
	}
	/* out is this frame's: cli must not keep it. */
	cli->output = given_output;
	return code;
}

/* tractd warmup: fills the caches, in a scratch directory it removes. */
static int run_warmup(struct cli *cli)
{
	const char *tmp = getenv("TMPDIR");
	char dir[PATH_MAX];
	double t0 = timing_now();
	int code;

	if (snprintf(dir, sizeof(dir), "%s/tractd-warmup-XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
	    (int)sizeof(dir))
		return usage_error("TMPDIR too long: %s", tmp);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "tractd: error: cannot create %s: %s\n", dir, strerror(errno));
		return EXIT_RUNTIME;
	}
	code = warm_up_in(cli, dir);
	nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
	if (code == EXIT_OK)
		log_info("GPU kernels of the default configurations ready in %.1f s (%s)",
			 timing_now() - t0, cli->pipeline_cache ? cli->pipeline_cache :
			 "no cache: --pipeline-cache none");
	return code;
}

#define COMMAND_NAMES "serve, run, track, fit, merge, phantom, devices or warmup"

static int run_merge(struct cli *cli, char *const *args, int n)
{
	struct errbuf err = { 0 };
	int r;

	if (n < 2)
		return usage_error("%s", "'merge' takes OUT and at least one PART (see --help)");
	r = merge_job_run(args[0], (const char *const *)(args + 1), (size_t)n - 1, &cli->merge,
			  &err);
	if (r < 0) {
		report(&err);
		return exit_code_for(r, &err);
	}
	return EXIT_OK;
}

/* How many operands command takes; -1: no such command. */
static int operands_of(const char *command)
{
	static const char *const one[] = { "run", "fit", "phantom" };

	if (strcmp(command, "track") == 0)
		return 2;
	for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
		if (strcmp(command, one[i]) == 0)
			return 1;
	return strcmp(command, "devices") == 0 || strcmp(command, "warmup") == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	static const char *const operand_errors[] = {
		"'%s' takes no arguments",
		"'%s' takes exactly one argument (see --help)",
		"'%s' takes DWI and OUTPUT (see --help)",
	};
	struct cli cli = { .gpu = { .device_index = -1 } };
	const char *command;
	int opt, operands;

	/* The daemon has options of its own. */
	if (argc > 1 && strcmp(argv[1], "serve") == 0)
		return serve_main(argc - 1, argv + 1);
	phantom_default_params(&cli.phantom);
	track_request_init(&cli.track);
	build_long_options();
	set_default_cache(&cli);
	/* GNU getopt permutes argv: options may come before or after the command. */
	while ((opt = getopt_long(argc, argv, "o:d:qvhV", long_options, NULL)) != -1) {
		int code = parse_option(&cli, opt, optarg);
		if (code >= 0)
			return code;
	}
	if (cli.help)
		return print_help(optind < argc ? argv[optind] : NULL);
	if (optind >= argc)
		return usage_error("%s", "missing command (" COMMAND_NAMES ")");
	command = argv[optind++];
	if (strcmp(command, "merge") == 0)
		return run_merge(&cli, argv + optind, argc - optind);
	operands = operands_of(command);
	if (operands < 0)
		return usage_error("unknown command '%s' (" COMMAND_NAMES ")", command);
	if (argc - optind != operands)
		return usage_error(operand_errors[operands], command);
	if (strcmp(command, "devices") == 0)
		return list_devices();
	if (strcmp(command, "warmup") == 0)
		return run_warmup(&cli);
	if (strcmp(command, "run") == 0)
		return run_job(&cli, argv[optind]);
	if (strcmp(command, "track") == 0)
		return run_track(&cli, argv[optind], argv[optind + 1]);
	if (strcmp(command, "fit") == 0)
		return run_fit(&cli, argv[optind]);
	return run_phantom(&cli, argv[optind]);
}
