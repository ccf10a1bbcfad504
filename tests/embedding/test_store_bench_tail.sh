#!/usr/bin/env bash
# ps-store-bench --tail-calls (bench/RESULTS-pslat.md, session 8): per-call pull latency of a
# table whose rows exist, of one that has none, and of a plain gather of the same rows. Checks
# the three cases' JSON (each with --tail-calls calls, ordered percentiles), the printed lines,
# and one-line refusals of bad values (exit 2). A shape check: the figures themselves are the
# machine's, read in the RESULTS file.
set -u
B="${EMBER_BIN:?EMBER_BIN must point at build/bin}/ps-store-bench"
TMP=$(mktemp -d /tmp/store-tail.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$B" --help | grep -q -- "--tail-calls" || fail "--help does not list --tail-calls"
for bad in "--tail-calls -1" "--tail-keys 0 --tail-calls 10"; do
  # shellcheck disable=SC2086
  "$B" $bad --dir "$TMP/bad" >"$TMP/out" 2>"$TMP/err"; rc=$?
  [ $rc = 2 ] || fail "$bad exited $rc, want 2"
  [ "$(wc -l <"$TMP/err")" = 1 ] || fail "$bad: not one line: $(cat "$TMP/err")"
done
"$B" --dims 16 --tail-calls 250 --tail-keys 3000 --partitions 1 --dir "$TMP/db" \
  --json "$TMP/t.json" >"$TMP/t.txt" || fail "run exited $?"
cat "$TMP/t.txt"
[ "$(grep -c '^tail  ' "$TMP/t.txt")" = 3 ] || fail "want 3 tail lines"
/usr/bin/python3 - "$TMP/t.json" <<'PY' || fail "JSON"
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert sorted(x["rows"] for x in r) == ["cold", "gather", "warm"], r
for x in r:
    assert x["case"] == "tail" and x["calls"] == 250 and x["dim"] == 16 and x["key_space"] == 3000
    p = [x[k] for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")]
    assert 0 < p[0] and p == sorted(p), p
    assert 0 <= x["over_1ms"] <= 250
PY
echo "ok   ps-store-bench --tail-calls"
