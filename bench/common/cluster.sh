# bench/common/cluster.sh: ps-server clusters for benchmark scripts on 127.0.0.1 (sourced).
# S shards x K replicas on free ports, each process with its own data dir and log under a
# directory, started, killed (-9) and restarted one by one by PID, stopped with SIGTERM.
# Replica R of shard I is process P = I + R*S (the numbering of ember-local --replicas) and
# gets issue 23's --replica R --replicas K --peers 'URL|...'; K=1 passes none of those flags,
# so a ps-server without replication runs unchanged. The caller sets BIN (ps-server's
# folder) and may set CLUSTER_FLAGS (an array of ps-server flags every process gets).
#
#   cluster_start DIR S K        start; sets CLUSTER_SERVERS (the clients' --servers), and
#                                writes DIR/servers.txt (SHARD REPLICA PID URL)
#   cluster_kill P               kill -9 process P (no wait for its port)
#   cluster_restart P            start process P again with its arguments, wait for its port
#   cluster_stop                 SIGTERM every process (they flush), bounded wait, then -9
#   cluster_cpu_s                CPU seconds of every live server process (utime + stime)
#   free_ports N, load           N free loopback ports; the 1/5/15-minute load average
# Safe under set -e (the scripts use it): no kill of a gone process fails the caller.
# Why a library: the replication and shard-scaling scripts start the same clusters, and a
# process must be restartable with exactly its first arguments (the catch-up figure).

free_ports() {
  /usr/bin/python3 -c '
import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}
load() { cut -d' ' -f1-3 /proc/loadavg; }

[ -n "${CLUSTER_FLAGS+x}" ] || CLUSTER_FLAGS=()
CLUSTER_PIDS=() CLUSTER_PORTS=() CLUSTER_DIR="" CLUSTER_SERVERS=""

cluster_has_replicas() { "$BIN/ps-server" --help 2>&1 | grep -q -- '--replicas'; }

cluster_start() {
  local dir="$1" s="$2" k="$3" i r p peer
  CLUSTER_DIR="$dir" CLUSTER_PIDS=() CLUSTER_SERVERS=""
  rm -rf "$dir" && mkdir -p "$dir"
  read -r -a CLUSTER_PORTS <<< "$(free_ports $((s * k)))"
  local peers=()
  for ((i = 0; i < s; i++)); do
    peer=""
    for ((r = 0; r < k; r++)); do peer="${peer:+$peer|}tcp://127.0.0.1:${CLUSTER_PORTS[$((i + r * s))]}"; done
    peers+=("$peer")
    CLUSTER_SERVERS="${CLUSTER_SERVERS:+$CLUSTER_SERVERS,}$peer"
  done
  for ((i = 0; i < s; i++)); do
    for ((r = 0; r < k; r++)); do
      p=$((i + r * s))
      local args=(--listen "tcp://127.0.0.1:${CLUSTER_PORTS[$p]}" --shard "$i" --shards "$s"
                  --data-dir "$dir/p$p.data" --log-level warn "${CLUSTER_FLAGS[@]}")
      [ "$k" -gt 1 ] && args+=(--replica "$r" --replicas "$k" --peers "${peers[$i]}")
      printf '%s\0' "$BIN/ps-server" "${args[@]}" > "$dir/p$p.args"
      cluster_restart "$p" || return 1
    done
  done
  : > "$dir/servers.txt"
  for ((i = 0; i < s; i++)); do
    for ((r = 0; r < k; r++)); do
      p=$((i + r * s))
      echo "$i $r ${CLUSTER_PIDS[$p]} tcp://127.0.0.1:${CLUSTER_PORTS[$p]}" >> "$dir/servers.txt"
    done
  done
}

cluster_restart() {
  local p="$1" pid cmd
  # The arguments were kept NUL-separated: started straight from an array, $! is ps-server's
  # own PID (what a kill -9 must hit), not a subshell's.
  mapfile -d '' -t cmd < "$CLUSTER_DIR/p$p.args"
  "${cmd[@]}" >> "$CLUSTER_DIR/p$p.log" 2>&1 &
  pid=$!
  CLUSTER_PIDS[$p]=$pid
  for _ in $(seq 1 400); do
    (exec 3<>"/dev/tcp/127.0.0.1/${CLUSTER_PORTS[$p]}") 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "cluster: server process $p (port ${CLUSTER_PORTS[$p]}) did not start; see $CLUSTER_DIR/p$p.log" >&2
  return 1
}

cluster_kill() { kill -9 "${CLUSTER_PIDS[$1]}" 2>/dev/null || true; wait "${CLUSTER_PIDS[$1]}" 2>/dev/null || true; }

cluster_cpu_s() { # utime + stime of every live server process, in seconds
  local p t=0 f
  for p in "${CLUSTER_PIDS[@]}"; do
    f=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null) && t=$((t + f))
  done
  awk -v t="$t" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f\n", t / hz }'
}

cluster_stop() {
  local p
  for p in "${CLUSTER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 300); do
    local alive=0
    for p in "${CLUSTER_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for p in "${CLUSTER_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null
  CLUSTER_PIDS=()
}
