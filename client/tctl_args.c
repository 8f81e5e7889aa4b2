/* SPDX-License-Identifier: MIT */
/*
 * tctl_args: the command line of tractctl. One option table for the whole
 * tool (track DWI OUTPUT's part and its help lines are common/track_opts.c's,
 * which `tractd track` shares), the help texts (the tool's and each
 * command's), and every usage error: after args_parse, a command has the
 * operand it needs, only options that apply to it, and the address of the
 * daemon.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tctl.h"
#include "tctl_args.h"

#define SYSTEM_SOCKET "/run/tractd/tractd.sock"
#define DEFAULT_CONNECT_TIMEOUT_MS 10000L
#define MAX_CONNECT_TIMEOUT_S 86400.0

static const char tool_help[] =
"Usage: tractctl [OPTIONS] COMMAND [ARGS]\n"
"\n"
"Client of tractd, the resident GPU tractography daemon. Sends it tracking\n"
"jobs, follows them and fetches their tractograms (.trk, .tck or .trx). Job files\n"
"are the ones `tractd run` takes (proto/job.schema.json); their input files\n"
"are uploaded only when the daemon does not have them yet.\n"
"\n"
"Commands:\n"
"  track JOB.json      run a job on the daemon and write its tractogram\n"
"  track DWI OUTPUT    the same with the job composed from options, as\n"
"                      `tractd track` composes it\n"
"  submit JOB.json     upload the inputs, queue the job and print its id\n"
"  status ID           show a job\n"
"  list                list your jobs (an admin's: everyone's), newest first\n"
"  wait ID             wait until a job ends; the exit status tells how\n"
"  fetch ID            download a job's tractogram (also while it runs;\n"
"                      --wait: once it has ended)\n"
"  cancel ID           cancel a queued or running job\n"
"  delete ID           delete a job and its result (a running job is cancelled)\n"
"  volumes             list your uploaded volumes and your quota;\n"
"                      `volumes delete ID...` forgets them\n"
"  device              show the daemon's GPU, volume cache and queue\n"
"  help [COMMAND]      this text, or a command's (also: COMMAND --help)\n"
"\n"
"Options (before or after the command):\n"
"      --socket PATH     the daemon's Unix socket; default: $TRACTD_SOCKET, else\n"
"                        $XDG_RUNTIME_DIR/tractd.sock when it exists, else\n"
"                        " SYSTEM_SOCKET "\n"
"      --server URL      use TCP instead: URL is http://HOST:PORT (https:// for\n"
"                        a daemon behind a TLS proxy)\n"
"      --token TOKEN     the bearer token the daemon's tokens_file gave you, for\n"
"                        --server (TCP needs one; on the Unix socket the daemon\n"
"                        knows you by your user id). Other users can see command\n"
"                        lines: prefer --token-file or $TRACTD_TOKEN\n"
"      --token-file FILE read the token from the first line of FILE\n"
"      --timeout SECONDS give up connecting after SECONDS (default 10); jobs\n"
"                        themselves are waited for without a limit\n"
"      --json            print the server's JSON documents on standard output\n"
"                        instead of text\n"
"  -q, --quiet           errors only: no progress, no summaries\n"
"  -h, --help            this text; with a command, the command's help\n"
"  -V, --version         version\n"
"\n"
"Output: results (ids, tables, JSON, a tractogram sent to '-') go to standard\n"
"output; progress, summaries and errors go to standard error. Progress is\n"
"drawn only when standard error is a terminal: the seeds done and, once it can\n"
"be estimated, the time left; while a job fits its model, the stage\n"
"(e.g. \"fitting CSD 40 %\").\n"
"\n"
"Formats: -o FILE's extension (.trk, .tck or .trx, in any case) picks the\n"
"tractogram's format where the job (output.format) or --format does not;\n"
"where they name another, that is a usage error. Another or no extension\n"
"leaves the format to the job (TRK by default).\n"
"\n"
"Exit status:\n"
"  0    success\n"
"  1    the job failed (on the device, the disk...) or was cancelled\n"
"  2    usage error\n"
"  3    the server rejected the request (HTTP 4xx): an invalid job or input,\n"
"       an unknown job (or another user's), a full queue, no or a wrong\n"
"       token over TCP...; also a job that failed on its request after it\n"
"       was queued (an input the daemon could read only when it ran, a limit)\n"
"  4    server error (HTTP 5xx) or an answer tractctl cannot use\n"
"  5    cannot connect to the daemon\n"
"  6    local problem: a job file that cannot be read or is not JSON, an\n"
"       input that cannot be read, an output that cannot be written\n"
"  130  interrupted (Ctrl-C); 143 SIGTERM, 129 SIGHUP\n"
"Errors are printed as 'tractctl: error: FIELD: REASON', FIELD naming the part\n"
"of the job at fault when there is one, e.g.\n"
"  tractctl: error: tracking.max_angle: must be in (0, 90] degrees, got 120\n"
"\n"
"Environment:\n"
"  TRACTD_SOCKET     default for --socket\n"
"  TRACTD_TOKEN      the token for --server when neither --token nor\n"
"                    --token-file is given\n"
"  XDG_RUNTIME_DIR   where the socket of a daemon started by `tractd serve` is\n"
"\n"
"Examples:\n"
"  tractd phantom /tmp/ph && tractctl track /tmp/ph/job.json -o /tmp/ph/tracks.trk\n"
"  tractctl track /tmp/ph/dwi.nii.gz /tmp/ph/tracks.tck --mask /tmp/ph/mask.nii.gz\n"
"  id=$(tractctl submit job.json) && tractctl wait \"$id\" && tractctl fetch \"$id\"\n"
"  TRACTD_TOKEN=$(cat ~/.tractd-token) tractctl --server http://gpu1:7878 device\n";

static const char track_help[] =
"Usage: tractctl track JOB.json [-o FILE]\n"
"       tractctl track DWI OUTPUT [OPTIONS]\n"
"\n"
"Runs JOB.json on the daemon and writes its tractogram: `tractd run` on the\n"
"daemon's warm GPU. The job file is the same as for `tractd run`; relative\n"
"paths in it are relative to its directory ('-': the job from standard input,\n"
"its paths relative to the current directory).\n"
"\n"
"A first argument that does not end in .json and is not '-' is a DWI image\n"
"(.nii, .nii.gz): the job is then composed from the options below, from the\n"
"table `tractd track DWI OUTPUT` takes them from, into the job it composes:\n"
"the gradients found beside DWI (X.bval and X.bvec for X.nii.gz or X.nii,\n"
"else bvals and bvecs in its directory), OUTPUT's extension (.trk, .tck,\n"
".trx) picking the format, every path absolute. It runs as a job file does\n"
"and writes OUTPUT, which must not exist yet unless --force. --print-job\n"
"prints the job and contacts no daemon; unlike tractd's, it does not check\n"
"the job first (the daemon does when it is submitted).\n"
"\n"
"Every input file (each string member of \"inputs\" but sh_basis,\n"
"sh_frame and bvecs_convention, \"seeds.roi\", \"seeds.points_file\", the maps\n"
"of \"seeds.interface\" and of \"stopping\"; DWI bvals and bvecs included; .mif\n"
"images as NIfTI ones) is hashed\n"
"with SHA-256 and uploaded only when the daemon does not have it yet, then\n"
"named by its volume id; members that already are volume ids (\"sha256:...\")\n"
"are sent as they are. output.path is not sent: it is the default for -o.\n"
"The job is then queued and followed; on a terminal a progress line shows the\n"
"seeds done, the streamlines and the time elapsed. When the job is done its\n"
"tractogram is written to FILE.tmp and renamed to FILE; when anything fails\n"
"nothing is left behind.\n"
"\n"
"Ctrl-C (and SIGTERM, SIGHUP) cancels the job on the daemon before tractctl\n"
"exits; a second Ctrl-C exits at once.\n"
"\n"
"Options:\n"
"  -o, --output FILE   write the tractogram to FILE ('-': standard output);\n"
"                      default: the job's output.path. FILE's extension\n"
"                      (.trk, .tck, .trx) sets output.format when the job\n"
"                      has none; a job whose output.format differs is a\n"
"                      usage error (exit 2)\n"
"      --json          print the finished job (as `status --json` would) instead\n"
"                      of the summary; not with -o -\n"
"\n";

/* Then common/track_opts.c's lines, as `tractd track --help` prints them. */
static const char track_options_help[] =
"Options of track DWI OUTPUT (unset fields keep the defaults of a job without\n"
"them, README's tables):\n";

