#!/usr/bin/env bash
# Ember's main job (README): install dependencies, build, generate Criteo-style data with a
# planted model, train DLRM with 2 servers and 2 workers on loopback, and print the test AUC
# beside the planted model's AUC (the ceiling a trained model can approach).
#
# Environment: EMBER_OUT (default out/quickstart), EMBER_ROWS (default 300000 training rows),
# EMBER_TEST_ROWS (default 50000), EMBER_JOBS (default nproc).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${EMBER_OUT:-out/quickstart}"
rows="${EMBER_ROWS:-300000}"
test_rows="${EMBER_TEST_ROWS:-50000}"
jobs="${EMBER_JOBS:-$(nproc)}"

echo "== installing dependencies"
bash deploy/install-deps.sh
echo "== building (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j "$jobs" > build.quickstart.log 2>&1 || { tail -40 build.quickstart.log; exit 1; }

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
