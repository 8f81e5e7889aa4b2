#!/bin/sh
# make bench-lavapipe: tractd on a CPU (lavapipe) against DIPY 1.12's
# probabilistic_tracking, same cores, same thread count, same work.
# The case (bench/lavapipe_case.py): DIPY's CSD ODF of the crossing phantom on
# repulsion724, pmf_threshold 0.1, whole streamlines, the same seeds on both
# sides; built once in $BENCH_DIR/lavapipe_<grid>_<seeds>.
# Runs are interleaved (DIPY then tractd, for each thread count, each repeat)
# and pinned with taskset to CPUs 0..threads-1; the table gives the median
# and the spread (min-max) of each, and the point counts show equal work.
# DIPY's time: peaks at the seeds and tracking (its inputs already loaded);
# tractd's: its track phase (both passes; --stats-json), and the whole
# process (reading the inputs included) as wall.
# Usage: bench/lavapipe.sh [TRACTD]; LAVAPIPE_SEEDS (default 20000),
# LAVAPIPE_REPEATS (3), LAVAPIPE_THREADS ("1 2"), LAVAPIPE_GRID (48,48,24),
# BENCH_DIR (build/bench), BENCH_DIPY_PYTHON (build/venv-dipy/bin/python,
# DIPY >= 1.12), TRACTD_DEVICE (the lavapipe device where a GPU is present:
# `tractd devices` lists them).
set -eu
tractd=${1:-build/tractd}
python=${BENCH_DIPY_PYTHON:-build/venv-dipy/bin/python}
seeds=${LAVAPIPE_SEEDS:-20000}
repeats=${LAVAPIPE_REPEATS:-3}
threads_list=${LAVAPIPE_THREADS:-"1 2"}
grid=${LAVAPIPE_GRID:-48,48,24}
here=$(dirname "$0")
ph=${BENCH_DIR:-build/bench}/lavapipe_$(echo "$grid" | tr , x)_$seeds
device_opt=""
[ -n "${TRACTD_DEVICE:-}" ] && device_opt="--device $TRACTD_DEVICE"

# shellcheck source=bench/lib.sh
. "$here/lib.sh"

if [ ! -f "$ph/job_lavapipe.json" ]; then
	echo "building the case once: phantom $grid, DIPY's CSD ODF, $seeds seeds..." >&2
	"$tractd" -q phantom --dim "$grid" --sphere repulsion724 --seeds "$seeds" \
		--uncompressed "$ph"
	"$python" "$here/lavapipe_case.py" prepare "$ph" "$seeds"
fi

# One line per run: tool threads seconds points [wall].
runs="$ph/runs.txt"
: > "$runs"
for r in $(seq "$repeats"); do
	for t in $threads_list; do
		cpus=$(seq -s, 0 $((t - 1)))
		taskset -c "$cpus" "$python" "$here/lavapipe_case.py" dipy "$ph" "$t" > "$ph/dipy.json"
		echo "dipy $t $(json_number "$ph/dipy.json" seconds)" \
			"$(json_number "$ph/dipy.json" points)" >> "$runs"
		start=$(now)
		# shellcheck disable=SC2086
		LP_NUM_THREADS=$t taskset -c "$cpus" "$tractd" -q run "$ph/job_lavapipe.json" \
			-o "$ph/tracks.trk" --stats-json "$ph/stats.json" $device_opt
		wall=$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')
		echo "tractd $t $(json_number "$ph/stats.json" track)" \
			"$(json_number "$ph/stats.json" points) $wall" >> "$runs"
	done
done

echo "lavapipe against DIPY $(json_string "$ph/dipy.json" dipy) probabilistic_tracking:" \
	"$grid phantom, repulsion724, $seeds seeds, $repeats run(s) each, interleaved"
echo "tractd device: $(json_string "$ph/stats.json" device); load average after the runs: $(cut -d" " -f1-3 /proc/loadavg)"
printf '%-7s %7s %9s %17s %10s %9s %9s\n' tool threads median "spread (min-max)" points \
	wall speedup
for t in $threads_list; do
	for tool in dipy tractd; do
		# Median and spread of the seconds, the points of the last run and
		# tractd's wall time of its median run (the lower one of two).
		awk -v tool="$tool" -v t="$t" '$1 == tool && $2 == t' "$runs" | sort -n -k 3 |
		awk -v tool="$tool" -v t="$t" '
		{ s[NR] = $3; p = $4; w[NR] = $5 }
		END {
			m = NR % 2 ? s[(NR + 1) / 2] : (s[NR / 2] + s[NR / 2 + 1]) / 2
			printf "%-7s %7d %9.2f %8.2f-%-8.2f %10d %9s", tool, t, m, s[1], s[NR], p,
			       w[1] == "" ? "-" : sprintf("%.2f", w[int((NR + 1) / 2)])
			print m > "/dev/stderr"
		}' 2>"$ph/median.$tool"
		if [ "$tool" = tractd ]; then
			awk -v d="$(cat "$ph/median.dipy")" -v m="$(cat "$ph/median.tractd")" \
				'BEGIN { printf " %8.2fx\n", d / m }'
		else
			echo "         -"
		fi
	done
done
echo "seconds: DIPY peaks + tracking; tractd track phase (wall: the whole tractd run);" \
	"speedup: DIPY's median over tractd's, same threads"
