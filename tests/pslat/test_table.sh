#!/usr/bin/env bash
# ps-bench --table NAME (issue 36): a served table is benchmarked by name, without its training
# spec. A table (dim 8, adagrad: not ps-bench's own defaults) is written and checkpointed
# through the Python library; ps-server --serve serves the checkpoint; ps-bench --table pulls
# it with the servers' id and dim and no failed request. An unknown name is a set-up failure
# (exit 1, one line); --table with --op push, --prepopulate or --dim is a bad argument (exit 2).
. "$(dirname "$0")/lib.sh"
B="$EMBER_BIN/ps-bench"
CK="$TMP/ck/step-3"

start_server train 0 1 --checkpoint-root "$TMP/ck"
# An ASan build: python3 loads the runtime first, and its own allocations are not leak-checked.
asan=()
[ -n "${EMBER_ASAN_LIB:-}" ] && asan=(env "LD_PRELOAD=$EMBER_ASAN_LIB" ASAN_OPTIONS=detect_leaks=0)
timeout 60 "${asan[@]}" $PY - "$SRV_URL" "$CK/shards" <<'PY' || fail "writing the table through python/ember"
import os, sys
sys.path.insert(0, os.path.join(os.environ["EMBER_SRC"], "tests", "lib"))
import lib_harness
lib_harness.use_build_package()
import ember, numpy as np
with ember.Client([sys.argv[1]], timeout_ms=20000) as c:
    t = c.table("served_emb", dim=8, id=77, optimizer="adagrad", lr=0.1, init=0.01)
    keys = np.arange(1, 500, dtype=np.uint64)
    t.push(keys, np.ones((keys.shape[0], 8), np.float32))
    c.checkpoint(sys.argv[2])
PY

port=$(free_port)
SERVE="tcp://127.0.0.1:$port"
"$EMBER_BIN/ps-server" --listen "$SERVE" --serve "$CK" --shard 0 --shards 1 --log-level warn \
  >"$TMP/serve.out" 2>"$TMP/serve.err" &
PIDS+=($!)
for _ in $(seq 100); do grep -q listening "$TMP/serve.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$TMP/serve.out" || fail "ps-server --serve did not listen within 10 s"

timeout 60 "$B" --servers "$SERVE" --table served_emb --closed-loop --requests 200 --warmup 0 \
  --keys 64 --key-space 1000 --json "$TMP/run.json" >"$TMP/run.out" 2>"$TMP/run.err" ||
  fail "ps-bench --table exited $?: $(cat "$TMP/run.err")"
grep -q "64 keys x dim 8," "$TMP/run.out" || fail "not the served dim 8: $(head -1 "$TMP/run.out")"
[ "$(jget "$TMP/run.json" 'd["workload"]["table_id"], d["workload"]["dim"]')" = "77 8" ] ||
  fail "--json: $(jget "$TMP/run.json" 'd["workload"]')"
[ "$(jget "$TMP/run.json" 'sum(p["errors"] + p["timeouts"] for p in d["points"])')" = 0 ] ||
  fail "failed requests against the served table"
echo "ok   ps-bench --table served_emb: table 77, dim 8, 200 pulls, no failure"

timeout 30 "$B" --servers "$SERVE" --table nope --closed-loop --requests 10 \
  >"$TMP/nope.out" 2>"$TMP/nope.err"; rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$TMP/nope.err")" = 1 ] && grep -q "no table named 'nope'" "$TMP/nope.err" ||
  fail "--table nope: exit $rc, $(cat "$TMP/nope.err")"
echo "ok   --table nope: exit 1, $(cat "$TMP/nope.err")"

for extra in "--op push" "--prepopulate" "--dim 8" "--tables 2"; do
  # shellcheck disable=SC2086
  "$B" --servers "$SERVE" --table served_emb --closed-loop $extra >"$TMP/bad.out" 2>"$TMP/bad.err"
  rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] || fail "--table with $extra: exit $rc"
  echo "ok   --table with $extra: exit 2, $(cat "$TMP/bad.err")"
done
echo "PASS"
