#!/usr/bin/env bash
# Push throughput of two builds (ps-net-bench, each with its own ps-server), interleaved per
# configuration: ROUNDS rounds; in each, every configuration runs OLD then NEW (odd rounds) or
# NEW then OLD (even), so both see the same minutes of a noisy machine. Used for exactly-once
# pushes (bench/RESULTS-net.md); summarise OUT/*.json (medians per build, paired ratios).
#   bench/net/exactonce_compare.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS=7] [OUT=/tmp/exo-bench]
set -u
OLD="$1"; NEW="$2"; ROUNDS="${3:-7}"; OUT="${4:-/tmp/exo-bench}"
rm -rf "$OUT"; mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for batch in 256 4096; do
    for q in 1 8; do
      for b in $order; do
        bin=$OLD; [ $b = new ] && bin=$NEW
        "$bin/ps-net-bench" --ops push --dims 16 --servers 1 --inflight $q --batch $batch \
          --duration 1.5 --no-raw --json "$OUT/$b-$batch-$q-$r.json" > "$OUT/$b-$batch-$q-$r.log" 2>&1
      done
    done
  done
  uptime
done
# Medians per build (Mkeys/s), the ratio of the medians and the median of the paired ratios.
/usr/bin/python3 - "$OUT" <<'PY'
import glob, json, os, statistics as st, sys
res = {}
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    b, batch, q, r = os.path.basename(f)[:-5].split("-")
    for x in json.load(open(f)):
        if x.get("impl") == "ember":
            res.setdefault((int(batch), int(q)), {}).setdefault(b, {})[int(r)] = x["keys_per_s"]
print("batch inflight  old_Mkeys/s new_Mkeys/s  new/old  paired")
for k in sorted(res):
    o, n = res[k].get("old", {}), res[k].get("new", {})
    rs = sorted(set(o) & set(n))
    if not rs:
        continue
    mo, mn = st.median(o.values()), st.median(n.values())
    print("%5d %8d  %11.2f %11.2f  %7.3f  %6.3f" % (k[0], k[1], mo / 1e6, mn / 1e6, mn / mo,
                                                    st.median(n[r] / o[r] for r in rs)))
PY
