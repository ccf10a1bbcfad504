#!/usr/bin/env bash
# bench/sizing/run.sh: the measurements behind docs/SIZING.md (issue 23), from the existing
# binaries only (ps-server, ps-worker, ps-datagen, ps-bench, ps-ckpt-bench), on 127.0.0.1.
# Each part starts its own ps-server on a free port with a fresh data dir and kills it by PID.
#   wire    bytes per training sample on the wire: a 1-server 1-worker ps-worker run per
#           (one-hot Criteo | multi-hot bags of 1..4) x (f32 | f16), the server's byte counters
#           (ember_server_{received,sent}_bytes_total) divided by the samples trained, beside
#           the unique keys per sample they imply (the protocol: PULL in 8u, out 4du or 2du;
#           PUSH in 8u + 4du or 2du; headers counted too)
#   memory  RSS per stored row, per embedding optimizer (dim 64): two servers, trained on ROWS
#           and on 2 x ROWS samples (other keys), the RSS difference over the row difference
#           (a server's fixed costs cancel), beside the store's own hot_bytes
#   rocks   RocksDB space and write amplification: ps-bench pushes dim-64 SGD rows over a
#           1M-key space into a server whose hot tier is 10x too small: the bytes the process
#           wrote to disk (/proc/PID/io write_bytes; the store sets RocksDB's LOG to FATAL, so
#           its compaction statistics are not logged) against the records it wrote back; then
#           pulls and pushes through that server with ps-bench (cold: uniform and Zipf); after
#           SIGTERM (flush) the store's size against the logical bytes (key + record) of its rows
#   shard   hot rows/s of one store partition in process (ps-store-bench, dim 64 Adagrad) and
#           keys/s through 1 and 2 servers (ps-net-bench), 3 rounds
#   ckpt    ps-ckpt-bench with dim 64 rows (full and delta checkpoints, beside the store and
#           on /dev/shm)
# Usage: bench/sizing/run.sh [OUT [PARTS]]   (default /tmp/ember-sizing, "wire memory rocks shard ckpt")
# Environment: BIN (default <src>/build/bin), ROWS (ps-datagen training rows, default 100000),
# ROW_TYPES (memory: the row types measured, default "f32"; "f32 f16" compares them) and
# MEM_OPTS (memory: the optimizers, default all five).
# Prints one line per measurement ("wire ...", "memory ...", ...) and keeps the logs in OUT.
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-/tmp/ember-sizing}"
parts="${2:-wire memory rocks shard ckpt}"
BIN="${BIN:-$src/build/bin}"
ROWS="${ROWS:-100000}"
PY=/usr/bin/python3
mkdir -p "$out"
srv_pid=""
cleanup() { [ -n "$srv_pid" ] && kill "$srv_pid" 2> /dev/null || true; }
trap cleanup EXIT

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# start_server NAME [ps-server flags...]: sets srv_pid, url, mport
start_server() {
  local name="$1"; shift
  rm -rf "$out/$name.data"
  local port; port=$(free_port); mport=$(free_port)
  url="tcp://127.0.0.1:$port"
  "$BIN/ps-server" --listen "$url" --data-dir "$out/$name.data" --metrics-port "$mport" \
    --log-level warn "$@" > "$out/$name.server.log" 2>&1 &
  srv_pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$mport/metrics" > /dev/null && return 0; sleep 0.1; done
  echo "sizing: ps-server $name did not start, see $out/$name.server.log" >&2; exit 1
}
stop_server() { # SIGTERM: the server finishes in-flight work and flushes its store
  kill -TERM "$srv_pid"
  for _ in $(seq 300); do kill -0 "$srv_pid" 2> /dev/null || { srv_pid=""; return 0; }; sleep 0.1; done
  kill -9 "$srv_pid"; srv_pid=""
}
metric() { curl -sf "http://127.0.0.1:$mport/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2 } END { printf "%.0f\n", s }'; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$srv_pid/status"; }

worker() { # TRAIN SCHEMA WIRE OPT [more flags]
  local train="$1" schema="$2" wire="$3" opt="$4"; shift 4
  "$BIN/ps-worker" --servers "$url" --train "$train" --schema "$schema" --wire "$wire" \
    --sparse-opt "$opt" --emb-dim 64 --mlp-bot 13-64 --mlp-top 64-1 --batch "${BATCH:-2048}" \
    --threads 1 --progress-every 600 --log-level warn "$@"
  local rc=$?
  sleep 0.5 # the server publishes its statistics every 200 ms: let the last step's show
  return $rc
}

