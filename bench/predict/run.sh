#!/usr/bin/env bash
# ps-predict offline throughput (issue 20): trains the Kaggle-shape DLRM (13-512-256-64-16,
# 512-256-1, dim 16) on TRAIN rows with 2 servers and a checkpoint, then scores TEST rows from
# the checkpoint with ps-predict, --threads 1 and 2 and (1 thread) through two serving servers
# (ps-server --serve, ps-predict --servers) alternating, ROUNDS rounds; prints each run's rows/s
# and the medians. Also times ps-export of the same checkpoint once.
# Usage: bench/predict/run.sh [BIN_DIR] [TRAIN] [TEST] [ROUNDS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${1:-$root/build/bin}" train_rows="${2:-200000}" test_rows="${3:-200000}" rounds="${4:-3}"
d="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null; rm -rf "$d"; }
trap cleanup EXIT
"$bin/ps-datagen" --rows "$train_rows" --seed 1 --out "$d/train.tsv" --test-rows "$test_rows" \
  --test-out "$d/test.tsv" --json "$d/planted.json" > /dev/null
mkdir "$d/ck"
"$root/deploy/ember-local" --bin "$bin" --servers 2 --workers 1 -- --train "$d/train.tsv" \
  --checkpoint-dir "$d/ck" --progress-every 60 --log-level warn > "$d/train.log" 2>&1
# two serving servers of the checkpoint, one per shard, on free loopback ports
ports=$(/usr/bin/python3 -c "
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(('127.0.0.1', 0))
print(' '.join(str(s.getsockname()[1]) for s in ss))")
urls=""
i=0
for p in $ports; do
  "$bin/ps-server" --listen "tcp://127.0.0.1:$p" --serve "$d/ck" --shard "$i" --shards 2 \
    --log-level warn > "$d/serve-$i.log" 2>&1 &
  pids+=($!)
  urls="$urls${urls:+,}tcp://127.0.0.1:$p"
  i=$((i + 1))
done
for r in $(seq "$rounds"); do
  for t in 1 2 servers; do
    extra=(--threads "$t")
    [ "$t" = servers ] && extra=(--threads 1 --servers "$urls")
    "$bin/ps-predict" --checkpoint "$d/ck" --input "$d/test.tsv" --out "$d/p-$t.txt" "${extra[@]}" \
      --progress-every 0 --log-level warn --summary "$d/s-$t-$r.json" > /dev/null
    /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(f'round $r threads $t: {s[\"rows_per_s\"]:.0f} rows/s ({s[\"lines\"]} lines, {s[\"seconds\"]:.2f} s: rows {s[\"seconds_rows\"]:.2f}, model {s[\"seconds_model\"]:.2f})')" "$d/s-$t-$r.json"
  done
done
/usr/bin/python3 - "$d" "$rounds" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
m = {t: statistics.median(json.load(open(f"{d}/s-{t}-{r}.json"))["rows_per_s"] for r in range(1, n + 1)) for t in ("1", "2", "servers")}
print(f"median rows/s: threads 1 {m['1']:.0f}, threads 2 {m['2']:.0f} (ratio {m['2'] / m['1']:.2f}), "
      f"via serving servers (1 thread) {m['servers']:.0f} (ratio to offline {m['servers'] / m['1']:.2f})")
same = open(f"{d}/p-1.txt").read() == open(f"{d}/p-servers.txt").read()
print(f"scores via servers identical to offline: {same}")
PY
s=$(date +%s.%N)
"$bin/ps-export" --checkpoint "$d/ck" --out "$d/export" --log-level warn
e=$(date +%s.%N)
rows=$(/usr/bin/python3 -c "import json; print(json.load(open('$d/export/manifest.json'))['tables'][0]['rows'])")
echo "ps-export: $rows rows in $(/usr/bin/python3 -c "print(f'{$e - $s:.2f}')") s"
