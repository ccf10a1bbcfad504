#!/usr/bin/env bash
# bench/e2e/wire.sh: ps-worker --wire f16 against --wire f32 (issue 22): test AUC and training
# samples/s, SERVERS x WORKERS (default 1 x 1) with ps-worker's defaults, on
#   - planted data: ps-datagen seed 7, 100k train / 20k test rows (generalise.sh's s7);
#   - the real Criteo sample, 5 folds of 8,000 train / 2,000 test lines (generalise.sh's cv0-4),
# each with ps-worker seeds 1 2 3 (--seed: dense and embedding init, shuffle). The two wires run
# back to back for each (set, seed), so their samples/s ratio comes from the same minute; the
# AUC difference is read against the seed-to-seed spread of one wire. Prints a Markdown table
# per run and a summary per data set.
#
#   bench/e2e/wire.sh [OUTDIR]      (default /tmp/ember-wire)
#
# Environment: BIN (default <src>/build/bin), CRITEO (default /work/shared/data/criteo_real.tsv),
# SETS (default "s7 cv0 cv1 cv2 cv3 cv4"; any set generalise.sh --prepare-only makes), SEEDS
# (default "1 2 3"), THREADS (ps-worker --threads, default 1: the dev box has 2 shared cores),
# SERVERS, WORKERS. Results are cached in OUTDIR by name (<set>-<wire>-s<seed>-<S>x<W>.json): delete a file to run it again.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # src BIN CRITEO PY
out="${1:-/tmp/ember-wire}"
SETS="${SETS:-s7 cv0 cv1 cv2 cv3 cv4}"
SEEDS="${SEEDS:-1 2 3}"
THREADS="${THREADS:-1}"
SERVERS="${SERVERS:-1}"
WORKERS="${WORKERS:-1}"
topo="${SERVERS}x${WORKERS}"
mkdir -p "$out"

# --- data: generalise.sh makes them (the same files, the same fold split)
SETS="$SETS" BIN="$BIN" CRITEO="$CRITEO" "$src/bench/e2e/generalise.sh" --prepare-only "$out"

run() { # set wire seed
  local res="$out/$1-$2-s$3-$topo.json" log="$out/$1-$2-s$3-$topo.log"
  [ -s "$res" ] && return 0
  "$src/deploy/ember-local" --servers "$SERVERS" --workers "$WORKERS" --bin "$BIN" -- \
    --train "$out/$1.tsv" \
    --test "$out/${1}_test.tsv" --threads "$THREADS" --progress-every 100 --seed "$3" \
    --wire "$2" --summary "$res" > "$log" 2>&1 ||
    { echo "wire.sh: $1 $2 seed $3 $topo failed, see $log" >&2; return 1; }
}
for seed in $SEEDS; do
  for d in $SETS; do
    # Alternate which wire goes first, so neither always gets the quieter half of the minute.
    if [ $((seed % 2)) = 1 ]; then run "$d" f32 "$seed"; run "$d" f16 "$seed"
    else run "$d" f16 "$seed"; run "$d" f32 "$seed"; fi
  done
done

# --- tables
$PY - "$out" "$SETS" "$SEEDS" "$topo" <<'PY'
import json, os, statistics as st, sys
out, sets, seeds, topo = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
def get(d, w, s):
    return json.load(open(os.path.join(out, f"{d}-{w}-s{s}-{topo}.json")))
print("| data | seed | AUC f32 | AUC f16 | f16 - f32 | samples/s f32 | samples/s f16 | f16 / f32 |")
print("|---|---|---|---|---|---|---|---|")
groups = {}
for d in sets:
    g = "criteo 5 folds" if d.startswith("cv") else f"planted {d}"
    for s in seeds:
        a, b = get(d, "f32", s), get(d, "f16", s)
        groups.setdefault(g, {}).setdefault(d, []).append((a, b))
        print(f"| {d} | {s} | {a['auc']:.4f} | {b['auc']:.4f} | {b['auc'] - a['auc']:+.4f} | "
              f"{a['samples_per_s']:.0f} | {b['samples_per_s']:.0f} | "
              f"{b['samples_per_s'] / a['samples_per_s']:.2f}x |")
print()
print("| data | runs | mean AUC f32 | mean AUC f16 | mean f16 - f32 (± its standard error) | "
      "max abs f16 - f32 | seed-to-seed sd of AUC f32 | median samples/s ratio f16 / f32 |")
print("|---|---|---|---|---|---|---|---|")
for g, per in groups.items():
    v = [x for runs in per.values() for x in runs]
    diffs = [b["auc"] - a["auc"] for a, b in v]
    # the noise to read a difference against: the spread of one wire over seeds, per data set
    sds = [st.stdev([a["auc"] for a, _ in runs]) for runs in per.values() if len(runs) > 1]
    sd = f"{st.mean(sds):.4f}" if sds else ""
    print(f"| {g} | {len(v)} | {st.mean(a['auc'] for a, _ in v):.4f} | "
          f"{st.mean(b['auc'] for _, b in v):.4f} | {st.mean(diffs):+.4f} ± "
          f"{(st.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0):.4f} | "
          f"{max(abs(x) for x in diffs):.4f} | {sd} | "
          f"{st.median(b['samples_per_s'] / a['samples_per_s'] for a, b in v):.2f}x |")
PY
