#!/usr/bin/env bash
# ps-bench against a fixed service delay D: every reported percentile must be >= D (a reply
# cannot come sooner) and p50 below 1.4 D (generous: a loaded
# 2-core CI box adds tens of ms); the breakdown must put the delay in
# the round trip, not in the client queue, and within the round trip in the server's service
# part, not in its queue or the network. The delay is ps-server's --inject-delay-us: each
# reply leaves D after its store work started, without holding a thread, so the open loop's
# requests overlap and do not queue behind each other.
. "$(dirname "$0")/lib.sh"
D=50000 # 50 ms
start_server s0 0 1 --inject-delay-us $D
URL=$SRV_URL
for mode in open closed; do
  if [ $mode = open ]; then args=(--rate 50); else args=(--closed-loop --inflight 2); fi
  "$EMBER_BIN/ps-bench" --servers "$URL" --keys 16 --dim 8 --key-space 1000 "${args[@]}" \
    --warmup 0.3 --duration 2 --json "$TMP/$mode.json" || fail "ps-bench $mode exited $?"
  $PY - "$TMP/$mode.json" $D $mode <<'PYEOF' || fail "delay assertions ($mode)"
import json, sys
d = json.load(open(sys.argv[1]))["points"][0]; D = float(sys.argv[2]); mode = sys.argv[3]; L = d["latency_us"]
ok = True
def check(c, m):
    global ok
    print(("ok   " if c else "FAIL ") + f"{mode}: " + m); ok &= bool(c)
for k in ("p50", "p90", "p99", "p999", "p9999", "max"):
    check(L[k] >= D * 0.99, f"{k} {L[k]:.0f} us >= delay {D:.0f} us")  # buckets are within 1%
check(L["p50"] < 1.4 * D, f"p50 {L['p50']:.0f} us < 1.4 x delay (no queueing behind the delay)")
want = 100 if mode == "open" else 10  # open: exactly the schedule (2 s at 50/s)
check(d["errors"] == 0 and d["timeouts"] == 0 and
      (d["requests"] == want if mode == "open" else d["requests"] >= want),
      f"{d['requests']} requests ({'==' if mode == 'open' else '>='} {want}), no errors")
rt = d["breakdown_us"]["round_trip"]["p50"]; cq = d["breakdown_us"]["client_queue"]["p50"]
check(rt >= D * 0.99 and cq < D / 4, f"breakdown: round trip p50 {rt:.0f} us holds the delay, client queue p50 {cq:.0f} us")
B = d["breakdown_us"]; Q = B["server_queue"]; S = B["server_service"]; net = B["network"]["mean"]
check(S["p50"] >= D * 0.99 and S["mean"] >= D, f"breakdown: service p50 {S['p50']:.0f} mean {S['mean']:.0f} us hold the delay")
check(Q["p50"] < D / 4 and Q["mean"] < D / 4, f"breakdown: server queue p50 {Q['p50']:.0f} mean {Q['mean']:.0f} us small")
check(abs(net) < D / 4, f"breakdown: network {net:.0f} us small")
parts = B["client_queue"]["mean"] + net + Q["mean"] + S["mean"]
check(abs(parts - L["mean"]) <= 0.01 * L["mean"],
      f"breakdown: client queue + network + server queue + service = {parts:.0f} us, latency mean {L['mean']:.0f} us")
if mode == "closed":
    check(d["achieved_rate"] <= 2 / (D / 1e6) * 1.05, f"closed: {d['achieved_rate']:.1f}/s <= 2 in flight / delay")
sys.exit(0 if ok else 1)
PYEOF
done
echo PASS
