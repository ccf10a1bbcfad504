#!/bin/sh
# Smoke test of ps-dense-bench (not a timing test): --help, a bad flag, and a tiny run whose
# JSON must parse and hold one positive figure per batch size.
set -eu
BIN=${EMBER_BIN:?}
"$BIN/ps-dense-bench" --help | grep -q -- "--threads"
if "$BIN/ps-dense-bench" --batch 0 2>/dev/null; then echo "accepted --batch 0"; exit 1; fi
if "$BIN/ps-dense-bench" --opt rmsprop 2>/dev/null; then echo "accepted --opt rmsprop"; exit 1; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$BIN/ps-dense-bench" --threads 1 --batch 3,16 --seconds 0.05 --warmup 1 --mlp-bot 13-32-16 \
  --mlp-top 32-1 --json "$T/out.json" >/dev/null 2>&1
/usr/bin/python3 - "$T/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["results"]
assert [x["batch"] for x in r] == [3, 16], r
assert all(x["samples_per_s"] > 0 and "sgemm" in x["breakdown_ms"] for x in r), r
print("ps-dense-bench smoke ok")
PY
