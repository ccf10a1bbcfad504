#!/usr/bin/env bash
# ps-bench against a server with an injected fixed service delay D: every reported percentile
# must be >= D (latency cannot be below the service time) and p50 within D + a generous margin.
# Needs a ps-server option that delays each data op by a fixed time; none exists yet, so this
# test SKIPs until one does (it looks for --inject-delay-us in ps-server --help).
. "$(dirname "$0")/lib.sh"
if ! "$EMBER_BIN/ps-server" --help 2>&1 | grep -q -- '--inject-delay-us'; then
  echo "SKIP: ps-server has no injected service delay (expected a flag --inject-delay-us US" \
       "that delays every pull/push reply by US microseconds); nothing to measure against"
  exit 77
fi
D=20000 # 20 ms
start_server s0 0 1 --inject-delay-us $D
"$EMBER_BIN/ps-bench" --servers "$SRV_URL" --keys 16 --dim 8 --key-space 1000 --rate 100 \
  --warmup 0.3 --duration 2 --json "$TMP/d.json" || fail "ps-bench exited $?"
$PY - "$TMP/d.json" $D <<'PYEOF' || fail "delay assertions"
import json, sys
d = json.load(open(sys.argv[1])); D = float(sys.argv[2]); L = d["latency_us"]
ok = True
for k in ("p50", "p90", "p99", "p999", "max"):
    c = L[k] >= D * 0.99  # histogram midpoints are within 1%
    print(("ok   " if c else "FAIL ") + f"{k} {L[k]:.0f} us >= delay {D:.0f} us"); ok &= c
c = L["p50"] <= D + 10000
print(("ok   " if c else "FAIL ") + f"p50 {L['p50']:.0f} us <= delay + 10 ms"); ok &= c
c = d["errors"] == 0 and d["timeouts"] == 0 and d["requests"] >= 190
print(("ok   " if c else "FAIL ") + f"{d['requests']} requests, no errors"); ok &= c
sys.exit(0 if ok else 1)
PYEOF
echo PASS