static const char track_help_end[] =
"\n"
"and the options of every command (tractctl --help).\n"
"\n"
"Exit status: 0 done; 1 the job failed or was cancelled; 2 FILE's extension\n"
"and output.format disagree, or track DWI OUTPUT's usage: OUTPUT exists\n"
"without --force, its extension is not .trk, .tck or .trx, no --mask or\n"
"--seed-roi; 3 the daemon refused the job, at once or when it ran (the error\n"
"names the field, and the input file as this job file names it; an option's\n"
"value is the daemon's to judge); 6 the job file or an input cannot be read,\n"
"no gradients were found beside DWI, or FILE cannot be written; 130\n"
"interrupted (the job is cancelled); others as in tractctl --help.\n"
"\n"
"Examples:\n"
"  tractctl track job.json -o tracks.tck    # a TCK, as tckgen writes\n"
"  tractctl track dwi.nii.gz tracks.tck --mask mask.nii.gz --seeds 10000\n";

static const char submit_help[] =
"Usage: tractctl submit JOB.json\n"
"\n"
"Uploads the inputs of JOB.json that the daemon does not have yet (as `track`\n"
"does), queues the job and prints its id; it does not wait. output.path is\n"
"ignored: get the tractogram with `tractctl fetch ID -o FILE`.\n"
"\n"
"With --json, prints the daemon's answer instead:\n"
"  {\"id\": \"j-...\", \"status\": \"queued\", \"location\": \"/v1/jobs/j-...\"}\n"
"\n"
"Exit status: 0 queued; 3 the daemon refused the job; 6 the job file or an\n"
"input cannot be read; others as in tractctl --help.\n"
"\n"
"Example:\n"
"  id=$(tractctl submit job.json) && tractctl wait \"$id\"\n";

