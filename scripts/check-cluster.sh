#!/bin/sh
# make check-cluster: starts a one-node Slurm cluster (munged, slurmctld and
# slurmd of Debian's slurm-wlm in the foreground, no systemd; the node's one
# GPU a GRES without a device file: tractd takes lavapipe) in a temporary
# directory, runs scripts/slurm/'s two kinds of work through sbatch and
# compares them with `tractd run`; the cluster is torn down however it ends.
# Needs root (slurmd runs jobs as their user) and BUILD's tractd, tractctl.
set -eu
[ "$(id -u)" -eq 0 ] || { echo "check-cluster: needs root (slurmd, munged)" >&2; exit 1; }
for tool in munged slurmctld slurmd sbatch; do
	command -v "$tool" > /dev/null ||
		{ echo "check-cluster: $tool not found: scripts/install-deps.sh installs slurm-wlm, munge" >&2; exit 1; }
done
build=$(cd "${1:-build}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
PATH=$build:$PATH
export PATH
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tractd-cluster.XXXXXX")
pids=""

teardown() {
	status=$?
	for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in $pids; do wait "$pid" 2>/dev/null || true; done
	if [ "$status" -ne 0 ]; then
		for log in "$tmp"/*.log "$tmp"/work/*.slurm/logs/*.log "$tmp"/work/pilot-*.log; do
			[ -f "$log" ] && { echo "--- $log"; tail -n 20 "$log"; }
		done
		echo "check-cluster: FAILED" >&2
	fi
	rm -rf "$tmp"
	exit "$status"
}
trap teardown EXIT
trap 'exit 1' INT TERM HUP

fail() { echo "check-cluster: $*" >&2; exit 1; }
step() { echo "check-cluster: $* ($(($(date +%s) - started)) s)"; }
started=$(date +%s)

# munge: a fresh key, the daemon on its own socket (--force: as root).
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 2>/dev/null
chmod 0400 "$tmp/munge.key"
munged --foreground --force --key-file="$tmp/munge.key" --socket="$tmp/munge.sock" \
	--pid-file="$tmp/munged.pid" --log-file="$tmp/munged.log" --seed-file="$tmp/munge.seed" &
pids="$pids $!"

host=$(hostname -s)
port=$((20000 + $$ % 20000))
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/work"
cat > "$tmp/slurm.conf" <<CONF
ClusterName=tractdcheck
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Gres=gpu:1 State=UNKNOWN
PartitionName=check Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
echo "NodeName=$host Name=gpu File=/dev/null" > "$tmp/gres.conf"
SLURM_CONF=$tmp/slurm.conf
export SLURM_CONF
slurmctld -D -i -f "$SLURM_CONF" > "$tmp/slurmctld.out" 2>&1 &
pids="$pids $!"
slurmd -D -f "$SLURM_CONF" > "$tmp/slurmd.out" 2>&1 &
pids="$pids $!"
tries=0
until sinfo -h -o %t 2>/dev/null | grep -qx idle; do
	tries=$((tries + 1))
	[ "$tries" -lt 150 ] || fail "the node did not become idle: $(sinfo 2>&1)"
	sleep 0.2
done
step "cluster up"

work=$tmp/work
XDG_CACHE_HOME=$tmp/cache # the jobs' shared pipeline cache (sbatch exports the environment)
export XDG_CACHE_HOME
tractd phantom "$work/ph" --dim 24,24,16 --seeds 400 -q
tractd run "$work/ph/job.json" -o "$work/single.trk" -q
step "single run done"

# A sharded job, and a cohort of two subjects (one in a session) and one that fails.
ids=$(sh "$src/scripts/slurm/tractd-slurm" submit "$work/ph/job.json" --shards 3 \
	--output "$work/merged.trk" -- --time=5)
echo "$ids"
for s in sub-01/dwi/sub-01 sub-02/ses-1/dwi/sub-02_ses-1; do
	mkdir -p "$work/bids/$(dirname "$s")"
	for ext in nii.gz bval bvec; do cp "$work/ph/dwi.$ext" "$work/bids/${s}_dwi.$ext"; done
	printf '%s\t%s\n' "$work/bids/${s}_dwi.nii.gz" "$work/ph/mask.nii.gz"
done > "$work/subjects.txt"
printf '%s\t%s\n' "$work/bids/sub-03/dwi/sub-03_dwi.nii.gz" "$work/ph/mask.nii.gz" >> "$work/subjects.txt"
pilot=$(sbatch --parsable --array=0-1 --time=5 --output="$work/pilot-%a.log" \
	"$src/scripts/slurm/tractd-pilot" "$work/subjects.txt" "$work/derivatives" --seeds 200 --rng-seed 3)
echo "pilot $pilot"

tries=0
while [ -n "$(squeue -h -o %i)" ]; do
	tries=$((tries + 1))
	[ "$tries" -lt 600 ] || fail "jobs still queued or running after 120 s: $(squeue)"
	sleep 0.2
done
step "jobs done"

cmp "$work/single.trk" "$work/merged.trk" || fail "merged.trk differs from the single run"
[ ! -e "$work/merged.trk.slurm/parts" ] || fail "the merge job left its parts"
grep -q '"shards": 3' "$work/merged.trk.stats.json" || fail "merged.trk.stats.json: no \"shards\": 3"
for s in sub-01/dwi/sub-01 sub-02/ses-1/dwi/sub-02_ses-1; do
	out=$work/derivatives/${s}_tractography
	tractd track "$work/bids/${s}_dwi.nii.gz" "$work/ref.trx" --mask "$work/ph/mask.nii.gz" \
		--seeds 200 --rng-seed 3 -q
	cmp "$work/ref.trx" "$out.trx" || fail "$out.trx differs from tractd track's"
	grep -q '"rng_seed": 3' "$out.json" || fail "$out.json: no rng_seed 3 in the sidecar"
	rm "$work/ref.trx"
done
failed=$(cat "$work/derivatives/failed-${pilot}"_*.txt)
[ "$failed" = "$(tail -n 1 "$work/subjects.txt")" ] ||
	fail "the failed lists hold '$failed', not sub-03's line"
step "passed: merged shards and cohort outputs equal tractd's"
