#!/usr/bin/env bash
# ps-reshard's speed (issue 23): trains a small DLRM (13-32-16, 32-1, dim 16, Adagrad rows) on
# TRAIN ps-datagen rows with 2 servers and a checkpoint, then rewrites that checkpoint for 1, 3
# and 4 shards, interleaved, ROUNDS rounds; prints each run's rows, seconds and seconds per
# million rows (the move: read, route, write; and the recount of the new snapshots), and the
# medians per shard count.
# Usage: bench/reshard/run.sh [BIN_DIR] [TRAIN] [ROUNDS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${1:-$root/build/bin}" train_rows="${2:-1000000}" rounds="${3:-3}"
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
"$bin/ps-datagen" --rows "$train_rows" --seed 1 --out "$d/train.tsv" > /dev/null
mkdir "$d/ck"
"$root/deploy/ember-local" --bin "$bin" --servers 2 --workers 1 -- --train "$d/train.tsv" \
  --mlp-bot 13-32-16 --mlp-top 32-1 --emb-dim 16 --batch 2048 --checkpoint-dir "$d/ck" \
  --progress-every 60 --log-level warn > "$d/train.log" 2>&1
echo "checkpoint: $(du -sh "$d/ck/$(cat "$d/ck/latest")/shards" | cut -f1) of shards"
for r in $(seq "$rounds"); do
  for m in 1 3 4; do
    rm -rf "$d/out"
    "$bin/ps-reshard" --checkpoint "$d/ck" --shards "$m" --out "$d/out" 2> "$d/log-$m-$r"
    grep -o 'moved [0-9]* rows.*checked in [0-9.]* s' "$d/log-$m-$r" | sed "s/^/round $r, 2 -> $m: /"
  done
done
/usr/bin/python3 - "$d" "$rounds" <<'PY'
import re, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
for m in (1, 3, 4):
    runs = []
    for r in range(1, n + 1):
        t = re.search(r"moved (\d+) rows .* in ([0-9.]+) s .*checked in ([0-9.]+) s", open(f"{d}/log-{m}-{r}").read())
        rows, s, c = int(t[1]), float(t[2]), float(t[3])
        runs.append((s / rows * 1e6, (s + c) / rows * 1e6))
    print(f"2 -> {m} shards: median {statistics.median(x[0] for x in runs):.2f} s per million rows "
          f"moved, {statistics.median(x[1] for x in runs):.2f} with the recount ({rows} rows)")
PY
