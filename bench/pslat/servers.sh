# bench/pslat/servers.sh: sourced by the ps-bench scripts of bench/pslat (sweep.sh, multihot.sh):
# fresh ps-server shards on loopback for a run and their cleanup by PID. The sourcing script
# sets `bin` (the ps-server's directory) and `server_args` (extra ps-server flags, an array)
# first; this file makes `tmp` (data dirs and logs, removed on exit) and `urls` (by start).
# Design decision: a thin adapter over bench/common/cluster.sh, the one place benchmark scripts
# start and stop servers (a free port each, a bounded wait for the port, SIGTERM by PID with a
# bounded wait, then -9), so that the pslat scripts keep their start/stop_all words without a
# second copy of that code.
tmp="$(mktemp -d)"
BIN="$bin"
# shellcheck source=../common/cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common/cluster.sh"
CLUSTER_FLAGS=("${server_args[@]}")
cleanup() {
  cluster_stop
  rm -rf "$tmp"
}
trap cleanup EXIT
start() { # run shards: starts them, sets urls (not in a subshell: the PIDs must reach cleanup)
  cluster_start "$tmp/r$1-s$2" "$2" 1
  urls="$CLUSTER_SERVERS"
}
stop_all() { cluster_stop; }
