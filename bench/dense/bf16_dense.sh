#!/usr/bin/env bash
# bench/dense/bf16_dense.sh: the dense step, --precision fp32 against bf16 against PyTorch FP32
# and PyTorch bf16 (torch_dense.py --bf16, torch.autocast), in interleaved rounds (the order
# rotated each round), for the default towers (13-512-256-64-16 / 512-256-1) and the small ones
# (13-32-16 / 64-1), at each of BATCHES; then ps-gemm-bench (one step's GEMMs: OpenBLAS FP32,
# oneDNN bf16, an own AVX512_BF16 kernel) on the same shapes. Prints Markdown: the median
# samples/s of each, and the median within-round ratios.
#
#   bench/dense/bf16_dense.sh [OUTDIR]            (default /tmp/ember-bf16-dense)
#
# Environment: BIN (default <src>/build/bin), THREADS (1), BATCHES ("256,2048"), ROUNDS (3),
# SECONDS_EACH (2: timed seconds per batch size and run).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-bf16-dense}"
BIN="${BIN:-$src/build/bin}" THREADS="${THREADS:-1}" BATCHES="${BATCHES:-256,2048}"
ROUNDS="${ROUNDS:-3}" SECS="${SECONDS_EACH:-2}"
PY=/usr/bin/python3
mkdir -p "$out"
core=""; grep -q avx512bw /proc/cpuinfo && core=SkylakeX
towers=("13-512-256-64-16 512-256-1" "13-32-16 64-1")
names=(ember-fp32 ember-bf16 torch-fp32 torch-bf16)

for ((r = 1; r <= ROUNDS; r++)); do
  for t in 0 1; do
    read -r bot top <<< "${towers[$t]}"
    for ((i = 0; i < 4; i++)); do
      n="${names[$(((i + r - 1) % 4))]}" res="$out/r$r-t$t-$n.json"
      [ -s "$res" ] && continue
      case "$n" in
        ember-*) "$BIN/ps-dense-bench" --threads "$THREADS" --batch "$BATCHES" --seconds "$SECS" \
                   --mlp-bot "$bot" --mlp-top "$top" --emb-dim "${bot##*-}" --profile 0 \
                   --precision "${n#ember-}" --json "$res" > "$out/r$r-t$t-$n.log" 2>&1 ;;
        torch-*) bf=""; [ "$n" = torch-bf16 ] && bf=--bf16
                 OMP_NUM_THREADS="$THREADS" OPENBLAS_CORETYPE="$core" $PY "$src/bench/dense/torch_dense.py" \
                   --threads "$THREADS" --batch "$BATCHES" --seconds "$SECS" --mlp-bot "$bot" \
                   --mlp-top "$top" $bf --json "$res" > "$out/r$r-t$t-$n.log" 2>&1 ;;
      esac
    done
  done
  echo "bf16_dense: round $r done" >&2
done

for t in 0 1; do
  read -r bot top <<< "${towers[$t]}"
  for b in ${BATCHES//,/ }; do
    "$BIN/ps-gemm-bench" --threads "$THREADS" --batch "$b" --mlp-bot "$bot" --mlp-top "$top" \
      --rounds 5 --reps 3 --json "$out/gemm-t$t-b$b.json" 2>&1 | grep -v INFO
  done
done

$PY - "$out" "$ROUNDS" "$THREADS" <<'PY'
import json, os, statistics as st, sys
out, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
towers = ["13-512-256-64-16 / 512-256-1", "13-32-16 / 64-1"]
def sps(r, t, n, b):
    d = json.load(open(os.path.join(out, f"r{r}-t{t}-{n}.json")))
    x = next(x for x in d["results"] if x["batch"] == b)
    return x["samples_per_s"] if n.startswith("ember") else x["full"]["samples_per_s"]
print(f"Dense step samples/s, {threads} thread(s), median of {rounds} interleaved rounds; "
      "ratios are medians of within-round ratios.\n")
print("| towers | batch | Ember fp32 | Ember bf16 | PyTorch fp32 | PyTorch bf16 | Ember bf16/fp32 "
      "| PyTorch bf16/fp32 | Ember bf16 / PyTorch bf16 | Ember bf16 / PyTorch fp32 |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
batches = sorted({x["batch"] for x in json.load(open(os.path.join(out, "r1-t0-ember-fp32.json")))["results"]})
for t in (0, 1):
    for b in batches:
        v = {n: [sps(r, t, n, b) for r in range(1, rounds + 1)] for n in
             ("ember-fp32", "ember-bf16", "torch-fp32", "torch-bf16")}
        q = lambda a, c: st.median(x / y for x, y in zip(v[a], v[c]))
        print(f"| {towers[t]} | {b} | " + " | ".join(f"{st.median(v[n]):.0f}" for n in v) +
              f" | {q('ember-bf16', 'ember-fp32'):.2f}x | {q('torch-bf16', 'torch-fp32'):.2f}x"
              f" | {q('ember-bf16', 'torch-bf16'):.2f}x | {q('ember-bf16', 'torch-fp32'):.2f}x |")
PY
