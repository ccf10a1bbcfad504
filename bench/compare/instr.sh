#!/usr/bin/env bash
# Instructions per request of two commits, server and client, pull and push, counted by
# callgrind: a comparison a noisy shared machine cannot blur (wall-clock ratios of the same
# binary scatter 2-5x here; instruction counts repeat to well under 1%). It does not see
# cache misses, lock waits or the kernel: a change that costs no instructions but time
# (memory layout, -fPIC, syscalls) needs bench/compare/run.sh on a quiet machine.
#
#   bench/compare/instr.sh OLD_COMMIT NEW_COMMIT [OUT_DIR=/tmp/ember-instr]
#
# Each commit is checked out (git worktree) and built RelWithDebInfo under OUT_DIR: -O2 -g
# without -march=native, because valgrind 3.19 cannot decode AVX-512. ps-net-bench then runs
# one server and one client, 4,096 keys a request at dim 16 over a 16,384-key space (so every
# row is hot after the first pass), 1 in flight: once with ps-server under callgrind, once
# with ps-net-bench (the client) under it. Counters are dumped every 3 s; the first dump
# (start-up, the pre-push of every key) is left out. Prints Ir per request and per key of
# the server's request handler, its key check + partition sort, the store call, and the
# client's request start and wait, with the NEW/OLD ratio; OUT_DIR/instr.json has the same.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/compare/instr.sh OLD_COMMIT NEW_COMMIT [OUT_DIR]" >&2; exit 2; }
command -v valgrind > /dev/null || { echo "instr.sh: valgrind is not installed" >&2; exit 1; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${3:-/tmp/ember-instr}"
keys=4096
mkdir -p "$out"
py=/usr/bin/python3
calls="$root/bench/compare/callgrind_calls.py"

build() { # name commit
  local src="$out/src-$1"
  git -C "$root" rev-parse --verify -q "$2^{commit}" > /dev/null ||
    { echo "instr.sh: $2 is not a commit" >&2; exit 2; }
  if [ -d "$src" ]; then git -C "$src" checkout -q --detach "$2"
  else git -C "$root" worktree add -q --detach "$src" "$2"; fi
  cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_CUDA=OFF > /dev/null
  cmake --build "$src/build" -j"$(nproc)" --target ps-server ps-net-bench > "$out/build-$1.log" 2>&1 ||
    { echo "instr.sh: building $2 failed: $out/build-$1.log" >&2; exit 1; }
}

profile() { # name op side -> dumps in $out/cg-name-op-side.*
  local name="$1" op="$2" side="$3" bin="$out/src-$1/build/bin" pre=() srv=()
  local cg="$out/cg-$name-$op-$side"
  rm -f "$cg".*
  if [ "$side" = server ]; then
    printf '#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s.%%p %s "$@"\n' \
      "$cg" "$bin/ps-server" > "$out/srv-wrap"
    chmod +x "$out/srv-wrap"
    srv=(--server-bin "$out/srv-wrap")
  else
    pre=(valgrind --tool=callgrind "--callgrind-out-file=$cg.%p")
  fi
  (while sleep 3; do callgrind_control -d > /dev/null 2>&1 || true; done) &
  local dumper=$!
  timeout 600 "${pre[@]}" "$bin/ps-net-bench" --dims 16 --servers 1 --inflight 1 --ops "$op" \
    --batch "$keys" --key-space 16384 --duration 12 --warmup 1 --no-raw "${srv[@]}" \
    > "$out/net-$name-$op-$side.log" 2>&1 || true
  kill "$dumper" 2> /dev/null || true
  wait "$dumper" 2> /dev/null || true
  # Every periodic dump but the first (start-up and pre-push).
  ls "$cg".*.* 2> /dev/null | awk -F. '$NF > 1' > "$out/dumps-$name-$op-$side"
  [ -s "$out/dumps-$name-$op-$side" ] ||
    { echo "instr.sh: no callgrind dumps for $name $op $side ($out/net-$name-$op-$side.log)" >&2; exit 1; }
}

build old "$1"
build new "$2"
echo "{\"old\": \"$(git -C "$root" rev-parse --short "$1")\", \"new\": \"$(git -C "$root" rev-parse --short "$2")\", \"keys\": $keys, \"rows\": [" > "$out/instr.json"
printf '%-5s %-7s %-22s %12s %12s %8s\n' op side function "old Ir/key" "new Ir/key" new/old
first=1
for op in pull push; do
  for side in server client; do
    if [ "$side" = server ]; then funcs=(srv_handle check_keys "ps_store_${op}_batch" srv_reply)
    else funcs=("ps_client_${op}_start" ps_client_wait); fi
    for name in old new; do profile "$name" "$op" "$side"; done
    for f in "${funcs[@]}"; do
      o=$($py "$calls" --keys $keys --json $(cat "$out/dumps-old-$op-$side") -- "$f")
      n=$($py "$calls" --keys $keys --json $(cat "$out/dumps-new-$op-$side") -- "$f")
      $py - "$op" "$side" "$f" "$o" "$n" "$first" >> "$out/instr.json" <<'PY'
import json, sys
op, side, f, o, n, first = sys.argv[1:]
o, n = json.loads(o)[0], json.loads(n)[0]
ratio = n["ir_per_call"] / o["ir_per_call"] if o["ir_per_call"] else None
row = {"op": op, "side": side, "function": f, "old_ir_per_key": o["ir_per_key"],
       "new_ir_per_key": n["ir_per_key"], "old_calls": o["calls"], "new_calls": n["calls"],
       "ratio": round(ratio, 3) if ratio else None}
print(("" if first == "1" else ",") + json.dumps(row))
r = f"{ratio:8.3f}" if ratio else "       -"
print(f"{op:5s} {side:7s} {f:22s} {o['ir_per_key']:12.1f} {n['ir_per_key']:12.1f} {r}", file=sys.stderr)
PY
      first=0
    done
  done
done 2>&1
echo "]}" >> "$out/instr.json"
echo "json: $out/instr.json"
