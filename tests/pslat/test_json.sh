#!/usr/bin/env bash
# ps-bench's interface: --help lists its documented flags; bad arguments exit 2 with a one-line
# reason; --json has one shape for a run and a sweep (docs/BENCH.md): the workload as run, the
# points with every field typed, the knee as the documented rule gives it (recomputed here);
# --op mixed reports pulls and pushes apart, adding up to the whole; --requests measures
# exactly that many; mixed/push/zipf over two shards with --prepopulate and two tables run
# clean; a conflicting table is refused; --plot writes an SVG and a PNG whose data (PLOT.gp) is
# latency in ms against the offered rate; breakdown_us splits the time into client queue,
# network, server queue and service, consistently.
. "$(dirname "$0")/lib.sh"
B="$EMBER_BIN/ps-bench"

"$B" --help >"$TMP/help.txt" || fail "--help exited $?"
for f in servers op mix keys dim key-space dist rate arrivals closed-loop inflight duration \
         warmup sweep json tables connections threads requests prepopulate timeout-ms plot seed \
         log-level knee-p99-ms queue-sample-ms; do
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
bad --servers tcp://127.0.0.1:1 --sweep 10,20 --knee-p99-ms -1

start_server a 0 2
A=$SRV_URL
start_server b 1 2
S="$A,$SRV_URL"

# One open-loop run, exact request count, two shards, Zipf, mixed, two tables, prepopulated.
"$B" --servers "$S" --op mixed --mix 0.7 --keys 256 --dim 8 --key-space 20000 --dist zipf:1.1 \
  --tables 2 --prepopulate --rate 400 --arrivals poisson --requests 600 --warmup 0.2 \
  --threads 2 --json "$TMP/one.json" --plot "$TMP/one.svg" --seed 5 >"$TMP/one.txt" \
  || fail "mixed run exited $?"
grep -q '^  by op: pull [0-9]* requests p50 .* ms; push [0-9]* requests p50' "$TMP/one.txt" \
  || { cat "$TMP/one.txt"; fail "mixed run printed no per-op line"; }
# --op mixed --mix 0: every request a push, so a swapped attribution shows.
"$B" --servers "$S" --op mixed --mix 0 --keys 64 --dim 8 --rate 200 --requests 50 --warmup 0 \
  --json "$TMP/mix0.json" >/dev/null || fail "mix 0 run exited $?"
# A closed-loop push run.
"$B" --servers "$S" --op push --keys 64 --dim 8 --closed-loop --inflight 4 --duration 0.5 \
  --warmup 0 --queue-sample-ms 50 --json "$TMP/closed.json" >"$TMP/closed.txt" \
  || fail "closed run exited $?"
grep -q 'server queue depth (sampled every 50 ms)' "$TMP/closed.txt" || fail "no sampled queue depth"
grep -q 'server queue depth' "$TMP/one.txt" && fail "queue depths sampled without --queue-sample-ms"
# A sweep of three rates, with plots.
"$B" --servers "$S" --op pull --keys 128 --dim 8 --dist zipf:1.1 --sweep 100,200,400 \
  --duration 0.5 --warmup 0.1 --json "$TMP/sweep.json" --plot "$TMP/sweep.svg" \
  >"$TMP/sweep.txt" || fail "sweep exited $?"
cat "$TMP/sweep.txt"
grep -q '^knee' "$TMP/sweep.txt" || fail "sweep printed no knee line"
grep -q '^ *offered/s .* p50 ms ' "$TMP/sweep.txt" || fail "sweep table is not by offered rate in ms"
# An absolute knee bound no point can meet: no knee, and the JSON says so.
"$B" --servers "$S" --keys 16 --dim 8 --sweep 100,200 --duration 0.3 --warmup 0 \
  --knee-p99-ms 0.000001 --json "$TMP/noknee.json" --plot "$TMP/sweep.png" >/dev/null \
  || fail "png sweep exited $?"

# A table 1 of another dim is a conflict: a clear error, not a crash.
"$B" --servers "$S" --keys 16 --dim 32 --rate 10 --duration 0.1 >"$TMP/conf.out" 2>"$TMP/conf.err"
rc=$?
[ $rc = 1 ] || fail "conflicting declaration exited $rc, want 1"
grep -qi conflict "$TMP/conf.err" || { cat "$TMP/conf.err"; fail "no conflict message"; }
echo "ok   conflicting table refused: $(head -1 "$TMP/conf.err")"

$PY - "$TMP" "$S" <<'PYEOF' || fail "schema"
import json, math, sys
T, S = sys.argv[1], sys.argv[2]
ok = True
def check(c, m):
    global ok
    print(("ok   " if c else "FAIL ") + m); ok &= bool(c)
