#!/usr/bin/env bash
# One ps-lite run: a scheduler, N servers and one worker on 127.0.0.1, every process
# cleaned up by PID. Prints ps-net-bench's column layout (impl "pslite").
#   bench/net/pslite/run.sh BIN SERVERS OP DIM INFLIGHT   (env: PB_SECS, PB_BATCH, PB_KEYSPACE)
set -euo pipefail
bin="$1" n="$2" op="$3" dim="$4" q="$5"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export DMLC_NUM_SERVER="$n" DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT="$port" DMLC_INTERFACE=lo
export PB_OP="$op" PB_DIM="$dim" PB_INFLIGHT="$q"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
DMLC_ROLE=scheduler "$bin" & pids+=($!)
for _ in $(seq "$n"); do DMLC_ROLE=server "$bin" & pids+=($!); done
DMLC_ROLE=worker timeout 120 "$bin"