static const char status_help[] =
"Usage: tractctl status ID\n"
"\n"
"Shows job ID: who submitted it, its state (queued, running, done, failed or\n"
"cancelled), when it was created, started and finished, its progress while it\n"
"runs (the stage while a DWI job fits its model, e.g. \"fitting CSD 40 %\"),\n"
"and its result (streamlines, points, size, phase timings) or error when it\n"
"ended. Only your own jobs are shown (an admin's: anyone's); another user's\n"
"job reads as no such job.\n"
"With --json, prints the job document of GET /v1/jobs/ID.\n"
"\n"
"Exit status: 0 shown, whatever the job's state (see `wait` for an exit\n"
"status by state); 3 no such job; others as in tractctl --help.\n";

static const char list_help[] =
"Usage: tractctl list\n"
"\n"
"Lists your jobs on the daemon (an admin's: every user's), newest first: id,\n"
"state, owner, creation time, and progress (or fitting stage), result or error. On the Unix\n"
"socket you are your user; over --server, the name of your token. With\n"
"--json, prints {\"jobs\": [JOB, ...]}.\n"
"\n"
"Exit status: 0 listed; others as in tractctl --help.\n";

static const char wait_help[] =
"Usage: tractctl wait ID\n"
"\n"
"Waits until job ID has ended, polling it twice a second; on a terminal a\n"
"progress line shows the seeds done, the streamlines and the time left (or the\n"
"stage while a DWI job fits its model). Prints a summary (or,\n"
"with --json, the final job document). Interrupting `wait` leaves the job\n"
"running.\n"
"\n"
"Exit status: 0 the job is done; 1 it failed or was cancelled (the error is\n"
"printed); 3 no such job; 130 interrupted; others as in tractctl --help.\n"
"\n"
"Example:\n"
"  tractctl wait j-5c2f9a0d1e7b4c36 && tractctl fetch j-5c2f9a0d1e7b4c36\n";

