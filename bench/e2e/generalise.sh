#!/usr/bin/env bash
# bench/e2e/generalise.sh: do ps-worker's defaults generalise? Model quality on data the
# defaults were not tuned on, next to the PyTorch DLRM yardstick and a logistic regression:
#   - the real Criteo sample (10,000 lines), 5 folds: train on 8,000 lines, test on the other
#     2,000 (fold 0 = the last 2,000 lines); the AUC of 2,000 test lines has a standard error
#     of ~0.01, so the mean over the folds is what to read;
#   - ps-datagen data of other seeds and shapes (100k train / 20k test rows): seed 7; seed 13
#     with 10x vocabularies and a longer tail (--vocab-scale 10 --zipf-shift -0.05); seed 5
#     with 0.1x vocabularies and a shorter tail (--vocab-scale 0.1 --zipf-shift 0.2); m4: seed 7
#     multi-hot (--multi-hot 4: bags of 1..4 ids), read through the --schema-out schema by
#     every run (ps-worker --schema, torch_dlrm.py --schema).
# On each: ps-worker 1 server x 1 worker with its defaults ("new") and with OLD flags, PyTorch
# (torch_dlrm.py, open vocabulary like ps-worker's default, a seeded shuffle each epoch) with
# the optimizer settings of each, and bench/datagen/lr_baseline.py. Every trainer run is repeated
# for each of SEEDS (ps-worker --seed and torch_dlrm.py --seed: initialization and shuffle), so
# ps-worker and PyTorch are paired on the same (data, seed). Prints a Markdown table of the means
# over SEEDS and, with 2 or more seeds, the paired comparison new - torch per data set: mean gap
# ± its standard error, the paired t-test and the Wilcoxon signed-rank test (scipy).
#
#   bench/e2e/generalise.sh [--prepare-only] [OUTDIR]      (default /tmp/ember-generalise)
#
# --prepare-only writes the data of SETS into OUTDIR and stops (bench/e2e/wire.sh uses it). A set
# is cv0..cv4 (the Criteo folds), s7, s13v, s5v, m4 (above), s<N> (ps-datagen --seed N, 100k /
# 20k rows, no other flag) or m<M> (m4 with bags of 1..M ids).
#
# Environment: BIN (default <src>/build/bin), CRITEO (default /work/shared/data/criteo_real.tsv),
# OLD (the defaults before issue 19, as flags), SETS (which data sets), RUNS ("new old torch
# torch-old lr", and torch-buf: the PyTorch yardstick trained in the "new" run's own row order,
# ps-worker's shuffle buffer replayed by bench/e2e/ember_order.py, so only the initial weights
# differ between the two), SEEDS (default "1"), NEW_EXTRA (flags added to the "new" runs and their
# PyTorch yardstick: a candidate default, tried on every set; its --hash-buckets N reaches the
# yardstick too, and its --shuffle-buffer 0 makes the yardstick read in file order as well
# (torch-old always shuffles, as before)). One compute thread everywhere (the dev box has 2 shared
# cores). Results are cached in OUTDIR by name (<set>-<run>-s<seed>.json; lr has no seed):
# delete a file to run it again.
#
# Design decision: the PyTorch runs take their batch and learning rates from `ps-worker --help`
# (and from OLD), so the yardstick always trains with the settings it is compared with.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # src BIN CRITEO PY
prepare_only=0
if [ "${1:-}" = --prepare-only ]; then prepare_only=1; shift; fi
out="${1:-/tmp/ember-generalise}"
OLD="${OLD:---batch 2048 --lr 0.001 --sparse-lr 0.1 --emb-init 0.01 --shuffle-buffer 0}"
SETS="${SETS:-cv0 cv1 cv2 cv3 cv4 s7 s13v s5v m4}"
RUNS="${RUNS:-new old torch torch-old lr}"
SEEDS="${SEEDS:-1}"
NEW_EXTRA="${NEW_EXTRA:-}"
mkdir -p "$out"

