#!/usr/bin/env bash
# Issue 9's sweep, issue 22's tail goal: ps-bench latency against the offered rate on loopback
# against 1 and 2 fresh ps-server shards, dim 16 and 64, 4096-key pulls, Zipf(1.1) over 1e6
# pre-populated keys, open loop at each rate of RATES; RUNS consecutive runs (fresh servers
# each). Prints each sweep's table, knee and p99/p50 at half the knee, then one summary table
# over the runs (from the --json documents: knee, the half-knee point's p50/p99 and where its
# p99 went, the load average when the sweep ended) with, per run, the raw ZeroMQ round trip's
# own p50/p99 (ps-net-bench --no-ember, when built): the transport's tail that minute.
# Writes OUT/run<R>/{1s,2s}-d{16,64}.{json,svg,svg.gp}.
#
#   bench/pslat/sweep.sh [BIN_DIR] [OUT_DIR]
# Env: RATES (default 250,500,1000,1500,2000,3000,4000,5000,6000), SECS (2), WARMUP (0.5),
#      RUNS (3), SERVER_ARGS (extra ps-server flags), BENCH_ARGS (extra ps-bench flags).
set -euo pipefail
bin="${1:-build/bin}" out="${2:-out/pslat-sweep}"
rates="${RATES:-250,500,1000,1500,2000,3000,4000,5000,6000}"
secs="${SECS:-2}" warm="${WARMUP:-0.5}" runs="${RUNS:-3}"
read -r -a server_args <<< "${SERVER_ARGS:-}"
read -r -a bench_args <<< "${BENCH_ARGS:-}"
mkdir -p "$out"
. "$(dirname "${BASH_SOURCE[0]}")/servers.sh"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$runs"); do
  mkdir -p "$out/run$r"
  for n in 1 2; do
    start "$r" "$n"
    for dim in 16 64; do
      name="${n}s-d$dim"
      echo "== run $r, $n server(s), dim $dim ($name), $(date -u +%H:%M:%S) UTC"
      "$bin/ps-bench" --servers "$urls" --op pull --keys 4096 --dim "$dim" --table-id "$dim" \
        --dist zipf:1.1 --key-space 1000000 --prepopulate --sweep "$rates" --duration "$secs" \
        --warmup "$warm" --json "$out/run$r/$name.json" --plot "$out/run$r/$name.svg" \
        "${bench_args[@]}" | awk '/^ +offered/ {t++} t >= 2' || true
      cut -d' ' -f1 /proc/loadavg > "$out/run$r/$name.load"
    done
    stop_all
  done
  # The transport's own tail in the same minute: raw ZeroMQ round trips of a 4096-key dim-16
  # pull's bytes, 1 in flight (ps-net-bench's floor), when that binary was built.
  if [ -x "$bin/ps-net-bench" ]; then
    "$bin/ps-net-bench" --no-ember --dims 16 --servers 1 --inflight 1 --ops pull --duration "$secs" \
      --warmup "$warm" --json "$out/run$r/zmq-floor.json" > /dev/null 2>&1 || true
    cut -d' ' -f1 /proc/loadavg > "$out/run$r/zmq-floor.load"
  fi
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" "$runs" <<'PY'
import json, os, sys
out, runs = sys.argv[1], int(sys.argv[2])
print("\n| run | sweep | knee (req/s offered) | half-knee point | p50 ms | p99 ms | p99/p50 | "
      "p99 of client queue / round trip / server total, ms | load (1 min) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in range(1, runs + 1):
    for name in ("1s-d16", "1s-d64", "2s-d16", "2s-d64"):
        f = f"{out}/run{r}/{name}.json"
        if not os.path.exists(f):
            continue
        d = json.load(open(f))
        load = open(f"{out}/run{r}/{name}.load").read().strip()
        k, h = d["knee"], d["half_knee"]
        if not k:
            print(f"| {r} | {name} | none | | | | | | {load} |")
            continue
        p = d["points"][h["point"]]
        bd = p["breakdown_us"]
        parts = " / ".join(f"{bd[x]['p99'] / 1e3:.3f}" if x in bd else "?"
                           for x in ("client_queue", "round_trip", "server_total"))
        print(f"| {r} | {name} | {k['offered_rate']:.0f} | {h['offered_rate']:.0f} | "
              f"{h['p50_us'] / 1e3:.3f} | {h['p99_us'] / 1e3:.3f} | {h['p99_over_p50']:.2f} | "
              f"{parts} | {load} |")
    f = f"{out}/run{r}/zmq-floor.json"
    if os.path.exists(f):
        e = json.load(open(f))[0]
        load = open(f"{out}/run{r}/zmq-floor.load").read().strip()
        print(f"| {r} | raw ZeroMQ floor, closed loop 1 in flight | | | {e['p50_us'] / 1e3:.3f} | "
              f"{e['p99_us'] / 1e3:.3f} | {e['p99_us'] / e['p50_us']:.2f} | | {load} |")
PY
