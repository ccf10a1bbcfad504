#!/usr/bin/env bash
# bench/sizing/rowtype_quality.sh: do 16-bit rows train as well as f32 rows? ps-worker (1 server x
# 1 worker, deploy/ember-local, one compute thread, its defaults otherwise) with --row-type f32,
# f16 and bf16 on the same data and seed, so each seed gives one pair per row type (issue 33):
#   s7   ps-datagen --seed 7, 100k train / 20k test, one-hot (bench/e2e/generalise.sh's s7);
#   mh   the multi-hot CSV of bench/dense/mh_csv_gen.py (numpy, not ps-datagen), 100k / 20k rows,
#        read through its schema (bench/dense/bf16_quality.sh's mh);
#   cv0..cv4 the real Criteo folds (generalise.sh's).
# Prints per set the mean AUC of each row type over the seeds and the paired difference to f32:
# mean ± its standard error, the paired t-test and the Wilcoxon signed-rank test (scipy), and
# how many seeds lose more than 0.001.
#
#   bench/sizing/rowtype_quality.sh [OUTDIR]        (default /tmp/ember-rowtype-quality)
#
# Environment: BIN (default <src>/build/bin), SETS ("s7 mh"), SEEDS ("1 2 3 4 5 6 7 8"),
# ROW_TYPES ("f32 f16 bf16"; f32 first: the others are compared with it), EXTRA (more ps-worker
# flags), UNTIL (a `date +%s` time: start no seed after it; the table covers whole seeds only).
# Results are cached in OUTDIR as <set>-<row type>-s<seed>.json (delete one to run it again).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-rowtype-quality}"
BIN="${BIN:-$src/build/bin}"
SETS="${SETS:-s7 mh}" SEEDS="${SEEDS:-1 2 3 4 5 6 7 8}" ROW_TYPES="${ROW_TYPES:-f32 f16 bf16}"
EXTRA="${EXTRA:-}" UNTIL="${UNTIL:-}"
PY=/usr/bin/python3
mkdir -p "$out"

gsets="$(for d in $SETS; do [ "$d" = mh ] || echo -n "$d "; done)"
[ -z "$gsets" ] || BIN="$BIN" SETS="$gsets" "$src/bench/e2e/generalise.sh" --prepare-only "$out"
if [[ " $SETS " == *" mh "* ]] && [ ! -s "$out/mh.schema.json" ]; then
  $PY "$src/bench/dense/mh_csv_gen.py" --rows 100000 --test-rows 20000 --seed 11 \
    --out "$out/mh.tsv" --test-out "$out/mh_test.tsv" --schema-out "$out/mh.schema.json"
fi

run() { # set row-type seed
  local d="$1" rt="$2" sd="$3" res="$out/$1-$2-s$3.json" log="$out/$1-$2-s$3.log" sch=""
  [ -s "$res" ] && return 0
  [ -s "$out/$d.schema.json" ] && sch="--schema $out/$d.schema.json"
  "$src/deploy/ember-local" --servers 1 --workers 1 --bin "$BIN" -- --train "$out/$d.tsv" \
    --test "$out/${d}_test.tsv" --threads 1 --progress-every 100 --seed "$sd" --summary "$res" \
    --row-type "$rt" $sch $EXTRA > "$log" 2>&1 || { echo "rowtype_quality: $d $rt seed $sd failed, see $log" >&2; return 1; }
  echo "  $d $rt seed $sd: auc $($PY -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["auc"], 5))' "$res")" >&2
}
# Seed by seed, every row type on a set back to back, so an interrupted run leaves whole pairs.
for sd in $SEEDS; do
  if [ -n "$UNTIL" ] && [ "$(date +%s)" -ge "$UNTIL" ]; then echo "rowtype_quality: UNTIL reached before seed $sd" >&2; break; fi
  for d in $SETS; do for rt in $ROW_TYPES; do run "$d" "$rt" "$sd"; done; done
done

$PY - "$out" "$SETS" "$SEEDS" "$ROW_TYPES" <<'PY'
import json, math, os, statistics as st, sys
from scipy import stats
out, sets, seeds, rts = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
def auc(d, r, s):
    p = os.path.join(out, f"{d}-{r}-s{s}.json")
    return json.load(open(p))["auc"] if os.path.exists(p) else None
print("| set | row type | seeds | mean AUC | - f32 (mean ± s.e.) | paired t (p) | Wilcoxon p | seeds < -0.001 |")
print("|---|---|---|---|---|---|---|---|")
for d in sets:
    done = [s for s in seeds if all(auc(d, r, s) is not None for r in rts)]
    if not done:
        continue
    base = [auc(d, rts[0], s) for s in done]
    print(f"| {d} | {rts[0]} | {len(done)} | {st.mean(base):.4f} | | | | |")
    for r in rts[1:]:
        a = [auc(d, r, s) for s in done]
        g = [x - y for x, y in zip(a, base)]
        se = st.stdev(g) / math.sqrt(len(g)) if len(g) > 1 else float("nan")
        t = stats.ttest_rel(a, base) if len(g) > 1 else None
        w = stats.wilcoxon(a, base).pvalue if len(g) > 1 and any(g) else float("nan")
        tt = f"{t.statistic:+.2f} ({t.pvalue:.3f})" if t else ""
        print(f"| {d} | {r} | {len(done)} | {st.mean(a):.4f} | {st.mean(g):+.4f} ± {se:.4f} | {tt} | "
              f"{w:.3f} | {sum(x < -0.001 for x in g)} |")
print()
for d in sets:
    for r in rts[1:]:
        g = [auc(d, r, s) - auc(d, rts[0], s) for s in seeds
             if auc(d, r, s) is not None and auc(d, rts[0], s) is not None]
        print(f"{d} {r} - {rts[0]} per seed: " + " ".join(f"{x:+.4f}" for x in g))
PY