num = (int, float)
KS = ("p50", "p90", "p99", "p999", "p9999", "max")
def isnum(x): return isinstance(x, num) and not isinstance(x, bool)
def lat(L, where):
    check(all(isnum(L.get(k)) and L[k] >= 0 for k in KS + ("mean",)), f"{where}: {'/'.join(KS)}/mean numbers")
    check(all(L[a] <= L[b] * 1.0001 for a, b in zip(KS, KS[1:])), f"{where}: percentiles ordered")
# docs/BENCH.md, "ps-bench --json": one document shape for a run and a sweep.
WORKLOAD = {"op": str, "mix": num, "keys": int, "dim": int, "key_space": int, "distribution": str,
            "zipf_exponent": num, "tables": int, "table_id": int, "servers": list, "mode": str,
            "offered_rates": list, "inflight": int, "threads": int, "warmup_s": num,
            "prepopulate": bool, "unique": bool, "key_pool": int, "timeout_ms": int,
            "curve": bool, "seed": int, "queue_sample_ms": int}
def doc(name):
    d = json.load(open(f"{T}/{name}.json"))
    check(isinstance(d, dict) and d.get("format") == "ps-bench/2", f"{name}: format ps-bench/2")
    check(set(d) == {"format", "workload", "points", "knee", "half_knee"}, f"{name}: top-level fields {sorted(d)}")
    w = d["workload"]
    for k, t in WORKLOAD.items():
        check(k in w and isinstance(w[k], t) and (t is bool or not isinstance(w[k], bool)),
              f"{name}: workload.{k} is {t}")
    check(w["servers"] == S.split(","), f"{name}: workload.servers lists the shards in order")
    for k in ("arrivals", "duration_s", "requests_per_point"):
        check(k in w, f"{name}: workload.{k} present (null when it does not apply)")
    check(isinstance(d["points"], list) and d["points"], f"{name}: points is a non-empty list")
    for i, p in enumerate(d["points"]):
        point(p, f"{name}.points[{i}]", w)
    return d
def point(d, where, w):
    for k, t in (("achieved_rate", num), ("requests", int), ("errors", int), ("timeouts", int),
                 ("keys_per_s", num), ("latency_us", dict), ("by_op", dict), ("elapsed_s", num),
                 ("late_sends", int)):
        check(k in d and isinstance(d[k], t) and not isinstance(d[k], bool), f"{where}: {k} is {t}")
    check("offered_rate" in d and (d["offered_rate"] is None) == (w["mode"] == "closed-loop"),
          f"{where}: offered_rate {d.get('offered_rate')} (null only in a closed loop)")
    lat(d["latency_us"], where)
    check(d["latency_us"]["p50"] > 0, f"{where}: p50 > 0")
    ops = {"pull": ["pull"], "push": ["push"], "mixed": ["pull", "push"]}[w["op"]]
    check(sorted(d["by_op"]) == ops, f"{where}: by_op has {ops}")
    B = d["by_op"]
    for o in ops:
        check(all(isinstance(B[o].get(k), int) for k in ("requests", "errors", "timeouts")) and
              isnum(B[o].get("keys_per_s")), f"{where}: by_op.{o} counts")
        if B[o]["requests"]: lat(B[o]["latency_us"], f"{where}: by_op.{o}")
    check(sum(B[o]["requests"] for o in ops) == d["requests"], f"{where}: by_op requests add up to {d['requests']}")
    check(abs(sum(B[o]["keys_per_s"] for o in ops) - d["keys_per_s"]) <= 1e-6 * d["keys_per_s"] + 1e-6,
          f"{where}: by_op keys/s add up")
    # Together = the ops merged: the mean is the request-weighted mean, the max the larger max.
    n = sum(B[o]["requests"] for o in ops if B[o]["requests"])
    if n:
        m = sum(B[o]["requests"] * B[o]["latency_us"]["mean"] for o in ops if B[o]["requests"]) / n
        check(abs(m - d["latency_us"]["mean"]) <= 1e-6 * m + 1e-3,
              f"{where}: weighted by_op means {m:.1f} = together {d['latency_us']['mean']:.1f} us")
        mx = max(B[o]["latency_us"]["max"] for o in ops if B[o]["requests"])
        check(abs(mx - d["latency_us"]["max"]) < 1e-3, f"{where}: together max = the larger op max")
    # Where time went: client queue, network, server queue, service (the server parts from
    # two STATS snapshots around the point, so at least this point's requests, warm-up too).
    bd = d["breakdown_us"]
    for k in ("client_queue", "round_trip"):
        check(all(isnum(bd[k].get(f)) for f in ("p50", "p99", "mean")),
              f"{where}: breakdown_us.{k} has p50, p99, mean")
    check(isnum(bd.get("network", {}).get("mean")), f"{where}: breakdown_us.network.mean")
    check(isinstance(bd.get("server_shard"), int), f"{where}: breakdown_us.server_shard")
    parts = ("server_total", "server_queue", "server_service")
    for k in parts:
        P = bd.get(k, {})
        check(all(isnum(P.get(f)) and P[f] >= 0 for f in ("p50", "p90", "p99", "p999", "mean")),
              f"{where}: breakdown_us.{k} has p50, p90, p99, p999, mean")
        check(isinstance(P.get("count"), int) and P["count"] >= d["requests"],
              f"{where}: breakdown_us.{k}.count {P.get('count')} >= {d['requests']} requests")
    Tt, Q, Sv = (bd[k] for k in parts)
    check(Tt["count"] == Q["count"] == Sv["count"], f"{where}: every request of the window split")
    check(abs(Tt["mean"] - Q["mean"] - Sv["mean"]) <= 1e-6 * Tt["mean"] + 0.01,
          f"{where}: server queue + service means {Q['mean']:.1f} + {Sv['mean']:.1f} = total {Tt['mean']:.1f} us")
    check(abs(bd["network"]["mean"] - (bd["round_trip"]["mean"] - Tt["mean"])) < 0.01,
          f"{where}: network = round trip - server total")
    srv = bd["servers"][bd["server_shard"]]
    check(all(isinstance(srv.get(k), dict) for k in ("latency_us", "queue_us", "service_us")),
          f"{where}: the shard's own window in breakdown_us.servers")

