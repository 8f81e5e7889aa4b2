#!/bin/sh
# The streamed ODF's upload to several GPUs from one shared host copy
# (issue 24, README "Several GPUs share one host copy") against each device
# copying the file itself, in one build: the test hook
# TRACTD_FAULT_HOST_IMPORT=0 refuses every import, which gives the
# per-device path. For each: one device, then the devices of $ODF_SHARE_DEVICES,
# $ODF_SHARE_REPEATS runs in turns; prints the upload phase, the whole run,
# each device's staging line from `tractd -v` and the TRK's md5 (equal in
# every row). Python 3's standard library only (the GPU host has nothing
# else).
# Usage: bench/odf_share.sh [TRACTD]; ODF_SHARE_DIM (145,174,145: the
# HCP-sized 10 GB ODF), ODF_SHARE_SEEDS (10000000), ODF_SHARE_DEVICES (0,1),
# ODF_SHARE_REPEATS (2), BENCH_DIR (build/bench). On lavapipe:
# TRACTD_GPU_KERNELS=1 ODF_SHARE_DEVICES=0,0 ODF_SHARE_DIM=48,48,24
# ODF_SHARE_SEEDS=2000 ODF_SHARE_REPEATS=1.
set -eu
tractd=${1:-build/tractd}
dim=${ODF_SHARE_DIM:-145,174,145}
seeds=${ODF_SHARE_SEEDS:-10000000}
devices=${ODF_SHARE_DEVICES:-0,1}
repeats=${ODF_SHARE_REPEATS:-2}
dir=${BENCH_DIR:-build/bench}/odf_share_$(echo "$dim" | tr , x)
ph=$dir/ph

if [ ! -f "$ph/odf.nii" ]; then
	echo "phantom $dim (uncompressed float32 ODF on repulsion724) in $ph..." >&2
	"$tractd" -q phantom --dim "$dim" --sphere repulsion724 --uncompressed --no-dwi "$ph"
fi
python3 - "$ph" "$seeds" "$dir/job.json" <<'PY'
import json, sys
ph, seeds, out = sys.argv[1:4]
job = {"inputs": {"odf": ph + "/odf.nii", "stop_map": ph + "/fa.nii"},
       "seeds": {"roi": ph + "/seed_roi.nii", "count": int(seeds), "rng_seed": 0},
       "tracking": {"sphere": "repulsion724", "odf_storage": "float32"}}
json.dump(job, open(out, "w"))
PY

# NAME DEVICES [VAR=VALUE]: one run, one line, its staging lines below.
run() {
	name=$1 devs=$2
	shift 2
	rm -f "$dir/t.trk"
	start=$(date +%s.%N)
	env "$@" "$tractd" -v run "$dir/job.json" -o "$dir/t.trk" --device "$devs" \
		--stats-json "$dir/$name.json" >"$dir/$name.log" 2>&1
	end=$(date +%s.%N)
	python3 - "$dir/$name.json" "$name" "$start" "$end" <<'PY'
import json, sys
path, name, start, end = sys.argv[1:5]
s = json.load(open(path))["seconds"]
print(f"{name:10s} wall {float(end) - float(start):6.2f} s  upload {s['upload']:.3f} s  "
      f"track {s['track']:.3f} s", end="  ")
PY
	md5sum "$dir/t.trk" | cut -c1-12
	grep -o "ODF transposed on the GPU.*" "$dir/$name.log" | sed 's/^/    /' | cut -c1-330
	rm -f "$dir/t.trk"
}

for r in $(seq "$repeats"); do
	run "one_$r" 0
	run "own_$r" "$devices" TRACTD_FAULT_HOST_IMPORT=0
	run "shared_$r" "$devices" TRACTD_FAULT_HOST_IMPORT=
done
