#!/usr/bin/env bash
# bench/e2e/cold.sh: training throughput with the hot tier holding a tenth of the rows, against
# all-hot, with and without ps-worker --prefetch (issue 22, cold tier end to end).
#
#   bench/e2e/cold.sh [OUTDIR]        (default OUTDIR: /tmp/ember-cold)
#
# Environment: BIN (default <src>/build/bin), ROWS (300000: the quickstart data, seed 1),
# SERVERS / WORKERS (2 / 2: the quickstart cluster), CACHE_MB (4: each server's --cache-mb for
# the cold runs; the quickstart data makes ~466k rows of ~190 bytes with their index, so 2 x 4
# MB hold ~10% of them), CONFIGS (what to run: hot-P / cold-P, P the --prefetch, optionally
# -ROWTYPE for ps-worker --row-type, e.g. cold-0-f16; f32 without), ROUNDS (3),
# PSW_EXTRA (more ps-worker flags, e.g. "--threads 1").
#
# Design decisions: the configurations are interleaved within each round (hot-0 cold-0 cold-1
# ... then again), so a change in the machine's load hits them all alike, and the table gives
# medians and ratios to the all-hot median of the same run. Every run's dense hash and AUC are
# printed: a prefetch must not change the model (a cold tier must not either: it only caches).
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-cold}"
BIN="${BIN:-$src/build/bin}"
ROWS="${ROWS:-300000}" SERVERS="${SERVERS:-2}" WORKERS="${WORKERS:-2}" CACHE_MB="${CACHE_MB:-4}"
CONFIGS="${CONFIGS:-hot-0 hot-2 cold-0 cold-1 cold-2 cold-4}" ROUNDS="${ROUNDS:-3}"
PSW_EXTRA="${PSW_EXTRA:-}"
PY=/usr/bin/python3
mkdir -p "$out"

data="$out/data-$ROWS-s1"
if [ ! -s "$data/planted.json" ]; then
  mkdir -p "$data"
  "$BIN/ps-datagen" --rows "$ROWS" --seed 1 --out "$data/train.tsv" --test-rows 50000 \
    --test-out "$data/test.tsv" --json "$data/planted.json.tmp" > /dev/null
  mv "$data/planted.json.tmp" "$data/planted.json"
fi

echo "load before: $(cat /proc/loadavg)"
res="$out/results.tsv"
: > "$res"
for round in $(seq 1 "$ROUNDS"); do
  for cfg in $CONFIGS; do
    tier="${cfg%%-*}" rest="${cfg#*-}"
    pf="${rest%%-*}" rt=f32
    [ "$rest" != "$pf" ] && rt="${rest#*-}"
    cache=()
    [ "$tier" = cold ] && cache=(--cache-mb "$CACHE_MB")
    sum="$out/sum-$cfg-$round.json"
    "$src/deploy/ember-local" --bin "$BIN" --servers "$SERVERS" --workers "$WORKERS" "${cache[@]}" \
      -- --train "$data/train.tsv" --test "$data/test.tsv" --prefetch "$pf" --row-type "$rt" --summary "$sum" \
      --progress-every 600 $PSW_EXTRA > "$out/log-$cfg-$round.txt" 2>&1
    $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], \
'%.0f' % d['samples_per_s'], '%.10f' % d['auc'], d['dense_hash'], sep='\t')" \
      "$sum" "$cfg" "$round" | tee -a "$res"
  done
done
echo "load after: $(cat /proc/loadavg)"

$PY - "$res" <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
cfgs = list(dict.fromkeys(r[0] for r in rows))
med = {c: statistics.median(float(r[2]) for r in rows if r[0] == c) for c in cfgs}
hot = med.get("hot-0")
print("| run | --prefetch | rows | samples/s (runs) | median | vs all-hot | AUC | dense hash |")
print("|---|---|---|---|---|---|---|---|")
for c in cfgs:
    rs = [r for r in rows if r[0] == c]
    tier, pf, rt = (c.split("-") + ["f32"])[:3]
    ratio = f"{med[c] / hot:.2f}x" if hot else "-"
    print(f"| {'all-hot' if tier == 'hot' else 'cold'} | {pf} | {rt} | {', '.join(r[2] for r in rs)} | "
          f"{med[c]:.0f} | {ratio} | {rs[0][3][:8]} | {','.join(sorted(set(r[4] for r in rs)))} |")
EOF
