#!/usr/bin/env bash
# ps-worker's flag checks: every bad argument exits 2 with a one-line reason before anything
# connects (the servers here do not exist; a check that ran only after connecting would fail
# with 1 instead), and --help exits 0.
set -u
: "${EMBER_BIN:?EMBER_BIN must point at build/bin}"
W="$EMBER_BIN/ps-worker"
TMP=$(mktemp -d /tmp/worker-flags.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$W" --help >"$TMP/help.txt" || fail "--help exited $?"
grep -q -- "--consistency sync|async|ssp:K" "$TMP/help.txt" || fail "--help lacks --consistency"

bad() {
  timeout 20 "$W" --servers tcp://127.0.0.1:1 --train /dev/null --timeout-ms 500 "$@" \
    >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ $rc = 2 ] || { cat "$TMP/err" >&2; fail "ps-worker $* exited $rc, want 2"; }
  grep -q "^ps-worker: " "$TMP/err" || fail "ps-worker $* gave no reason"
  echo "ok   rejected: $* -> $(head -1 "$TMP/err")"
}
bad --consistency eventual
bad --consistency ssp:
bad --consistency ssp:x
bad --consistency ssp:-1
bad --consistency ssp:1000001
bad --sparse-opt rowwise_adagrad
bad --dense-opt ftrl
bad --bad-lines ignore
bad --resume
bad --rank 2 --world 2
echo "PASS"