static const char fetch_help[] =
"Usage: tractctl fetch ID [--wait] [-o FILE] [--format trk|tck|trx]\n"
"\n"
"Downloads the tractogram of job ID. While the job runs, the daemon streams\n"
"what exists and follows the job until it ends, so fetch may be started right\n"
"after submit; with --wait, fetch first waits until the job has ended (as\n"
"`wait` does, with its progress line) and then downloads, so that any format\n"
"can be asked for. The file is written to FILE.tmp and renamed to FILE once the\n"
"job is done; it is removed when the job fails or is cancelled. Sent to\n"
"standard output (-o -), what has been written cannot be taken back: check\n"
"the exit status.\n"
"\n"
"Options:\n"
"  -o, --output FILE   write to FILE ('-': standard output); default: ID.trk,\n"
"                      ID.tck or ID.trx, after the job's output format\n"
"                      (or --format). FILE's extension (.trk, .tck, .trx)\n"
"                      asks for that format where --format is not given;\n"
"                      a --format that differs is a usage error (exit 2)\n"
"      --format FMT    trk, tck or trx: the daemon converts the finished\n"
"                      result (only a done job converts; its own format\n"
"                      streams while it runs)\n"
"      --wait          wait until the job has ended, then download\n"
"      --json          print the finished job's document; not with -o -\n"
"and the options of every command (tractctl --help).\n"
"\n"
"Exit status: 0 written; 1 the job failed or was cancelled; 2 FILE's extension\n"
"and --format disagree; 3 no such job, its result expired, or another format\n"
"asked for while the job runs (use --wait); 6 FILE cannot be written; others\n"
"as in tractctl --help.\n";

static const char cancel_help[] =
"Usage: tractctl cancel ID\n"
"\n"
"Cancels job ID when it is queued or running; a running job stops within one\n"
"chunk of seeds. A job that has already ended is left as it is (the daemon\n"
"would delete it and its result). With --json, prints the job document.\n"
"\n"
"Exit status: 0 cancelled, or already ended; 3 no such job; others as in\n"
"tractctl --help. To remove a job that has ended: tractctl delete ID.\n";

static const char delete_help[] =
"Usage: tractctl delete ID\n"
"\n"
"Deletes job ID and its result from the daemon. A queued or running job is\n"
"cancelled first (a running one stops within one chunk of seeds), then\n"
"deleted. With --json, prints {\"id\": ID, \"deleted\": true}.\n"
"\n"
"Exit status: 0 deleted; 3 no such job; others as in tractctl --help.\n";

static const char volumes_help[] =
"Usage: tractctl volumes\n"
"       tractctl volumes delete ID...\n"
"\n"
"Volumes are the input files that `track` and `submit` uploaded, named by\n"
"their content's SHA-256 (\"sha256:...\"); the daemon keeps them for later\n"
"jobs, within your quota (max_volume_bytes_per_user), and forgets those not\n"
"uploaded again for volume_ttl_seconds.\n"
"\n"
"`volumes` lists yours: id, kind (nifti, nifti-gz, mif, mif-gz, npy or text)\n"
"and size, then the bytes they take of your quota. With --json, prints the\n"
"document of GET /v1/volumes. `volumes delete ID...` forgets each of your\n"
"uploads ID (the file goes with its last uploader); a queued job naming one\n"
"fails when it starts. Every ID is tried, and the first failure sets the exit\n"
"status.\n"
"\n"
"Exit status: 0 listed, or all deleted; 3 no such volume (or not yours);\n"
"others as in tractctl --help.\n"
"\n"
"Example:\n"
"  # forget every upload\n"
"  tractctl --json volumes | jq -r '.volumes[].id' |\n"
"    xargs tractctl volumes delete\n";

static const char device_help[] =
"Usage: tractctl device\n"
"\n"
"Shows the daemon's GPU (name, type, subgroup size, memory, the largest\n"
"allocation and storage binding, the memory limit gpu_memory_limit and a\n"
"job's budget under it), its cache of volumes kept on the GPU\n"
"(budget, use, entries, hits, misses) and its queue (jobs queued, running).\n"
"With --json, prints the document of GET /v1/device.\n"
"\n"
"Exit status: 0 shown; others as in tractctl --help.\n";

struct command_spec {
	const char *name;
	const char *operand;   /* the one operand's name, NULL when the command takes none */
	bool takes_output;     /* -o */
	bool takes_format;     /* --format, --wait */
	const char *help;
};

