#!/usr/bin/env bash
# A real single-host Slurm cluster for Virga's tests (internal/backend/slurm): two
# nodes, virga1 and virga2 (two slurmd on this host, 2 CPUs and 4000 MB each), and two
# partitions on both: "spot" (PriorityTier=1, preempted by requeue-or-cancel with a
# 15 s GraceTime) and "ondemand" (PriorityTier=10, never preempted). Installs
# slurm-wlm and munge if missing, runs the daemons as root without systemd, and
# stops only what it started.
#   scripts/slurm.sh start    start (idempotent); waits until both nodes are idle
#   scripts/slurm.sh stop     stop the daemons (and munged) this script started
#   scripts/slurm.sh status   exit 0 if the test cluster runs (prints sinfo)
#   scripts/slurm.sh env      the variables the tests need (eval "$(scripts/slurm.sh env)")
set -euo pipefail
cmd=${1:-start}
conf=/etc/slurm/slurm.conf
marker="# Virga test cluster, written by scripts/slurm.sh"
run=/run/virga-slurm         # pid files and the record of what was started
spool=/var/spool/virga-slurm # slurmctld state and the slurmds' spools
logs=/var/log/slurm
nodes=(virga1 virga2)
hosts_tag="# virga-slurm test nodes"
# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/apt.sh"

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

running() {
  pid_alive "$run/slurmctld.pid" || return 1
  for n in "${nodes[@]}"; do pid_alive "$run/slurmd.$n.pid" || return 1; done
}

stop_pid() { # stop_pid FILE: TERM the recorded daemon, KILL it after 10 s
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

case "$cmd" in
env) echo "export VIRGA_TEST_SLURM=1"; exit 0 ;;
status)
  if running; then sinfo -N -o '%N %P %c %m %T'; exit 0; fi
  echo "the Virga test Slurm cluster is not running (scripts/slurm.sh start)" >&2
  exit 1 ;;
stop)
  for n in "${nodes[@]}"; do stop_pid "$run/slurmd.$n.pid"; done
  stop_pid "$run/slurmctld.pid"
  if [ -f "$run/munged.started" ]; then stop_pid "$run/munged.pid"; rm -f "$run/munged.started"; fi
  if [ -f "$run/hosts.added" ] && grep -q "$hosts_tag" /etc/hosts; then
    # /etc/hosts may be a bind mount: rewrite it in place rather than replace it.
    grep -v "$hosts_tag" /etc/hosts >"$run/hosts.tmp" && cat "$run/hosts.tmp" >/etc/hosts
    rm -f "$run/hosts.tmp" "$run/hosts.added"
  fi
  exit 0 ;;
start) ;;
*) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac

if running; then exit 0; fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null ||
  ! command -v munged >/dev/null; then
  echo "== installing slurm-wlm munge" >&2
  apt_install slurm-wlm munge
fi
if [ -f "$conf" ] && ! grep -qF "$marker" "$conf"; then
  echo "$conf exists and is not Virga's test configuration: not overwriting it" >&2
  exit 1
fi

mkdir -p "$run" "$spool/ctld" "$logs" /run/munge
for n in "${nodes[@]}"; do mkdir -p "$spool/$n"; done
chown munge:munge /run/munge

# Slurm itself is happy with node names that do not resolve, but a gang's first
# node is its rendezvous address (SLURM_JOB_NODELIST): make them resolve here.
if ! getent hosts "${nodes[0]}" >/dev/null; then
  echo "127.0.0.1 ${nodes[*]} $hosts_tag" >>/etc/hosts
  touch "$run/hosts.added"
fi

mem=4000
cat >"$conf" <<EOF
$marker (rewritten on each start)
ClusterName=virga
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$spool/ctld
SlurmdSpoolDir=$spool/%n
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.%n.pid
SlurmctldLogFile=$logs/virga-slurmctld.log
SlurmdLogFile=$logs/virga-slurmd.%n.log
MailProg=/bin/true
MpiDefault=none
# No cgroups and no accounting daemon on the test machine.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# A higher PriorityTier partition's job preempts the spot partition's: SIGTERM to
# its steps, SIGKILL after GraceTime; Virga submits with --no-requeue, so the
# preempted job ends (PreemptTime set) instead of waiting to be requeued.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
# Short timeouts so that the tests are quick: finished jobs stay visible to squeue
# for 30 s (the backend polls every fraction of a second in the tests), a job is
# killed 5 s after the SIGTERM of its time limit or cancellation.
MinJobAge=30
KillWait=5
OverTimeLimit=0
InactiveLimit=0
ReturnToService=2
SlurmdTimeout=60
SchedulerParameters=sched_interval=5,bf_interval=5
NodeName=virga1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17001 CPUs=2 RealMemory=$mem State=UNKNOWN
NodeName=virga2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17002 CPUs=2 RealMemory=$mem State=UNKNOWN
PartitionName=spot Nodes=virga[1-2] Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=15 MaxTime=INFINITE State=UP
PartitionName=ondemand Nodes=virga[1-2] PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
EOF

if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  # munged refuses to run as root with its directories owned by munge (and,
  # as munge, cannot write its pid file here: record it after).
  runuser -u munge -- /usr/sbin/munged 2>/dev/null || true
  pgrep -n -x munged >"$run/munged.pid" || true
  touch "$run/munged.started"
  for _ in $(seq 1 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

# Leftovers of an earlier run that was not stopped cleanly.
for n in "${nodes[@]}"; do stop_pid "$run/slurmd.$n.pid"; done
stop_pid "$run/slurmctld.pid"

slurmctld -c -i # -c: a clean state each time (no jobs of an earlier run)
for n in "${nodes[@]}"; do slurmd -N "$n"; done

for i in $(seq 1 120); do
  states=$(sinfo -h -N -p spot -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')
  [ "$states" = "idle " ] && exit 0
  if [ $((i % 10)) = 0 ]; then
    scontrol update NodeName="virga[1-2]" State=RESUME >/dev/null 2>&1 || true
  fi
  sleep 0.5
done
echo "the Slurm test nodes did not become idle: $(sinfo -N 2>&1)" >&2
echo "see $logs/virga-slurmctld.log and $logs/virga-slurmd.*.log" >&2
exit 1
