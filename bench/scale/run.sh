#!/usr/bin/env bash
# bench/scale/run.sh: shard scaling on this machine (issue 23's figures): pull and push keys/s
# and p99 through ps-bench against 1, 2 and 4 ps-server shards, rounds interleaved (every shard
# count once per round, so slow phases of a shared machine hit them all), medians and the
# ratios to 1 shard within this run. Beside each run: the servers' CPU seconds per second
# (cores they used), ps-bench's own, the whole machine's busy cores (/proc/stat: other users
# included) and the load average, to show where the cores saturate.
# Each run: fresh servers (bench/common/cluster.sh), the key space prepopulated (hot rows),
# closed loop with INFLIGHT requests outstanding per ps-bench thread.
# Usage: bench/scale/run.sh [OUT]        (default /tmp/ember-scale)
# Environment: BIN (default <src>/build/bin), SHARDS ("1 2 4"), ROUNDS (3), OPS ("pull push"),
#   KEYS (4096 per request), DIM (64), KEY_SPACE (200000), INFLIGHT (8), THREADS (ps-bench
#   sender threads, 2), DURATION (4 s per run), SERVER_THREADS (each server's --threads; unset:
#   the server's default).
# Prints "scale round=R shards=N op=OP keys_per_s=... p50_us=... p99_us=... server_cores=...
# bench_cores=... machine_busy_cores=B/NCPU load=..." per run, then "scale median ..." per (op, shards).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-scale}"
BIN="${BIN:-$src/build/bin}"
SHARDS="${SHARDS:-1 2 4}" ROUNDS="${ROUNDS:-3}" OPS="${OPS:-pull push}" KEYS="${KEYS:-4096}"
DIM="${DIM:-64}" KEY_SPACE="${KEY_SPACE:-200000}" INFLIGHT="${INFLIGHT:-8}" THREADS="${THREADS:-2}"
DURATION="${DURATION:-4}"
CLUSTER_FLAGS=(--cache-mb 2048)
[ -n "${SERVER_THREADS:-}" ] && CLUSTER_FLAGS+=(--threads "$SERVER_THREADS")
# shellcheck source=../common/cluster.sh
. "$src/bench/common/cluster.sh"
for b in ps-server ps-bench; do
  [ -x "$BIN/$b" ] || { echo "scale: $BIN/$b not found (build it, or set BIN)" >&2; exit 2; }
done
mkdir -p "$out"
trap cluster_stop EXIT

: > "$out/scale.txt"
for r in $(seq "$ROUNDS"); do
  for n in $SHARDS; do
    cluster_start "$out/cluster" "$n" 1
    "$BIN/ps-bench" --servers "$CLUSTER_SERVERS" --op pull --dim "$DIM" --keys "$KEYS" \
      --key-space "$KEY_SPACE" --prepopulate --closed-loop --requests 1 --warmup 0 > /dev/null
    for op in $OPS; do
      j="$out/r$r-n$n-$op.json"
      c0=$(cluster_cpu_s) t0=$(date +%s.%N) m0="$(head -n 1 /proc/stat)"
      TIMEFORMAT='%U %S'
      { time "$BIN/ps-bench" --servers "$CLUSTER_SERVERS" --op "$op" --dim "$DIM" --keys "$KEYS" \
          --key-space "$KEY_SPACE" --closed-loop --inflight "$((INFLIGHT * THREADS))" \
          --threads "$THREADS" --duration "$DURATION" --warmup 1 --json "$j" > "$j.log" 2>&1 ; } 2> "$j.time"
      c1=$(cluster_cpu_s) t1=$(date +%s.%N) m1="$(head -n 1 /proc/stat)"
      /usr/bin/python3 - "$j" "$r" "$n" "$op" "$c0" "$c1" "$t0" "$t1" "$(cat "$j.time")" "$(load)" "$m0" "$m1" "$(nproc)" <<'PY' | tee -a "$out/scale.txt"
import json, sys
j, r, n, op, c0, c1, t0, t1, tm, ld, m0, m1, ncpu = sys.argv[1:]
a, b = [list(map(int, m.split()[1:])) for m in (m0, m1)]
d = [y - x for x, y in zip(a, b)]
busy = int(ncpu) * (1 - (d[3] + d[4]) / sum(d))  # idle + iowait
p = json.load(open(j))["points"][0]
wall = float(t1) - float(t0)
print(f"scale round={r} shards={n} op={op} keys_per_s={p['keys_per_s']:.0f} "
      f"p50_us={p['latency_us']['p50']:.0f} p99_us={p['latency_us']['p99']:.0f} "
      f"errors={p['errors'] + p['timeouts']} server_cores={(float(c1) - float(c0)) / wall:.2f} "
      f"bench_cores={sum(map(float, tm.split())) / wall:.2f} machine_busy_cores={busy:.2f}/{ncpu} "
      f"load={ld.replace(' ', ',')}")
PY
    done
    cluster_stop
  done
done

/usr/bin/python3 - "$out/scale.txt" <<'PY'
import re, statistics as st, sys
runs = {}
for ln in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in ln.split()[1:])
    runs.setdefault((f["op"], int(f["shards"])), []).append(f)
for op in sorted({k[0] for k in runs}):
    base = None
    for n in sorted(k[1] for k in runs if k[0] == op):
        v = runs[(op, n)]
        med = {x: st.median(float(f[x]) for f in v)
               for x in ("keys_per_s", "p99_us", "server_cores", "bench_cores")}
        med["busy"] = st.median(float(f["machine_busy_cores"].split("/")[0]) for f in v)
        base = base or med["keys_per_s"]
        print(f"scale median op={op} shards={n} keys_per_s={med['keys_per_s']:.3g} "
              f"(x{med['keys_per_s'] / base:.2f} of 1 shard; runs "
              f"{','.join('%.3g' % float(f['keys_per_s']) for f in v)}) p99_us={med['p99_us']:.0f} "
              f"server_cores={med['server_cores']:.2f} bench_cores={med['bench_cores']:.2f} "
              f"machine_busy_cores={med['busy']:.2f}")
PY
