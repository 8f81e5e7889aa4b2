#!/bin/sh
# bench/warm_big.sh: a warm daemon's big job (issue 24's goal: the HCP-sized
# 10 M-seed job on cached inputs in <= 3 s on one GPU). For each tractd given,
# in turns, starts `tractd serve` with the phantom's directory as a data root
# (so that the job names its files: nothing is uploaded over the socket) and
# submits the same prob job BENCH_WARM_BIG_RUNS times (default 3) through
# ?wait=stream with curl, the answer to /dev/null; the first run reads and
# uploads the ODF, the later ones find it in the daemon's cache. Prints per
# run the client's wall time, the job's events (seconds after submission:
# tracking started, tracked, synced to disk, done) and its phases.
# Usage: bench/warm_big.sh TRACTD [TRACTD...]  (e.g. a build before and after).
# BENCH_DIR (default build/bench) holds the phantoms and the daemon's state;
# BENCH_WARM_BIG_CASE: a case of bench/cases.sh (default hcp, the phantom
# bench.sh's "any size" writes; tiny and small do on lavapipe);
# BENCH_WARM_BIG_SEEDS (default 10000000); BENCH_WARM_BIG_FORMAT: trk (the
# default) or trx-f16 (stored TRX float16, pyAFQ's choice: written whole,
# then sent); TRACTD_DEVICE picks a device.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 TRACTD [TRACTD...]" >&2; exit 2; }
command -v curl >/dev/null || { echo "warm big job: skipped (no curl)"; exit 0; }
dir=${BENCH_DIR:-build/bench}
case=${BENCH_WARM_BIG_CASE:-hcp}
count=${BENCH_WARM_BIG_SEEDS:-10000000}
runs=${BENCH_WARM_BIG_RUNS:-3}
format=${BENCH_WARM_BIG_FORMAT:-trk}
case $format in
trk)     output="" ;;
trx-f16) output=', "output": {"format": "trx", "positions": "float16"}' ;;
*) echo "BENCH_WARM_BIG_FORMAT: trk or trx-f16, not $format" >&2; exit 2 ;;
esac

tractd=$1
# shellcheck source=bench/cases.sh
. "$(dirname "$0")/cases.sh"
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
mkdir -p "$dir"
bench_case "$case"
state=$(cd "$dir" && pwd)/warm_big_state
sock=$state.sock
prob_job "$ph/job_warm_big.json" "$count" "$output"
device_set=""
[ -n "${TRACTD_DEVICE:-}" ] && device_set="--set device=$TRACTD_DEVICE"

echo "warm daemon, big job: prob, $case phantom $(echo "$grid" | tr , x), $sphere, $count seeds," \
	"$format"
printf '  %-3s %-30s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n' run tractd wall tracking tracked \
	synced "done" track kernels encode write
for tractd in "$@"; do
	rm -rf "$state" "$sock"
	# shellcheck disable=SC2086
	"$tractd" serve --listen-unix "$sock" --state-dir "$state" --set data_roots="$abs" \
		--set log_level=warning $device_set &
	pid=$!
	trap 'kill $pid 2>/dev/null' EXIT
	for _ in $(seq 100); do
		curl -sf --unix-socket "$sock" http://localhost/healthz >/dev/null && break
		sleep 0.1
	done
	for run in $(seq "$runs"); do
		start=$(now)
		if ! curl -sS --fail-with-body --unix-socket "$sock" -D "$state.headers" \
			--data-binary @"$ph/job_warm_big.json" 'http://localhost/v1/jobs?wait=stream' \
			-o /dev/null; then
			echo "  $run $tractd: failed"
			continue
		fi
		wall=$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')
		id=$(sed -n 's/^X-Tractd-Job: *\([^[:space:]]*\).*/\1/ip' "$state.headers")
		# One key a line, so that json_number finds each.
		curl -sf --unix-socket "$sock" "http://localhost/v1/jobs/$id" | sed 's/[,{]/\n/g' \
			>"$state.job"
		awk -v r="$run" -v b="$tractd" -v w="$wall" \
		    -v t0="$(json_number "$state.job" tracking)" \
		    -v t1="$(json_number "$state.job" tracked)" \
		    -v sy="$(json_number "$state.job" synced)" -v d="$(json_number "$state.job" "done")" \
		    -v t="$(json_number "$state.job" track)" -v k="$(json_number "$state.job" kernels)" \
		    -v e="$(json_number "$state.job" encode)" \
		    -v wr="$(json_number "$state.job" write)" 'BEGIN {
			printf "  %-3d %-30s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n",
			       r, substr(b, length(b) > 30 ? length(b) - 29 : 1), w, t0, t1, sy, d,
			       t, k, e, wr }'
	done
	kill $pid
	wait $pid 2>/dev/null || true
	trap - EXIT
done
rm -rf "$state" "$sock" "$state.headers" "$state.job"
echo "  wall = the client's, submit to the answer's end (curl to /dev/null); tracking .. done:" \
	"the job's events in seconds after submission; track, kernels, encode, write: its phases" \
	"(the writer encodes and writes while the GPU tracks); run 1 reads and uploads the ODF"
