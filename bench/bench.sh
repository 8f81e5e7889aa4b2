#!/bin/sh
# make bench: tracks the synthetic phantom at several sizes and prints seeds/s,
# streamline steps/s and the time of each phase. Each case runs twice: the
# first run fills the on-disk pipeline cache, the second is the one reported.
# seeds/s and steps/s are taken over the track phase (GPU work and transfers).
# Usage: bench/bench.sh [TRACTD]; BENCH_CASES="small medium stanford" selects cases
# (bench/cases.sh; none skips this table),
# BENCH_DIR (default build/bench) holds the phantoms, TRACTD_DEVICE picks a device,
# BENCH_FORMAT_CASE (default small) the case whose output formats are compared and
# BENCH_DAEMON_CASE (default small) the one run twice through the daemon;
# BENCH_WARM_CASE (default small), BENCH_WARM_SEEDS (1000) and BENCH_WARM_RUNS
# (20; 0 skips) the warm small jobs' latency (bench/warm_jobs.py).
# Fitting: BENCH_FIT_CASE (default stanford: Stanford HARDI's 81x106x76 grid and
# 160 volumes; small: the default phantom; none: skip) is fitted once by
# `tractd fit` on the CPU (BENCH_FIT_THREADS: --threads, default all CPUs), and
# by DIPY as a reference when BENCH_PYTHON (default /usr/bin/python3) imports
# dipy: DIPY's time is measured once and kept in the phantom's directory
# (BENCH_DIPY=0 skips it, BENCH_DIPY=fresh measures it again).
# Boot: BENCH_BOOT_CASE (default stanford; small; none) and BENCH_BOOT_SEEDS
# (default 100000) track the fit phantom's DWI with the bootstrap getter.
# PTT: BENCH_PTT_CASE (default small; medium, stanford; none) and BENCH_PTT_SEEDS
# (default 10000) track the case's ODF with ptt and prob, max_angle 20.
# A warm daemon's big job: bench/warm_big.sh on the any-size case's phantom
# (BENCH_WARM_BIG_CASE, default that case; none skips it; BENCH_WARM_BIG_SEEDS,
# BENCH_WARM_BIG_RUNS, BENCH_WARM_BIG_FORMAT: trk or trx-f16).
# Cluster: bench/cluster.sh, last (shards and a pilot cohort; its own settings).
set -eu
tractd=${1:-build/tractd}
dir=${BENCH_DIR:-build/bench}
cases=${BENCH_CASES:-"small medium stanford"}
[ "$cases" = none ] && cases=""
device_opt=""
[ -n "${TRACTD_DEVICE:-}" ] && device_opt="--device $TRACTD_DEVICE"
mkdir -p "$dir"
# shellcheck source=bench/cases.sh
. "$(dirname "$0")/cases.sh"
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
device="(no case ran)"

printf '%-9s %-13s %-13s %8s %11s %10s %12s %8s %8s %8s %8s %8s\n' case grid sphere seeds streamlines \
	seeds/s steps/s load upload compile track write
for c in $cases; do
	# The benchmark tracks the ODF job only: no DWI series to write.
	bench_case "$c"
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

