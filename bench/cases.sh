# shellcheck shell=sh disable=SC2154  # tractd and dir: the sourcing script's
# bench/cases.sh: the synthetic phantom cases the benchmarks share, sourced
# by bench/bench.sh, cluster.sh, trx.sh and warm_big.sh (after they set
# $tractd and $dir).
# bench_case CASE sets grid, sphere and seeds (the seeds.count of the case's
# job.json) for tiny (24x24x16, for the tests on lavapipe), small (48x48x24),
# medium (64x64x40), stanford (81x106x76, Stanford HARDI's grid), mid
# (96x96x60, a 1.5 GiB ODF to try the any-size section on lavapipe) or hcp
# (145x174x145, HCP's grid: a 9.9 GiB ODF, ~10
# GiB of disk and a minute to write), and ph, the case's directory
# $dir/CASE (abs: the same, absolute), where the phantom's ODF, stop map and
# seed ROI (no DWI) are made once, uncompressed; an unknown case exits 2.
# prob_job FILE COUNT [MEMBERS] then writes a prob job on the case's files
# with COUNT seeds (rng_seed 0) and MEMBERS after its tracking (e.g.
# ', "output": {...}').
bench_case() { # CASE
	case $1 in
	tiny)     grid=24,24,16;    sphere=symmetric362; seeds=300 ;;
	small)    grid=48,48,24;    sphere=symmetric362; seeds=10000 ;;
	medium)   grid=64,64,40;    sphere=repulsion724; seeds=20000 ;;
	stanford) grid=81,106,76;   sphere=repulsion724; seeds=100000 ;;
	mid)      grid=96,96,60;    sphere=repulsion724; seeds=1000 ;;
	hcp)      grid=145,174,145; sphere=repulsion724; seeds=1000000 ;;
	*) echo "unknown case $1" >&2; exit 2 ;;
	esac
	ph="$dir/$1"
	[ -f "$ph/job.json" ] || "$tractd" -q phantom --dim "$grid" --sphere "$sphere" \
		--seeds "$seeds" --uncompressed --no-dwi "$ph"
	abs=$(cd "$ph" && pwd)
}

prob_job() { # FILE COUNT [MEMBERS]
	cat >"$1" <<JOB
{"inputs": {"odf": "$abs/odf.nii", "stop_map": "$abs/fa.nii"},
 "seeds": {"roi": "$abs/seed_roi.nii", "count": $2, "rng_seed": 0},
 "tracking": {"sphere": "$sphere"}${3:-}}
JOB
}
