#!/bin/sh
# Byte comparison of the phantom's fixed jobs (prob, boot, ptt, DWI) between
# two tractd binaries: the proof a refactor leaves outputs unchanged.
# Usage: scripts/compare-outputs.sh BEFORE AFTER [DIR]   (DIR: scratch, default
# build/compare); exits 1 at the first job whose TRKs differ.
set -eu
before=$1 after=$2 dir=${3:-build/compare}
mkdir -p "$dir"
[ -f "$dir/ph/job.json" ] || "$after" -q phantom --sphere repulsion100 "$dir/ph"
for job in job job_boot job_ptt job_dwi; do
	"$before" -q run "$dir/ph/$job.json" -o "$dir/$job-before.trk"
	"$after" -q run "$dir/ph/$job.json" -o "$dir/$job-after.trk"
	if cmp -s "$dir/$job-before.trk" "$dir/$job-after.trk"; then
		echo "$job: identical ($(wc -c < "$dir/$job-after.trk") bytes)"
	else
		echo "$job: DIFFERENT"
		exit 1
	fi
done