# --- data
gen() { # name flags...
  local n="$1"; shift
  [ -s "$out/$n.json" ] && return 0
  "$BIN/ps-datagen" --rows 100000 --test-rows 20000 "$@" --out "$out/$n.tsv" \
    --test-out "$out/${n}_test.tsv" --json "$out/$n.json" --log-level warn > /dev/null
}
for d in $SETS; do
  case "$d" in
    cv[0-4])
      k="${d#cv}"
      [ -s "$out/${d}_test.tsv" ] && continue
      awk -v k="$k" 'int((NR-1)/2000)==(4-k)' "$CRITEO" > "$out/${d}_test.tsv"
      awk -v k="$k" 'int((NR-1)/2000)!=(4-k)' "$CRITEO" > "$out/$d.tsv" ;;
    s13v) gen s13v --seed 13 --vocab-scale 10 --zipf-shift -0.05 ;;
    s5v) gen s5v --seed 5 --vocab-scale 0.1 --zipf-shift 0.2 ;;
    m[0-9]*) [[ "${d#m}" =~ ^[0-9]+$ ]] || { echo "generalise: unknown set $d" >&2; exit 2; }
      gen "$d" --seed 7 --multi-hot "${d#m}" --schema-out "$out/$d.schema.json" ;;
    s[0-9]*) [[ "${d#s}" =~ ^[0-9]+$ ]] || { echo "generalise: unknown set $d" >&2; exit 2; }
      gen "$d" --seed "${d#s}" ;;
    *) echo "generalise: unknown set $d (cv0..cv4, s13v, s5v, s<seed> or m<bag size>)" >&2; exit 2 ;;
  esac
done
[ "$prepare_only" = 1 ] && exit 0

# --- settings: ps-worker's defaults, and OLD on top of them for the torch-old run
default_of() { "$BIN/ps-worker" --help | sed -n "s/^ *--$1 [^ ]* .*(default: \([^)]*\)).*/\1/p"; }
torch_flags() { # ps-worker flags... -> torch_dlrm.py flags for the same settings
  local b lr slr ei dim bot top hb=0 shuf=--shuffle
  b="$(default_of batch)" lr="$(default_of lr)" slr="$(default_of sparse-lr)"
  ei="$(default_of emb-init)" dim="$(default_of emb-dim)" bot="$(default_of mlp-bot)" top="$(default_of mlp-top)"
  while [ $# -gt 0 ]; do
    case "$1" in
      --batch) b="$2" ;; --lr) lr="$2" ;; --sparse-lr) slr="$2" ;; --emb-init) ei="$2" ;;
      --emb-dim) dim="$2" ;; --mlp-bot) bot="$2" ;; --mlp-top) top="$2" ;;
      --hash-buckets) hb="$2" ;; --shuffle-buffer) [ "$2" = 0 ] && shuf="" ;;
    esac
    shift 2
  done
  echo "--batch $b --lr $lr --sparse-lr $slr --emb-init $ei --emb-dim $dim --mlp-bot $bot --mlp-top $top --hash-buckets $hb $shuf"
}
buffer_of() { # ps-worker flags... -> the --shuffle-buffer they train with
  local n; n="$(default_of shuffle-buffer)"
  while [ $# -gt 0 ]; do [ "$1" = --shuffle-buffer ] && n="$2"; shift 2; done
  echo "$n"
}
core=""
if grep -q avx512bw /proc/cpuinfo; then core=SkylakeX; fi

run() { # set run seed
  local d="$1" r="$2" sd="$3" res="$out/$1-$2-s$3.json" log="$out/$1-$2-s$3.log" sch=""
  [ "$r" = lr ] && res="$out/$d-lr.json" log="$out/$d-lr.log"
  [ -s "$res" ] && return 0
  [ -s "$out/$d.schema.json" ] && sch="--schema $out/$d.schema.json"
  case "$r" in
    new|old)
      local extra="$NEW_EXTRA"; [ "$r" = old ] && extra="$OLD"
      "$src/deploy/ember-local" --servers 1 --workers 1 --bin "$BIN" -- --train "$out/$d.tsv" \
        --test "$out/${d}_test.tsv" --threads 1 --progress-every 100 --seed "$sd" --summary "$res" \
        $extra $sch > "$log" 2>&1 || { echo "generalise: $d $r seed $sd failed, see $log" >&2; return 1; } ;;
    torch|torch-old|torch-buf)
      local f; if [ "$r" = torch-old ]; then f="$(torch_flags $OLD) --shuffle"; else f="$(torch_flags $NEW_EXTRA)"; fi
      # torch-buf: the rows in the order of the "new" run of the same seed (ember_order.py)
      [ "$r" = torch-buf ] && f="$f --shuffle-buffer $(buffer_of $NEW_EXTRA)"
      OMP_NUM_THREADS=1 OPENBLAS_CORETYPE="$core" $PY "$src/bench/e2e/torch_dlrm.py" \
        --train "$out/$d.tsv" --test "$out/${d}_test.tsv" --threads 1 \
        --seed "$sd" $f $sch --json "$res" > "$log" 2>&1 ;;
    lr)
      $PY "$src/bench/datagen/lr_baseline.py" "$out/$d.tsv" "$out/${d}_test.tsv" > "$log"
      $PY -c "import json,sys; a=open(sys.argv[1]).read().split(); json.dump({'auc': float(a[a.index('AUC')+1])}, open(sys.argv[2],'w'))" \
        "$log" "$res" ;;
  esac
}
# Seed by seed, so an interrupted run still leaves whole pairs behind.
for sd in $SEEDS; do for d in $SETS; do for r in $RUNS; do run "$d" "$r" "$sd"; done; done; done

