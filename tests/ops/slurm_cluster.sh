# slurm_cluster.sh: start and stop a private single-node Slurm cluster (munged, slurmctld,
# slurmd from Debian's packages) in a temporary directory, for tests. Sourced, not run.
#
#   slurm_cluster_start DIR   -> 0 and exports SLURM_CONF, or non-zero with the reason in
#                                SLURM_CLUSTER_REASON (the caller reports SKIPPED)
#   slurm_cluster_stop        -> stops what start started, by PID
#
# No cgroup plugins (proctrack/linuxproc, task/none), so it works in a container without
# systemd or a delegated cgroup tree; every daemon runs as the invoking user (root here),
# with its own munge socket, ports, spool and state directories, so it never touches a
# system Slurm installation.

SLURM_CLUSTER_PIDS=()
SLURM_CLUSTER_REASON=""

_slurm_free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The first of N consecutive loopback ports that were all free a moment ago.
_slurm_free_ports() {
  /usr/bin/python3 - "$1" <<'PY'
import socket, sys
n = int(sys.argv[1])
for _ in range(200):
    socks = [socket.socket()]
    socks[0].bind(("127.0.0.1", 0))
    p = socks[0].getsockname()[1]
    try:
        for i in range(1, n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p + i))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(p)
    break
PY
}

_slurm_wait_file() { # file, tenths of a second
  local i
  for ((i = 0; i < $2; i++)); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}

slurm_cluster_start() {
  local dir="$1"
  local bin
  for bin in munged slurmctld slurmd sinfo sbatch srun scontrol squeue; do
    if ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$bin" ]; then
      SLURM_CLUSTER_REASON="$bin not installed (apt-get install slurmctld slurmd slurm-client munge)"
      return 1
    fi
  done
  export PATH="$PATH:/usr/sbin"
  mkdir -p "$dir"/{munge,state,spool,log}
  chmod 700 "$dir" "$dir/munge"

  # munge: a fresh key, a private socket.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  local sock="$dir/munge/munge.socket"
  munged --force --socket="$sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" > "$dir/log/munged.out" 2>&1 || {
    SLURM_CLUSTER_REASON="munged did not start: $(tail -n 3 "$dir/log/munged.out" "$dir/log/munged.log" 2>/dev/null | tr '\n' ' ')"
    return 1
  }
  _slurm_wait_file "$dir/munge/munged.pid" 50 || { SLURM_CLUSTER_REASON="munged wrote no pid file"; return 1; }
  SLURM_CLUSTER_PIDS+=("$(cat "$dir/munge/munged.pid")")

  # What slurmd sees of this machine (CPUs, sockets, memory), so the node definition matches.
  local node cpus mem hwline
  node="$(hostname -s)"
  hwline="$(slurmd -C 2>/dev/null | head -n 1)"
  cpus="$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<< "$hwline")"
  mem="$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<< "$hwline")"
  [ -n "$cpus" ] || cpus="$(nproc)"
  [ -n "$mem" ] || mem=1024
  local hw
  hw="$(sed -n 's/^NodeName=[^ ]* //p' <<< "$hwline" | sed 's/ RealMemory=[0-9]*//')"
  [ -n "$hw" ] || hw="CPUs=$cpus"

  local ctld_port slurmd_port user
  ctld_port="$(_slurm_free_port)"
  slurmd_port="$(_slurm_free_port)"
  user="$(id -un)"
  cat > "$dir/slurm.conf" <<EOF
# Written by tests/ops/slurm_cluster.sh: a private single-node cluster.
ClusterName=embertest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=30
# Jobs may share the node's CPUs (tests submit with --overcommit to run more tasks than CPUs).
NodeName=$node NodeAddr=127.0.0.1 $hw RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=30 State=UP OverSubscribe=FORCE:4
EOF
  export SLURM_CONF="$dir/slurm.conf"

  slurmctld -f "$SLURM_CONF" > "$dir/log/slurmctld.out" 2>&1 || {
    SLURM_CLUSTER_REASON="slurmctld did not start: $(tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmctld.out" 2>/dev/null | tr '\n' ' ')"
    return 1
  }
  _slurm_wait_file "$dir/slurmctld.pid" 100 || { SLURM_CLUSTER_REASON="slurmctld wrote no pid file: $(tail -n 5 "$dir/log/slurmctld.log" | tr '\n' ' ')"; return 1; }
  SLURM_CLUSTER_PIDS+=("$(cat "$dir/slurmctld.pid")")
  slurmd -f "$SLURM_CONF" -N "$node" > "$dir/log/slurmd.out" 2>&1 || {
    SLURM_CLUSTER_REASON="slurmd did not start: $(tail -n 5 "$dir/log/slurmd.log" "$dir/log/slurmd.out" 2>/dev/null | tr '\n' ' ')"
    return 1
  }
  _slurm_wait_file "$dir/slurmd.pid" 100 || { SLURM_CLUSTER_REASON="slurmd wrote no pid file: $(tail -n 5 "$dir/log/slurmd.log" | tr '\n' ' ')"; return 1; }
  SLURM_CLUSTER_PIDS+=("$(cat "$dir/slurmd.pid")")

  # Bounded wait for the node to register and become idle.
  local i state=""
  for ((i = 0; i < 300; i++)); do
    state="$(sinfo -h -n "$node" -o '%t' 2>/dev/null | head -n 1)"
    case "$state" in idle|mix|alloc) return 0 ;; esac
    sleep 0.1
  done
  SLURM_CLUSTER_REASON="node $node did not become idle (state '$state'): $(tail -n 5 "$dir/log/slurmd.log" | tr '\n' ' ')"
  return 1
}

slurm_cluster_stop() {
  local i j p
  # One at a time in reverse order (slurmd, slurmctld, munged), so that no daemon loses its
  # peer (or munge) while it still talks to it.
  for ((i = ${#SLURM_CLUSTER_PIDS[@]} - 1; i >= 0; i--)); do
    p="${SLURM_CLUSTER_PIDS[$i]}"
    kill -TERM "$p" 2>/dev/null || continue
    for ((j = 0; j < 50; j++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  SLURM_CLUSTER_PIDS=()
}
