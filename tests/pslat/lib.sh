# Shared helpers of the ps-bench script tests: free loopback ports, ps-server start with a
# bounded wait for its "listening" line, cleanup of every child by PID.
set -u
: "${EMBER_BIN:?EMBER_BIN must point at build/bin}"
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/pslat-test.XXXXXX)
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

free_port() {
  $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# start_server NAME SHARD SHARDS [extra args...]: sets SRV_URL and SRV_PID.
start_server() {
  local name=$1 shard=$2 shards=$3; shift 3
  local port; port=$(free_port)
  SRV_URL="tcp://127.0.0.1:$port"
  "$EMBER_BIN/ps-server" --listen "$SRV_URL" --shard "$shard" --shards "$shards" \
    --data-dir "$TMP/$name" --cache-mb 256 --log-level warn "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  SRV_PID=$!
  PIDS+=("$SRV_PID")
  for _ in $(seq 100); do
    grep -q listening "$TMP/$name.out" 2>/dev/null && return 0
    kill -0 "$SRV_PID" 2>/dev/null || { cat "$TMP/$name.err" >&2; fail "ps-server $name exited"; }
    sleep 0.1
  done
  fail "ps-server $name did not listen within 10 s"
}

# jget FILE EXPR: evaluates a Python expression over the JSON document `d`.
jget() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
