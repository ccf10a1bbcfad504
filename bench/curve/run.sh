#!/usr/bin/env bash
# What CURVE costs (issue 18): ps-bench against two ps-servers of one build, one plain and one
# with --curve-secret/--curve-clients (ps-bench with the matching --curve-secret/--curve-
# server), interleaved: ROUNDS rounds, the order of the two alternating, each running every
# case against both, so both see the same minutes of this noisy machine. Cases: closed-loop
# pull and push of 512 keys at dim 16 and 64 with 1 and 8 requests in flight (keys/s, p50
# latency). Prints the median of each figure per mode and the curve/plain ratio (keys/s below 1
# and p50 above 1 are CURVE's cost); the raw figures go to OUT_DIR/curve.json.
#
# With E2E_ROWS=N (default 0: off) it then trains a 2-server, 2-worker ember-local job on N
# ps-datagen rows with and without --auth, ROUNDS times interleaved, and prints the median
# samples/s of each and whether every run trained the same model.
#
#   bench/curve/run.sh [BIN_DIR=build/bin] [ROUNDS=5] [SECONDS=2] [OUT_DIR=/tmp/ember-curve-bench]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$(cd "${1:-$root/build/bin}" && pwd)"
rounds="${2:-5}" secs="${3:-2}" out="${4:-/tmp/ember-curve-bench}"
rm -rf "$out" && mkdir -p "$out/clients"
"$bin/ps-keygen" --out "$out/server" > /dev/null
"$bin/ps-keygen" --out "$out/bench" > /dev/null
cp "$out/bench.public" "$out/clients/"
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pp="$(port)" cp_="$(port)"
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait' EXIT
"$bin/ps-server" --listen "tcp://127.0.0.1:$pp" --data-dir "$out/plain" --log-level error \
  > "$out/plain.log" 2>&1 & pids+=($!)
"$bin/ps-server" --listen "tcp://127.0.0.1:$cp_" --data-dir "$out/curve" --log-level error \
  --curve-secret "$out/server.secret" --curve-clients "$out/clients" > "$out/curve.log" 2>&1 & pids+=($!)
sleep 1
declare -A url=([plain]="tcp://127.0.0.1:$pp" [curve]="tcp://127.0.0.1:$cp_")
declare -A auth=([plain]="")
auth[curve]="--curve-secret $out/bench.secret --curve-server $out/server.public"
one() { # mode round op dim q
  local m="$1" r="$2" op="$3" dim="$4" q="$5"
  # shellcheck disable=SC2086  # the CURVE flags are meant to split
  "$bin/ps-bench" --servers "${url[$m]}" ${auth[$m]} --closed-loop --inflight "$q" --op "$op" \
    --keys 512 --dim "$dim" --key-space 100000 --table-id "$dim" --duration "$secs" --warmup 0.5 \
    --prepopulate --json "$out/$m-$r-$op-$dim-$q.json" > /dev/null
}
for r in $(seq 1 "$rounds"); do
  order="plain curve"; [ $((r % 2)) -eq 0 ] && order="curve plain"
  for op in pull push; do for dim in 16 64; do for q in 1 8; do
    for m in $order; do one "$m" "$r" "$op" "$dim" "$q"; done
  done; done; done
  echo "round $r done ($order)" >&2
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
res, raw = [], {}
print(f"| case (median of {rounds}) | plain keys/s | CURVE keys/s | ratio | plain p50 us | CURVE p50 us | ratio |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for op in ("pull", "push"):
    for dim in (16, 64):
        for q in (1, 8):
            f = {m: [json.load(open(f"{out}/{m}-{r}-{op}-{dim}-{q}.json"))["points"][0] for r in range(1, rounds + 1)]
                 for m in ("plain", "curve")}
            k = {m: statistics.median(x["keys_per_s"] for x in f[m]) for m in f}
            p = {m: statistics.median(x["latency_us"]["p50"] for x in f[m]) for m in f}
            raw[f"{op} dim {dim} q{q}"] = {m: [(x["keys_per_s"], x["latency_us"]["p50"]) for x in f[m]] for m in f}
            print(f"| {op} dim {dim}, 512 keys, {q} in flight | {k['plain']:.4g} | {k['curve']:.4g} | "
                  f"{k['curve'] / k['plain']:.3f} | {p['plain']:.1f} | {p['curve']:.1f} | {p['curve'] / p['plain']:.3f} |")
json.dump(raw, open(f"{out}/curve.json", "w"), indent=1)
PY

rows="${E2E_ROWS:-0}"
[ "$rows" -gt 0 ] || exit 0
"$bin/ps-datagen" --rows "$rows" --seed 1 --out "$out/train.tsv" --test-rows $((rows / 4)) \
  --test-out "$out/test.tsv" > /dev/null 2>&1
for r in $(seq 1 "$rounds"); do
  order="plain curve"; [ $((r % 2)) -eq 0 ] && order="curve plain"
  for m in $order; do
    a=(); [ "$m" = curve ] && a=(--auth)
    rm -rf "$out/e2e"
    "$root/deploy/ember-local" --servers 2 --workers 2 --data-dir "$out/e2e" --bin "$bin" "${a[@]}" -- \
      --train "$out/train.tsv" --test "$out/test.tsv" --threads 1 --summary "$out/e2e-$m-$r.json" \
      > "$out/e2e-$m-$r.log" 2>&1
  done
  echo "e2e round $r done ($order)" >&2
done
rm -rf "$out/e2e"
/usr/bin/python3 - "$out" "$rounds" "$rows" <<'PY'
import json, statistics, sys
out, rounds, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = {m: [json.load(open(f"{out}/e2e-{m}-{r}.json")) for r in range(1, rounds + 1)] for m in ("plain", "curve")}
sps = {m: statistics.median(x["samples_per_s"] for x in s[m]) for m in s}
print(f"| e2e 2x2 samples/s ({rows} rows, median of {rounds}) | {sps['plain']:.4g} | {sps['curve']:.4g} | "
      f"{sps['curve'] / sps['plain']:.3f} |")
models = {(x["auc"], x["logloss"], x["dense_hash"]) for m in s for x in s[m]}
print("models:", "identical" if len(models) == 1 else "DIFFERENT", sorted(models))
PY
