#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the Slurm backend's tests (tests/e2e/test_slurm.py).
#
#   bash .ci/slurm_cluster.sh start    # as root; needs Debian's slurmctld slurmd munge slurm-client
#   bash .ci/slurm_cluster.sh status
#   bash .ci/slurm_cluster.sh stop
#
# Everything lives in one folder, $SLURM_CLUSTER_DIR (default /tmp/byol-gamma-slurm): slurm.conf, a private
# munged (its own key and socket) and the daemons' state, spool, logs and pid files. Nothing under /etc is
# read or changed, and the ports are not Slurm's defaults, so a system Slurm or munge on the same machine is
# left alone. Slurm's commands find this cluster through SLURM_CONF=$SLURM_CLUSTER_DIR/slurm.conf, the path
# `start` prints; tests/e2e/test_slurm.py looks there when SLURM_CONF is not set.
#
# `start` is idempotent: a cluster that answers is left running; one that does not (a stale folder, a dead
# daemon) is stopped and started afresh. `stop` cancels the cluster's jobs, ends its daemons (by the pids
# they recorded) and removes the folder.
set -euo pipefail

DIR=${SLURM_CLUSTER_DIR:-/tmp/byol-gamma-slurm}
CONF=$DIR/slurm.conf
# Written first by `start`: `stop` removes only a folder that has it, never one a mistyped SLURM_CLUSTER_DIR names.
MARKER=$DIR/.slurm_cluster
CTLD_PORT=${SLURM_CLUSTER_CTLD_PORT:-16817}
SLURMD_PORT=${SLURM_CLUSTER_SLURMD_PORT:-16818}
NODE=$(hostname -s)
PARTITION=debug
export SLURM_CONF=$CONF

say() { echo "slurm_cluster: $*" >&2; }

# The daemons in the order they are stopped (the reverse of starting).
DAEMONS=(slurmd slurmctld munged)

pid_of() {
  # The daemon's pid, from its pid file, if that process is still this daemon (not a later one given its pid).
  local file=$DIR/run/$1.pid pid
  [[ -s $file ]] || return 1
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] || return 1
  echo "$pid"
}

answers() {
  # The controller answers and the node is ready for jobs (idle, or busy with some).
  [[ -f $CONF ]] && pid_of slurmctld >/dev/null && pid_of slurmd >/dev/null || return 1
  local state
  state=$(timeout 10 sinfo -h -n "$NODE" -o %t 2>/dev/null) || return 1
  [[ $state =~ ^(idle|mix|alloc)$ ]]
}

stop_cluster() {
  if [[ -f $CONF ]] && pid_of slurmctld >/dev/null; then
    # Jobs first: their slurmstepd processes outlive slurmd otherwise.
    local jobs
    jobs=$(timeout 10 squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ') || true
    if [[ -n ${jobs// } ]]; then
      # shellcheck disable=SC2086
      timeout 10 scancel $jobs 2>/dev/null || true
      for _ in $(seq 50); do
        [[ -z $(timeout 10 squeue -h -t all -o %T 2>/dev/null | grep -vE '^(COMPLETED|CANCELLED|FAILED|TIMEOUT|NODE_FAIL|PREEMPTED|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)$') ]] && break
        sleep 0.2
      done
    fi
  fi
  local name pid
  for name in "${DAEMONS[@]}"; do
    pid=$(pid_of "$name") || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  done
  if [[ -e $DIR ]]; then
    if [[ ! -f $MARKER ]] && [[ -n $(ls -A "$DIR") ]]; then
      say "$DIR was not made by this script: not removing it"
      exit 1
    fi
    rm -rf "$DIR"
  fi
}

write_config() {
  local cpus memory
  cpus=$(nproc)
  # What slurmd itself measures, less a margin: a node configured with more memory than slurmd finds is drained.
  memory=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  memory=$(( ${memory:-2048} * 9 / 10 ))
  cat >"$CONF" <<EOF
# A one-node test cluster written by .ci/slurm_cluster.sh.
ClusterName=byolgamma
# The address in parentheses: clients and daemons need not resolve the host name.
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job may start again only once the credential of its last start expires (default
# 120 s, the minimum is 5).
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=5
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in a container: processes are tracked through /proc, tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=512
# Start jobs as soon as they are submitted or resources free up, rather than on the next periodic pass.
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=1,defer_batch=0
# submitit requeues a checkpointed job with scontrol requeue.
JobRequeue=1
KillWait=5
MinJobAge=60
MessageTimeout=10
SlurmdTimeout=60
SlurmctldTimeout=60
InactiveLimit=0
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start_munge() {
  mkdir -p "$DIR/munge"
  chmod 755 "$DIR/munge"  # the socket is for every local user; the key inside stays 600
  # A fresh key per cluster; munged insists that only its owner can read it.
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile="$DIR/munge/munge.key"
  else  # munge before 0.5.14
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 600 "$DIR/munge/munge.key"
  # --force: past munged's permission checks of the folders above its socket, which a SLURM_CLUSTER_DIR inside a
  # private folder (mktemp -d) fails; only root uses this cluster's key and socket.
  munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
  for _ in $(seq 50); do
    [[ -S $DIR/munge/munge.socket ]] && break
    sleep 0.1
  done
  if ! munge -n --socket="$DIR/munge/munge.socket" | unmunge --socket="$DIR/munge/munge.socket" >/dev/null; then
    say "munged does not answer; its log:"
    tail -n 20 "$DIR/log/munged.log" >&2 || true
    exit 1
  fi
}

start_cluster() {
  if [[ $(id -u) != 0 ]]; then
    say "start needs root (slurmd runs jobs as their submitter)"
    exit 1
  fi
  local tool
  for tool in slurmctld slurmd munged munge sinfo squeue scontrol scancel sbatch; do
    command -v "$tool" >/dev/null || {
      say "$tool not found: apt-get install -y slurmctld slurmd munge slurm-client"
      exit 1
    }
  done
  if answers; then
    say "already running"
    echo "$CONF"
    return
  fi
  stop_cluster
  mkdir -p "$DIR"
  touch "$MARKER"
  mkdir -p "$DIR"/{state,spool,run,log}
  write_config
  start_munge
  # -c: no state from an earlier cluster; -i: start even if saved state cannot be read.
  slurmctld -c -i -f "$CONF"
  slurmd -f "$CONF" -N "$NODE"
  local state=''
  for _ in $(seq 150); do
    state=$(timeout 10 sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
    [[ $state == idle ]] && break
    sleep 0.2
  done
  if [[ $state != idle ]]; then
    say "node $NODE is not idle after 30 s (state: ${state:-no answer}); the daemons' logs:"
    tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
    exit 1
  fi
  say "node $NODE idle in partition $PARTITION ($(sinfo -V)); use it with: export SLURM_CONF=$CONF"
  echo "$CONF"
}

case ${1:-} in
  start) start_cluster ;;
  stop) stop_cluster ;;
  status)
    if answers; then
      sinfo
      echo "SLURM_CONF=$CONF"
    else
      say "not running (no cluster answers at $CONF)"
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