# Encoding per output format: streamlines/s of the write phase, the whole
# run's wall time (TRX assembles its zip after tracking) and the file size.
# Variants: TRK, TCK, TRX (float32, stored), TRX float16 deflated, and TRK
# linearised within 0.1 mm (output.compress).
format_case=${BENCH_FORMAT_CASE:-small}
ph="$dir/$format_case"
if [ -f "$ph/job.json" ]; then
	echo
	echo "output formats, $format_case phantom:"
	for variant in trk tck trx trx-f16 trk-compress; do
		case $variant in
		trk)          fmt=trk; extra="" ;;
		tck)          fmt=tck; extra="" ;;
		trx)          fmt=trx; extra="" ;;
		trx-f16)      fmt=trx; extra=', "positions": "float16", "compression": "deflate"' ;;
		trk-compress) fmt=trk; extra=', "compress": {"tolerance_mm": 0.1}' ;;
		esac
		sed "s/\"format\": \"trk\"/\"format\": \"$fmt\"$extra/" "$ph/job.json" \
			> "$ph/job-$variant.json"
		t0=$(now)
		# shellcheck disable=SC2086
		"$tractd" -q run "$ph/job-$variant.json" -o "$ph/tracks-$variant.$fmt" \
			--stats-json "$ph/stats-$variant.json" $device_opt || continue
		t1=$(now)
		awk -v f="$variant" -v n="$(json_number "$ph/stats-$variant.json" streamlines)" \
		    -v w="$(json_number "$ph/stats-$variant.json" write)" \
		    -v t="$(json_number "$ph/stats-$variant.json" track)" -v r0="$t0" -v r1="$t1" \
		    -v b="$(wc -c < "$ph/tracks-$variant.$fmt")" 'BEGIN {
			printf "  %-12s %d streamlines, write %.3f s (%.0f streamlines/s; track %.3f s),"\
			       " run %.2f s, %.1f MB\n", f, n, w, (w > 0 ? n / w : 0), t, r1 - r0, b / 1e6 }'
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

# Warm small jobs (issue 24's goal: a warm daemon's overhead <= 20 ms):
# BENCH_WARM_RUNS (default 20; 0 skips) jobs of BENCH_WARM_SEEDS seeds
# (default 1000) on the BENCH_WARM_CASE phantom (default small), each through
# ?wait=stream after a warm-up job, with the median and p90 of the client's
# wall time, the tracking, the overhead and each step of the job's `timing`
# (bench/warm_jobs.py; BENCH_PYTHON runs it, the standard library suffices).
warm_runs=${BENCH_WARM_RUNS:-20}
ph="$dir/${BENCH_WARM_CASE:-small}"
if [ "$warm_runs" != 0 ] && [ -f "$ph/job.json" ]; then
	echo
	# shellcheck disable=SC2086
	"${BENCH_PYTHON:-/usr/bin/python3}" "$(dirname "$0")/warm_jobs.py" "$tractd" "$ph" \
		--seeds "${BENCH_WARM_SEEDS:-1000}" --runs "$warm_runs" \
		${TRACTD_DEVICE:+--device "$TRACTD_DEVICE"} ||
		echo "warm small jobs: failed (see above)"
fi

# Fitting raw DWI (DTI, response, CSD, ODF sampling) on the CPU, stage by stage
# from tractd's debug log, next to DIPY's time for the same steps.
log_seconds() { # LOG PATTERN -> the number that \(...\) in PATTERN captures
	sed -n "s/.*$2.*/\1/p" "$1" | head -n 1
}

# DIPY's time for the phantom in $1, measured once (it takes minutes) and kept
# in $1/dipy_fit.json; prints a line saying where the numbers come from.
dipy_reference() { # PHANTOM_DIR
	python=${BENCH_PYTHON:-/usr/bin/python3}
	[ "${BENCH_DIPY:-1}" = fresh ] && rm -f "$1/dipy_fit.json"
	if [ -f "$1/dipy_fit.json" ]; then
		echo "DIPY: measured earlier ($1/dipy_fit.json; BENCH_DIPY=fresh measures again)"
	elif ! "$python" -c 'import dipy' 2>/dev/null; then
		echo "DIPY: not installed for $python"
	elif echo "fitting with DIPY for reference, once (minutes)..." >&2 &&
		"$python" "$(dirname "$0")/dipy_fit_reference.py" "$1/dwi.nii" "$1/dwi.bval" \
		"$1/dwi.bvec" "$1/mask.nii" > "$1/dipy_fit.json.tmp" 2>"$1/dipy.err"; then
		mv "$1/dipy_fit.json.tmp" "$1/dipy_fit.json"
		echo "DIPY: measured now"
	else
		rm -f "$1/dipy_fit.json.tmp"
		echo "DIPY: failed: $(tail -n 1 "$1/dipy.err")"
	fi
}

