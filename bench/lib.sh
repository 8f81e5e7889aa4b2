# shellcheck shell=sh
# bench/lib.sh: the helpers the benchmark scripts share, sourced by
# bench/bench.sh, cluster.sh, lavapipe.sh, regions.sh and trx.sh (one copy,
# where each had its own): reading a value out of a --stats-json file or a
# job document, and the clock.
json_number() { # FILE KEY -> value of the first "KEY": number
	sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" "$1" | head -n 1
}
json_string() { # FILE KEY -> value of the first "KEY": "string"
	sed -n "s/.*\"$2\": *\"\([^\"]*\)\".*/\1/p" "$1" | head -n 1
}
json_device_seconds() { # STATS KERNEL -> seconds.device.KERNEL of a --stats-json
	sed -n '/"device": {/,/}/p' "$1" | sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" | head -n 1
}
now() { date +%s.%N; }