# --- tables
$PY - "$out" "$SETS" "$RUNS" "$SEEDS" <<'PY'
import json, os, statistics as st, sys
from scipy import stats
out, sets, runs, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
def auc(d, r, s):
    p = os.path.join(out, f"{d}-lr.json" if r == "lr" else f"{d}-{r}-s{s}.json")
    return json.load(open(p))["auc"] if os.path.exists(p) else None
def mean(xs):
    return st.mean(xs) if xs and all(x is not None for x in xs) else None
# per (data, run): the AUC of each seed; the Criteo folds' mean is one more "data set" whose
# seed s value is the mean over the folds of seed s
per = {d: {r: [auc(d, r, s) for s in seeds] for r in runs} for d in sets}
cv = [d for d in sets if d.startswith("cv")]
if cv:
    per["criteo 5-fold mean"] = {r: [mean([per[d][r][i] for d in cv]) for i in range(len(seeds))] for r in runs}
names = sets + (["criteo 5-fold mean"] if cv else [])
f4 = lambda x: f"{x:.4f}" if x is not None else ""
print(f"Means over seeds {' '.join(seeds)}:\n")
print("| data | " + " | ".join(runs) + " | new - torch | planted |")
print("|---|" + "---|" * (len(runs) + 2))
for d in names:
    m = {r: mean(per[d][r]) for r in runs}
    pj = os.path.join(out, f"{d}.json")
    planted = f"{json.load(open(pj))['test_auc']:.4f}" if os.path.exists(pj) else ""
    gap = f"{m['new'] - m['torch']:+.4f}" if m.get("new") is not None and m.get("torch") is not None else ""
    print(f"| {d} | " + " | ".join(f4(m[r]) for r in runs) + f" | {gap} | {planted} |")
def paired(label, a, b):
    g = [x - y for x, y in zip(a, b)]
    t = stats.ttest_rel(a, b)
    w = stats.wilcoxon(a, b).pvalue if any(g) else 1.0
    print(f"| {label} | {len(g)} | {st.mean(a):.4f} | {st.mean(b):.4f} | {st.mean(g):+.4f} ± "
          f"{st.stdev(g) / len(g) ** 0.5:.4f} | {t.statistic:+.2f} ({t.pvalue:.3f}) | {w:.3f} | "
          f"{sum(x >= 0 for x in g)} of {len(g)} |")
for y in ("torch", "torch-buf"):
    if len(seeds) < 2 or "new" not in runs or y not in runs:
        continue
    print(f"\nPaired new - {y}, one pair per seed (same data, same --seed):\n")
    print(f"| data | pairs | mean new | mean {y} | mean gap ± its standard error | paired t (p, two-sided) "
          f"| Wilcoxon p | new >= {y} |")
    print("|---|---|---|---|---|---|---|---|")
    for d in names:
        a, b = per[d]["new"], per[d][y]
        if all(x is not None for x in a + b):
            paired(d, a, b)
    if cv and all(per[d][r][i] is not None for d in cv for r in ("new", y) for i in range(len(seeds))):
        paired("criteo, every fold x seed", [per[d]["new"][i] for d in cv for i in range(len(seeds))],
               [per[d][y][i] for d in cv for i in range(len(seeds))])
PY
