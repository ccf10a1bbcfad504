#!/usr/bin/env bash
# bench/pslat/multihot.sh: the wire with DLRMv2-like multi-hot requests (issue 19). ps-bench
# --bag-size against fresh ps-server shards on loopback: a request is one 256-sample batch of
# 26 features, each a bag of 1..100 ids (KEYS = 26 x 256 bags), dim 128, de-duplicated as
# ps-worker does before the send; Zipf(1.1) over 284k keys gives ~49k unique rows of ~336k ids
# a request, about what ps-worker sees on `ps-datagen --multi-hot 100` data (53k of 297k;
# bench/RESULTS-e2e.md), and uniform over the same keys is the no-locality end. Closed loop,
# one request in flight (a worker's pull or push of a step), every (servers, dist, op)
# configuration in each of ROUNDS interleaved rounds. Prints a line per run and a table of
# medians: ids (keys) /s, unique rows/s, the rows' MB/s on the wire, ms a request.
#
#   bench/pslat/multihot.sh [BIN_DIR] [OUT_DIR]      (defaults build/bin, out/pslat-multihot)
# Env: ROUNDS (3), SECS (5), WARMUP (1), KEYS (6656), BAG (1..100), DIM (128),
#      KEY_SPACE (284000), DISTS ("zipf:1.1 uniform"), SHARDS ("1 2"), OPS ("pull push"),
#      SERVER_ARGS (extra ps-server flags; default --cache-mb 1024), BENCH_ARGS.
set -euo pipefail
bin="${1:-build/bin}" out="${2:-out/pslat-multihot}"
rounds="${ROUNDS:-3}" secs="${SECS:-5}" warm="${WARMUP:-1}" keys="${KEYS:-6656}"
bag="${BAG:-1..100}" dim="${DIM:-128}" space="${KEY_SPACE:-284000}"
dists="${DISTS:-zipf:1.1 uniform}" shards="${SHARDS:-1 2}" ops="${OPS:-pull push}"
read -r -a server_args <<< "${SERVER_ARGS:---cache-mb 1024}"
read -r -a bench_args <<< "${BENCH_ARGS:-}"
mkdir -p "$out"
. "$(dirname "${BASH_SOURCE[0]}")/servers.sh"
for r in $(seq 1 "$rounds"); do
  for n in $shards; do
    start "$r" "$n"
    t=1
    for dist in $dists; do
      for op in $ops; do
        name="r$r-${n}s-${dist/:/}-$op"
        # one table per distribution, populated by its first run
        pre=(); [ "$op" = "${ops%% *}" ] && pre=(--prepopulate)
        "$bin/ps-bench" --servers "$urls" --op "$op" --keys "$keys" --bag-size "$bag" \
          --dim "$dim" --key-space "$space" --dist "$dist" --table-id "$t" "${pre[@]}" \
          --closed-loop --inflight 1 --duration "$secs" --warmup "$warm" \
          --json "$out/$name.json" "${bench_args[@]}" > "$out/$name.txt"
        echo "$name load $(cut -d' ' -f1 /proc/loadavg): $(grep '^  bags:' "$out/$name.txt")"
      done
      t=$((t + 1))
    done
    stop_all
  done
done
/usr/bin/python3 - "$out" "$rounds" "$shards" "$dists" "$ops" "$dim" <<'PY'
import json, statistics as st, sys
out, rounds, shards, dists, ops, dim = sys.argv[1], int(sys.argv[2]), *[a.split() for a in sys.argv[3:6]], int(sys.argv[6])
print(f"\n| servers | dist | op | ids/s (keys/s) | unique rows/s | rows MB/s | ids -> rows a request | "
      f"ms a request (mean) | rows/s per round |")
print("|---|---|---|---|---|---|---|---|---|")
for n in shards:
    for d in dists:
        for o in ops:
            ps = [json.load(open(f"{out}/r{r}-{n}s-{d.replace(':', '')}-{o}.json"))["points"][0]
                  for r in range(1, rounds + 1)]
            kps, rps = [p["keys_per_s"] for p in ps], [p["rows_per_s"] for p in ps]
            ids = st.mean(p["keys_per_s"] / p["achieved_rate"] for p in ps)
            rows = st.mean(p["rows_per_s"] / p["achieved_rate"] for p in ps)
            ms = st.median(p["latency_us"]["mean"] / 1e3 for p in ps)
            print(f"| {n} | {d} | {o} | {st.median(kps) / 1e6:.2f}M | {st.median(rps) / 1e6:.2f}M | "
                  f"{st.median(rps) * dim * 4 / 1e6:.0f} | {ids:.0f} -> {rows:.0f} | {ms:.1f} | "
                  + " / ".join(f"{x / 1e6:.2f}M" for x in rps) + " |")
PY