bench_fit() { # CASE
	case $1 in
	small)    grid=48,48,24;  b0s=6;  directions=64;  bvalue=1000; sphere=symmetric362 ;;
	stanford) grid=81,106,76; b0s=10; directions=150; bvalue=2000; sphere=repulsion724 ;;
	*) echo "unknown fit case $1" >&2; exit 2 ;;
	esac
	ph="$dir/fit_$1"
	log="$ph/fit.log"
	[ -f "$ph/job_dwi.json" ] || "$tractd" -q phantom --dim "$grid" --b0s "$b0s" \
		--directions "$directions" --bvalue "$bvalue" --sphere "$sphere" --uncompressed "$ph"
	threads_opt=""
	[ -n "${BENCH_FIT_THREADS:-}" ] && threads_opt="--threads $BENCH_FIT_THREADS"
	echo
	# shellcheck disable=SC2086
	if ! "$tractd" -v fit "$ph/job_dwi.json" -o "$ph/fit" $threads_opt 2>"$log"; then
		echo "fitting, $1 phantom: skipped: $(tail -n 1 "$log")"
		return 0
	fi
	dipy_note="DIPY: skipped (BENCH_DIPY=0)"
	[ "${BENCH_DIPY:-1}" = 0 ] || dipy_note=$(dipy_reference "$ph")
	dipy_json="$ph/dipy_fit.json"
	[ "${BENCH_DIPY:-1}" != 0 ] && [ -f "$dipy_json" ] || dipy_json=/dev/null

	echo "fitting, $1 phantom: $(echo "$grid" | tr , x), $((b0s + directions)) volumes" \
		"($b0s b0 + $directions directions at b=$bvalue), tractd on" \
		"$(log_seconds "$log" 'fit stage dti: .* on \([0-9]*\) thread') thread(s)"
	awk -v dti="$(log_seconds "$log" 'fit stage dti: \([0-9.]*\) s')" \
	    -v resp="$(log_seconds "$log" 'fit stage response: \([0-9.]*\) s')" \
	    -v csd="$(log_seconds "$log" 'fit stage csd: \([0-9.]*\) s')" \
	    -v inputs="$(log_seconds "$log" 'loaded and fitted in \([0-9.]*\) s')" \
	    -v written="$(log_seconds "$log" 'results written in \([0-9.]*\) s')" \
	    -v total="$(log_seconds "$log" 'fit written to .* in \([0-9.]*\) s')" \
	    -v dti_voxels="$(log_seconds "$log" 'fit stage dti: [0-9.]* s (\([0-9]*\) voxels')" \
	    -v fitted="$(json_number "$ph/fit/response.json" fitted_voxels)" \
	    -v d_load="$(json_number "$dipy_json" load)" -v d_dti="$(json_number "$dipy_json" dti)" \
	    -v d_resp="$(json_number "$dipy_json" response)" \
	    -v d_csd="$(json_number "$dipy_json" csd)" \
	    -v d_fitted="$(json_number "$dipy_json" fitted_voxels)" \
	    -v d_version="$(json_string "$dipy_json" dipy)" -v note="$dipy_note" '
	function row(name, t, d) {
		if (d == "")
			printf "  %-20s %9.3f %9s\n", name, t, "-"
		else
			printf "  %-20s %9.3f %9.3f %8.1fx\n", name, t, d, d / t
	}
	BEGIN {
		# What the inputs took beyond the fit stages is reading the files.
		load = inputs - dti - resp - csd
		d_model = d_load == "" ? "" : d_dti + d_resp + d_csd
		printf "  %-20s %9s %9s %9s\n", "stage (seconds)", "tractd", "dipy", "speedup"
		row("load", load, d_load)
		row("dti", dti, d_dti)
		row("response", resp, d_resp)
		row("csd", csd, d_csd)
		row("dti+response+csd", dti + resp + csd, d_model)
		row("write (tractd only)", written, "")
		row("total", total, d_load == "" ? "" : d_load + d_model)
		printf "  tractd: dti %d voxels (%.0f/s), csd %d voxels (%.0f/s)\n",
		       dti_voxels, dti_voxels / dti, fitted, fitted / csd
		if (d_load != "")
			printf "  dipy %s, one process: csd %d voxels (%.0f/s)\n", d_version,
			       d_fitted, d_fitted / d_csd
		print "  " note
	}'
}
fit_case=${BENCH_FIT_CASE:-stanford}
# Not "|| bench_fit": set -e would not apply inside it.
if [ "$fit_case" != none ]; then
	bench_fit "$fit_case"
