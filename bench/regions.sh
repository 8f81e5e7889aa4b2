#!/bin/sh
# The cost of regions and max_cross (README's "Include and exclude regions"):
# tracks the phantom without them, with an include and an exclude sphere, and
# with max_cross 1, and prints each run's streamlines, rejections and track
# and kernel seconds. Each job runs twice; the second (pipelines cached) is
# the one printed.
# Usage: bench/regions.sh [TRACTD]; REGIONS_DIM (default 96,96,48) and
# REGIONS_SEEDS (default 200000) size the case, REGIONS_DIR (default
# build/bench-regions) holds it.
set -eu
tractd=${1:-build/tractd}
dir=${REGIONS_DIR:-build/bench-regions}
dim=${REGIONS_DIM:-96,96,48}
seeds=${REGIONS_SEEDS:-200000}
mkdir -p "$dir"
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
[ -f "$dir/ph/job.json" ] || "$tractd" -q phantom --dim "$dim" --no-dwi "$dir/ph"

# job NAME MEMBERS TRACKING: the phantom's job.json with seeds.count, MEMBERS
# before its tracking and TRACKING's members first in it.
job() {
	sed -e "s/\"count\": *[0-9]*/\"count\": $seeds/" \
	    -e "s|\"tracking\": *{|$2 \"tracking\": {$3|" \
	    -e 's|"odf.nii.gz"|"ph/odf.nii.gz"|; s|"fa.nii.gz"|"ph/fa.nii.gz"|' \
	    -e 's|"seed_roi.nii.gz"|"ph/seed_roi.nii.gz"|; s|"tracks.trk"|"'"$1"'.trk"|' \
	    "$dir/ph/job.json" > "$dir/$1.json"
}
rejected() { # FILE KEY -> the count of "rejected" (after stop_reasons), or -
	sed -n "/\"rejected\"/,/}/s/.*\"$2\": *\([0-9]*\).*/\1/p" "$1" | grep . || echo -
}

job free "" ""
job regions '"regions": {"include": [{"center": [0, 0, 0], "radius": 8}], "exclude": [{"center": [-20, -20, 0], "radius": 6}]},' ""
job max_cross1 "" '"max_cross": 1, '

printf '%-11s %11s %15s %16s %9s %9s\n' job streamlines rejected_excl rejected_missing track_s kernel_s
for name in free regions max_cross1; do
	for pass in 1 2; do
		"$tractd" -q run "$dir/$name.json" --stats-json "$dir/$name.stats.json"
	done
	s="$dir/$name.stats.json"
	printf '%-11s %11s %15s %16s %9.3f %9.3f\n' "$name" "$(json_number "$s" streamlines)" \
		"$(rejected "$s" exclude_region)" "$(rejected "$s" include_missing)" \
		"$(json_number "$s" track)" "$(json_number "$s" kernels)"
done
"$tractd" -q devices 2>/dev/null | head -n 3 || true
