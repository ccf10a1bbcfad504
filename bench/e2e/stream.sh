#!/usr/bin/env bash
# Streaming throughput (issue 34): ps-worker trained on the same lines read directly from the
# file (as by default, and with --prefetch 0 as streams run), through stdin from `cat`, through
# a named pipe, and by --follow-input on the finished file, in interleaved rounds (file,
# file-p0, stdin, fifo, follow, file, ...) on a fresh 1-shard server
# each, so machine noise falls on every mode alike. Prints each run, then per mode the median
# samples/s of the summaries and its ratio to the file's, and one JSON line.
#
# Usage: bench/e2e/stream.sh [ROWS [ROUNDS [BIN]]]   (defaults 200000, 3, build/bin)
#        MODES="file follow" bench/e2e/stream.sh ...   (a subset of the modes; file always runs)
# Besides the ratio of the medians, the median of each round's ratio to that round's file run:
# on a loaded machine whole rounds run slower or faster together, which the per-round ratio
# cancels.
# The model is small (13-16-8, 16-1, batch 1024, one thread) so that the input path weighs as
# much as it can: the worst case for a stream. --follow-input ends by --input-idle-s 0.3,
# which its time includes.
set -euo pipefail
rows="${1:-200000}" rounds="${2:-3}" bin="${3:-build/bin}"
tmp="$(mktemp -d /tmp/stream-bench.XXXXXX)"
srv_pid=""
cleanup() { [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
"$bin/ps-datagen" --rows "$rows" --seed 1 --out "$tmp/train.tsv" > /dev/null 2>&1
model=(--mlp-bot 13-16-8 --mlp-top 16-1 --emb-dim 8 --threads 1 --batch 1024
       --shuffle-buffer 0 --progress-every 1000 --log-level warn)

start_server() {
  rm -rf "$tmp/srv" "$tmp/srv.out" # a stale srv.out would name the previous server
  "$bin/ps-server" --listen tcp://127.0.0.1:0 --data-dir "$tmp/srv" --log-level warn \
    > "$tmp/srv.out" 2>&1 &
  srv_pid=$!
  for _ in $(seq 1 200); do
    url="$(sed -n 's/.*listening on //p' "$tmp/srv.out" 2>/dev/null)"
    [ -n "$url" ] && return 0
    sleep 0.05
  done
  echo "stream.sh: the server did not start" >&2
  exit 1
}

one() { # mode -> samples/s of its summary
  local mode="$1" s="$tmp/$1.json"
  start_server
  case "$mode" in
    file) "$bin/ps-worker" --servers "$url" --train "$tmp/train.tsv" --summary "$s" "${model[@]}" ;;
    file-p0) "$bin/ps-worker" --servers "$url" --train "$tmp/train.tsv" --summary "$s" \
               "${model[@]}" --prefetch 0 ;;
    stdin) cat "$tmp/train.tsv" | "$bin/ps-worker" --servers "$url" --train - --summary "$s" "${model[@]}" ;;
    fifo) rm -f "$tmp/f"; mkfifo "$tmp/f"; cat "$tmp/train.tsv" > "$tmp/f" & local cat_pid=$!
          "$bin/ps-worker" --servers "$url" --train "$tmp/f" --summary "$s" "${model[@]}"
          wait "$cat_pid" ;;
    follow) "$bin/ps-worker" --servers "$url" --train "$tmp/train.tsv" --follow-input \
              --input-idle-s 0.3 --summary "$s" "${model[@]}" ;;
  esac
  kill "$srv_pid"; wait "$srv_pid" 2>/dev/null || true; srv_pid=""
  /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['samples_per_s'])" "$s"
}

read -r -a modes <<< "file ${MODES:-file-p0 stdin fifo follow}"
mapfile -t modes < <(printf '%s\n' "${modes[@]}" | awk '!seen[$0]++')
declare -A res
for ((r = 1; r <= rounds; r++)); do
  for m in "${modes[@]}"; do
    v="$(one "$m")"
    echo "round $r $m $v samples/s"
    res[$m]="${res[$m]:-} $v"
  done
done
args=()
for m in "${modes[@]}"; do args+=("$m=${res[$m]}"); done
/usr/bin/python3 - "$rows" "$rounds" "${args[@]}" <<'EOF'
import json, statistics, sys
rows, rounds = int(sys.argv[1]), int(sys.argv[2])
runs = {a.split("=")[0]: [float(x) for x in a.split("=")[1].split()] for a in sys.argv[3:]}
med = {m: statistics.median(v) for m, v in runs.items()}
rr = {m: statistics.median(x / f for x, f in zip(v, runs["file"])) for m, v in runs.items()}
for m, v in med.items():
    print(f"{m:7s} median {v:10.0f} samples/s  {v / med['file']:.3f}x the file's median, "
          f"median of the rounds' ratios {rr[m]:.3f}")
print(json.dumps({"bench": "stream", "rows": rows, "rounds": rounds, "median_samples_per_s": med,
                  "ratio_to_file": {m: round(v / med["file"], 4) for m, v in med.items()},
                  "median_round_ratio": {m: round(v, 4) for m, v in rr.items()}}))
EOF
