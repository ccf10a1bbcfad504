#!/usr/bin/env bash
# bench/e2e/run.sh: end-to-end DLRM training on ps-datagen data — ps-worker through
# deploy/ember-local (1 server + 1 worker, 2 servers + 2 workers, and open vocabulary) next to
# the PyTorch yardstick bench/e2e/torch_dlrm.py on the same data, keys and threads — and a
# table of AUC, logloss and samples/s with the gaps and the planted ceiling.
#
#   bench/e2e/run.sh [OUTDIR]        (default OUTDIR: /tmp/ember-e2e)
#
# Environment: BIN (ps-* binaries, default <src>/build/bin), ROWS (200000), TEST_ROWS (50000),
# SEED (1), BUCKETS (100000), THREADS (2: total compute threads, split over the workers),
# BATCH (2048: the GLOBAL batch; each of W workers gets BATCH/W, so every run trains the same
# model as PyTorch), RUNS ("1x1 2x2 open torch": which runs), PSW_EXTRA (extra ps-worker
# flags, e.g. "--sparse-lr 0.05"; the PyTorch run gets the same --lr/--sparse-lr/--emb-init).
#
# Design decision: the optimizer settings both trainers use are read from `ps-worker --help`
# (then overridden by PSW_EXTRA) and passed to torch_dlrm.py explicitly, so the yardstick can
# never drift from ps-worker's defaults.
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-e2e}"
BIN="${BIN:-$src/build/bin}"
ROWS="${ROWS:-200000}" TEST_ROWS="${TEST_ROWS:-50000}" SEED="${SEED:-1}"
BUCKETS="${BUCKETS:-100000}" THREADS="${THREADS:-2}" BATCH="${BATCH:-2048}"
RUNS="${RUNS:-1x1 2x2 open torch}" PSW_EXTRA="${PSW_EXTRA:-}"
PY=/usr/bin/python3
mkdir -p "$out"

# --- data (reused when the same shape and seed are already there)
data="$out/data-$ROWS-$TEST_ROWS-s$SEED"
if [ ! -s "$data/planted.json" ]; then
  mkdir -p "$data"
  "$BIN/ps-datagen" --rows "$ROWS" --seed "$SEED" --out "$data/train.tsv" \
    --test-rows "$TEST_ROWS" --test-out "$data/test.tsv" --json "$data/planted.json.tmp"
  mv "$data/planted.json.tmp" "$data/planted.json"
fi

# --- optimizer settings: ps-worker's defaults, then PSW_EXTRA on top
default_of() { "$BIN/ps-worker" --help | sed -n "s/^ *--$1 [^ ]* .*(default: \([^)]*\)).*/\1/p"; }
lr="$(default_of lr)" slr="$(default_of sparse-lr)" einit="$(default_of emb-init)"
set -- $PSW_EXTRA
while [ $# -gt 0 ]; do
  case "$1" in
    --lr) lr="$2"; shift 2 ;; --sparse-lr) slr="$2"; shift 2 ;; --emb-init) einit="$2"; shift 2 ;;
    *) shift ;;
  esac
done
tag="lr${lr}-slr${slr}-init${einit}"
echo "e2e: data $data; lr $lr, sparse-lr $slr, emb-init $einit; threads $THREADS; global batch $BATCH" >&2

ps_run() { # name servers workers [extra ps-worker flags...]
  local name="$1" ns="$2" nw="$3"; shift 3
  local thr=$((THREADS / nw)); [ "$thr" -ge 1 ] || thr=1
  "$src/deploy/ember-local" --servers "$ns" --workers "$nw" --bin "$BIN" -- \
    --train "$data/train.tsv" --test "$data/test.tsv" --batch $((BATCH / nw)) \
    --threads "$thr" --progress-every 30 --summary "$out/$name-$tag.json" \
    --lr "$lr" --sparse-lr "$slr" --emb-init "$einit" "$@" $PSW_EXTRA \
    > "$out/$name-$tag.log" 2>&1 || { echo "e2e: $name failed, see $out/$name-$tag.log" >&2; tail -5 "$out/$name-$tag.log" >&2; return 1; }
  grep "done:" "$out/$name-$tag.log" | sed 's/.*done:/  '"$name"':/' >&2
}

for r in $RUNS; do
  case "$r" in
    1x1) ps_run 1x1 1 1 --hash-buckets "$BUCKETS" ;;
    2x2) ps_run 2x2 2 2 --hash-buckets "$BUCKETS" ;;
    open) ps_run open 1 1 ;;
    torch)
      # PyTorch at its best: Debian's DYNAMIC_ARCH OpenBLAS (torch's libblas.so.3) falls back
      # to SSE3 "Prescott" kernels on CPUs it does not know, 3x slower here; ps-worker's CPU
      # backend re-selects the core itself (bench/RESULTS-dense.md).
      core="${OPENBLAS_CORETYPE:-}"
      if [ -z "$core" ] && grep -q avx512bw /proc/cpuinfo; then core=SkylakeX; fi
      OMP_NUM_THREADS="$THREADS" OPENBLAS_CORETYPE="$core" $PY "$src/bench/e2e/torch_dlrm.py" --train "$data/train.tsv" --test "$data/test.tsv" \
        --hash-buckets "$BUCKETS" --batch "$BATCH" --threads "$THREADS" --lr "$lr" \
        --sparse-lr "$slr" --emb-init "$einit" --json "$out/torch-$tag.json" ;;
    *) echo "e2e: unknown run '$r'" >&2; exit 2 ;;
  esac
done

# --- table
$PY - "$out" "$tag" "$data/planted.json" $RUNS <<'PY'
import json, os, sys
out, tag, planted = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
names = {"1x1": "ps-worker 1 server x 1 worker (hash)", "2x2": "ps-worker 2 servers x 2 workers (hash)",
         "open": "ps-worker 1 x 1 (open vocabulary)", "torch": "PyTorch (torch_dlrm.py, hash)"}
res = {}
for r in sys.argv[4:]:
    p = os.path.join(out, f"{r}-{tag}.json")
    if os.path.exists(p):
        res[r] = json.load(open(p))
ref = res.get("torch", {}).get("auc")
print(f"settings: {tag}")
print(f"| run | test AUC | logloss | samples/s | AUC - torch |")
print(f"|---|---|---|---|---|")
for r, j in res.items():
    gap = f"{j['auc'] - ref:+.4f}" if ref is not None and r != "torch" else ""
    print(f"| {names[r]} | {j['auc']:.4f} | {j['logloss']:.4f} | {j['samples_per_s']:.0f} | {gap} |")
print(f"| planted model (ceiling) | {planted['test_auc']:.4f} | {planted['test_logloss']:.4f} | | |")
PY