static const struct command_spec commands[CMD_COUNT] = {
	[CMD_HELP] = { "help", NULL, false, false, tool_help },
	[CMD_TRACK] = { "track", "JOB.json", true, false, track_help },
	[CMD_SUBMIT] = { "submit", "JOB.json", false, false, submit_help },
	[CMD_STATUS] = { "status", "ID", false, false, status_help },
	[CMD_LIST] = { "list", NULL, false, false, list_help },
	[CMD_WAIT] = { "wait", "ID", false, false, wait_help },
	[CMD_FETCH] = { "fetch", "ID", true, true, fetch_help },
	[CMD_CANCEL] = { "cancel", "ID", false, false, cancel_help },
	[CMD_DELETE] = { "delete", "ID", false, false, delete_help },
	/* Operands of its own: none, or "delete ID..." (check_volumes_operands). */
	[CMD_VOLUMES] = { "volumes", NULL, false, false, volumes_help },
	[CMD_DEVICE] = { "device", NULL, false, false, device_help },
};

enum option_id {
	OPT_SOCKET = 256, OPT_SERVER, OPT_TOKEN, OPT_TOKEN_FILE, OPT_TIMEOUT, OPT_JSON, OPT_FORMAT,
	OPT_WAIT,
	OPT_TRACK,   /* + enum track_opt: track DWI OUTPUT's options (common/track_opts.h) */
};

/* The options but track DWI OUTPUT's, which track_opts adds. */
static const struct option own_options[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "server", required_argument, NULL, OPT_SERVER },
	{ "token", required_argument, NULL, OPT_TOKEN },
	{ "token-file", required_argument, NULL, OPT_TOKEN_FILE },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "format", required_argument, NULL, OPT_FORMAT },
	{ "wait", no_argument, NULL, OPT_WAIT },
	{ "output", required_argument, NULL, 'o' },
	{ "quiet", no_argument, NULL, 'q' },
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

/* What the option loop saw, before the command is known. */
struct seen {
	bool help;
	bool version;
	const char *socket_option;
	const char *token_option;
	const char *token_file;
};

int args_usage_error(enum tctl_command command, const char *message)
{
	fprintf(stderr, "tractctl: %s\n", message);
	if (command == CMD_HELP)
		fprintf(stderr, "Try 'tractctl --help'.\n");
	else
		fprintf(stderr, "Try 'tractctl help %s'.\n", commands[command].name);
	return TCTL_EXIT_USAGE;
}

/* Usage errors about one argument. */
static int bad_argument(const char *what, const char *arg)
{
	char message[512];

	snprintf(message, sizeof(message), "%s '%s'", what, arg);
	return args_usage_error(CMD_HELP, message);
}

static int print_help(enum tctl_command command)
{
	fputs(commands[command].help, stdout);
	if (command == CMD_TRACK) {
		fputs(track_options_help, stdout);
		track_opts_print_help(stdout);
		fputs(track_help_end, stdout);
	}
	return TCTL_EXIT_OK;
}

static int find_command(const char *name, enum tctl_command *ret)
{
	for (int i = 0; i < CMD_COUNT; i++) {
		if (strcmp(commands[i].name, name) == 0) {
			*ret = (enum tctl_command)i;
			return 0;
		}
	}
	return -ENOENT;
}

static int parse_timeout(const char *arg, long *ret_ms)
{
	char *end;
	double seconds;

	errno = 0;
	seconds = strtod(arg, &end);
	if (errno || end == arg || *end || !(seconds > 0.0) || seconds > MAX_CONNECT_TIMEOUT_S)
		return bad_argument("invalid --timeout (seconds, more than 0, at most 86400)", arg);
	/* libcurl takes milliseconds, where 0 would mean its own default. */
	*ret_ms = seconds < 0.001 ? 1 : (long)(seconds * 1000.0);
	return ARGS_RUN;
}

/* Takes http://HOST[:PORT] or https://, as libcurl reads it; a trailing
 * slash is harmless because the client strips it. */
