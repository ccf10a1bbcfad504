#!/usr/bin/env bash
# ps-bench --prepopulate makes every key's row exist before the run, so a pull benchmark measures
# pulls of rows that exist (the hot path), not the cold path: a pull of a key without a row is
# answered from the initializer and creates nothing. Checked on the server's own STATS (ps-stats):
# after --prepopulate over K keys the hot tier holds K rows, and the measured pulls over those keys
# are all hits (misses: one per key, the creating pushes). Fails where --prepopulate pulls:
# no row, every pulled key a miss.
. "$(dirname "$0")/lib.sh"
B="$EMBER_BIN/ps-bench"
K=3000

start_server a 0 1
S=$SRV_URL
"$B" --servers "$S" --op pull --keys 512 --dim 16 --table-id 7 --key-space $K --prepopulate \
  --closed-loop --inflight 1 --requests 40 --warmup 0 --seed 5 >"$TMP/run.txt" 2>"$TMP/run.err" \
  || fail "ps-bench exited $?: $(cat "$TMP/run.err")"
"$EMBER_BIN/ps-stats" --servers "$S" >"$TMP/stats.json" || fail "ps-stats exited $?"
$PY - "$TMP/stats.json" "$K" <<'PYEOF' || fail "server state after --prepopulate"
import json, sys
st = json.loads(open(sys.argv[1]).readline())
K = int(sys.argv[2])
s, pull = st["store"], st["ops"]["pull"]
print(f"rows_hot {s['rows_hot']}, hits {s['hits']}, misses {s['misses']}, "
      f"pull requests {pull['count']}, pulled keys {pull['keys']}")
assert s["rows_hot"] == K, f"want {K} rows after --prepopulate, got {s['rows_hot']}"
# The prepopulating pushes miss once per key (each creates its row); every pulled key then hits.
assert s["misses"] == K, f"want {K} misses (the creating pushes only), got {s['misses']}"
assert pull["count"] >= 40 and pull["keys"] > 0
assert s["hits"] >= pull["keys"], f"pulled keys {pull['keys']} but hits {s['hits']}"
PYEOF
echo "ok   --prepopulate: $K rows exist, the measured pulls hit them"
