#!/usr/bin/env bash
# Two builds of Ember side by side, interleaved: the embedding store (ps-store-bench), the
# server and client on loopback (ps-net-bench, Ember only), and end to end (2 servers x 2
# workers on ps-datagen data, samples/s), ROUNDS rounds with the order of the two builds
# alternating, so both see the same minutes of this noisy machine. Prints the median of each
# figure per build and the NEW/OLD ratio, and checks that both builds train the same model
# (test AUC, logloss and the dense parameters' hash equal to every printed digit).
#
#   bench/compare/run.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS=3] [OUT_DIR=/tmp/ember-compare]
#
# OLD_ARGS / NEW_ARGS (environment): extra ps-worker flags for the end-to-end run of each build,
# for when the defaults changed between them (e.g. NEW_ARGS="--batch 2048 --shuffle-buffer 0"
# to train what an older build trains by default).
set -euo pipefail
old="$(cd "$1" && pwd)"; new="$(cd "$2" && pwd)"
rounds="${3:-3}"
out="${4:-/tmp/ember-compare}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
data="$out/data"
if [ ! -f "$data/train.tsv" ]; then
  mkdir -p "$data"
  "$old/ps-datagen" --rows 200000 --seed 1 --out "$data/train.tsv" --test-rows 50000 \
    --test-out "$data/test.tsv" > /dev/null
fi

run_one() { # build-name bin-dir round
  local name="$1" bin="$2" r="$3" d="$out/$1-$3"
  mkdir -p "$d"
  local extra="${OLD_ARGS:-}"
  [ "$name" = new ] && extra="${NEW_ARGS:-}"
  "$bin/ps-store-bench" --dims 16,64 --regimes hot,over --seconds 0.5 --dir "$d/store" \
    --json "$d/store.json" > "$d/store.log" 2>&1
  "$bin/ps-net-bench" --dims 16 --servers 1 --inflight 1,8 --ops pull,push --duration 2 \
    --no-raw --json "$d/net.json" > "$d/net.log" 2>&1
  rm -rf "$d/e2e"
  "$root/deploy/ember-local" --servers 2 --workers 2 --data-dir "$d/e2e" --bin "$bin" -- \
    --train "$data/train.tsv" --test "$data/test.tsv" --summary "$d/e2e.json" $extra \
    > "$d/e2e.log" 2>&1
  rm -rf "$d/e2e" "$d/store"
  echo "round $r $name done"
}

for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then run_one old "$old" "$r"; run_one new "$new" "$r"
  else run_one new "$new" "$r"; run_one old "$old" "$r"; fi
done

/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def figs(name, r):
    d = f"{out}/{name}-{r}"
    f = {}
    for e in json.load(open(f"{d}/store.json"))["results"]:
        if e["op"] in ("pull", "push"):
            f[f"store {e['regime']} {e['dist']} {e['op']} dim {e['dim']} rows/s"] = e["rows_per_s"]
    for e in json.load(open(f"{d}/net.json")):
        f[f"net {e['op']} dim {e['dim']} q{e['inflight']} keys/s"] = e["keys_per_s"]
    s = json.load(open(f"{d}/e2e.json"))
    f["e2e 2x2 samples/s"] = s["samples_per_s"]
    return f, (s["auc"], s["logloss"], s["dense_hash"])
res = {n: [figs(n, r) for r in range(1, rounds + 1)] for n in ("old", "new")}
print(f"| figure (median of {rounds}) | old | new | new/old |")
print("| --- | --- | --- | --- |")
for k in res["old"][0][0]:
    o = statistics.median(x[0][k] for x in res["old"])
    n = statistics.median(x[0][k] for x in res["new"])
    print(f"| {k} | {o:.4g} | {n:.4g} | {n / o:.3f} |")
models = {x[1] for n in res for x in res[n]}
print("models:", "identical" if len(models) == 1 else "DIFFERENT", sorted(models))
json.dump({n: [x[0] for x in res[n]] for n in res}, open(f"{out}/compare.json", "w"), indent=1)
sys.exit(0 if len(models) == 1 else 1)
PY
