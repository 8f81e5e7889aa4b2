#!/bin/sh
# make bench: tracks the synthetic phantom at several sizes and prints seeds/s,
# streamline steps/s and the time of each phase. Each case runs twice: the
# first run fills the on-disk pipeline cache, the second is the one reported.
# seeds/s and steps/s are taken over the track phase (GPU work and transfers).
# Usage: bench/bench.sh [TRACTD]; BENCH_CASES="small medium stanford" selects cases,
# BENCH_DIR (default build/bench) holds the phantoms, TRACTD_DEVICE picks a device,
# BENCH_FORMAT_CASE (default small) the case whose output formats are compared and
# BENCH_DAEMON_CASE (default small) the one run twice through the daemon.
set -eu
tractd=${1:-build/tractd}
dir=${BENCH_DIR:-build/bench}
cases=${BENCH_CASES:-"small medium stanford"}
device_opt=""
[ -n "${TRACTD_DEVICE:-}" ] && device_opt="--device $TRACTD_DEVICE"
mkdir -p "$dir"

json_number() { # FILE KEY -> value of the first "KEY": number
	sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" "$1" | head -n 1
}
json_string() { # FILE KEY -> value of the first "KEY": "string"
	sed -n "s/.*\"$2\": *\"\([^\"]*\)\".*/\1/p" "$1" | head -n 1
}
device="(no case ran)"

printf '%-9s %-13s %-13s %8s %11s %10s %12s %8s %8s %8s %8s %8s\n' case grid sphere seeds streamlines \
	seeds/s steps/s load upload compile track write
for c in $cases; do
	case $c in
	small)    grid=48,48,24;  sphere=symmetric362; seeds=10000 ;;
	medium)   grid=64,64,40;  sphere=repulsion724; seeds=20000 ;;
	stanford) grid=81,106,76; sphere=repulsion724; seeds=100000 ;;
	*) echo "unknown case $c" >&2; exit 2 ;;
	esac
	ph="$dir/$c"
	# The benchmark tracks the ODF job only: no DWI series to write.
	[ -f "$ph/job.json" ] || "$tractd" -q phantom --dim "$grid" --sphere "$sphere" \
		--seeds "$seeds" --uncompressed --no-dwi "$ph"
	stats="$ph/stats.json"
	ok=1
	for run in cold warm; do
		# shellcheck disable=SC2086
		if ! "$tractd" -q run "$ph/job.json" -o "$ph/tracks.trk" --stats-json "$stats" \
			$device_opt 2>"$ph/err.txt"; then
			ok=0
			break
		fi
	done
	if [ $ok -eq 0 ]; then
		printf '%-9s %-13s %-13s skipped: %s\n' "$c" "$grid" "$sphere" "$(tail -n 1 "$ph/err.txt")"
		continue
	fi
	device=$(json_string "$stats" device)
	track=$(json_number "$stats" track)
	write=$(json_number "$stats" write)
	awk -v c="$c" -v g="$grid" -v s="$sphere" -v n="$(json_number "$stats" seeds)" \
	    -v sl="$(json_number "$stats" streamlines)" -v p="$(json_number "$stats" points)" \
	    -v l="$(json_number "$stats" load)" -v u="$(json_number "$stats" upload)" \
	    -v co="$(json_number "$stats" compile)" -v t="$track" -v w="$write" 'BEGIN {
		printf "%-9s %-13s %-13s %8d %11d %10.0f %12.0f %8.3f %8.3f %8.3f %8.3f %8.3f\n",
		       c, g, s, n, sl, n / t, p / t, l, u, co, t, w }'
done
echo "device: $device (times in seconds, second run of each case; steps = points written)"