static int check_server_url(const char *url)
{
	const char *rest;

	if (strncmp(url, "http://", 7) == 0)
		rest = url + 7;
	else if (strncmp(url, "https://", 8) == 0)
		rest = url + 8;
	else
		return bad_argument("invalid --server (expected http://HOST:PORT)", url);
	if (*rest == '\0' || *rest == '/')
		return bad_argument("invalid --server (no host in it)", url);
	return ARGS_RUN;
}

/* The formats the daemon writes and converts to (API.md). */
static int parse_format(const char *arg, const char **ret)
{
	if (strcmp(arg, "trk") != 0 && strcmp(arg, "tck") != 0 && strcmp(arg, "trx") != 0)
		return bad_argument("invalid --format (trk, tck or trx)", arg);
	*ret = arg;
	return ARGS_RUN;
}

/* Which command the options are for is known later: check_track_operands. */
static int parse_track_option(struct tctl_args *args, enum track_opt opt, const char *arg)
{
	struct job_doc_error err = { 0 };

	if (track_request_take(&args->track, opt, arg, &err) < 0)
		return args_usage_error(CMD_TRACK, err.message);
	return ARGS_RUN;
}

static int parse_option(struct tctl_args *args, struct seen *seen, int opt, const char *arg,
			const char *arg_text)
{
	switch (opt) {
	case OPT_SOCKET: seen->socket_option = arg; return ARGS_RUN;
	case OPT_SERVER: args->server_url = arg; return check_server_url(arg);
	case OPT_TOKEN: seen->token_option = arg; return ARGS_RUN;
	case OPT_TOKEN_FILE: seen->token_file = arg; return ARGS_RUN;
	case OPT_TIMEOUT: return parse_timeout(arg, &args->connect_timeout_ms);
	case OPT_JSON: args->json = true; return ARGS_RUN;
	case OPT_FORMAT: return parse_format(arg, &args->format);
	case OPT_WAIT: args->wait = true; return ARGS_RUN;
	case 'o': args->output = arg; return ARGS_RUN;
	case 'q': args->quiet = true; return ARGS_RUN;
	case 'h': seen->help = true; return ARGS_RUN;
	case 'V': seen->version = true; return ARGS_RUN;
	case ':': return bad_argument("missing argument to", arg_text);
	default:
		if (opt >= OPT_TRACK && opt < OPT_TRACK + TRACK_OPT_COUNT)
			return parse_track_option(args, (enum track_opt)(opt - OPT_TRACK), arg);
		return bad_argument("invalid option", arg_text);
	}
}

/* A daemon run by systemd listens on SYSTEM_SOCKET; one started by hand with
 * `tractd serve` on $XDG_RUNTIME_DIR/tractd.sock. Users have XDG_RUNTIME_DIR
 * set in every login session, so the per-user socket is taken only when it
 * exists: otherwise the system daemon could never be found by default. */
static const char *default_socket(struct tctl_args *args)
{
	const char *env = getenv("TRACTD_SOCKET"), *runtime_dir = getenv("XDG_RUNTIME_DIR");
	int n;

	if (env && *env)
		return env;
	if (!runtime_dir || !*runtime_dir)
		return SYSTEM_SOCKET;
	n = snprintf(args->socket_buf, sizeof(args->socket_buf), "%s/tractd.sock", runtime_dir);
	if (n < 0 || (size_t)n >= sizeof(args->socket_buf) || access(args->socket_buf, F_OK) < 0)
		return SYSTEM_SOCKET;
	return args->socket_buf;
}

/* The first line of path, without its blanks: the token. Exit code. */
static int read_token_file(struct tctl_args *args, const char *path)
{
	FILE *f = fopen(path, "re");
	char *t;
	size_t n;

	if (!f) {
		fprintf(stderr, "tractctl: error: --token-file: cannot read %s: %s\n", path,
			strerror(errno));
		return TCTL_EXIT_LOCAL;
	}
	if (!fgets(args->token_buf, sizeof(args->token_buf), f))
		args->token_buf[0] = '\0';
	fclose(f);
	t = args->token_buf + strspn(args->token_buf, " \t");
	n = strcspn(t, " \t\r\n");
	t[n] = '\0';
	if (n == 0) {
		fprintf(stderr, "tractctl: error: --token-file: no token on the first line of %s\n",
			path);
		return TCTL_EXIT_LOCAL;
	}
	args->token = t;
	return ARGS_RUN;
}

