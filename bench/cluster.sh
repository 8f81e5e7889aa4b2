#!/bin/sh
# bench/cluster.sh: README "Slurm"'s two kinds of cluster work, measured on
# one host without Slurm (`make bench` runs it last; it runs alone too).
# Shards: one job tracked whole, then split in 1, 2 and 4 shards run at once
# (shard K on device K mod D of the devices given) and joined by `tractd
# merge`: wall time of each split and whether the merged bytes equal the
# whole run's. Cohort: phantom subjects of different sizes and noise through
# one pilot daemon (scripts/slurm/tractd-pilot as one array task: `tractd
# serve` + `tractctl track` per subject), against one `tractd track` process
# per subject: subjects per minute both ways and whether the outputs match.
# Usage: bench/cluster.sh [TRACTD]; tractctl is TRACTD's sibling.
# BENCH_DIR (default build/bench) holds the phantoms and outputs.
# BENCH_SHARD_CASE: a case of bench/cases.sh (small, medium, stanford: the
#   default) or none; BENCH_SHARD_SEEDS (default 1000000);
#   BENCH_SHARD_SPLITS (default "1 2 4"); BENCH_SHARD_DEVICES: devices, comma-
#   separated (default: the GPUs `tractd devices` lists, else 0). Each shard
#   gets --gpu-memory-budget = its device's memory / (2 x shards on it).
# BENCH_COHORT_SUBJECTS (default 8; 0 skips); BENCH_COHORT_SEEDS (default
#   100000); BENCH_COHORT_DIM (default 64,64,40: subject i adds 4*(i mod 3)
#   voxels in x and y, its SNR is 20 + 5*(i mod 4)).
set -eu
tractd=${1:-build/tractd}
tractctl=$(dirname "$tractd")/tractctl
src=$(cd "$(dirname "$0")/.." && pwd)
dir=${BENCH_DIR:-build/bench}
mkdir -p "$dir"
# shellcheck source=bench/cases.sh
. "$src/bench/cases.sh"
# shellcheck source=bench/lib.sh
. "$src/bench/lib.sh"
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }

# The GPUs `tractd devices` lists (its second column is the type), else 0.
default_devices() {
	gpus=$("$tractd" devices 2>/dev/null | awk -F '\t' '$2 != "cpu" { print $1 }' | paste -sd, -)
	echo "${gpus:-0}"
}

# MiB of device $1's memory, as `tractd devices` prints it ("memory N MiB").
device_mib() {
	"$tractd" devices 2>/dev/null | awk -F '\t' -v d="$1" '$1 == d {
		for (i = 1; i <= NF; i++) if ($i ~ /^memory [0-9]+ MiB$/) { split($i, m, " "); print m[2] } }'
}

# Runs the n shards of $job at once into $out/part_K.trk, shard K on device
# K mod D; 0 when all succeeded.
run_shards() { # JOB OUT N DEVICES
	n=$3
	ndev=$(echo "$4" | tr , '\n' | wc -l)
	per_device=$(((n + ndev - 1) / ndev))
	pids=""
	k=0
	while [ $k -lt "$n" ]; do
		dev=$(echo "$4" | cut -d, -f $((k % ndev + 1)))
		mib=$(device_mib "$dev")
		budget=""
		[ -n "$mib" ] && budget="--gpu-memory-budget $((mib / (2 * per_device)))M"
		# shellcheck disable=SC2086
		"$tractd" -q run "$1" --shard "$k/$n" -o "$2/part_$k.trk" --device "$dev" $budget \
			2>"$2/err_$k.txt" &
		pids="$pids $!"
		k=$((k + 1))
	done
	status=0
	for pid in $pids; do wait "$pid" || status=1; done
	return $status
}

bench_shards() { # CASE
	bench_case "$1"
	seeds=${BENCH_SHARD_SEEDS:-1000000}
	devices=${BENCH_SHARD_DEVICES:-$(default_devices)}
	job="$ph/job_shards.json"
	sed "s/\"count\": *[0-9]*/\"count\": $seeds/" "$ph/job.json" > "$job"
	out="$dir/shards_$1"
	rm -rf "$out"
	mkdir -p "$out"
	echo
	echo "shards, $1 phantom: $(echo "$grid" | tr , x), $sphere, $seeds seeds, devices $devices"
	# The first run fills the pipeline cache; the second is the reference.
	for _ in cold warm; do
		start=$(now)
		if ! "$tractd" -q run "$job" -o "$out/whole.trk" --device "${devices%%,*}" \
			2>"$out/err.txt"; then
			echo "  skipped: $(tail -n 1 "$out/err.txt")"
			return 0
		fi
		whole=$(elapsed "$start")
	done
	printf '  %-7s %-8s %9s %9s %9s %8s %s\n' shards devices shards_s merge_s total_s speedup \
		identical
	printf '  %-7s %-8s %9s %9s %9.3f %8s %s\n' whole 1 - - "$whole" 1.00 reference
	for n in ${BENCH_SHARD_SPLITS:-1 2 4}; do
		rm -f "$out"/part_*.trk "$out/merged.trk"
		ndev=$(echo "$devices" | tr , '\n' | wc -l)
		[ "$ndev" -gt "$n" ] && ndev=$n
		start=$(now)
		if ! run_shards "$job" "$out" "$n" "$devices"; then
			echo "  $n: skipped: $(cat "$out"/err_*.txt | tail -n 1)"
			continue
		fi
		tracked=$(elapsed "$start")
		mstart=$(now)
		parts=$(k=0; while [ $k -lt "$n" ]; do echo "$out/part_$k.trk"; k=$((k + 1)); done)
		# shellcheck disable=SC2086
		"$tractd" -q merge "$out/merged.trk" $parts
		merged=$(elapsed "$mstart")
		total=$(elapsed "$start")
		same=no
		cmp -s "$out/whole.trk" "$out/merged.trk" && same=yes
		awk -v n="$n" -v d="$ndev" -v s="$tracked" -v m="$merged" -v t="$total" -v w="$whole" \
		    -v same="$same" 'BEGIN {
			printf "  %-7d %-8d %9.3f %9.3f %9.3f %8.2f %s\n", n, d, s, m, t, w / t, same }'
	done
	echo "  times: wall seconds; shards_s from the first shard's start to the last's end" \
		"(each shard reads the inputs itself), total_s adds the merge;" \
		"identical: cmp of the merged file with the whole run's ($(wc -c < "$out/whole.trk") bytes)"
	rm -f "$out"/part_*.trk "$out/merged.trk" "$out/whole.trk"
}