one = doc("one")
w, p = one["workload"], one["points"][0]
check(len(one["points"]) == 1 and one["knee"] is None and one["half_knee"] is None,
      "one: a single point, no knee")
check((w["op"], w["mix"], w["keys"], w["dim"], w["key_space"], w["distribution"], w["zipf_exponent"],
       w["tables"], w["threads"], w["arrivals"], w["mode"], w["requests_per_point"], w["duration_s"],
       w["offered_rates"], w["prepopulate"], w["seed"]) ==
      ("mixed", 0.7, 256, 8, 20000, "zipf:1.1", 1.1, 2, 2, "poisson", "open-loop", 600, None,
       [400], True, 5), f"one: the workload as run {w}")
check(p["requests"] == 600, f"one: --requests 600 measured {p['requests']}")
check(p["errors"] == 0 and p["timeouts"] == 0, "one: no errors")
check(abs(p["keys_per_s"] - 256 * p["achieved_rate"]) < 1e-6 * p["keys_per_s"] + 1,
      "one: keys_per_s = keys x achieved_rate")
check(p["offered_rate"] == 400, "one: offered_rate 400")
check(len(p["breakdown_us"]["servers"]) == 2, "one: both shards' STATS in the breakdown")
# By default the bench sends no STATS while the load runs: only the snapshot before the point
# falls between the two (the one after is answered after its own count is taken).
sr = [s["stats_requests"] for s in p["breakdown_us"]["servers"]]
check(sr == [1, 1] and all(s["max_inflight_sampled"] is None for s in p["breakdown_us"]["servers"]),
      f"one: no STATS during the load by default (STATS per shard between snapshots: {sr})")
npull, npush = p["by_op"]["pull"]["requests"], p["by_op"]["push"]["requests"]
sd = math.sqrt(600 * 0.7 * 0.3)  # binomial: pulls ~ Bin(600, 0.7)
check(abs(npull - 420) <= 5 * sd and npush > 0,
      f"one: --mix 0.7 gave {npull} pulls, {npush} pushes (420 +- {5 * sd:.0f} pulls expected)")
m0 = doc("mix0")["points"][0]["by_op"]
check(m0["pull"]["requests"] == 0 and m0["push"]["requests"] == 50,
      f"mix0: all 50 requests counted as pushes ({m0['push']['requests']}), none as pulls")
cl = doc("closed")
check(cl["points"][0]["requests"] > 0 and cl["points"][0]["errors"] == 0, "closed: requests, no errors")
w = cl["workload"]
check((w["mode"], w["arrivals"], w["offered_rates"], w["inflight"], w["op"]) ==
      ("closed-loop", None, [], 4, "push") and cl["knee"] is None, f"closed: workload {w}")
