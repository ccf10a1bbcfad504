#!/usr/bin/env bash
# bench/replica/run.sh: what replicated shards cost and how fast they recover (issue 23's
# figures), with ps-server --replica/--replicas/--peers, ps-bench and ps-stats on 127.0.0.1.
# Every cluster is fresh (bench/common/cluster.sh); shard 0's replica 0 is its primary at the
# start (the lowest-numbered live replica).
#   cost      pull and push through one shard at K=1 (no replica flags: today's server) and
#             K=2, rounds interleaved (K=1, K=2, K=1, ...): closed loop (keys/s, p99) and open
#             loop at RATE requests/s (p99 where neither is saturated), medians, K=2/K=1 ratios
#   failover  kill -9 of the primary while ps-bench pushes at FRATE requests/s (open loop,
#             latency from each request's intended send time): the requests due after the
#             death wait until the client has failed over and a push succeeded, so the point's
#             max latency is the time from the death to the first successful push after it
#             (to within 1/FRATE); the same run without a kill gives the machine's floor. The
#             client's own figure, its first "failover: shard S answered by ... N ms after ..."
#             line (ps-bench --log-level info), is printed beside it as client_ms, to agree with.
#   catchup   ROWS rows (dim DIM) pushed through K=2, then kill -9 of the backup (replica 1),
#             some pushes without it until the primary's STATS drops it from the live set, and
#             its restart with the same arguments: the time from
#             the restart until the primary's STATS counts it live again (ps-stats, polled
#             every 50 ms), and the rows the restarted replica then holds
# "Live" is read from STATS by LIVE_EXPR, a Python expression over s (the primary's STATS)
# and r (the replica), default: bool(s["replication"]["live"] >> r & 1) (the primary's live
# set, bit r = replica r, as ps-server's STATS has it); a STATS without that field
# stops the part with one line (set LIVE_EXPR to the server's field).
# Usage: bench/replica/run.sh [OUT [PARTS]]   (default /tmp/ember-replica, "cost failover catchup")
# Environment: BIN (default <src>/build/bin), ROUNDS (3), DIM (64), KEYS (4096 per request),
#   KEY_SPACE (200000), INFLIGHT (8), DURATION (4 s), RATE (200), FRATE (500), FKEYS (512 keys
#   a failover-part push: light enough that the backlog after the gap drains), FDURATION (8 s),
#   FTIMEOUT_MS (30000: ps-bench's bound per push in the failover part), FAILOVER_MS (1000:
#   every server's --failover-ms), ROWS ("100000 1000000"), CATCHUP_S (300: how long a restarted
#   replica may take to be live again), LIVE_EXPR.
# Exits 2 with one line when ps-server has no --replicas.
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-replica}"
parts="${2:-cost failover catchup}"
BIN="${BIN:-$src/build/bin}"
ROUNDS="${ROUNDS:-3}" DIM="${DIM:-64}" KEYS="${KEYS:-4096}" KEY_SPACE="${KEY_SPACE:-200000}"
INFLIGHT="${INFLIGHT:-8}" DURATION="${DURATION:-4}" RATE="${RATE:-200}" FRATE="${FRATE:-500}" FKEYS="${FKEYS:-512}"
FDURATION="${FDURATION:-8}" FTIMEOUT_MS="${FTIMEOUT_MS:-30000}" FAILOVER_MS="${FAILOVER_MS:-1000}" ROWS="${ROWS:-100000 1000000}" CATCHUP_S="${CATCHUP_S:-300}"
LIVE_EXPR="${LIVE_EXPR:-bool(s[\"replication\"][\"live\"] >> r & 1)}"
# shellcheck source=../common/cluster.sh
. "$src/bench/common/cluster.sh"
for b in ps-server ps-bench ps-stats; do
  [ -x "$BIN/$b" ] || { echo "replica: $BIN/$b not found (build it, or set BIN)" >&2; exit 2; }
done
if ! cluster_has_replicas; then
  echo "replica: $BIN/ps-server has no --replicas (a build without issue 23's replicated shards): nothing to measure" >&2
  exit 2
fi
mkdir -p "$out"
trap cluster_stop EXIT
PY=/usr/bin/python3

# The loops run in this shell (no pipe: a subshell's servers would outlive an error in it,
# beyond the EXIT trap's reach); each result line goes to the terminal and OUT/PART.txt.
emit() { local part="$1"; shift; echo "$*" | tee -a "$out/$part.txt"; }

bench() { # NAME [ps-bench flags]: runs ps-bench on the cluster, JSON in OUT/NAME.json
  local name="$1"; shift
  "$BIN/ps-bench" --servers "$CLUSTER_SERVERS" --dim "$DIM" --keys "$KEYS" \
    --json "$out/$name.json" "$@" > "$out/$name.log" 2>&1
}
point() { # NAME: one line of the JSON's point: keys/s, p50, p99, p99.9, max (us), failures
  $PY -c 'import json,sys; p=json.load(open(sys.argv[1]))["points"][0]; l=p["latency_us"]
print("keys_per_s=%.0f p50_us=%.0f p99_us=%.0f p999_us=%.0f max_us=%.0f requests=%d errors=%d timeouts=%d" % (p["keys_per_s"], l["p50"], l["p99"], l["p999"], l["max"], p["requests"], p["errors"], p["timeouts"]))' "$out/$1.json"
}

