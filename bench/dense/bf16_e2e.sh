#!/usr/bin/env bash
# bench/dense/bf16_e2e.sh: end to end, --precision fp32 against bf16, beside PyTorch FP32 and
# PyTorch bf16 (torch.autocast), in interleaved rounds on the same data: each round runs
# ps-worker 1x1 and 2x2 (deploy/ember-local, sync) at both precisions and
# bench/e2e/torch_dlrm.py with and without --bf16, the order rotated from round to round.
# Settings as bench/e2e/run.sh: ps-datagen data (ROWS train, TEST_ROWS test, SEED), a GLOBAL
# batch of BATCH split over the workers, --hash-buckets BUCKETS, THREADS compute threads split
# over the workers (PyTorch gets them all), ps-worker's optimizer defaults for both trainers.
# Prints the median samples/s and AUC of every run over the rounds, and the ratios within a
# round (median), as Markdown.
#
#   bench/dense/bf16_e2e.sh [OUTDIR]          (default /tmp/ember-bf16-e2e)
#
# Environment: BIN (default <src>/build/bin), ROWS (200000), TEST_ROWS (50000), SEED (1),
# BUCKETS (100000), THREADS (2), BATCH (2048), ROUNDS (3), RUNS ("ps1x1 ps2x2 torch": which).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-bf16-e2e}"
BIN="${BIN:-$src/build/bin}" ROWS="${ROWS:-200000}" TEST_ROWS="${TEST_ROWS:-50000}"
SEED="${SEED:-1}" BUCKETS="${BUCKETS:-100000}" THREADS="${THREADS:-2}" BATCH="${BATCH:-2048}"
ROUNDS="${ROUNDS:-3}" RUNS="${RUNS:-ps1x1 ps2x2 torch}"
PY=/usr/bin/python3
mkdir -p "$out"
data="$out/data-$ROWS-$TEST_ROWS-s$SEED" # made once, reused by every round
[ -s "$data/test.tsv" ] || { mkdir -p "$data" && "$BIN/ps-datagen" --rows "$ROWS" --seed "$SEED" \
  --out "$data/train.tsv" --test-rows "$TEST_ROWS" --test-out "$data/test.tsv" --log-level warn > /dev/null; }
opt() { "$BIN/ps-worker" --help | sed -n "s/^ *--$1 [^ ]* .*(default: \([^)]*\)).*/\1/p"; }
lr="$(opt lr)" slr="$(opt sparse-lr)" einit="$(opt emb-init)"
core=""; grep -q avx512bw /proc/cpuinfo && core=SkylakeX

one() { # round name -> $out/r<round>-<name>.json
  local r="$1" name="$2" res="$out/r$1-$2.json" log="$out/r$1-$2.log"
  [ -s "$res" ] && return 0
  case "$name" in
    ps*-*)
      local shape="${name%-*}" prec="${name##*-}" w; w="${shape#ps}"; w="${w#*x}"
      "$src/deploy/ember-local" --servers "$w" --workers "$w" --bin "$BIN" -- \
        --train "$data/train.tsv" --test "$data/test.tsv" --batch $((BATCH / w)) \
        --threads $((THREADS / w > 0 ? THREADS / w : 1)) --hash-buckets "$BUCKETS" \
        --lr "$lr" --sparse-lr "$slr" --emb-init "$einit" --progress-every 60 \
        --precision "$prec" --summary "$res" > "$log" 2>&1 ;;
    torch-*)
      local bf=""; [ "${name#torch-}" = bf16 ] && bf=--bf16
      OMP_NUM_THREADS="$THREADS" OPENBLAS_CORETYPE="$core" $PY "$src/bench/e2e/torch_dlrm.py" \
        --train "$data/train.tsv" --test "$data/test.tsv" --hash-buckets "$BUCKETS" \
        --batch "$BATCH" --threads "$THREADS" --lr "$lr" --sparse-lr "$slr" --emb-init "$einit" \
        $bf --json "$res" > "$log" 2>&1 ;;
  esac || { echo "bf16_e2e: round $r $name failed, see $log" >&2; return 1; }
  echo "  round $r $name: $($PY -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.0f samples/s, AUC %.4f' % (d['samples_per_s'], d['auc']))" "$res")" >&2
}
names=()
for r in $RUNS; do
  case "$r" in
    ps1x1|ps2x2|torch) names+=("$r-fp32" "$r-bf16") ;;
    *) echo "bf16_e2e: unknown run $r (ps1x1 ps2x2 torch)" >&2; exit 2 ;;
  esac
done
n=${#names[@]}
for ((r = 1; r <= ROUNDS; r++)); do
  for ((i = 0; i < n; i++)); do one "$r" "${names[$(((i + r - 1) % n))]}"; done
done

$PY - "$out" "$ROUNDS" "${names[@]}" <<'PY'
import json, os, statistics as st, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
get = lambda r, n: json.load(open(os.path.join(out, f"r{r}-{n}.json")))
rows = {n: [get(r, n) for r in range(1, rounds + 1)] for n in names}
print(f"| run | samples/s (median of {rounds}) | AUC (median) | logloss |")
print("| --- | --- | --- | --- |")
for n in names:
    v = rows[n]
    print(f"| {n} | {st.median(x['samples_per_s'] for x in v):.0f} | "
          f"{st.median(x['auc'] for x in v):.4f} | {st.median(x['logloss'] for x in v):.4f} |")
def ratio(a, b):
    if a in rows and b in rows:
        q = [x["samples_per_s"] / y["samples_per_s"] for x, y in zip(rows[a], rows[b])]
        print(f"| {a} / {b} | {st.median(q):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in q)}) |")
print("\n| ratio within a round | median |\n| --- | --- |")
for a, b in (("ps1x1-bf16", "ps1x1-fp32"), ("ps2x2-bf16", "ps2x2-fp32"), ("torch-bf16", "torch-fp32"),
             ("ps1x1-fp32", "torch-fp32"), ("ps1x1-bf16", "torch-bf16"), ("ps2x2-fp32", "torch-fp32"),
             ("ps2x2-bf16", "torch-fp32"), ("ps2x2-bf16", "torch-bf16")):
    ratio(a, b)
PY