# Encoding per output format: streamlines/s of the write phase and file size.
format_case=${BENCH_FORMAT_CASE:-small}
ph="$dir/$format_case"
if [ -f "$ph/job.json" ]; then
	echo
	echo "output formats, $format_case phantom:"
	for fmt in trk tck; do
		sed "s/\"format\": \"trk\"/\"format\": \"$fmt\"/" "$ph/job.json" > "$ph/job-$fmt.json"
		# shellcheck disable=SC2086
		"$tractd" -q run "$ph/job-$fmt.json" -o "$ph/tracks.$fmt" --stats-json "$ph/stats-$fmt.json" \
			$device_opt || continue
		awk -v f="$fmt" -v n="$(json_number "$ph/stats-$fmt.json" streamlines)" \
		    -v w="$(json_number "$ph/stats-$fmt.json" write)" \
		    -v t="$(json_number "$ph/stats-$fmt.json" track)" \
		    -v b="$(wc -c < "$ph/tracks.$fmt")" 'BEGIN {
			printf "  %s: %d streamlines, write %.3f s (%.0f streamlines/s; track %.3f s), %.1f MB\n",
			       f, n, w, (w > 0 ? n / w : 0), t, b / 1e6 }'
	done
fi

# The daemon keeps pipelines and uploaded volumes warm: the same job twice,
# the second one reads and uploads nothing. BENCH_DAEMON_CASE picks the phantom.
daemon_case=${BENCH_DAEMON_CASE:-small}
ph="$dir/$daemon_case"
if [ -f "$ph/job.json" ] && command -v curl >/dev/null; then
	sock="$dir/bench.sock"
	"$tractd" serve --listen-unix "$sock" --state-dir "$dir/state" --set log_level=warning &
	pid=$!
	trap 'kill $pid 2>/dev/null' EXIT
	for _ in $(seq 50); do curl -sf --unix-socket "$sock" http://localhost/healthz >/dev/null && break; sleep 0.2; done
	# -T streams the file (--data-binary @file would hold it all in memory).
	upload() { curl -sf --unix-socket "$sock" -X POST -T "$1" http://localhost/v1/volumes |
		sed -n 's/.*"id":"\([^"]*\)".*/\1/p'; }
	ext=$(ls "$ph"/odf.nii* | sed 's/.*odf//')
	odf=$(upload "$ph/odf$ext"); fa=$(upload "$ph/fa$ext"); roi=$(upload "$ph/seed_roi$ext")
	if [ -z "$odf" ] || [ -z "$fa" ] || [ -z "$roi" ]; then
		echo "daemon: uploading the $daemon_case phantom failed" >&2
		kill $pid
		exit 1
	fi
	seeds=$(sed -n 's/.*"count": *\([0-9]*\).*/\1/p' "$ph/job.json" | head -n 1)
	sphere=$(sed -n 's/.*"sphere": *"\([^"]*\)".*/\1/p' "$ph/job.json" | head -n 1)
	printf '{"inputs":{"odf":"%s","stop_map":"%s"},"seeds":{"roi":"%s","count":%s},"tracking":{"sphere":"%s"}}' \
		"$odf" "$fa" "$roi" "$seeds" "$sphere" > "$dir/daemon-job.json"
	echo
	echo "daemon, $daemon_case phantom, same job twice (seconds):"
	for run in first second; do
		id=$(curl -sf --unix-socket "$sock" --data-binary @"$dir/daemon-job.json" \
			http://localhost/v1/jobs | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
		for _ in $(seq 3000); do
			curl -sf --unix-socket "$sock" "http://localhost/v1/jobs/$id" |
				grep -q '"status":"\(done\|failed\|cancelled\)"' && break
			sleep 0.1
		done
		curl -sf --unix-socket "$sock" "http://localhost/v1/jobs/$id" > "$dir/daemon-$run.json"
		awk -v r="$run" -v l="$(json_number "$dir/daemon-$run.json" load)" \
		    -v u="$(json_number "$dir/daemon-$run.json" upload)" \
		    -v c="$(json_number "$dir/daemon-$run.json" compile)" \
		    -v t="$(json_number "$dir/daemon-$run.json" track)" 'BEGIN {
			printf "  %-6s job: load %.3f, upload %.3f, compile %.3f, track %.3f\n", r, l, u, c, t }'
	done
	curl -sf --unix-socket "$sock" http://localhost/v1/device | sed 's/.*"cache":\({[^}]*}\).*/  cache: \1/'
	kill $pid
	wait $pid 2>/dev/null || true
	trap - EXIT
fi
