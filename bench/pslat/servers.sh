# bench/pslat/servers.sh: sourced by the ps-bench scripts of bench/pslat (sweep.sh, multihot.sh):
# fresh ps-server shards on loopback for a run and their cleanup by PID. The sourcing script
# sets `bin` (the ps-server's directory) and `server_args` (extra ps-server flags, an array)
# first; this file makes `tmp` (data dirs and logs, removed on exit) and `pids`.
# Design decision: shared so that every script starts and stops servers the same way (a free
# port each, a bounded wait for the "listening" line, kill by PID on exit), not once per script.
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() { # run shards: starts them, sets urls (not in a subshell: pids must reach cleanup)
  local r="$1" n="$2" i port list=()
  for i in $(seq 0 $((n - 1))); do
    port=$(free_port)
    "$bin/ps-server" --listen "tcp://127.0.0.1:$port" --shard "$i" --shards "$n" \
      --data-dir "$tmp/r$r-s$n-$i" --log-level warn "${server_args[@]}" > "$tmp/r$r-s$n-$i.log" 2>&1 &
    pids+=($!)
    list+=("tcp://127.0.0.1:$port")
    for _ in $(seq 100); do grep -qs listening "$tmp/r$r-s$n-$i.log" && break; sleep 0.1; done
  done
  urls=$(IFS=,; echo "${list[*]}")
}
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
