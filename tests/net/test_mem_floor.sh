#!/usr/bin/env bash
# ps-net-bench --mem-floor: the zmq+mem row runs beside ember and zmq (positive rates, JSON impl
# "zmq+mem" for pull and push); --verify compares every zmq+mem pull reply with the rows the
# client computes from the keys it sent (an echo that skips the gather fails it, exit 1);
# --mem-only prints the four gather figures; --mem-floor with --f16 is refused (exit 2).
set -u
: "${EMBER_BIN:?EMBER_BIN must point at build/bin}"
B="$EMBER_BIN/ps-net-bench"
TMP=$(mktemp -d /tmp/netfloor-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$B" --help >"$TMP/help.txt" || fail "--help exited $?"
for f in mem-floor verify mem-only; do
  grep -q -- "--$f" "$TMP/help.txt" || fail "--help does not list --$f"
done

"$B" --mem-floor --f16 --dims 16 >/dev/null 2>"$TMP/bad.err"; rc=$?
[ $rc = 2 ] || fail "--mem-floor --f16 exited $rc, want 2"
[ -s "$TMP/bad.err" ] || fail "--mem-floor --f16 gave no reason"

timeout 40 "$B" --mem-floor --verify --duration 0.2 --warmup 0.1 --dims 16 --servers 1 \
  --inflight 1 --ops pull,push --json "$TMP/r.json" >"$TMP/out.txt" 2>"$TMP/err.txt"
rc=$?
[ $rc = 0 ] || { cat "$TMP/err.txt" >&2; fail "ps-net-bench --mem-floor --verify exited $rc"; }
/usr/bin/python3 - "$TMP/r.json" "$TMP/out.txt" <<'PY' || fail "results"
import json, sys
rows = json.load(open(sys.argv[1]))
got = sorted((r["impl"], r["op"]) for r in rows)
want = sorted((i, o) for i in ("ember", "zmq", "zmq+mem") for o in ("pull", "push"))
assert got == want, f"rows {got}, want {want}"
for r in rows:
    assert r["keys_per_s"] > 0 and r["requests"] > 0 and r["dim"] == 16, r
lines = [l.split() for l in open(sys.argv[2]) if l.startswith("zmq+mem")]
assert len(lines) == 2 and all(float(l[5]) > 0 for l in lines), lines
print("ok   three rows, zmq+mem pull/push:", [round(r["keys_per_s"] / 1e6, 2) for r in rows if r["impl"] == "zmq+mem"], "Mkeys/s")
PY

# The mem-only figures: four (array, row) lines, every ns/key positive.
"$B" --mem-only >"$TMP/mem.txt" || fail "--mem-only exited $?"
n=$(awk 'NR > 1 && $3 > 0 && $4 > 0' "$TMP/mem.txt" | wc -l)
[ "$n" = 4 ] || { cat "$TMP/mem.txt" >&2; fail "--mem-only printed $n good lines, want 4"; }
echo "ok   --mem-only: $(tr '\n' ';' <"$TMP/mem.txt")"
echo PASS
