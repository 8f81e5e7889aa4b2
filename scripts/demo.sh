#!/bin/sh
# Generates the built-in phantom and tracks it from its raw DWI (tractd fits
# DTI and CSD first): the end-to-end demo.
# Usage: scripts/demo.sh [TRACTD] [OUTDIR]
set -eu
tractd=${1:-build/tractd}
out=${2:-build/demo}
"$tractd" phantom "$out"
"$tractd" run "$out/job_dwi.json" -o "$out/tracks.trk" --stats-json "$out/stats.json"
echo "demo: wrote $out/tracks.trk (statistics in $out/stats.json)"