fi

# The bootstrap getter (OPDT, sh_order 4, repulsion724: GPUStreamlines' default
# --dg boot job) on the raw DWI of the fit phantom: BENCH_BOOT_CASE (default
# stanford; small; none) with BENCH_BOOT_SEEDS seeds (default 100000; lavapipe
# needs minutes for that many). Cold run, then warm (pipeline cache on disk);
# a daemon with the inputs cached skips load, upload and compile, so its job
# takes the warm run's track + write.
bench_boot() { # CASE
	case $1 in
	small)    grid=48,48,24;  b0s=6;  directions=64;  bvalue=1000 ;;
	stanford) grid=81,106,76; b0s=10; directions=150; bvalue=2000 ;;
	*) echo "unknown boot case $1" >&2; exit 2 ;;
	esac
	ph="$dir/fit_$1"
	[ -f "$ph/job_dwi.json" ] || "$tractd" -q phantom --dim "$grid" --b0s "$b0s" \
		--directions "$directions" --bvalue "$bvalue" --sphere repulsion724 --uncompressed "$ph"
	seeds=${BENCH_BOOT_SEEDS:-100000}
	abs=$(cd "$ph" && pwd)
	cat >"$ph/job_boot.json" <<JOB
{"inputs": {"dwi": "$abs/dwi.nii", "bvals": "$abs/dwi.bval", "bvecs": "$abs/dwi.bvec",
            "mask": "$abs/mask.nii"},
 "direction_getter": "boot", "model": {"name": "opdt", "sh_order": 4},
 "seeds": {"roi": "$abs/seed_roi.nii", "count": $seeds, "rng_seed": 0},
 "tracking": {"sphere": "repulsion724", "pmf_threshold": 0.1}}
JOB
	echo
	echo "boot (OPDT, order 4), $1 phantom: $(echo "$grid" | tr , x), $((b0s + directions))" \
		"volumes, repulsion724, $seeds seeds"
	printf '  %-5s %11s %8s %8s %8s %8s %8s %8s %10s\n' run streamlines load upload compile \
		track write total seeds/s
	for run in cold warm; do
		stats="$ph/boot_$run.json"
		# shellcheck disable=SC2086
		if ! "$tractd" -q run "$ph/job_boot.json" -o "$ph/boot.trk" --stats-json "$stats" \
			$device_opt 2>"$ph/boot_err.txt"; then
			echo "  skipped: $(tail -n 1 "$ph/boot_err.txt")"
			return 0
		fi
		awk -v r="$run" -v sl="$(json_number "$stats" streamlines)" \
		    -v n="$(json_number "$stats" seeds)" -v l="$(json_number "$stats" load)" \
		    -v u="$(json_number "$stats" upload)" -v co="$(json_number "$stats" compile)" \
		    -v t="$(json_number "$stats" track)" -v w="$(json_number "$stats" write)" 'BEGIN {
			printf "  %-5s %11d %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %10.0f\n",
			       r, sl, l, u, co, t, w, l + u + co + t + w, n / t }'
	done
	echo "  device: $(json_string "$stats" device); warm daemon job = track + write"
}
boot_case=${BENCH_BOOT_CASE:-stanford}
if [ "$boot_case" != none ]; then
	bench_boot "$boot_case"
