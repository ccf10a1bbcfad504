#!/usr/bin/env bash
# ps-server runs jemalloc with its memory in huge pages (server/main.c's malloc_conf: per-request
# frames of tens of MB and random row reads cost a fault per 4 KB page otherwise;
# bench/RESULTS-pslat.md, session 8), and STATS says what the process runs with. MALLOC_CONF in
# the environment still overrides it. Fails where ps-server does not set it (opt.thp "default").
. "$(dirname "$0")/../pslat/lib.sh"
thp_of() { # URL -> the STATS document's allocator.thp
  "$EMBER_BIN/ps-stats" --servers "$1" | $PY -c \
    'import json, sys; a = json.loads(sys.stdin.readline())["allocator"]; print(a["name"], a["thp"])'
}
start_server a 0 1
got=$(thp_of "$SRV_URL") || fail "ps-stats"
[ "$got" = "jemalloc always" ] || fail "allocator: want 'jemalloc always', got '$got'"
echo "ok   built-in: $got"
MALLOC_CONF=thp:never start_server b 0 1
got=$(thp_of "$SRV_URL") || fail "ps-stats"
[ "$got" = "jemalloc never" ] || fail "MALLOC_CONF=thp:never: want 'jemalloc never', got '$got'"
echo "ok   MALLOC_CONF overrides: $got"
