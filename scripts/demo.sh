#!/bin/sh
# Generates the built-in phantom and tracks it from its raw DWI (tractd fits
# DTI and CSD first): the end-to-end demo. The phantom's jobs name the sphere
# it is written on, so it is written on repulsion724, the sphere a job gets by
# default: the demo tracks the way users' jobs do.
# Usage: scripts/demo.sh [TRACTD] [OUTDIR]
set -eu
tractd=${1:-build/tractd}
out=${2:-build/demo}
"$tractd" phantom --sphere repulsion724 "$out"
"$tractd" run "$out/job_dwi.json" -o "$out/tracks.trk" --stats-json "$out/stats.json"
echo "demo: wrote $out/tracks.trk (statistics in $out/stats.json)"
