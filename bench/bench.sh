#!/bin/sh
# make bench: tracks the synthetic phantom at several sizes and prints seeds/s,
# streamline steps/s and the time of each phase. Each case runs twice: the
# first run fills the on-disk pipeline cache, the second is the one reported.
# seeds/s and steps/s are taken over the track phase (GPU work and transfers).
# Usage: bench/bench.sh [TRACTD]; BENCH_CASES="small medium stanford" selects cases,
# BENCH_DIR (default build/bench) holds the phantoms, TRACTD_DEVICE picks a device.
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
	[ -f "$ph/job.json" ] || "$tractd" -q phantom --dim "$grid" --sphere "$sphere" \
		--seeds "$seeds" --uncompressed "$ph"
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