/* --token, else --token-file, else $TRACTD_TOKEN; used with --server only. */
static int choose_token(struct tctl_args *args, const struct seen *seen)
{
	const char *env = getenv("TRACTD_TOKEN");

	if (seen->token_option && seen->token_file)
		return args_usage_error(CMD_HELP, "--token and --token-file exclude each other");
	if (seen->token_option && !*seen->token_option)
		return args_usage_error(CMD_HELP, "empty --token");
	if ((seen->token_option || seen->token_file) && !args->server_url)
		return args_usage_error(CMD_HELP, "--token and --token-file go with --server: on the "
					"Unix socket the daemon knows you by your user id");
	if (!args->server_url)
		return ARGS_RUN;
	if (seen->token_option)
		args->token = seen->token_option;
	else if (seen->token_file)
		return read_token_file(args, seen->token_file);
	else if (env && *env)
		args->token = env;
	return ARGS_RUN;
}

static int check_address(struct tctl_args *args, const struct seen *seen)
{
	int code;

	if (seen->socket_option && args->server_url)
		return args_usage_error(CMD_HELP, "--socket and --server exclude each other");
	code = choose_token(args, seen);
	if (code != ARGS_RUN)
		return code;
	if (seen->socket_option && !*seen->socket_option)
		return args_usage_error(CMD_HELP, "empty --socket");
	if (!args->server_url)
		args->socket_path = seen->socket_option ? seen->socket_option : default_socket(args);
	return ARGS_RUN;
}

/* `tractctl help [COMMAND]` */
static int run_help(int operands, char **operand)
{
	enum tctl_command command;
	char message[256];

	if (operands == 0)
		return print_help(CMD_HELP);
	if (operands > 1)
		return args_usage_error(CMD_HELP, "'help' takes one command at most");
	if (find_command(operand[0], &command) < 0) {
		snprintf(message, sizeof(message), "no command '%s'", operand[0]);
		return args_usage_error(CMD_HELP, message);
	}
	return print_help(command);
}

/* `volumes` or `volumes delete ID...` */
static int check_volumes_operands(struct tctl_args *args, int operands, char **operand)
{
	if (operands == 0)
		return ARGS_RUN;
	if (strcmp(operand[0], "delete") != 0)
		return args_usage_error(CMD_VOLUMES, "'volumes' takes no arguments, or: volumes "
					"delete ID...");
	if (operands == 1)
		return args_usage_error(CMD_VOLUMES, "'volumes delete' takes the ids of the "
					"volumes: volumes delete ID...");
	args->volume_ids = operand + 1;
	args->n_volume_ids = operands - 1;
	return ARGS_RUN;
}

/* A job file: JOB.json (any case) or '-'; any other first argument of
 * track is a DWI image. */
static bool names_a_job(const char *arg)
{
	size_t n = strlen(arg);

	return strcmp(arg, "-") == 0 || (n >= 5 && strcasecmp(arg + n - 5, ".json") == 0);
}

/* `track JOB.json` or `track DWI OUTPUT [OPTIONS]`; the options of the one
 * are not the other's. */
static int check_track_operands(struct tctl_args *args, int operands, char **operand)
{
	char message[256];

	if (operands == 1 && names_a_job(operand[0])) {
		if (args->track.first_given < 0)
			return ARGS_RUN;
		snprintf(message, sizeof(message), "'track JOB.json' has no --%s: the options of "
			 "track DWI OUTPUT compose a job from a DWI",
			 track_opts_name((enum track_opt)args->track.first_given));
		return args_usage_error(CMD_TRACK, message);
	}
	if (operands != 2 || names_a_job(operand[0]))
		return args_usage_error(CMD_TRACK, "'track' takes JOB.json, or DWI OUTPUT: track "
					"JOB.json [-o FILE], track DWI OUTPUT [OPTIONS]");
	if (args->output)
		return args_usage_error(CMD_TRACK, "'track DWI OUTPUT' writes its second argument, "
					"OUTPUT: no -o");
	args->dwi = operand[0];
	args->track_output = operand[1];
	return ARGS_RUN;
}

