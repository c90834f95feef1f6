#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the tests (and for trying the Slurm paths on a laptop).
#
#   bash jobs/slurm/cluster.sh install   # Debian's slurm-wlm and munge, when missing (needs root)
#   bash jobs/slurm/cluster.sh up        # munged + slurmctld + slurmd; prints the SLURM_CONF to export
#   bash jobs/slurm/cluster.sh down      # cancel jobs, stop the daemons (munged too, if `up` started it)
#
# Everything lives in $SPECBATCH_SLURM_DIR (default /tmp/specbatch-slurm); clients find the cluster through
# SLURM_CONF=$SPECBATCH_SLURM_DIR/slurm.conf. No accounting database: sacct is unavailable (submitit warns).
set -euo pipefail

DIR="${SPECBATCH_SLURM_DIR:-/tmp/specbatch-slurm}"
CONF="$DIR/slurm.conf"
say() { echo "[slurm] $*" >&2; }

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return 0
  fi
  if [[ $(id -u) -ne 0 ]]; then
    say "slurm-wlm and munge are missing and installing them needs root: apt-get install slurm-wlm munge"
    exit 2
  fi
  say "installing slurm-wlm and munge (once per machine)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

healthy() {
  [[ -f "$CONF" ]] && SLURM_CONF="$CONF" timeout 10 sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'
}

up() {
  install
  if healthy; then
    say "already up"; echo "$CONF"; return 0
  fi
  # Leftovers of an earlier cluster (a daemon still shutting down, a stuck job step) would make the new one
  # report its node as not responding: stop them all and start from an empty state.
  stop_daemons
  rm -rf "$DIR/ctld" "$DIR/spool"
  mkdir -p "$DIR"/{ctld,spool,log}
  local host cpus mem_mb
  host=$(hostname -s)
  cpus=$(nproc)
  mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  cat > "$CONF" <<CONF
ClusterName=specbatch
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=6917
SlurmdPort=6918
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MpiDefault=none
# Without a default, a job that asks for no memory gets the whole node and array tasks run one by one.
DefMemPerCPU=4096
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  # munged runs as its own user; its socket directory may not exist on a fresh machine.
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
  if ! pgrep -x munged >/dev/null; then
    runuser -u munge -- /usr/sbin/munged
    # Ours to stop on `down` (its own pid file names it); a munged that was already running is left alone.
    cp /run/munge/munged.pid "$DIR/munged.pid"
  fi
  slurmctld -c -f "$CONF"
  slurmd -c -f "$CONF"
  for _ in $(seq 1 60); do
    if healthy; then
      say "up: $(SLURM_CONF="$CONF" sinfo -h -o '%P %D %c CPUs %m MB %T')"
      echo "$CONF"
      return 0
    fi
    sleep 1
  done
  say "the cluster did not come up; logs in $DIR/log"
  tail -n 20 "$DIR"/log/*.log >&2 || true
  exit 1
}

stop_daemons() {
  local pattern
  for pattern in "slurmd -c -f $CONF" "slurmctld -c -f $CONF"; do
    pkill -TERM -f "$pattern" 2>/dev/null || true
  done
  for _ in $(seq 1 30); do
    pgrep -f "(slurmd|slurmctld) -c -f $CONF" >/dev/null || break
    sleep 1
  done
  pkill -KILL -f "(slurmd|slurmctld) -c -f $CONF" 2>/dev/null || true
  # A step daemon stuck on a job that ignores signals (seen with vLLM workers) would outlive the cluster.
  pkill -KILL -x slurmstepd 2>/dev/null || true
}

down() {
  if healthy; then
    SLURM_CONF="$CONF" scancel --full --user="$(id -un)" 2>/dev/null || true
    # Let cancelled jobs end before the daemons go, or their steps linger into the next cluster.
    for _ in $(seq 1 60); do
      [[ -z "$(SLURM_CONF="$CONF" squeue -h 2>/dev/null)" ]] && break
      sleep 1
    done
  fi
  stop_daemons
  if [[ -f "$DIR/munged.pid" ]]; then
    local pid
    pid=$(cat "$DIR/munged.pid")
    [[ "$(ps -o comm= -p "$pid" 2>/dev/null)" == munged ]] && kill -TERM "$pid" 2>/dev/null || true
  fi
  say "down"
}

case "${1:-}" in
  install) install ;;
  up) up ;;
  down) down ;;
  *) echo "usage: $0 install|up|down" >&2; exit 2 ;;
esac