fi

# PTT next to prob on the same phantom ODF and seeds, both at PTT's max_angle
# of 20 degrees (job_ptt.json): BENCH_PTT_CASE (default small; medium,
# stanford; none) with BENCH_PTT_SEEDS seeds (default 10000). Cold run, then
# warm; the warm run is reported.
bench_ptt() { # CASE
	bench_case "$1"
	seeds=${BENCH_PTT_SEEDS:-10000}
	echo
	echo "ptt and prob, $1 phantom: $(echo "$grid" | tr , x), $sphere, $seeds seeds, max_angle 20"
	printf '  %-5s %11s %8s %8s %10s %12s\n' getter streamlines compile track seeds/s steps/s
	for getter in prob ptt; do
		sed -e "s/\"direction_getter\": *\"prob\"/\"direction_getter\": \"$getter\"/" \
		    -e "s/\"count\": *[0-9]*/\"count\": $seeds/" \
		    -e "s/\"sphere\": *\"\([^\"]*\)\"/\"sphere\": \"\1\", \"max_angle\": 20/" \
		    "$ph/job.json" > "$ph/job_bench_$getter.json"
		stats="$ph/bench_$getter.json"
		for run in cold warm; do
			# shellcheck disable=SC2086
			if ! "$tractd" -q run "$ph/job_bench_$getter.json" -o "$ph/bench_$getter.trk" \
				--stats-json "$stats" $device_opt 2>"$ph/bench_err.txt"; then
				echo "  $getter skipped: $(tail -n 1 "$ph/bench_err.txt")"
				continue 2
			fi
		done
		awk -v g="$getter" -v sl="$(json_number "$stats" streamlines)" \
		    -v n="$(json_number "$stats" seeds)" -v p="$(json_number "$stats" points)" \
		    -v co="$(json_number "$stats" compile)" -v t="$(json_number "$stats" track)" 'BEGIN {
			printf "  %-5s %11d %8.3f %8.3f %10.0f %12.0f\n", g, sl, co, t, n / t, p / t }'
	done
	echo "  device: $(json_string "$stats" device) (warm runs; steps = points written)"
}
ptt_case=${BENCH_PTT_CASE:-small}
if [ "$ptt_case" != none ]; then
	bench_ptt "$ptt_case"
fi

