#!/usr/bin/env bash
# ps-bench's interface: --help lists its documented flags; bad arguments exit 2 with a one-line
# reason; --json has every contract field with the right type (an object for one run, a list
# with "target_rate" for a sweep); --requests measures exactly that many; mixed/push/zipf over
# two shards with --prepopulate and two tables run clean; the table is declared by ps-bench on a
# fresh server; a conflicting table is refused; --plot writes an SVG and a PNG; breakdown_us
# splits the time into client queue, network, server queue and service, consistently.
. "$(dirname "$0")/lib.sh"
B="$EMBER_BIN/ps-bench"

"$B" --help >"$TMP/help.txt" || fail "--help exited $?"
for f in servers op mix keys dim key-space dist rate arrivals closed-loop inflight duration \
         warmup sweep json tables connections threads requests prepopulate timeout-ms plot seed \
         log-level; do
  grep -q -- "--$f" "$TMP/help.txt" || fail "--help does not list --$f"
done

bad() {
  "$B" "$@" >"$TMP/bad.out" 2>"$TMP/bad.err"; local rc=$?
  [ $rc = 2 ] || fail "ps-bench $* exited $rc, want 2"
  [ "$(wc -l <"$TMP/bad.err")" -ge 1 ] || fail "ps-bench $* gave no reason"
  echo "ok   rejected: $* -> $(head -1 "$TMP/bad.err")"
}
bad --servers tcp://127.0.0.1:1 --rate 10 --op frob
bad --servers tcp://127.0.0.1:1 --rate 10 --dist zipf:x
bad --servers tcp://127.0.0.1:1 --rate 10 --dist zipf:-1
bad --servers tcp://127.0.0.1:1 --rate 10 --arrivals bursty
bad --servers tcp://127.0.0.1:1 --rate 10 --closed-loop
bad --servers tcp://127.0.0.1:1 --sweep 10,,20
bad --servers tcp://127.0.0.1:1 --sweep 10,20 --rate 5
bad --servers tcp://127.0.0.1:1
bad --rate 10
bad --servers tcp://127.0.0.1:1 --rate 10 --mix 1.5

start_server a 0 2
A=$SRV_URL
start_server b 1 2
S="$A,$SRV_URL"

# One open-loop run, exact request count, two shards, Zipf, mixed, two tables, prepopulated.
"$B" --servers "$S" --op mixed --mix 0.7 --keys 256 --dim 8 --key-space 20000 --dist zipf:1.1 \
  --tables 2 --prepopulate --rate 400 --arrivals poisson --requests 600 --warmup 0.2 \
  --threads 2 --json "$TMP/one.json" --seed 5 || fail "mixed run exited $?"
# A closed-loop push run.
"$B" --servers "$S" --op push --keys 64 --dim 8 --closed-loop --inflight 4 --duration 0.5 \
  --warmup 0 --json "$TMP/closed.json" || fail "closed run exited $?"
# A sweep of three rates, with plots.
"$B" --servers "$S" --op pull --keys 128 --dim 8 --dist zipf:1.1 --sweep 100,200,400 \
  --duration 0.5 --warmup 0.1 --json "$TMP/sweep.json" --plot "$TMP/sweep.svg" \
  >"$TMP/sweep.txt" || fail "sweep exited $?"
cat "$TMP/sweep.txt"
grep -q '^knee' "$TMP/sweep.txt" || fail "sweep printed no knee line"
"$B" --servers "$S" --keys 16 --dim 8 --sweep 100,200 --duration 0.3 --warmup 0 \
  --plot "$TMP/sweep.png" >/dev/null || fail "png sweep exited $?"

# A table 1 of another dim is a conflict: a clear error, not a crash.
"$B" --servers "$S" --keys 16 --dim 32 --rate 10 --duration 0.1 >"$TMP/conf.out" 2>"$TMP/conf.err"
rc=$?
[ $rc = 1 ] || fail "conflicting declaration exited $rc, want 1"
grep -qi conflict "$TMP/conf.err" || { cat "$TMP/conf.err"; fail "no conflict message"; }
echo "ok   conflicting table refused: $(head -1 "$TMP/conf.err")"

$PY - "$TMP" <<'PYEOF' || fail "schema"
import json, sys, os
T = sys.argv[1]
ok = True
def check(c, m):
    global ok
    print(("ok   " if c else "FAIL ") + m); ok &= bool(c)
