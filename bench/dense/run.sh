#!/bin/sh
# bench/dense/run.sh: ps-dense-bench and the same model in PyTorch, same machine, same thread
# count, one invocation; prints both, the ratio, and which BLAS torch loaded.
#   bench/dense/run.sh [THREADS] [BATCHES] [SECONDS]      (defaults: 2 128,2048,8192 3)
# Env: EMBER_BIN (default build/bin), OUT (JSON folder, default a temp dir).
# PyTorch is given OPENBLAS_CORETYPE=SkylakeX when the CPU has AVX-512 and nothing is set, so
# it runs at its best: Debian's DYNAMIC_ARCH OpenBLAS falls back to Prescott kernels on CPUs it
# does not recognise (this VM), where torch is 3x slower (recorded in bench/RESULTS-dense.md).
set -eu
T=${1:-2}
BATCHES=${2:-128,2048,8192}
SECS=${3:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${EMBER_BIN:-$HERE/../../build/bin}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -q avx512bw /proc/cpuinfo; then
  TORCH_CORE=SkylakeX
else
  TORCH_CORE=${OPENBLAS_CORETYPE:-}
fi
echo "== ps-dense-bench ($T threads)"
"$BIN/ps-dense-bench" --threads "$T" --batch "$BATCHES" --seconds "$SECS" --json "$OUT/ember.json"
echo "== PyTorch ($T threads, OPENBLAS_CORETYPE=${TORCH_CORE:-unset})"
OMP_NUM_THREADS=$T OPENBLAS_CORETYPE=$TORCH_CORE /usr/bin/python3 "$HERE/torch_dense.py" \
  --threads "$T" --batch "$BATCHES" --seconds "$SECS" --json "$OUT/torch.json"
/usr/bin/python3 - "$OUT/ember.json" "$OUT/torch.json" <<'PY'
import json, sys
e = {r["batch"]: r for r in json.load(open(sys.argv[1]))["results"]}
t = json.load(open(sys.argv[2]))
print(f"== ratio (Ember / PyTorch), {t['threads']} threads; torch BLAS: {', '.join(t['blas'])} "
      f"(OpenBLAS core {t['openblas_core']})")
print(f"{'batch':>6} {'ember/s':>10} {'torch full/s':>13} {'ratio':>6} {'torch dense-only/s':>19} {'ratio':>6}")
for r in t["results"]:
    b = r["batch"]
    es = e[b]["samples_per_s"]
    tf, td = r["full"]["samples_per_s"], r["dense_only"]["samples_per_s"]
    print(f"{b:>6} {es:>10.0f} {tf:>13.0f} {es / tf:>6.2f} {td:>19.0f} {es / td:>6.2f}")
PY
echo "JSON in $OUT"
