#!/usr/bin/env bash
# bench/e2e/latency.sh: how much of a network hop ps-worker hides (issue 32). ps-worker against
# ps-server with `--inject-delay-us D` (every reply held D: a network hop and a queue), at
# D = 0, 1000 and 3000 us, 1 server x 1 worker and 2 x 2, on planted ps-datagen data:
#   - "small" towers (--mlp-bot 13-32-16 --mlp-top 64-1, batch 256 per worker): a fast dense
#     step that stands in for a GPU's (~1.3 ms at batch 2048 on an H200), so the round trips
#     show;
#   - "default" towers at batch 2048 per worker (a CPU step long enough to hide most hops).
# Rounds are interleaved (build A then B, B then A, ...; every D of a shape inside a round) and
# each figure is the median of ROUNDS: samples/s, its ratio to D = 0 of the same build and
# shape, rank 0's wait on servers as a share of its training time and per step, and the dense
# hash, which must be the same at every D (a sync run trains the same model whatever the
# latency; the script exits 1 when it is not).
#
#   bench/e2e/latency.sh BIN_DIR [BIN_DIR_2] [OUT_DIR=/tmp/ember-latency]
#
# One build dir measures that build ("this"); two compare them ("old", "new") in the same
# run. Both need this --inject-delay-us (every reply held; before it ps-server held only
# pull/push replies, from the start of their store work), so an older build's D > 0 figures
# are not comparable. Environment: ROUNDS (3), DELAYS ("0 1000 3000"), SHAPES ("1x1 2x2": servers
# x workers), TOWERS ("small default"), ROWS (200000), SEED (1), THREADS (1: each worker's compute
# threads; on a loaded 2-core VM two OpenMP threads that meet at every barrier ran 10x slower
# than one), STEPS_SMALL (400) and STEPS_DEFAULT (40): steps per run (--max-steps).
# Output: a table on stdout, OUT_DIR/latency.json (every run and the medians). Shards per host:
# SHAPES="1x1 2x1 4x1" DELAYS=0 compares K shards beside one worker (docs/SIZING.md).
# WORKER_ARGS: extra ps-worker flags for every run; ARGS_OLD / ARGS_NEW (ARGS_THIS): for one
# build's runs only. The same BIN_DIR twice compares two flag sets of one build, e.g. the row
# cache: ARGS_NEW="--row-cache-mb 64" bench/e2e/latency.sh build build.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/e2e/latency.sh BIN_DIR [BIN_DIR_2] [OUT_DIR]" >&2; exit 2; }
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
a="$(cd "$1" && pwd)"
if [ $# -ge 2 ] && [ -x "$2/ps-worker" ]; then b="$(cd "$2" && pwd)"; out="${3:-/tmp/ember-latency}"
else b=""; out="${2:-/tmp/ember-latency}"; fi
ROUNDS="${ROUNDS:-3}" DELAYS="${DELAYS:-0 1000 3000}" SHAPES="${SHAPES:-1x1 2x2}"
TOWERS="${TOWERS:-small default}" ROWS="${ROWS:-200000}" SEED="${SEED:-1}" THREADS="${THREADS:-1}"
STEPS_SMALL="${STEPS_SMALL:-400}" STEPS_DEFAULT="${STEPS_DEFAULT:-40}"
mkdir -p "$out/runs"
data="$out/data-$ROWS-s$SEED"
if [ ! -s "$data/train.tsv" ]; then
  mkdir -p "$data"
  "$a/ps-datagen" --rows "$ROWS" --seed "$SEED" --out "$data/train.tsv.tmp" > /dev/null
  mv "$data/train.tsv.tmp" "$data/train.tsv"
fi
if [ -n "$b" ]; then builds="old:$a new:$b"; else builds="this:$a"; fi

run_one() { # build bin shape towers D round
  local name="$1" bin="$2" shape="$3" tw="$4" d="$5" r="$6"
  local ns="${shape%x*}" nw="${shape#*x}"
  local tf=(--batch 2048 --max-steps "$STEPS_DEFAULT")
  [ "$tw" = small ] && tf=(--mlp-bot 13-32-16 --mlp-top 64-1 --batch 256 --max-steps "$STEPS_SMALL")
  local f="$out/runs/$name-$shape-$tw-d$d-r$r"
  local sa="" ea=()
  local v="ARGS_${name^^}"
  read -r -a ea <<< "${WORKER_ARGS:-} ${!v:-}"
  [ "$d" -gt 0 ] && sa="--inject-delay-us $d"
  "$src/deploy/ember-local" --servers "$ns" --workers "$nw" --bin "$bin" --server-args "$sa" -- \
    --train "$data/train.tsv" --hash-buckets 100000 --threads "$THREADS" --progress-every 1000 \
    "${tf[@]}" ${ea[@]+"${ea[@]}"} --summary "$f.json" > "$f.log" 2>&1 \
    || { echo "latency: $f failed, see $f.log" >&2; tail -5 "$f.log" >&2; return 1; }
  echo "round $r $name $shape $tw D=$d: $(grep -o '[0-9]* samples/s' "$f.log" | tail -1)" >&2
}

for r in $(seq 1 "$ROUNDS"); do
  order="$builds"
  [ $((r % 2)) -eq 0 ] && order="$(echo "$builds" | tr ' ' '\n' | tac | tr '\n' ' ')"
  for tw in $TOWERS; do
    for shape in $SHAPES; do
      for nb in $order; do
        for d in $DELAYS; do run_one "${nb%%:*}" "${nb#*:}" "$shape" "$tw" "$d" "$r"; done
      done
    done
  done
done

/usr/bin/python3 - "$out" "$ROUNDS" "$DELAYS" "$SHAPES" "$TOWERS" "$builds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
delays, shapes, towers = [int(x) for x in sys.argv[3].split()], sys.argv[4].split(), sys.argv[5].split()
builds = [x.split(":")[0] for x in sys.argv[6].split()]
runs, rows, ok = [], [], True
for b in builds:
    for tw in towers:
        for sh in shapes:
            base = None
            hashes = set()
            for d in delays:
                got = []
                for r in range(1, rounds + 1):
                    s = json.load(open(f"{out}/runs/{b}-{sh}-{tw}-d{d}-r{r}.json"))
                    w = s.get("servers_rank0", {})
                    e = {"build": b, "shape": sh, "towers": tw, "delay_us": d, "round": r,
                         "samples_per_s": s["samples_per_s"], "steps": s["steps"],
                         "wait_s": s["seconds_rank0"].get("wait"),
                         "wait_share": w.get("wait_share"),
                         "wait_ms_per_step": w.get("wait_ms_per_step"),
                         "pulled_rows_per_sample": w.get("pulled_rows_per_sample"),
                         "refreshed_rows_per_sample": w.get("refreshed_rows_per_sample"),
                         "cache_hit_rate": w.get("cache_hit_rate"),
                         "dense_hash": s["dense_hash"]}
                    runs.append(e)
                    got.append(e)
                    hashes.add(s["dense_hash"])
                med = lambda k: (statistics.median(x[k] for x in got)
                                 if all(x[k] is not None for x in got) else None)
                sps = med("samples_per_s")
                if d == 0: base = sps
                rows.append({"build": b, "shape": sh, "towers": tw, "delay_us": d,
                             "samples_per_s": sps, "ratio_to_d0": sps / base if base else None,
                             "wait_share": med("wait_share"),
                             "wait_ms_per_step": med("wait_ms_per_step"),
                             "pulled_rows_per_sample": med("pulled_rows_per_sample"),
                             "refreshed_rows_per_sample": med("refreshed_rows_per_sample"),
                             "cache_hit_rate": med("cache_hit_rate"),
                             "dense_hash": sorted({x["dense_hash"] for x in got})})
            same = len(hashes) == 1
            ok &= same
            for x in rows[-len(delays):]: x["hash_equal_across_d"] = same
f = lambda v, p: "n/a" if v is None else f"{v:{p}}"
print(f"| build | shape | towers | D (us) | samples/s (median of {rounds}) | / D=0 | wait share | wait ms/step | pulled rows/sample | refreshed rows/sample | cache hit rate | dense hash equal across D |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for x in rows:
    print(f"| {x['build']} | {x['shape']} | {x['towers']} | {x['delay_us']} | {x['samples_per_s']:.0f} | "
          f"{f(x['ratio_to_d0'], '.2f')} | {f(x['wait_share'], '.2f')} | {f(x['wait_ms_per_step'], '.2f')} | "
          f"{f(x['pulled_rows_per_sample'], '.2f')} | {f(x['refreshed_rows_per_sample'], '.2f')} | "
          f"{f(x['cache_hit_rate'], '.2f')} | {'yes' if x['hash_equal_across_d'] else 'NO'} {x['dense_hash'][0]} |")
json.dump({"rounds": rounds, "delays_us": delays, "runs": runs, "medians": rows},
          open(f"{out}/latency.json", "w"), indent=1)
print(f"json: {out}/latency.json")
sys.exit(0 if ok else 1)
PY