num = (int, float)
def schema(d, where, sweep):
    check(isinstance(d, dict), f"{where}: an object")
    for k, t in (("achieved_rate", num), ("requests", int), ("errors", int), ("timeouts", int),
                 ("keys_per_s", num), ("latency_us", dict)):
        check(k in d and isinstance(d[k], t) and not isinstance(d[k], bool),
              f"{where}: {k} is {t}")
    L = d["latency_us"]
    ks = ("p50", "p90", "p99", "p999", "p9999", "max")
    for k in ks:
        check(isinstance(L.get(k), num) and L[k] >= 0, f"{where}: latency_us.{k} is a number")
    check(all(L[a] <= L[b] * 1.0001 for a, b in zip(ks, ks[1:])), f"{where}: percentiles ordered")
    check(L["p50"] > 0, f"{where}: p50 > 0")
    if sweep:
        check(isinstance(d.get("target_rate"), num), f"{where}: target_rate")
    # Where time went: client queue, network, server queue, service (the server parts from
    # two STATS snapshots around the point, so at least this point's requests, warm-up too).
    bd = d["breakdown_us"]
    for k in ("client_queue", "round_trip"):
        check(all(isinstance(bd[k].get(f), num) for f in ("p50", "p99", "mean")),
              f"{where}: breakdown_us.{k} has p50, p99, mean")
    check(isinstance(bd.get("network", {}).get("mean"), num), f"{where}: breakdown_us.network.mean")
    check(isinstance(bd.get("server_shard"), int), f"{where}: breakdown_us.server_shard")
    parts = ("server_total", "server_queue", "server_service")
    for k in parts:
        P = bd.get(k, {})
        check(all(isinstance(P.get(f), num) and P[f] >= 0 for f in ("p50", "p90", "p99", "p999", "mean")),
              f"{where}: breakdown_us.{k} has p50, p90, p99, p999, mean")
        check(isinstance(P.get("count"), int) and P["count"] >= d["requests"],
              f"{where}: breakdown_us.{k}.count {P.get('count')} >= {d['requests']} requests")
    T, Q, S = (bd[k] for k in parts)
    check(T["count"] == Q["count"] == S["count"], f"{where}: every request of the window split")
    check(abs(T["mean"] - Q["mean"] - S["mean"]) <= 1e-6 * T["mean"] + 0.01,
          f"{where}: server queue + service means {Q['mean']:.1f} + {S['mean']:.1f} = total {T['mean']:.1f} us")
    check(Q["p50"] <= Q["p99"] * 1.0001 and S["p50"] <= S["p99"] * 1.0001, f"{where}: split percentiles ordered")
    check(abs(bd["network"]["mean"] - (bd["round_trip"]["mean"] - T["mean"])) < 0.01,
          f"{where}: network = round trip - server total")
    srv = bd["servers"][bd["server_shard"]]
    check(all(isinstance(srv.get(k), dict) for k in ("latency_us", "queue_us", "service_us")),
          f"{where}: the shard's own window in breakdown_us.servers")
one = json.load(open(f"{T}/one.json"))
schema(one, "one", False)
check(one["requests"] == 600, f"one: --requests 600 measured {one['requests']}")
check(one["errors"] == 0 and one["timeouts"] == 0, "one: no errors")
check(abs(one["keys_per_s"] - 256 * one["achieved_rate"]) < 1e-6 * one["keys_per_s"] + 1,
      "one: keys_per_s = keys x achieved_rate")
check(one.get("target_rate") == 400, "one: target_rate 400")
check(len(one["breakdown_us"]["servers"]) == 2, "one: both shards' STATS in the breakdown")
cl = json.load(open(f"{T}/closed.json"))
schema(cl, "closed", False)
check(cl["requests"] > 0 and cl["errors"] == 0, "closed: requests, no errors")
sw = json.load(open(f"{T}/sweep.json"))
check(isinstance(sw, list) and len(sw) == 3, "sweep: a list of 3")
for i, (p, r) in enumerate(zip(sw, (100, 200, 400))):
    schema(p, f"sweep[{i}]", True)
    check(p["target_rate"] == r, f"sweep[{i}]: target_rate {r}")
    # The schedule is exact (constant arrivals, 0.5 s measured); the rate achieved is timing.
    check(p["requests"] == r // 2, f"sweep[{i}]: {p['requests']} requests == {r // 2} scheduled")
    check(0 < p["achieved_rate"] <= 1.05 * r, f"sweep[{i}]: achieved {p['achieved_rate']:.1f} <= {r}")
svg = open(f"{T}/sweep.svg").read(4096)
check("<svg" in svg, "plot: SVG written")
png = open(f"{T}/sweep.png", "rb").read(8)
check(png == b"\x89PNG\r\n\x1a\n", "plot: PNG written")
sys.exit(0 if ok else 1)
PYEOF
echo PASS
