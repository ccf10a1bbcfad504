#!/usr/bin/env bash
# bench/dense/bf16_quality.sh: does --precision bf16 train as well as FP32? ps-worker (1 server
# x 1 worker, deploy/ember-local, one compute thread, its defaults otherwise) with --precision
# fp32 and bf16 on the same data and seeds, paired, on data that neither Ember's generator nor
# its tuning shaped:
#   cv0..cv4  the real Criteo lines (10,000), 5 folds: train on 8,000, test on the other 2,000
#             (fold k tests lines 8000-2000k+1 .. 10000-2000k, as bench/e2e/generalise.sh);
#   mh        a multi-hot CSV from bench/dense/mh_csv_gen.py (numpy, not ps-datagen): 100k
#             train / 20k test rows, read through its schema.
# Prints per set the mean AUC of each precision over SEEDS and the paired difference bf16 -
# fp32 (mean ± standard error), and the mean difference over all Criteo folds and seeds.
#
#   bench/dense/bf16_quality.sh [OUTDIR]       (default /tmp/ember-bf16-quality)
#
# Environment: BIN (default <src>/build/bin), CRITEO (default <src>/../shared/data/criteo_real.tsv),
# SETS ("cv0 cv1 cv2 cv3 cv4 mh"), SEEDS ("1 2 3"), EXTRA (more ps-worker flags). Results are
# cached in OUTDIR as <set>-<precision>-s<seed>.json (delete one to run it again).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-bf16-quality}"
BIN="${BIN:-$src/build/bin}"
CRITEO="${CRITEO:-$src/../shared/data/criteo_real.tsv}"
SETS="${SETS:-cv0 cv1 cv2 cv3 cv4 mh}" SEEDS="${SEEDS:-1 2 3}" EXTRA="${EXTRA:-}"
PY=/usr/bin/python3
mkdir -p "$out"

# the Criteo folds as bench/e2e/generalise.sh cuts them (its --prepare-only), then mh
cv="$(for d in $SETS; do case "$d" in cv[0-4]) echo -n "$d " ;; mh) ;;
  *) echo "bf16_quality: unknown set $d (cv0..cv4, mh)" >&2; exit 2 ;; esac; done)"
[ -z "$cv" ] || BIN="$BIN" CRITEO="$CRITEO" SETS="$cv" "$src/bench/e2e/generalise.sh" --prepare-only "$out"
if [[ " $SETS " == *" mh "* ]] && [ ! -s "$out/mh.schema.json" ]; then
  $PY "$src/bench/dense/mh_csv_gen.py" --rows 100000 --test-rows 20000 --seed 11 \
    --out "$out/mh.tsv" --test-out "$out/mh_test.tsv" --schema-out "$out/mh.schema.json"
fi

run() { # set precision seed
  local d="$1" p="$2" sd="$3" res="$out/$1-$2-s$3.json" log="$out/$1-$2-s$3.log" sch=""
  [ -s "$res" ] && return 0
  [ -s "$out/$d.schema.json" ] && sch="--schema $out/$d.schema.json"
  "$src/deploy/ember-local" --servers 1 --workers 1 --bin "$BIN" -- --train "$out/$d.tsv" \
    --test "$out/${d}_test.tsv" --threads 1 --progress-every 100 --seed "$sd" --summary "$res" \
    --precision "$p" $sch $EXTRA > "$log" 2>&1 || { echo "bf16_quality: $d $p seed $sd failed, see $log" >&2; return 1; }
  echo "  $d $p seed $sd: auc $($PY -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["auc"], 5))' "$res")" >&2
}
# Seed by seed, fp32 then bf16 on each set, so an interrupted run leaves whole pairs behind.
for sd in $SEEDS; do for d in $SETS; do for p in fp32 bf16; do run "$d" "$p" "$sd"; done; done; done

$PY - "$out" "$SETS" "$SEEDS" <<'PY'
import json, math, os, statistics as st, sys
out, sets, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
auc = lambda d, p, s: json.load(open(os.path.join(out, f"{d}-{p}-s{s}.json")))["auc"]
def se(xs):
    return st.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan")
print(f"| set | AUC fp32 (mean of {len(seeds)} seeds) | AUC bf16 | bf16 - fp32 (± s.e.) |")
print("| --- | --- | --- | --- |")
cv = []
for d in sets:
    f, b = [auc(d, "fp32", s) for s in seeds], [auc(d, "bf16", s) for s in seeds]
    diff = [y - x for x, y in zip(f, b)]
    if d.startswith("cv"):
        cv += diff
    print(f"| {d} | {st.mean(f):.4f} | {st.mean(b):.4f} | {st.mean(diff):+.4f} ± {se(diff):.4f} |")
if cv:
    print(f"| Criteo, all folds x seeds (n={len(cv)}) | | | {st.mean(cv):+.4f} ± {se(cv):.4f} |")
PY