/* operand: the arguments after the command's name. */
static int check_command_arguments(struct tctl_args *args, int operands, char **operand)
{
	const struct command_spec *spec = &commands[args->command];
	char message[256];
	int code;

	if (args->command == CMD_TRACK) {
		code = check_track_operands(args, operands, operand);
		if (code != ARGS_RUN)
			return code;
	} else if (args->track.first_given >= 0) {
		snprintf(message, sizeof(message), "'%s' has no --%s", spec->name,
			 track_opts_name((enum track_opt)args->track.first_given));
		return args_usage_error(args->command, message);
	} else if (args->command == CMD_VOLUMES) {
		code = check_volumes_operands(args, operands, operand);
		if (code != ARGS_RUN)
			return code;
	} else if (spec->operand && operands != 1) {
		snprintf(message, sizeof(message), "'%s' takes %s: %s %s", spec->name,
			 operands ? "only one argument" : "an argument", spec->name, spec->operand);
		return args_usage_error(args->command, message);
	} else if (!spec->operand && operands != 0) {
		snprintf(message, sizeof(message), "'%s' takes no arguments", spec->name);
		return args_usage_error(args->command, message);
	}
	if (args->output && !spec->takes_output) {
		snprintf(message, sizeof(message), "'%s' has no -o/--output", spec->name);
		return args_usage_error(args->command, message);
	}
	if (args->output && !*args->output)
		return args_usage_error(args->command, "empty -o/--output");
	if ((args->format || args->wait) && !spec->takes_format) {
		snprintf(message, sizeof(message), "'%s' has no %s", spec->name,
			 args->format ? "--format" : "--wait");
		return args_usage_error(args->command, message);
	}
	if (args->output && args->json && strcmp(args->output, "-") == 0)
		return args_usage_error(args->command,
					"--json and -o - would both write to standard output");
	return ARGS_RUN;
}

static int parse_command(struct tctl_args *args, const struct seen *seen, int operands,
			 char **operand)
{
	char message[256];
	int code;

	if (operands == 0)
		return seen->help ? print_help(CMD_HELP) :
				    args_usage_error(CMD_HELP, "missing command (track, submit, status, "
						     "list, wait, fetch, cancel, delete, volumes, "
						     "device or help)");
	if (find_command(operand[0], &args->command) < 0) {
		snprintf(message, sizeof(message), "unknown command '%s'", operand[0]);
		return args_usage_error(CMD_HELP, message);
	}
	if (seen->help)
		return print_help(args->command);
	if (args->command == CMD_HELP)
		return run_help(operands - 1, operand + 1);
	code = check_command_arguments(args, operands - 1, operand + 1);
	if (code != ARGS_RUN)
		return code;
	args->operand = operands > 1 && commands[args->command].operand && !args->dwi ? operand[1] :
										     NULL;
	return check_address(args, seen);
}

/* The option getopt complained about, as the user wrote it. An unknown short
 * option inside a cluster ("-qx") does not advance optind, so it is rebuilt
 * from optopt; long options, and missing arguments, are argv[optind - 1]. */
static const char *offending_option(int opt, char **argv, char short_text[3])
{
	if (opt != '?' || optopt <= 0 || optopt > 127)
		return argv[optind - 1];
	short_text[0] = '-';
	short_text[1] = (char)optopt;
	short_text[2] = '\0';
	return short_text;
}

int args_parse(int argc, char **argv, struct tctl_args *ret)
{
	struct seen seen = { 0 };
	char short_text[3];
	int opt, code;

	*ret = (struct tctl_args){ .connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS };
	track_request_init(&ret->track);
	build_long_options();
	/* Own messages: a leading ':' makes getopt report a missing argument as ':'. */
	opterr = 0;
	/* GNU getopt permutes argv: options may come before or after the command. */
	while ((opt = getopt_long(argc, argv, ":o:qhV", long_options, NULL)) != -1) {
		code = parse_option(ret, &seen, opt, optarg, offending_option(opt, argv, short_text));
		if (code != ARGS_RUN)
			return code;
	}
	if (seen.version && !seen.help) {
		printf("tractctl %s\n", TCTL_VERSION);
		return TCTL_EXIT_OK;
	}
	return parse_command(ret, &seen, argc - optind, argv + optind);
}
