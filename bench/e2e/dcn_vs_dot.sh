#!/usr/bin/env bash
# bench/e2e/dcn_vs_dot.sh: ps-worker's two interactions on the same data in the same session —
# dot (the default), DCNv2 at the defaults (3 layers, rank 64) and any other DCN shapes given —
# each through deploy/ember-local (1 server x 1 worker, sync), in ROUNDS interleaved rounds so
# that the machine's load falls on every variant alike. Prints one line per run and a table of
# AUC and logloss (deterministic: the same in every round) and the MEDIAN samples/s with its
# ratio to dot's.
#
#   bench/e2e/dcn_vs_dot.sh [OUTDIR]      (default /tmp/ember-dcn)
#
# Environment: BIN (default <src>/build/bin), ROWS (200000), TEST_ROWS (50000), SEED (1),
# ROUNDS (3), THREADS (2), VARIANTS ("dot dcn:3:64 dcn:3:0": dot or dcn:LAYERS:RANK),
# PSW_EXTRA (flags for every run, e.g. "--mlp-bot 13-64-16 --mlp-top 64-1").
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-dcn}"
BIN="${BIN:-$src/build/bin}" ROWS="${ROWS:-200000}" TEST_ROWS="${TEST_ROWS:-50000}"
SEED="${SEED:-1}" ROUNDS="${ROUNDS:-3}" THREADS="${THREADS:-2}" PSW_EXTRA="${PSW_EXTRA:-}"
VARIANTS="${VARIANTS:-dot dcn:3:64 dcn:3:0}"
mkdir -p "$out"
data="$out/data-$ROWS-$TEST_ROWS-s$SEED"
if [ ! -s "$data/planted.json" ]; then
  mkdir -p "$data"
  "$BIN/ps-datagen" --rows "$ROWS" --seed "$SEED" --out "$data/train.tsv" \
    --test-rows "$TEST_ROWS" --test-out "$data/test.tsv" --json "$data/planted.json" >/dev/null 2>&1
fi
for r in $(seq 1 "$ROUNDS"); do
  for v in $VARIANTS; do
    flags=(--interaction dot)
    if [ "${v%%:*}" = dcn ]; then
      IFS=: read -r _ L R <<<"$v"
      flags=(--interaction dcn --dcn-layers "$L" --dcn-rank "$R")
    fi
    "$src/deploy/ember-local" --servers 1 --workers 1 --bin "$BIN" -- \
      --train "$data/train.tsv" --test "$data/test.tsv" --threads "$THREADS" \
      --progress-every 60 --summary "$out/$v-r$r.json" "${flags[@]}" $PSW_EXTRA \
      >"$out/$v-r$r.log" 2>&1 || { echo "dcn_vs_dot: $v failed, see $out/$v-r$r.log" >&2; exit 1; }
    /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(f'round $r {sys.argv[2]:10s} AUC {s[\"auc\"]:.4f} logloss {s[\"logloss\"]:.4f} {s[\"samples_per_s\"]:.0f} samples/s')" "$out/$v-r$r.json" "$v"
  done
done
/usr/bin/python3 - "$out" "$ROUNDS" "$data/planted.json" $VARIANTS <<'PY'
import json, statistics, sys
out, rounds, planted, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
print(f"planted ceiling (test AUC of the planted model): {json.load(open(planted))['test_auc']:.4f}")
print("| variant | test AUC | logloss | samples/s (median of %d) | vs dot |" % rounds)
print("|---|---|---|---|---|")
med = {}
for v in variants:
    s = [json.load(open(f"{out}/{v}-r{r}.json")) for r in range(1, rounds + 1)]
    med[v] = statistics.median(x["samples_per_s"] for x in s)
    base = med.get("dot")
    ratio = f"{med[v] / base:.2f}x" if base else ""
    print(f"| {v} | {s[0]['auc']:.4f} | {s[0]['logloss']:.4f} | {med[v]:.0f} | {ratio} |")
PY