data() {
  [ -s "$out/onehot.tsv" ] || "$BIN/ps-datagen" --rows "$ROWS" --seed 1 --out "$out/onehot.tsv" --log-level warn
  [ -s "$out/multihot.tsv" ] || "$BIN/ps-datagen" --rows "$ROWS" --seed 1 --multi-hot 4 \
    --out "$out/multihot.tsv" --schema-out "$out/multihot.schema.json" --log-level warn
}

part_wire() {
  data
  for set in onehot multihot; do
    schema=criteo; [ "$set" = multihot ] && schema="$out/multihot.schema.json"
    for wire in f32 f16; do
      start_server "wire-$set-$wire"
      worker "$out/$set.tsv" "$schema" "$wire" adagrad > "$out/wire-$set-$wire.log" 2>&1
      echo "wire set=$set wire=$wire batch=2048 samples=$ROWS in=$(metric ember_server_received_bytes_total)" \
        "out=$(metric ember_server_sent_bytes_total) rows=$(metric ember_store_rows) load=$(load)"
      stop_server
    done
  done
  for b in 256 16384; do # one-hot f32 at other batch sizes: duplicates within a batch are sent once
    start_server "wire-onehot-f32-b$b"
    BATCH=$b worker "$out/onehot.tsv" criteo f32 adagrad > "$out/wire-onehot-f32-b$b.log" 2>&1
    echo "wire set=onehot wire=f32 batch=$b samples=$ROWS in=$(metric ember_server_received_bytes_total)" \
      "out=$(metric ember_server_sent_bytes_total) load=$(load)"
    stop_server
  done
  # The independent count: distinct (feature, id) pairs per batch of the file, in file order
  # (ps-worker shuffles, the same distribution), per sample.
  $PY - "$out" <<'PY'
import sys
for f, b in (("onehot", 2048), ("onehot", 256), ("onehot", 16384), ("multihot", 2048)):
    rows = [l.rstrip("\n").split("\t")[14:] for l in open(f"{sys.argv[1]}/{f}.tsv")]
    tot = sum(len({(j, x) for r in rows[s:s + b] for j, v in enumerate(r) for x in v.split("|") if x})
              for s in range(0, len(rows), b))
    print(f"wire data set={f} batch={b} unique_keys_per_sample={tot / len(rows):.2f}")
PY
  # ids per sample in the multi-hot data (26 bags of 1..4 ids, '|'-separated)
  awk -F'\t' '{ for (i = 15; i <= NF; i++) n += split($i, a, "|") } END { printf "wire multihot ids_per_sample=%.3f\n", n / NR }' "$out/multihot.tsv"
}

part_memory() {
  data
  [ -s "$out/onehot2.tsv" ] || "$BIN/ps-datagen" --rows "$ROWS" --seed 2 --out "$out/onehot2.tsv" --log-level warn
  [ -s "$out/onehot12.tsv" ] || cat "$out/onehot.tsv" "$out/onehot2.tsv" > "$out/onehot12.tsv"
  # Per optimizer two servers: one trained on ROWS lines, one on those and ROWS more of other
  # keys (ps-datagen seed 2). The RSS difference over the row difference is the cost of a row
  # without the server's fixed costs (buffers, memtables, arenas), which both servers have.
  # Each row type of ROW_TYPES in turn per optimizer (ps-worker --row-type, issue 33).
  for opt in ${MEM_OPTS:-sgd adagrad rowwise-adagrad adam ftrl}; do
    for rt in ${ROW_TYPES:-f32}; do
      line="memory opt=$opt row_type=$rt"
      for f in onehot onehot12; do
        start_server "mem-$opt-$rt-$f" --cache-mb 8192
        line="$line rss0_kb=$(rss_kb)"
        worker "$out/$f.tsv" criteo f32 "$opt" --row-type "$rt" > "$out/mem-$opt-$rt-$f.log" 2>&1
        line="$line rss_kb=$(rss_kb) rows_hot=$(metric 'ember_store_rows{tier="hot"}') hot_bytes=$(metric 'ember_store_bytes{tier="hot"}')"
        stop_server
      done
      echo "$line load=$(load)"
    done
  done
}

