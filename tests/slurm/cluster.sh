#!/usr/bin/env bash
# A one-node Slurm cluster on the loopback, private to one folder: its own
# munge daemon (own key and socket), slurmctld and slurmd, as the current
# user, on free ports. Debian 12 packages: slurmctld slurmd slurm-client munge.
# The node declares two GPUs (GRES) backed by /dev/null and /dev/zero: Slurm
# schedules --gres=gpu:N jobs on them and sets CUDA_VISIBLE_DEVICES and
# SLURM_JOB_GPUS as on a GPU node (no cgroups here, so nothing is fenced).
#   cluster.sh start DIR    writes DIR/slurm.conf and DIR/env.sh (source it for sbatch & co)
#   cluster.sh stop DIR
set -euo pipefail
cmd=$1; DIR=$(realpath -m "$2")
stop() {
  for pid in "$DIR"/*.pid; do
    [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
  done
  sleep 1
  for pid in "$DIR"/*.pid; do
    [ -f "$pid" ] && kill -9 "$(cat "$pid")" 2>/dev/null || true
  done
  rm -f "$DIR"/*.pid
}
if [ "$cmd" = stop ]; then stop; exit 0; fi

mkdir -p "$DIR"/{state,spool,munge}
chmod 0700 "$DIR/munge"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(free_port); SLURMD_PORT=$(free_port)
USER_NAME=$(id -un)
NODE=tbnode
CPUS=$(nproc)

# munge: a fresh key; --force because the folders above may be world-writable (/tmp).
dd if=/dev/urandom bs=1 count=1024 of="$DIR/munge/munge.key" status=none
chmod 0400 "$DIR/munge/munge.key"
munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munge/munge.seed"

cat > "$DIR/slurm.conf" <<CONF
ClusterName=trainbench-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$USER_NAME
SlurmdUser=$USER_NAME
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
SlurmctldTimeout=30
SlurmdTimeout=30
GresTypes=gpu
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$(hostname -s) CPUs=$CPUS RealMemory=1024 Gres=gpu:2 State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
cat > "$DIR/gres.conf" <<GRES
NodeName=$NODE Name=gpu File=/dev/null
NodeName=$NODE Name=gpu File=/dev/zero
GRES
cat > "$DIR/env.sh" <<ENV
export SLURM_CONF=$DIR/slurm.conf
ENV
export SLURM_CONF=$DIR/slurm.conf
slurmctld -i > "$DIR/slurmctld.out" 2>&1
slurmd -N "$NODE" > "$DIR/slurmd.out" 2>&1 || true  # a slurmd that cannot start is told below
# Up when the node is idle; a slurmd that gave up is not waited for.
failed() { grep -qs "slurmd initialization failed" "$DIR/slurmd.log"; }
for _ in $(seq 1 60); do
  failed && break
  if sinfo -h -N -o '%T' 2>/dev/null | grep -qx idle; then exit 0; fi
  sleep 0.5
done
# slurmd needs a cgroup mount even with proctrack/linuxproc (Slurm 22.05); a
# container without one cannot run this cluster: skipped (77), with the reason.
cgroup=$(grep -h -i -m1 cgroup "$DIR/slurmd.log" "$DIR/slurmd.out" 2>/dev/null || true)
if [ -n "$cgroup" ] && failed; then
  echo "skipped: slurmd cannot start without a cgroup mount here (a container?): $cgroup"
  stop
  exit 77
fi
echo "slurm test cluster did not come up; logs in $DIR:" >&2
tail -20 "$DIR/slurmctld.log" "$DIR/slurmd.log" "$DIR/munged.log" >&2 || true
stop
exit 1