summarize() { # PART: medians (and ratios) over the lines in OUT/PART.txt
  FRATE="$FRATE" $PY - "$out/$1.txt" "$1" <<'PY'
import os, statistics as st, sys


def lines():
    """Each line's KEY=VALUE fields after its first two words (client_says='...' left out)."""
    for ln in open(sys.argv[1]):
        yield dict(kv.split("=", 1) for kv in ln.split(" client_says=")[0].split()[2:])


part = sys.argv[2]
if part == "cost":
    runs = {}
    for f in lines():
        runs.setdefault((f["op"], f["mode"], f["K"]), []).append(f)
    for op, mode in sorted({(a, b) for a, b, _ in runs}):
        med = {k: {x: st.median(float(f[x]) for f in runs[(op, mode, k)]) for x in ("keys_per_s", "p99_us")}
               for k in ("1", "2") if (op, mode, k) in runs}
        if len(med) < 2:
            continue
        print(f"replica cost median op={op} mode={mode} K=1 keys_per_s={med['1']['keys_per_s']:.3g} "
              f"p99_us={med['1']['p99_us']:.0f} K=2 keys_per_s={med['2']['keys_per_s']:.3g} "
              f"p99_us={med['2']['p99_us']:.0f} K2/K1 keys_per_s x{med['2']['keys_per_s'] / med['1']['keys_per_s']:.2f} "
              f"p99 x{med['2']['p99_us'] / med['1']['p99_us']:.2f}")
elif part == "failover":
    runs = {"0": [], "1": []}
    for f in lines():
        runs[f["kill"]].append(f)
    # A run whose pushes failed (timed out: no failover within ps-bench's bound; or refused,
    # e.g. "busy" while the backlog drained) has no clean gap: counted apart.
    ok = [f for f in runs["1"] if int(f["errors"]) + int(f["timeouts"]) == 0]
    floor = st.median(float(f["max_us"]) / 1e3 for f in runs["0"]) if runs["0"] else float("nan")
    if ok:
        print(f"replica failover median: death -> first successful push "
              f"{st.median(float(f['max_us']) / 1e3 for f in ok):.0f} ms (max latency, within "
              f"{1e3 / float(os.environ['FRATE']):.0f} ms; runs {','.join('%.0f' % (float(f['max_us']) / 1e3) for f in ok)}); "
              f"without a kill the max is {floor:.0f} ms; the client's own failover line says "
              f"{','.join(f['client_ms'] for f in ok)} ms")
    if len(ok) < len(runs["1"]):
        print(f"replica failover: {len(runs['1']) - len(ok)} of {len(runs['1'])} runs with a kill had failed "
              f"pushes (first_error on their lines): not counted")
else:
    runs = {}
    for f in lines():
        runs.setdefault(f["target"], []).append(f)
    for rows, v in runs.items():
        ok = [f for f in v if f["live"] == "True" and f["dropped"] == "yes"]
        if ok:
            m = st.median(float(f["seconds"]) for f in ok)
            n = st.median(float(f["rows"]) for f in ok)
            print(f"replica catchup median key_space={rows} rows={n:.0f}: {m:.2f} s ({n / m / 1e6:.2f} M rows/s; "
                  f"runs {','.join(f['seconds'] for f in ok)}; {len(v) - len(ok)} not counted: never "
                  f"dropped by the primary before the restart, or never live after it)")
        else:
            print(f"replica catchup key_space={rows}: no run counted ({len(v)} run(s): never dropped by "
                  f"the primary before the restart, or never live after it)")
PY
}

part_cost() {
  : > "$out/cost.txt"
  local r k op
  for r in $(seq "$ROUNDS"); do
    for k in 1 2; do
      cluster_start "$out/cost" 1 "$k"
      bench "cost-prepop" --op pull --key-space "$KEY_SPACE" --prepopulate --closed-loop \
        --requests 1 --warmup 0 || true
      for op in pull push; do
        bench "cost-r$r-k$k-$op-closed" --op "$op" --key-space "$KEY_SPACE" --closed-loop \
          --inflight "$INFLIGHT" --duration "$DURATION" --warmup 1 || true
        emit cost "replica cost round=$r K=$k op=$op mode=closed $(point "cost-r$r-k$k-$op-closed") load=$(load | tr ' ' ,)"
        bench "cost-r$r-k$k-$op-open" --op "$op" --key-space "$KEY_SPACE" --rate "$RATE" \
          --duration "$DURATION" --warmup 1 || true
        emit cost "replica cost round=$r K=$k op=$op mode=open rate=$RATE $(point "cost-r$r-k$k-$op-open") load=$(load | tr ' ' ,)"
      done
      cluster_stop
    done
  done
  summarize cost
}