# Any size: prob on an HCP-sized phantom (145x174x145, repulsion724: a 9.9 GiB
# ODF, over one binding and one allocation on every device) with
# BENCH_SIZE_SEEDS seed counts (default "1000000 10000000"), end to end (read
# the ODF, upload it in pages, track, write the TRK), with the storage the job
# picked, the peak GPU memory tractd allocated and the process's peak resident
# memory. BENCH_SIZE_CASE: a case of bench/cases.sh (hcp, the default where a
# GPU is listed; stanford; mid, 96x96x60 with a 1.5 GiB ODF, tries the section
# on lavapipe with BENCH_SIZE_SEEDS=300...) or none (the default on CPU-only
# machines); BENCH_SIZE_STORAGE: tracking.odf_storage (default auto). The
# phantom's ODF takes ~10 GiB of disk and a minute to write; the TRK of 10
# million seeds ~8 GiB. BENCH_SIZE_DEVICES (e.g. "0,1") adds a run of the last
# seed count spread over those devices, for the multi-GPU speed-up.
# BENCH_SIZE_GPU_MEMORY (default "16G 16G:15G"; empty skips) adds a run of the
# last seed count for each LIMIT[:BUDGET] as if the device had LIMIT bytes
# (--gpu-memory; a 16 GB card), with the job's budget BUDGET
# (--gpu-memory-budget; default half the limit). The ODF is an uncompressed
# .nii, which `tractd run` reads in slabs while it uploads them (README,
# "Speed"): load is then the other inputs and the seeds, and upload reading
# and uploading the ODF together; host_GiB shows that the host no longer
# holds the whole ODF. BENCH_SIZE_BASELINE (another tractd, e.g. one built
# before the slabs) runs each case with it too, in turns with this one
# (column build: base, this).
bench_size() { # CASE
	bench_case "$1"
	storage=${BENCH_SIZE_STORAGE:-auto}
	echo
	echo "any size: prob, $1 phantom $(echo "$grid" | tr , x), $sphere," \
		"odf_storage $storage, end to end"
	printf '  %-5s %-9s %-8s %-9s %-8s %11s %8s %8s %8s %8s %8s %8s %8s %8s %8s %10s %9s %9s\n' \
		build seeds devices limit storage streamlines load upload compile track encode \
		write kernels on_gpu total seeds/s gpu_GiB host_GiB
	# Each run: SEEDS:DEVICES:LIMIT:BUDGET, - for the default.
	runs=""
	for n in ${BENCH_SIZE_SEEDS:-1000000 10000000}; do runs="$runs $n:-:-:-"; last=$n; done
	[ -n "${BENCH_SIZE_DEVICES:-}" ] && runs="$runs $last:$BENCH_SIZE_DEVICES:-:-"
	for m in ${BENCH_SIZE_GPU_MEMORY-16G 16G:15G}; do
		case $m in
		*:*) runs="$runs $last:-:$m" ;;
		*)   runs="$runs $last:-:$m:-" ;;
		esac
	done
	builds="this"
	[ -n "${BENCH_SIZE_BASELINE:-}" ] && builds="base this"
	for r in $runs; do for build in $builds; do
		n=$(echo "$r" | cut -d: -f1) devs=$(echo "$r" | cut -d: -f2)
		limit=$(echo "$r" | cut -d: -f3) budget=$(echo "$r" | cut -d: -f4)
		bin=$tractd
		[ "$build" = base ] && bin=$BENCH_SIZE_BASELINE
		cat >"$ph/job_$n.json" <<JOB
{"inputs": {"odf": "$abs/odf.nii", "stop_map": "$abs/fa.nii"},
 "seeds": {"roi": "$abs/seed_roi.nii", "count": $n, "rng_seed": 0},
 "tracking": {"sphere": "$sphere", "odf_storage": "$storage"}}
JOB
		opt=$device_opt
		[ "$devs" != - ] && opt="--device $devs"
		[ "$limit" != - ] && opt="$opt --gpu-memory $limit"
		[ "$budget" != - ] && opt="$opt --gpu-memory-budget $budget"
		label=$limit
		[ "$budget" != - ] && label="$limit/$budget"
		stats="$ph/stats_$n.json"
		# Replacing a multi-GiB file would time its unlink too.
		rm -f "$ph/tracks.trk"
		start=$(now)
		# shellcheck disable=SC2086
		if ! "$bin" -q run "$ph/job_$n.json" -o "$ph/tracks.trk" --stats-json "$stats" \
			$opt 2>"$ph/err.txt"; then
			echo "  $build $n ($label): skipped: $(tail -n 1 "$ph/err.txt")"
			continue
		fi
		wall=$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')
		awk -v b="$build" -v n="$n" -v d="$(json_number "$stats" devices)" -v lim="$label" \
		    -v st="$(json_string "$stats" odf_storage)" \
		    -v sl="$(json_number "$stats" streamlines)" -v l="$(json_number "$stats" load)" \
		    -v u="$(json_number "$stats" upload)" -v co="$(json_number "$stats" compile)" \
		    -v t="$(json_number "$stats" track)" -v e="$(json_number "$stats" encode)" \
		    -v w="$(json_number "$stats" write)" \
		    -v k="$(json_number "$stats" kernels)" \
		    -v dev="$(json_device_seconds "$stats" track)" \
		    -v tot="$wall" -v g="$(json_number "$stats" gpu_peak_bytes)" \
		    -v h="$(json_number "$stats" host_peak_bytes)" 'BEGIN {
			printf "  %-5s %-9d %-8d %-9s %-8s %11d %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8s %8.3f %10.0f %9.2f %9.2f\n",
			       b, n, d, lim, st, sl, l, u, co, t, e, w, k, dev == "" ? "-" : sprintf("%.3f", dev),
			       tot, n / (t + e + w), g / 2^30, h / 2^30 }'
	done; done
	echo "  device: $(json_string "$stats" device); limit = --gpu-memory[/--gpu-memory-budget];" \
		"total = wall time of the whole command; the writer threads encode (on all cores)" \
		"and write while the GPU tracks, so track + encode + write is the run's wall time" \
		"and seeds/s is taken over it;" \
		"kernels = time in the GPU's submits; on_gpu = the track kernel's own time on the" \
		"device's clock (its timestamps; - from a build without them); gpu_GiB = the most tractd's buffers held on" \
		"a device (within the limit); host_GiB = the process's peak resident memory (on" \
		"lavapipe the 'GPU' memory too); the TRK is deleted afterwards"
	rm -f "$ph/tracks.trk"
}
# Hours on lavapipe: by default only where a GPU is listed.
if "$tractd" devices 2>/dev/null | cut -f 2 | grep -qv '^cpu$'; then
	size_case=${BENCH_SIZE_CASE:-hcp}