sr = [s["stats_requests"] for s in cl["points"][0]["breakdown_us"]["servers"]]
check(w["queue_sample_ms"] == 50 and all(n >= 5 for n in sr) and
      all(isinstance(s["max_inflight_sampled"], int) for s in cl["points"][0]["breakdown_us"]["servers"]),
      f"closed: --queue-sample-ms 50 over 0.5 s sent {sr} STATS per shard (>= 5)")

sw = doc("sweep")
pts = sw["points"]
check(len(pts) == 3 and sw["workload"]["offered_rates"] == [100, 200, 400], "sweep: 3 points, rates named")
for i, (p, r) in enumerate(zip(pts, (100, 200, 400))):
    check(p["offered_rate"] == r, f"sweep[{i}]: offered_rate {r}")
    # The schedule is exact (constant arrivals, 0.5 s measured); the rate achieved is timing.
    check(p["requests"] == r // 2, f"sweep[{i}]: {p['requests']} requests == {r // 2} scheduled")
    check(0 < p["achieved_rate"] <= 1.05 * r, f"sweep[{i}]: achieved {p['achieved_rate']:.1f} <= {r}")
# The knee, recomputed here from the points by the documented rule.
bound = 5 * pts[0]["latency_us"]["p99"]
knee = None
for p in sorted(pts, key=lambda p: p["offered_rate"]):
    if p["errors"] or p["timeouts"] or p["achieved_rate"] < 0.95 * p["offered_rate"] or \
       p["latency_us"]["p99"] > bound: break
    knee = p
K = sw["knee"]
if knee is None:
    check(K is None, "sweep: no knee, as the rule says")
else:
    check(K is not None and K["offered_rate"] == knee["offered_rate"] and
          pts[K["point"]] is not None and pts[K["point"]]["offered_rate"] == K["offered_rate"] and
          abs(K["p99_bound_us"] - bound) <= 1e-6 * bound and K["min_achieved_fraction"] == 0.95,
          f"sweep: knee {K and K['offered_rate']} = the rule's {knee['offered_rate']}")
    H = sw["half_knee"]
    want = min(pts, key=lambda p: (abs(p["offered_rate"] - knee["offered_rate"] / 2), p["offered_rate"]))
    check(H["offered_rate"] == want["offered_rate"] and
          abs(H["p99_over_p50"] - want["latency_us"]["p99"] / want["latency_us"]["p50"]) < 1e-6,
          f"sweep: half_knee at {H['offered_rate']} = nearest half the knee, p99/p50 {H['p99_over_p50']:.2f}")
nk = doc("noknee")
check(nk["knee"] is None and nk["half_knee"] is None, "noknee: --knee-p99-ms below every p99: knee null")

# The plot is drawn from the data block of its script (PLOT.gp): x is the OFFERED rate.
def plot_data(path):
    rows, inblock, xl = [], False, ""
    for line in open(path):
        if line.startswith("$d << EOD"): inblock = True; continue
        if line.startswith("EOD"): inblock = False; continue
        if inblock and not line.startswith("#"): rows.append([float(x) for x in line.split()])
        if line.startswith("set xlabel"): xl = line
    return rows, xl
rows, xl = plot_data(f"{T}/sweep.svg.gp")
check("offered" in xl and "ms" in open(f"{T}/sweep.svg.gp").read().split("set ylabel")[1].split("\n")[0],
      f"plot: x label {xl.strip()!r}, y in ms")
check([r[0] for r in rows] == [p["offered_rate"] for p in pts], "plot: x column = the offered rates")
check(all(abs(r[1] - p["achieved_rate"]) < 1e-3 for r, p in zip(rows, pts)), "plot: column 2 = achieved rate")
check(all(abs(r[2] - p["latency_us"]["p50"] / 1e3) < 1e-3 and abs(r[4] - p["latency_us"]["p99"] / 1e3) < 1e-3
          for r, p in zip(rows, pts)), "plot: p50 and p99 columns in ms")
rows, _ = plot_data(f"{T}/one.svg.gp")
B = one["points"][0]["by_op"]
check(len(rows) == 1 and all(abs(rows[0][8 + 2 * i + j] - B[o]["latency_us"][q] / 1e3) < 1e-3
                             for i, o in enumerate(("pull", "push")) for j, q in enumerate(("p50", "p99"))),
      "plot (mixed): pull and push p50/p99 columns")
svg = open(f"{T}/sweep.svg").read()
check("<svg" in svg and "offered rate" in svg and "knee" in svg, "plot: SVG written, offered-rate axis, knee marked")
png = open(f"{T}/sweep.png", "rb").read(8)
check(png == b"\x89PNG\r\n\x1a\n", "plot: PNG written")
sys.exit(0 if ok else 1)
PYEOF
echo PASS