# Subject i's phantom (its DWI in a BIDS layout) and its line of SUBJECTS.
cohort_subject() { # I COHORT_DIR
	nx=$(echo "$dim" | cut -d, -f1) ny=$(echo "$dim" | cut -d, -f2) nz=$(echo "$dim" | cut -d, -f3)
	grow=$((4 * ($1 % 3)))
	sub=$(printf 'sub-%02d' "$1")
	ph="$2/phantoms/$sub"
	[ -f "$ph/mask.nii.gz" ] || "$tractd" -q phantom "$ph" --dim "$((nx + grow)),$((ny + grow)),$nz" \
		--snr $((20 + 5 * ($1 % 4)))
	mkdir -p "$2/bids/$sub/dwi"
	for ext in nii.gz bval bvec; do
		cp "$ph/dwi.$ext" "$2/bids/$sub/dwi/${sub}_dwi.$ext"
	done
	printf '%s\t%s\n' "$2/bids/$sub/dwi/${sub}_dwi.nii.gz" "$ph/mask.nii.gz"
}

bench_cohort() { # SUBJECTS
	seeds=${BENCH_COHORT_SEEDS:-100000}
	dim=${BENCH_COHORT_DIM:-64,64,40}
	co="$dir/cohort"
	rm -rf "$co/bids" "$co/pilot" "$co/runs"
	mkdir -p "$co/runs"
	i=1
	while [ $i -le "$1" ]; do
		cohort_subject $i "$co"
		i=$((i + 1))
	done > "$co/subjects.txt"
	track_opts="--seeds $seeds --rng-seed 1"
	echo
	echo "cohort: $1 phantom subjects from $dim (DWI, fitted on the CPU), $seeds seeds each"
	# Fills the pipeline cache, so that neither way below compiles kernels.
	first=$(head -n 1 "$co/subjects.txt")
	# shellcheck disable=SC2086
	"$tractd" -q track "${first%%	*}" "$co/runs/warmup.trx" --mask "${first#*	}" $track_opts
	start=$(now)
	# One array task of one (no Slurm variables): every subject through one daemon.
	# shellcheck disable=SC2086
	if ! env -u SLURM_ARRAY_TASK_ID -u SLURM_ARRAY_TASK_COUNT -u SLURM_ARRAY_TASK_MIN \
		TRACTD="$tractd" TRACTCTL="$tractctl" sh "$src/scripts/slurm/tractd-pilot" \
		"$co/subjects.txt" "$co/pilot" $track_opts 2>"$co/pilot.err"; then
		echo "  pilot failed: $(tail -n 1 "$co/pilot.err")"
		return 0
	fi
	pilot=$(elapsed "$start")
	start=$(now)
	while IFS='	' read -r dwi mask; do
		sub=$(basename "$(dirname "$(dirname "$dwi")")")
		# shellcheck disable=SC2086
		"$tractd" -q track "$dwi" "$co/runs/$sub.trx" --mask "$mask" $track_opts ||
			{ echo "  tractd track failed: $sub"; return 0; }
	done < "$co/subjects.txt"
	runs=$(elapsed "$start")
	same=0
	while IFS='	' read -r dwi mask; do
		sub=$(basename "$(dirname "$(dirname "$dwi")")")
		cmp -s "$co/runs/$sub.trx" "$co/pilot/$sub/dwi/${sub}_tractography.trx" &&
			same=$((same + 1))
	done < "$co/subjects.txt"
	printf '  %-34s %9s %14s\n' way wall_s subjects/min
	awk -v n="$1" -v p="$pilot" -v r="$runs" 'BEGIN {
		printf "  %-34s %9.3f %14.1f\n", "one pilot daemon (tractd-pilot)", p, 60 * n / p
		printf "  %-34s %9.3f %14.1f\n", "one tractd track per subject", r, 60 * n / r
		printf "  pilot / per-subject throughput: %.2fx\n", r / p }'
	echo "  outputs identical: $same of $1 (cmp of each subject's TRX);" \
		"both on the default device, one subject at a time; the pilot's time includes" \
		"starting and stopping its daemon"
}

shard_case=${BENCH_SHARD_CASE:-stanford}
if [ "$shard_case" != none ]; then
	bench_shards "$shard_case"
fi
subjects=${BENCH_COHORT_SUBJECTS:-8}
if [ "$subjects" != 0 ]; then
	bench_cohort "$subjects"
fi
