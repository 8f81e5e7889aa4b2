#!/bin/sh
# bench/trx.sh: TRX float16 against TRK end to end (issue 24): one prob job
# on a phantom, written as TRK and as stored TRX float16 (pyAFQ's choice) by
# each tractd given, the binaries in turns, BENCH_TRX_RUNS times; prints the
# --stats-json phases, the wall time and the file size of each run. `make
# bench` runs it on the HCP-sized case where a GPU is listed; it runs alone.
# Usage: bench/trx.sh TRACTD [TRACTD...]  (e.g. a build before and after).
# BENCH_DIR (default build/bench) holds the phantoms and outputs.
# BENCH_TRX_CASE: a case of bench/cases.sh: hcp (the default; the phantom
#   bench.sh's "any size" writes), stanford, or tiny and small (lavapipe will
#   do); BENCH_TRX_SEEDS (default 10000000);
#   BENCH_TRX_RUNS (default 2); BENCH_TRX_FORMATS (default "trk trx-f16";
#   also trx-f32, trx-f16-deflate).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 TRACTD [TRACTD...]" >&2; exit 2; }
dir=${BENCH_DIR:-build/bench}
case=${BENCH_TRX_CASE:-hcp}
count=${BENCH_TRX_SEEDS:-10000000}   # not seeds: bench_case sets the case's
runs=${BENCH_TRX_RUNS:-2}
formats=${BENCH_TRX_FORMATS:-"trk trx-f16"}

tractd=$1
# shellcheck source=bench/cases.sh
. "$(dirname "$0")/cases.sh"
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
mkdir -p "$dir"
bench_case "$case"

output_of() { # FORMAT -> the job's "output"
	case $1 in
	trk)             echo '{"format": "trk"}' ;;
	trx-f32)         echo '{"format": "trx"}' ;;
	trx-f16)         echo '{"format": "trx", "positions": "float16"}' ;;
	trx-f16-deflate) echo '{"format": "trx", "positions": "float16", "compression": "deflate"}' ;;
	*) echo "unknown format $1" >&2; exit 2 ;;
	esac
}

echo "TRX against TRK: prob, $case phantom $(echo "$grid" | tr , x), $sphere, $count seeds"
printf '  %-3s %-16s %-30s %8s %8s %8s %8s %8s %8s %9s\n' run format tractd load upload track \
	encode write total GB
for run in $(seq "$runs"); do
	for fmt in $formats; do
		ext=${fmt%%-*}
		prob_job "$ph/job_trx_bench.json" "$count" ", \"output\": $(output_of "$fmt")"
		for tractd in "$@"; do
			out="$ph/bench_out.$ext"
			stats="$ph/stats_trx_bench.json"
			# Replacing a multi-GB file would time its unlink too.
			rm -f "$out"
			start=$(now)
			if ! "$tractd" -q run "$ph/job_trx_bench.json" -o "$out" --stats-json "$stats" \
				2>"$ph/err.txt"; then
				echo "  $run $fmt $tractd: failed: $(tail -n 1 "$ph/err.txt")"
				continue
			fi
			awk -v r="$run" -v f="$fmt" -v b="$tractd" -v l="$(json_number "$stats" load)" \
			    -v u="$(json_number "$stats" upload)" -v t="$(json_number "$stats" track)" \
			    -v e="$(json_number "$stats" encode)" -v w="$(json_number "$stats" write)" \
			    -v a="$start" -v z="$(now)" -v s="$(wc -c <"$out")" 'BEGIN {
				printf "  %-3d %-16s %-30s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %9.3f\n",
				       r, f, substr(b, length(b) > 30 ? length(b) - 29 : 1), l, u, t, e, w,
				       z - a, s / 1e9 }'
			rm -f "$out"
		done
	done
done
echo "  seconds from --stats-json; total = wall time of the command; GB = output size"
