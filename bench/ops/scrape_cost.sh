#!/usr/bin/env bash
# What a Prometheus scraper costs ps-server (issue 10: < 2% of throughput at 1 scrape/s).
#
#   bench/ops/scrape_cost.sh [BIN_DIR] [ROUNDS] [SECONDS]
#
# One ps-server with --metrics-port, driven by ps-bench in a closed loop (pull, 4096 keys,
# dim 16, 8 in flight, Zipf(1.1) over 1e6 pre-populated keys). Rounds alternate "no scraper"
# and "1 scrape/s" (a curl loop on /metrics) on the same server, so both see the same minute.
# Figures: the idle server's CPU per scrape (exact, from /proc/PID/stat), then per run keys/s
# (what the criterion names; noisy on a shared machine) and the server's CPU seconds per
# million keys (utime + stime over the run), which other processes' load disturbs much less.
# Prints each run, the paired per-round ratios, then the medians as a markdown table. The
# scraper keeps one HTTP connection open, as Prometheus does.
set -euo pipefail
bin="${1:-build/bin}" rounds="${2:-8}" secs="${3:-5}"
for t in curl; do command -v "$t" >/dev/null || { echo "scrape_cost.sh: $t missing" >&2; exit 1; }; done
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}" ${scr:-}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port) mport=$(free_port)
"$bin/ps-server" --listen "tcp://127.0.0.1:$port" --data-dir "$tmp/data" --metrics-port "$mport" \
  --log-level warn > "$tmp/server.log" 2>&1 &
spid=$!
pids+=("$spid")
for _ in $(seq 100); do grep -q listening "$tmp/server.log" && break; sleep 0.1; done
grep -q listening "$tmp/server.log" || { cat "$tmp/server.log"; exit 1; }
url="tcp://127.0.0.1:$port"
common=(--servers "$url" --op pull --keys 4096 --dim 16 --dist zipf:1.1 --key-space 1000000
        --closed-loop --inflight 8 --warmup 1 --duration "$secs" --log-level error)
"$bin/ps-bench" "${common[@]}" --prepopulate --duration 1 > /dev/null

cpu_ticks() { awk '{print $14 + $15}' "/proc/$spid/stat"; }
scraper() { # HZ: GET /metrics HZ times a second over one HTTP/1.1 connection, until killed
  # exec: $! of `scraper &` is then the python process itself, which kill reaches
  exec /usr/bin/python3 - "$mport" "$1" > /dev/null <<'PY'
import http.client, os, sys, time
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
period = 1.0 / float(sys.argv[2])
nxt = time.monotonic()
parent = os.getppid()
while os.getppid() == parent:  # the script that started it is gone: stop too
    c.request("GET", "/metrics")
    r = c.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"/metrics answered {r.status}")
    nxt += period
    time.sleep(max(0.0, nxt - time.monotonic()))
PY
}
hz=$(getconf CLK_TCK)
run() { # mode -> "keys_per_s cpu_s_per_mkey"
  local mode="$1" scr=""
  if [ "$mode" = scrape ]; then
    scraper 1 & # one keep-alive connection, as Prometheus scrapes (no process start per scrape)
    scr=$!
  fi
  local c0 c1
  c0=$(cpu_ticks)
  "$bin/ps-bench" "${common[@]}" --json "$tmp/r.json" > /dev/null
  c1=$(cpu_ticks)
  [ -n "$scr" ] && { kill "$scr"; wait "$scr" 2>/dev/null || true; }
  /usr/bin/python3 - "$tmp/r.json" "$c0" "$c1" "$hz" "$secs" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["points"][0]  # ps-bench --json (docs/BENCH.md)
c0, c1, hz, secs = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
# CPU over warm-up + measured part; keys over the measured part scaled to the same span.
keys = r["keys_per_s"] * (secs + 1.0)
print(f"{r['keys_per_s']:.0f} {(c1 - c0) / hz / (keys / 1e6):.4f}")
PY
}
# The server's own CPU per scrape, measured on the idle server (nothing else moves its CPU
# time): 10 scrapes/s for 10 s against 10 s without.
idle_cpu() { local c0 c1; c0=$(cpu_ticks); sleep 10; c1=$(cpu_ticks); echo $((c1 - c0)); }
quiet=$(idle_cpu)
scraper 10 &
scr=$!
sleep 0.5
busy=$(idle_cpu)
kill "$scr"; wait "$scr" 2>/dev/null || true
per_scrape_ms=$(awk -v q="$quiet" -v b="$busy" -v hz="$hz" 'BEGIN {printf "%.3f", (b - q) / hz / 100 * 1000}')
bytes=$(curl -s "http://127.0.0.1:$mport/metrics" | wc -c)
echo "idle server: ${per_scrape_ms} ms of CPU per scrape of ${bytes} bytes (100 scrapes vs none, ${quiet} vs ${busy} ticks)"
echo "round mode keys_per_s server_cpu_s_per_Mkey" >&2
for i in $(seq "$rounds"); do
  for mode in none scrape; do
    line="$(run "$mode")"
    echo "$i $mode $line" >&2
    echo "$mode $line" >> "$tmp/all"
  done
done
/usr/bin/python3 - "$tmp/all" "$rounds" "$secs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
pairs = [(float(b[1]) / float(a[1]), float(b[2]) / float(a[2])) for a, b in zip(rows[0::2], rows[1::2])]
print("per round, scrape / none: keys/s " + " ".join(f"{p[0]:.3f}" for p in pairs) +
      f" (median {statistics.median(p[0] for p in pairs):.3f}); CPU per key " +
      " ".join(f"{p[1]:.3f}" for p in pairs) + f" (median {statistics.median(p[1] for p in pairs):.3f})")
med = {m: [statistics.median(float(r[i]) for r in rows if r[0] == m) for i in (1, 2)]
       for m in ("none", "scrape")}
print(f"{sys.argv[2]} interleaved rounds of {sys.argv[3]} s each")
print("| | no scraper | 1 scrape/s | ratio |")
print("|---|---:|---:|---:|")
print(f"| keys/s (median) | {med['none'][0]:,.0f} | {med['scrape'][0]:,.0f} | {med['scrape'][0] / med['none'][0]:.3f} |")
print(f"| server CPU s per M keys (median) | {med['none'][1]:.4f} | {med['scrape'][1]:.4f} | {med['scrape'][1] / med['none'][1]:.3f} |")
PY
