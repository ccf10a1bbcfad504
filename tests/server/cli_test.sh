#!/bin/bash
# ps-server's command line: --help exits 0 and lists the contract's flags; bad arguments exit
# non-zero with a one-line reason naming the option; SIGTERM shuts down cleanly (exit 0) and a
# second signal during shutdown is not needed. Bounded waits, the child killed by PID.
set -u
BIN="${EMBER_BIN:?}/ps-server"
fail() { echo "FAIL: $*"; exit 1; }
out=$("$BIN" --help) || fail "--help exited non-zero"
for f in --listen --shard --shards --data-dir --cache-mb --threads --metrics-port --log-level \
  --checkpoint-root --max-request-mb --metrics-bind; do
  grep -q -- "$f" <<<"$out" || fail "--help does not mention $f"
done
check_bad() {
  local err
  err=$("$BIN" "$@" 2>&1 >/dev/null) && fail "accepted: $*"
  [ "$(wc -l <<<"$err")" -eq 1 ] || fail "more than one line for: $* -> $err"
  echo "ok: $* -> $err"
}
check_bad --data-dir /tmp/x
check_bad --listen tcp://127.0.0.1:1 --data-dir /tmp/x --shard 2 --shards 2
check_bad --listen tcp://127.0.0.1:1 --data-dir /tmp/x --threads lots
check_bad --listen http://x --data-dir /tmp/x
check_bad --listen tcp://127.0.0.1:1 --data-dir /tmp/x --log-level loud
# Bad arguments exit 2 with one line naming the flag, before anything is bound or created (a
# server that accepted them would run: bounded by timeout, which exits 124).
check_bad2() {
  local err rc
  err=$(timeout 10 "$BIN" "$@" 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || fail "exit $rc (want 2) for: $* -> $err"
  [ "$(wc -l <<<"$err")" -eq 1 ] || fail "more than one line for: $* -> $err"
  grep -q -- "$1" <<<"$err" || fail "the message does not name $1: $err"
  echo "ok: $* -> $err"
}
check_bad2 --listen tcp://127.0.0.1:99999 --data-dir /tmp/ember-cli-never
check_bad2 --listen tcp://127.0.0.1:70000x --data-dir /tmp/ember-cli-never
check_bad2 --listen tcp://127.0.0.1 --data-dir /tmp/ember-cli-never
check_bad2 --listen tcp://:5555 --data-dir /tmp/ember-cli-never
check_bad2 --listen ipc:// --data-dir /tmp/ember-cli-never
check_bad2 --shard 2 --shards 2 --listen tcp://127.0.0.1:1 --data-dir /tmp/ember-cli-never
check_bad2 --checkpoint-root "" --listen tcp://127.0.0.1:1 --data-dir /tmp/ember-cli-never
check_bad2 --checkpoint-root /tmp/a/../b --listen tcp://127.0.0.1:1 --data-dir /tmp/ember-cli-never
check_bad2 --metrics-bind 10.0.0.x --listen tcp://127.0.0.1:1 --data-dir /tmp/ember-cli-never
check_bad2 --max-request-mb -1 --listen tcp://127.0.0.1:1 --data-dir /tmp/ember-cli-never
# Replicated shards: --peers with K URLs, this replica's --listen at index --replica.
check_bad2 --replicas 2 --listen tcp://127.0.0.1:1 --data-dir /tmp/ember-cli-never
check_bad2 --replica 2 --replicas 2 --peers 'tcp://127.0.0.1:1|tcp://127.0.0.1:2' \
  --listen tcp://127.0.0.1:1 --data-dir /tmp/ember-cli-never
check_bad2 --peers 'tcp://127.0.0.1:1' --replicas 2 --listen tcp://127.0.0.1:1 \
  --data-dir /tmp/ember-cli-never
check_bad2 --peers 'tcp://127.0.0.1:2|tcp://127.0.0.1:1' --replicas 2 --listen tcp://127.0.0.1:1 \
  --data-dir /tmp/ember-cli-never
check_bad2 --failover-ms 10 --listen tcp://127.0.0.1:1 --data-dir /tmp/ember-cli-never
[ -e /tmp/ember-cli-never ] && fail "a refused start created its data dir"
dir=$(mktemp -d /tmp/ember-cli-XXXXXX)
# A port free a moment ago (bind to port 0); another test may still take it first, so a
# bind failure is retried with a fresh port, a few times.
for attempt in 1 2 3 4 5; do
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  data="$dir/d$attempt"
  "$BIN" --listen "tcp://127.0.0.1:$port" --data-dir "$data" --threads 1 > "$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    grep -q listening "$dir/log" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  grep -q listening "$dir/log" && break
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  grep -q "Address already in use" "$dir/log" || break
done
grep -q listening "$dir/log" || { kill -9 $pid 2>/dev/null; fail "did not start: $(cat "$dir/log")"; }
kill -TERM $pid
for _ in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
if kill -0 $pid 2>/dev/null; then kill -9 $pid; fail "did not stop on SIGTERM"; fi
wait $pid; rc=$?
[ $rc -eq 0 ] || fail "exit $rc after SIGTERM"
grep -q '"clean": true' "$data/ember-server.json" || fail "data dir not marked clean"
# A start refused at run time (this data dir is shard 0 of 1) is one line naming the reason,
# exit 1: no logged reason followed by a second "cannot start: conflict".
err=$(timeout 10 "$BIN" --listen tcp://127.0.0.1:0 --data-dir "$data" --shard 1 --shards 2 \
  --log-level warn 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] || fail "exit $rc (want 1) for a data dir of another shard: $err"
[ "$(wc -l <<<"$err")" -eq 1 ] || fail "more than one line for a refused start: $err"
grep -q "ps-server: cannot start: data dir $data belongs to shard 0 of 1" <<<"$err" ||
  fail "the refusal does not say why: $err"
echo "ok: refused start -> $err"
rm -rf "$dir"
echo "1 passed, 0 failed"
