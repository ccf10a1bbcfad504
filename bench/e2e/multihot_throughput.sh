#!/usr/bin/env bash
# bench/e2e/multihot_throughput.sh: throughput with DLRMv2-like multi-hot bags (issue 19) and
# DCNv2 beside dot on multi-hot data.
#   Part 1 (throughput): ps-datagen --multi-hot 100 (26 categorical features, bags of 1..100
#   ids, 13 dense), dim 128 on the wire (--emb-dim 128, --mlp-bot 13-512-256-128), dot
#   interaction, ps-worker's other defaults. In ROUNDS interleaved rounds: ps-worker 1 server x
#   1 worker and 2 x 2 (deploy/ember-local, sync), and bench/e2e/torch_dlrm.py --schema
#   (nn.EmbeddingBag, sum pooling) on the same files and shape; one compute thread a process.
#   Then the store alone: ps-store-bench at dim 128 with one call = the unique keys of one
#   256-row batch of this data (KEYS, ~53k of ~297k ids) over a key space of ~284k rows.
#   Part 2 (quality): ps-worker --interaction dot vs dcn on m4 (ps-datagen --seed 7 --multi-hot 4,
#   100k train / 20k test rows, generalise.sh's set) for SEEDS, with the planted ceiling.
# Prints one line per run and Markdown tables (medians of the rounds, ratios within a round).
#
#   bench/e2e/multihot_throughput.sh [OUTDIR]      (default /tmp/ember-multihot)
#
# Environment: BIN (default <src>/build/bin), ROWS (20000), ROUNDS (3), KEYS (53184),
# SEEDS ("1 2"), PARTS ("1 2"). The data files are cached in OUTDIR.
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-multihot}"
BIN="${BIN:-$src/build/bin}" ROWS="${ROWS:-20000}" ROUNDS="${ROUNDS:-3}" KEYS="${KEYS:-53184}"
SEEDS="${SEEDS:-1 2}" PARTS="${PARTS:-1 2}"
PY=/usr/bin/python3
mkdir -p "$out"
default_of() { "$BIN/ps-worker" --help | sed -n "s/^ *--$1 [^ ]* .*(default: \([^)]*\)).*/\1/p"; }
MODEL=(--emb-dim 128 --mlp-bot 13-512-256-128 --mlp-top "$(default_of mlp-top)")
gen() { # name flags...
  local n="$1"; shift
  [ -s "$out/$n.json" ] && return 0
  "$BIN/ps-datagen" "$@" --out "$out/$n.tsv" --test-out "$out/${n}_test.tsv" \
    --json "$out/$n.json" --schema-out "$out/$n.schema.json" --log-level warn > /dev/null
}
psw() { # servers workers summary log flags...
  local s="$1" w="$2" sum="$3" log="$4"; shift 4
  "$src/deploy/ember-local" --servers "$s" --workers "$w" --bin "$BIN" -- --threads 1 \
    --progress-every 100 --summary "$sum" "$@" > "$log" 2>&1 || { echo "failed: see $log" >&2; exit 1; }
}

if [[ " $PARTS " == *" 1 "* ]]; then
  gen mh --rows "$ROWS" --test-rows 2000 --seed 7 --multi-hot 100
  d=(--train "$out/mh.tsv" --test "$out/mh_test.tsv" --schema "$out/mh.schema.json")
  for r in $(seq 1 "$ROUNDS"); do
    echo "round $r: $(uptime)"
    psw 1 1 "$out/tp-1x1-r$r.json" "$out/tp-1x1-r$r.log" "${d[@]}" "${MODEL[@]}"
    psw 2 2 "$out/tp-2x2-r$r.json" "$out/tp-2x2-r$r.log" "${d[@]}" "${MODEL[@]}"
    $PY "$src/bench/e2e/torch_dlrm.py" "${d[@]}" "${MODEL[@]}" --threads 1 --shuffle \
      --batch "$(default_of batch)" --lr "$(default_of lr)" --sparse-lr "$(default_of sparse-lr)" \
      --emb-init "$(default_of emb-init)" --json "$out/tp-torch-r$r.json" > "$out/tp-torch-r$r.log" 2>&1
    for v in 1x1 2x2 torch; do
      $PY -c "import json,sys; s=json.load(open(sys.argv[1])); print(f'round $r {sys.argv[2]:6s} {s[\"samples_per_s\"]:7.0f} samples/s AUC {s[\"auc\"]:.4f}', s.get('seconds_rank0', ''))" \
        "$out/tp-$v-r$r.json" "$v"
    done
  done
  $PY - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
s = {v: [json.load(open(f"{out}/tp-{v}-r{r}.json")) for r in range(1, rounds + 1)] for v in ("1x1", "2x2", "torch")}
print(f"| run | samples/s (median of {rounds}) | per round | vs PyTorch (per round) | AUC |")
print("|---|---|---|---|---|")
for v, xs in s.items():
    sps = [x["samples_per_s"] for x in xs]
    ratio = " / ".join(f"{x / t['samples_per_s']:.2f}" for x, t in zip(sps, s["torch"]))
    print(f"| {v} | {statistics.median(sps):.0f} | {' / '.join(f'{x:.0f}' for x in sps)} | {ratio} | {xs[0]['auc']:.4f} |")
keys = ["data", "pull", "compute", "allreduce", "push", "optimizer", "eval"]
print("| rank-0 seconds (median) | " + " | ".join(keys) + " |")
print("|---" * (len(keys) + 1) + "|")
for v in ("1x1", "2x2"):
    print(f"| {v} | " + " | ".join(f"{statistics.median(x['seconds_rank0'][k] for x in s[v]):.2f}" for k in keys) + " |")
PY
  "$BIN/ps-store-bench" --dims 128 --regimes hot --batch "$KEYS" --cache-mb 512 --seconds 1 \
    --json "$out/store.json" 2>&1 | tail -7
fi

if [[ " $PARTS " == *" 2 "* ]]; then
  gen m4 --rows 100000 --test-rows 20000 --seed 7 --multi-hot 4
  d=(--train "$out/m4.tsv" --test "$out/m4_test.tsv" --schema "$out/m4.schema.json")
  for seed in $SEEDS; do
    for i in dot dcn; do
      psw 1 1 "$out/q-$i-s$seed.json" "$out/q-$i-s$seed.log" "${d[@]}" --interaction "$i" --seed "$seed"
    done
  done
  $PY - "$out" $SEEDS <<'PY'
import json, statistics, sys
out, seeds = sys.argv[1], sys.argv[2:]
print(f"planted ceiling (test AUC of the planted model): {json.load(open(out + '/m4.json'))['test_auc']:.4f}")
print("| interaction | " + " | ".join(f"seed {s} AUC / logloss / samples/s" for s in seeds) + " | mean AUC |")
print("|---" * (len(seeds) + 2) + "|")
for i in ("dot", "dcn"):
    xs = [json.load(open(f"{out}/q-{i}-s{s}.json")) for s in seeds]
    cells = [f"{x['auc']:.4f} / {x['logloss']:.4f} / {x['samples_per_s']:.0f}" for x in xs]
    print(f"| {i} | " + " | ".join(cells) + f" | {statistics.mean(x['auc'] for x in xs):.4f} |")
PY
fi