else
	size_case=${BENCH_SIZE_CASE:-none}
	[ "$size_case" = none ] && echo && echo "any size: skipped on a CPU-only machine" \
		"(BENCH_SIZE_CASE=hcp runs it)"
fi
if [ "$size_case" != none ]; then
	bench_size "$size_case"
fi

# TRX float16 against TRK end to end, on the any-size case's phantom (where a
# GPU is listed): bench/trx.sh and its BENCH_TRX_* settings (BENCH_TRX_CASE=none
# skips it).
trx_case=${BENCH_TRX_CASE:-$size_case}
if [ "$trx_case" != none ]; then
	BENCH_TRX_CASE=$trx_case "$(dirname "$0")/trx.sh" "$tractd"
fi

# A warm daemon's big job (the any-size case's phantom, 10 M seeds, where a GPU
# is listed): bench/warm_big.sh and its BENCH_WARM_BIG_* settings
# (BENCH_WARM_BIG_CASE=none skips it).
warm_big_case=${BENCH_WARM_BIG_CASE:-$size_case}
if [ "$warm_big_case" != none ]; then
	echo
	BENCH_WARM_BIG_CASE=$warm_big_case "$(dirname "$0")/warm_big.sh" "$tractd"
fi

# The encoders alone, on the CPU (no GPU; also `make bench-encode`):
# BENCH_ENCODE_STREAMLINES (default 1000000; 0 skips) synthetic streamlines of
# 20-100 points as TRK, TCK and TRX float16, to a file in BENCH_DIR and to
# /dev/null, one writer call per streamline and through the parallel encoder
# on 1 and on all CPUs (bench/encode.c; BENCH_ENCODE_FORMATS, e.g. trx-f16,
# only those).
encode_n=${BENCH_ENCODE_STREAMLINES:-1000000}
if [ "$encode_n" != 0 ]; then
	echo
	# shellcheck disable=SC2086
	"$(dirname "$tractd")/bench-encode" "$encode_n" "$dir" ${BENCH_ENCODE_FORMATS:-}
fi

# Cluster work on this host without Slurm (README "Slurm"): one job split in
# shards run at once over the GPUs and merged, and a cohort through one pilot
# daemon against a process per subject. bench/cluster.sh documents its
# BENCH_SHARD_* and BENCH_COHORT_* settings (BENCH_SHARD_CASE=none and
# BENCH_COHORT_SUBJECTS=0 skip them); it also runs alone.
"$(dirname "$0")/cluster.sh" "$tractd"