part_failover() {
  : > "$out/failover.txt"
  local r kill bp says cms ferr
  CLUSTER_FLAGS+=(--failover-ms "$FAILOVER_MS")
  for r in $(seq "$ROUNDS"); do
    for kill in 0 1; do
      cluster_start "$out/failover" 1 2
      bench "fo-prepop" --op pull --key-space "$KEY_SPACE" --prepopulate --closed-loop \
        --requests 1 --warmup 0 || true
      bench "fo-r$r-kill$kill" --op push --key-space "$KEY_SPACE" --keys "$FKEYS" --rate "$FRATE" \
        --duration "$FDURATION" --warmup 1 --timeout-ms "$FTIMEOUT_MS" --log-level info &
      bp=$!
      sleep "$($PY -c "print(1 + $FDURATION / 2)")"
      [ "$kill" -eq 1 ] && cluster_kill 0
      wait "$bp" || true
      says="$(grep -m 1 'failover: shard' "$out/fo-r$r-kill$kill.log" | cut -c1-240 || true)"
      cms="$(echo "$says" | sed -n 's/.* \([0-9][0-9]*\) ms after .*/\1/p')"
      ferr="$(sed -n 's/^ *first error: //p' "$out/fo-r$r-kill$kill.log" | head -n 1 | cut -c1-200)"
      emit failover "replica failover round=$r kill=$kill rate=$FRATE failover_ms=$FAILOVER_MS $(point "fo-r$r-kill$kill")" \
        "client_ms=${cms:-none} load=$(load | tr ' ' ,) client_says='${says:-nothing}' first_error='${ferr:-none}'"
      cluster_stop
    done
  done
  summarize failover
}

stats_py() { # ARGS...: python over the primary's STATS (s) and the replica (r), prints its value
  local expr="$1" r="$2"
  "$BIN/ps-stats" --servers "$CLUSTER_SERVERS" --timeout-ms 2000 2> /dev/null | head -n 1 |
    $PY -c 'import json,sys
try:
    s = json.loads(sys.stdin.read()); r = int(sys.argv[2]); print(eval(sys.argv[1]))
except (KeyError, TypeError, IndexError, ValueError) as e:
    print("absent:%r" % e)' "$expr" "$r"
}

part_catchup() {
  : > "$out/catchup.txt"
  local n r rows t0 t1 v
  for n in $ROWS; do
    for r in $(seq "$ROUNDS"); do
      cluster_start "$out/catchup" 1 2
      # 3 draws per key: about 95% of the N keys get a row; the count is read from STATS.
      bench "cu-fill" --op push --key-space "$n" --closed-loop --inflight 4 \
        --requests "$(( (3 * n + KEYS - 1) / KEYS ))" --warmup 0 || true
      rows="$(stats_py 's["store"]["rows_hot"] + s["store"]["rows_cold"]' 0)"
      cluster_kill 1
      bench "cu-without" --op push --key-space "$n" --closed-loop --requests 20 --warmup 0 || true
      # The primary must have dropped it (the pushes above found it gone) before the restart.
      for _ in $(seq 1 200); do
        v="$(stats_py "$LIVE_EXPR" 1)"
        case "$v" in absent:*)
          echo "replica: STATS has no live set where LIVE_EXPR looks ($LIVE_EXPR: ${v#absent:}); set LIVE_EXPR to the server's field" >&2
          exit 1 ;;
        esac
        [ "$v" = False ] && break
        sleep 0.05
      done
      local dropped=$v
      t0=$(date +%s.%N)
      cluster_restart 1
      v=False
      while :; do
        v="$(stats_py "$LIVE_EXPR" 1)"
        [ "$v" = True ] && break
        $PY -c "import sys, time; sys.exit(time.time() - $t0 > $CATCHUP_S)" || break
        sleep 0.05
      done
      t1=$(date +%s.%N)
      local got
      got="$("$BIN/ps-stats" --servers "tcp://127.0.0.1:${CLUSTER_PORTS[1]}" --timeout-ms 2000 2> /dev/null |
        $PY -c 'import json,sys; s=json.loads(sys.stdin.read()); print(s["store"]["rows_hot"] + s["store"]["rows_cold"])' 2> /dev/null || echo '?')"
      emit catchup "replica catchup round=$r target=$n rows=$rows dim=$DIM dropped=$([ "$dropped" = False ] && echo yes || echo no) live=$v seconds=$($PY -c "print('%.2f' % ($t1 - $t0))")" \
        "restarted_replica_rows=$got load=$(load | tr ' ' ,)"
      cluster_stop
    done
  done
  summarize catchup
}

for p in $parts; do
  case "$p" in
    cost|failover|catchup) "part_$p" ;;
    *) echo "replica: unknown part $p (cost failover catchup)" >&2; exit 2 ;;
  esac
done
