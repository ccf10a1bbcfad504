#!/usr/bin/env bash
# Issue 9's sweep: ps-bench latency vs throughput on loopback against 1 and 2 fresh ps-server
# shards, dim 16 and 64, 4096-key pulls, Zipf(1.1) over 1e6 pre-populated keys, open loop at
# each rate of RATES. Prints each sweep's table, knee and p99/p50 at half the knee; writes
# OUT/{1s,2s}-d{16,64}.{json,svg}.
#
#   bench/pslat/sweep.sh [BIN_DIR] [OUT_DIR]
# Env: RATES (default 250,500,1000,1500,2000,3000,4000,5000,6000), SECS (2), WARMUP (0.5).
set -euo pipefail
bin="${1:-build/bin}" out="${2:-out/pslat-sweep}"
rates="${RATES:-250,500,1000,1500,2000,3000,4000,5000,6000}"
secs="${SECS:-2}" warm="${WARMUP:-0.5}"
mkdir -p "$out"
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() { # shards: starts them, sets urls (not in a subshell: pids must reach cleanup)
  local n="$1" i port list=()
  for i in $(seq 0 $((n - 1))); do
    port=$(free_port)
    "$bin/ps-server" --listen "tcp://127.0.0.1:$port" --shard "$i" --shards "$n" \
      --data-dir "$tmp/s$n-$i" --log-level warn > "$tmp/s$n-$i.log" 2>&1 &
    pids+=($!)
    list+=("tcp://127.0.0.1:$port")
    for _ in $(seq 100); do grep -q listening "$tmp/s$n-$i.log" && break; sleep 0.1; done
  done
  urls=$(IFS=,; echo "${list[*]}")
}
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in 1 2; do
  start "$n"
  for dim in 16 64; do
    name="${n}s-d$dim"
    echo "== $n server(s), dim $dim ($name)"
    "$bin/ps-bench" --servers "$urls" --op pull --keys 4096 --dim "$dim" --table-id "$dim" \
      --dist zipf:1.1 --key-space 1000000 --prepopulate --sweep "$rates" --duration "$secs" \
      --warmup "$warm" --json "$out/$name.json" --plot "$out/$name.svg" |
      awk '/^ +target/ {t++} t == 2 || /^knee|^at /' || true
  done
  stop_all
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
