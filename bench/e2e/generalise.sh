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
# the optimizer settings of each, and bench/datagen/lr_baseline.py. Prints a Markdown table.
#
#   bench/e2e/generalise.sh [OUTDIR]      (default /tmp/ember-generalise)
#
# Environment: BIN (default <src>/build/bin), CRITEO (default /work/shared/data/criteo_real.tsv),
# OLD (the defaults before issue 19, as flags), SETS (which data sets), RUNS ("new old torch
# torch-old lr"). One compute thread everywhere (the dev box has 2 shared cores). Results are
# cached in OUTDIR by name: delete a file to run it again.
#
# Design decision: the PyTorch runs take their batch and learning rates from `ps-worker --help`
# (and from OLD), so the yardstick always trains with the settings it is compared with.
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-generalise}"
BIN="${BIN:-$src/build/bin}"
CRITEO="${CRITEO:-/work/shared/data/criteo_real.tsv}"
OLD="${OLD:---batch 2048 --lr 0.001 --sparse-lr 0.1 --emb-init 0.01 --shuffle-buffer 0}"
SETS="${SETS:-cv0 cv1 cv2 cv3 cv4 s7 s13v s5v m4}"
RUNS="${RUNS:-new old torch torch-old lr}"
PY=/usr/bin/python3
mkdir -p "$out"

# --- data
for k in 0 1 2 3 4; do
  [ -s "$out/cv${k}_test.tsv" ] && continue
  awk -v k=$k 'int((NR-1)/2000)==(4-k)' "$CRITEO" > "$out/cv${k}_test.tsv"
  awk -v k=$k 'int((NR-1)/2000)!=(4-k)' "$CRITEO" > "$out/cv${k}.tsv"
done
gen() { # name flags...
  local n="$1"; shift
  [ -s "$out/$n.json" ] && return 0
  "$BIN/ps-datagen" --rows 100000 --test-rows 20000 "$@" --out "$out/$n.tsv" \
    --test-out "$out/${n}_test.tsv" --json "$out/$n.json" --log-level warn > /dev/null
}
gen s7 --seed 7
gen s13v --seed 13 --vocab-scale 10 --zipf-shift -0.05
gen s5v --seed 5 --vocab-scale 0.1 --zipf-shift 0.2
gen m4 --seed 7 --multi-hot 4 --schema-out "$out/m4.schema.json"

# --- settings: ps-worker's defaults, and OLD on top of them for the torch-old run
default_of() { "$BIN/ps-worker" --help | sed -n "s/^ *--$1 [^ ]* .*(default: \([^)]*\)).*/\1/p"; }
torch_flags() { # ps-worker flags... -> torch_dlrm.py flags for the same settings
  local b lr slr ei dim bot top
  b="$(default_of batch)" lr="$(default_of lr)" slr="$(default_of sparse-lr)"
  ei="$(default_of emb-init)" dim="$(default_of emb-dim)" bot="$(default_of mlp-bot)" top="$(default_of mlp-top)"
  while [ $# -gt 0 ]; do
    case "$1" in
      --batch) b="$2" ;; --lr) lr="$2" ;; --sparse-lr) slr="$2" ;; --emb-init) ei="$2" ;;
      --emb-dim) dim="$2" ;; --mlp-bot) bot="$2" ;; --mlp-top) top="$2" ;;
    esac
    shift 2
  done
  echo "--batch $b --lr $lr --sparse-lr $slr --emb-init $ei --emb-dim $dim --mlp-bot $bot --mlp-top $top"
}
core=""
if grep -q avx512bw /proc/cpuinfo; then core=SkylakeX; fi

run() { # set run
  local d="$1" r="$2" res="$out/$1-$2.json" sch=""
  [ -s "$res" ] && return 0
  [ -s "$out/$d.schema.json" ] && sch="--schema $out/$d.schema.json"
  case "$r" in
    new|old)
      local extra=""; [ "$r" = old ] && extra="$OLD"
      "$src/deploy/ember-local" --servers 1 --workers 1 --bin "$BIN" -- --train "$out/$d.tsv" \
        --test "$out/${d}_test.tsv" --threads 1 --progress-every 100 --summary "$res" $extra $sch \
        > "$out/$d-$r.log" 2>&1 || { echo "generalise: $d $r failed, see $out/$d-$r.log" >&2; return 1; } ;;
    torch|torch-old)
      local f; if [ "$r" = torch ]; then f="$(torch_flags)"; else f="$(torch_flags $OLD)"; fi
      OMP_NUM_THREADS=1 OPENBLAS_CORETYPE="$core" $PY "$src/bench/e2e/torch_dlrm.py" \
        --train "$out/$d.tsv" --test "$out/${d}_test.tsv" --threads 1 --hash-buckets 0 --shuffle \
        $f $sch --json "$res" > "$out/$d-$r.log" 2>&1 ;;
    lr)
      $PY "$src/bench/datagen/lr_baseline.py" "$out/$d.tsv" "$out/${d}_test.tsv" > "$out/$d-lr.log"
      $PY -c "import json,sys; a=open(sys.argv[1]).read().split(); json.dump({'auc': float(a[a.index('AUC')+1])}, open(sys.argv[2],'w'))" \
        "$out/$d-lr.log" "$res" ;;
  esac
}
for d in $SETS; do for r in $RUNS; do run "$d" "$r"; done; done

# --- table
$PY - "$out" "$SETS" "$RUNS" <<'PY'
import json, os, sys
out, sets, runs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def auc(d, r):
    p = os.path.join(out, f"{d}-{r}.json")
    return json.load(open(p))["auc"] if os.path.exists(p) else None
rows = [(d, {r: auc(d, r) for r in runs}) for d in sets]
cv = [v for d, v in rows if d.startswith("cv")]
if cv:
    rows.append(("criteo 5-fold mean", {r: sum(v[r] for v in cv) / len(cv) if all(v[r] is not None for v in cv) else None for r in runs}))
print("| data | " + " | ".join(runs) + " | new - torch | planted |")
print("|---|" + "---|" * (len(runs) + 2))
for d, v in rows:
    pj = os.path.join(out, f"{d}.json")
    planted = f"{json.load(open(pj))['test_auc']:.4f}" if os.path.exists(pj) else ""
    gap = f"{v['new'] - v['torch']:+.4f}" if v.get("new") is not None and v.get("torch") is not None else ""
    print(f"| {d} | " + " | ".join(f"{v[r]:.4f}" if v[r] is not None else "" for r in runs) + f" | {gap} | {planted} |")
PY
