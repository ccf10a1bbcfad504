#!/usr/bin/env bash
# Ember's main job (README): install dependencies, build, generate Criteo-style data with a
# planted model, train DLRM with 2 servers and 2 workers on loopback, and print the test AUC
# beside the planted model's AUC (the ceiling a trained model can approach).
#
# Environment: EMBER_OUT (default out/quickstart), EMBER_ROWS (default 300000 training rows),
# EMBER_TEST_ROWS (default 50000), EMBER_JOBS (default nproc), EMBER_CUDA (AUTO, ON or OFF:
# the build's EMBER_CUDA; unset: AUTO where `nvidia-smi -L` lists a GPU, else OFF).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${EMBER_OUT:-out/quickstart}"
rows="${EMBER_ROWS:-300000}"
test_rows="${EMBER_TEST_ROWS:-50000}"
jobs="${EMBER_JOBS:-$(nproc)}"

echo "== installing dependencies"
bash deploy/install-deps.sh
# The CUDA backend only where a GPU is: nvcc alone (a toolkit on a CPU host) would add minutes
# of kernels no run here can use. EMBER_CUDA, when set, decides instead.
if [ -n "${EMBER_CUDA:-}" ]; then
  cuda="$EMBER_CUDA"
elif nvidia-smi -L > /dev/null 2>&1; then
  cuda=AUTO
else
  cuda=OFF
fi
log="$root/build.quickstart.log"
echo "== building (build/, CUDA $cuda; a few minutes; its output: $log)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA="$cuda" > "$log" 2>&1 ||
  { tail -40 "$log"; echo "quickstart: cmake failed, its output: $log" >&2; exit 1; }
# The build's lines go to the log; the terminal gets its progress, a line each 10% (make's
# "[ 45%]", Ninja's "[45/300]"), so the silent minutes do not look like a hang. A bash loop:
# mawk (Debian's awk) reads a pipe in blocks and would show the progress only at the end.
progress() {
  local line pct next=0
  while IFS= read -r line; do
    printf '%s\n' "$line" >&3
    if [[ $line =~ ^\[\ *([0-9]+)%\] ]]; then
      pct=$((10#${BASH_REMATCH[1]}))
    elif [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
      pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
    else
      continue
    fi
    if [ "$pct" -ge "$next" ]; then
      echo "   built $pct%"
      next=$((pct - pct % 10 + 10))
    fi
  done
}
cmake --build build -j "$jobs" 2>&1 | progress 3>> "$log" ||
  { tail -40 "$log"; echo "quickstart: the build failed, its output: $log" >&2; exit 1; }

mkdir -p "$out"
echo "== generating $rows training rows and $test_rows test rows"
build/bin/ps-datagen --rows "$rows" --seed 1 --out "$out/train.tsv" \
  --test-rows "$test_rows" --test-out "$out/test.tsv" --json "$out/planted.json"

# Servers persist their tables: a data dir left by an earlier run would start this one from
# already-trained rows (a second epoch), so the job starts from a fresh one.
rm -rf "$out/servers"
echo "== training: 2 servers x 2 workers (sync)"
deploy/ember-local --servers 2 --workers 2 --data-dir "$out/servers" -- \
  --train "$out/train.tsv" --test "$out/test.tsv" --summary "$out/summary.json"

/usr/bin/python3 - "$out/summary.json" "$out/planted.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); p = json.load(open(sys.argv[2]))
ceiling = p.get("test_auc", p.get("auc"))
print(f"== test AUC {s['auc']:.4f} (planted ceiling {ceiling:.4f}, gap {ceiling - s['auc']:.4f}); "
      f"logloss {s['logloss']:.4f}, accuracy {s['accuracy']:.4f}, "
      f"{s['samples']} samples at {s['samples_per_s']:.0f} samples/s, bad lines {s['bad_lines']}")
PY
