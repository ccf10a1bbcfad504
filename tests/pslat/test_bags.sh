#!/usr/bin/env bash
# ps-bench --bag-size LO..HI (multi-hot requests, issue 19): --keys bags of LO..HI ids each, the
# ids de-duplicated before the send. Checked against hand-computed expectations, one ps-server on
# loopback: the ids a request holds average --keys x (LO + HI) / 2; the unique rows it sends
# average E[K (1 - (1 - 1/K)^n)] over the exact distribution of n (uniform draws from a key space
# of K); the server counts those rows, not the ids (its ember_server_keys_total per request);
# rows/s adds up over the ops; without --bag-size rows/s equals keys/s. Bad ranges exit 2 with
# one line.
. "$(dirname "$0")/lib.sh"
B="$EMBER_BIN/ps-bench"

"$B" --help | grep -q -- "--bag-size" || fail "--help does not list --bag-size"

bad() {
  "$B" "$@" >"$TMP/bad.out" 2>"$TMP/bad.err"; local rc=$?
  [ $rc = 2 ] || fail "ps-bench $* exited $rc, want 2"
  [ "$(wc -l <"$TMP/bad.err")" = 1 ] || fail "ps-bench $* gave not one line: $(cat "$TMP/bad.err")"
  echo "ok   rejected: $* -> $(cat "$TMP/bad.err")"
}
bad --servers tcp://127.0.0.1:1 --rate 10 --bag-size 0..5
bad --servers tcp://127.0.0.1:1 --rate 10 --bag-size 5..2
bad --servers tcp://127.0.0.1:1 --rate 10 --bag-size 1-100
bad --servers tcp://127.0.0.1:1 --rate 10 --bag-size 1..100x
# rows of a request: min(--keys x 1000, --key-space) x dim 1024 x 4 bytes = 4 GiB
bad --servers tcp://127.0.0.1:1 --rate 10 --bag-size 1..1000 --keys 100000 --dim 1024

mport=$(free_port)
start_server a 0 1 --metrics-port "$mport"
S=$SRV_URL
K=2000
"$B" --servers "$S" --op mixed --mix 0.5 --keys 26 --bag-size 1..100 --dim 16 --key-space $K \
  --key-pool 0 --closed-loop --inflight 2 --requests 400 --warmup 0 --seed 3 \
  --json "$TMP/bags.json" >"$TMP/bags.txt" || fail "bag run exited $?"
cat "$TMP/bags.txt"
grep -q '^  bags: 26 of 1..100 ids a request, ' "$TMP/bags.txt" || fail "no bags line"
# What the server saw, before anything else adds to its counters: /metrics publishes a
# snapshot refreshed every 200 ms, so read until two reads 300 ms apart agree (at most 10 s).
$PY - "http://127.0.0.1:$mport/metrics" "$TMP/metrics.txt" <<'PYEOF' || fail "no settled /metrics"
import sys, time, urllib.request
prev = None
for _ in range(33):
    m = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
    cur = [l for l in m.splitlines() if l.startswith("ember_server_keys_total{")]
    if cur and cur == prev:
        open(sys.argv[2], "w").write(m)
        sys.exit(0)
    prev = cur
    time.sleep(0.3)
sys.exit(1)
PYEOF
"$B" --servers "$S" --op pull --keys 64 --dim 16 --key-space $K --closed-loop --requests 50 \
  --warmup 0 --json "$TMP/plain.json" >/dev/null || fail "plain run exited $?"
$PY - "$TMP" "$K" <<'PYEOF' || fail "checks"
import json, sys
import numpy as np
T, K = sys.argv[1], int(sys.argv[2])
ok = True
def check(c, m):
    global ok
    print(("ok   " if c else "FAIL ") + m); ok &= bool(c)
d = json.load(open(f"{T}/bags.json"))
w, p = d["workload"], d["points"][0]
check(w["bag_size"] == "1..100" and w["keys"] == 26, f"workload: bag_size {w['bag_size']}, keys {w['keys']}")
n_req = p["requests"]
check(n_req == 400 and p["errors"] == 0, f"400 requests, no errors ({n_req}, {p['errors']})")
ids = p["keys_per_s"] / p["achieved_rate"]
rows = p["rows_per_s"] / p["achieved_rate"]
# The ids of a request: a sum of 26 independent uniform lengths in 1..100.
pmf = np.ones(100) / 100
dist = np.array([1.0])
for _ in range(26):
    dist = np.convolve(dist, pmf)
n = np.arange(len(dist)) + 26          # the support: 26 .. 2600
mean_ids = float((dist * n).sum())     # = 26 x 50.5
sd_ids = float(np.sqrt((dist * (n - mean_ids) ** 2).sum()))
check(abs(mean_ids - 26 * 50.5) < 1e-6, f"reference: {mean_ids:.1f} ids a request = 26 x 50.5")
check(abs(ids - mean_ids) < 5 * sd_ids / n_req ** 0.5,
      f"ids a request {ids:.1f}, expected {mean_ids:.1f} +- {5 * sd_ids / n_req ** 0.5:.1f}")
# Unique ids among n uniform draws from K keys: K (1 - (1 - 1/K)^n), averaged over n.
e_rows = float((dist * K * (1 - (1 - 1 / K) ** n)).sum())
check(abs(rows - e_rows) < 0.02 * e_rows,
      f"unique rows a request {rows:.1f}, expected {e_rows:.1f} (2%); ids {ids:.0f}")
B = p["by_op"]
check(abs(B["pull"]["rows_per_s"] + B["push"]["rows_per_s"] - p["rows_per_s"]) < 1e-6 * p["rows_per_s"] + 1e-6,
      "by_op rows/s add up")
# What the server saw: rows, not ids (its counters also hold the closed loop's unmeasured
# start-up requests, which are drawn alike).
m = open(f"{T}/metrics.txt").read()
def metric(name, op):
    for line in m.splitlines():
        if line.startswith(f'{name}{{') and f'op="{op}"' in line:
            return float(line.split()[-1])
    return 0.0
keys = metric("ember_server_keys_total", "pull") + metric("ember_server_keys_total", "push")
reqs = metric("ember_server_requests_total", "pull") + metric("ember_server_requests_total", "push")
pl = json.load(open(f"{T}/plain.json"))["points"][0]
check(pl["rows_per_s"] == pl["keys_per_s"] and pl["keys_per_s"] > 0,
      f"without --bag-size rows/s = keys/s ({pl['rows_per_s']:.0f})")
per = keys / reqs
check(abs(per - e_rows) < 0.05 * e_rows and abs(per - mean_ids) > 0.2 * mean_ids,
      f"server: {keys:.0f} keys in {reqs:.0f} requests = {per:.1f} a request: the rows ({e_rows:.1f}), not the ids ({mean_ids:.1f})")
sys.exit(0 if ok else 1)
PYEOF
echo "PASS"