part_rocks() {
  start_server rocks --cache-mb 32
  "$BIN/ps-bench" --servers "$url" --op push --dim 64 --keys 4096 --key-space 1000000 \
    --closed-loop --inflight 4 --requests 1200 --warmup 0 > "$out/rocks.bench.log" 2>&1
  sleep 0.5
  # write_bytes: what the server process sent to the disk (flushes, compactions, ingested SST
  # files, WAL), counted when the pages are dirtied; the store's write-backs are the records it
  # handed RocksDB (key + record = 8 + 280 bytes for dim-64 SGD rows).
  echo "rocks populate draws=$((1200 * 4096)) key_space=1000000 writebacks=$(metric ember_store_writebacks_total)" \
    "write_bytes=$(awk '/^write_bytes/ { print $2 }' "/proc/$srv_pid/io") load=$(load)"
  # Cold reads through the server on the same store (hot tier ~1/10 of the rows): uniform and
  # Zipf pulls, then pushes, of 4096 keys, 4 in flight.
  for w in "pull uniform" "pull zipf:1.1" "push uniform" "push zipf:1.1"; do
    set -- $w
    "$BIN/ps-bench" --servers "$url" --op "$1" --dist "$2" --dim 64 --keys 4096 --key-space 1000000 \
      --closed-loop --inflight 4 --duration 3 --warmup 0.5 --json "$out/cold-$1-$2.json" > /dev/null 2>&1
    $PY -c 'import json,sys; p=json.load(open(sys.argv[1]))["points"][0]; print("shard cold op=%s dist=%s keys_per_s=%.0f p50_us=%.0f p99_us=%.0f" % (sys.argv[2], sys.argv[3], p["keys_per_s"], p["latency_us"]["p50"], p["latency_us"]["p99"]))' \
      "$out/cold-$1-$2.json" "$1" "$2"
  done
  echo "shard cold hits=$(metric ember_store_cache_hits_total) misses=$(metric ember_store_cache_misses_total) load=$(load)"
  stop_server
  echo "rocks after_stop dir_bytes=$(du -sb "$out/rocks.data/store" | cut -f1)" \
    "sst_files=$(ls "$out"/rocks.data/store/*.sst | wc -l) logical_max_bytes=$((1000000 * 288))"
}

part_shard() { # hot rows in process (ps-store-bench) and through one or two servers (ps-net-bench)
  for r in 1 2 3; do
    echo "shard round=$r load=$(load)"
    "$BIN/ps-store-bench" --dims 64 --regimes hot,over -p 1 --seconds 1 --opt adagrad \
      --json "$out/store-r$r.json" > "$out/store-r$r.log" 2>&1
    "$BIN/ps-net-bench" --dims 64 --servers 1,2 --inflight 8 --duration 2 --no-raw \
      --json "$out/net-r$r.json" > "$out/net-r$r.log" 2>&1
  done
  $PY - "$out" <<'PY'
import json, statistics as st, sys
d, S, N = sys.argv[1], {}, {}
for r in (1, 2, 3):
    for x in json.load(open(f"{d}/store-r{r}.json"))["results"]:
        S.setdefault((x["regime"], x["dist"], x["op"]), []).append((x["rows_per_s"], x["hit_ratio"]))
    for x in json.load(open(f"{d}/net-r{r}.json")):
        N.setdefault((x["op"], x["servers"]), []).append(x["keys_per_s"])
for k, v in S.items():
    print("shard store %s %s %s rows_per_s=%s median=%.3g hit=%.2f" % (*k, ",".join("%.3g" % a for a, _ in v), st.median(a for a, _ in v), v[0][1]))
for k, v in N.items():
    print("shard net %s servers=%d keys_per_s=%s median=%.3g" % (*k, ",".join("%.3g" % a for a in v), st.median(v)))
PY
}

part_ckpt() {
  for dir in "" /dev/shm; do
    args=(--rows 1000000 --dim 64 --rounds 3)
    [ -n "$dir" ] && args+=(--ckpt-dir "$dir/ember-sizing-ckpt") && rm -rf "$dir/ember-sizing-ckpt"
    echo "ckpt on=${dir:-beside} load=$(load)"
    "$BIN/ps-ckpt-bench" "${args[@]}" 2>&1 | tail -n 12 | sed 's/^/ckpt   /'
    [ -n "$dir" ] && rm -rf "$dir/ember-sizing-ckpt"
  done
}

for p in $parts; do
  case "$p" in
    wire|memory|rocks|shard|ckpt) "part_$p" ;;
    *) echo "sizing: unknown part $p (wire memory rocks shard ckpt)" >&2; exit 2 ;;
  esac
done
