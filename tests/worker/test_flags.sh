#!/usr/bin/env bash
# ps-worker's flag checks: every bad argument exits 2 with a one-line reason before anything
# connects (the servers here do not exist; a check that ran only after connecting would fail
# with 1 instead), and --help exits 0.
set -u
: "${EMBER_BIN:?EMBER_BIN must point at build/bin}"
W="$EMBER_BIN/ps-worker"
TMP=$(mktemp -d /tmp/worker-flags.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
: >"$TMP/empty.tsv" # the --train of the checks below (/dev/null is a device: refused)
fail() { echo "FAIL: $*" >&2; exit 1; }

"$W" --help >"$TMP/help.txt" || fail "--help exited $?"
grep -q -- "--consistency sync|async|ssp:K" "$TMP/help.txt" || fail "--help lacks --consistency"

bad() {
  timeout 20 "$W" --servers tcp://127.0.0.1:1 --train "$TMP/empty.tsv" --timeout-ms 500 "$@" \
    >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ $rc = 2 ] || { cat "$TMP/err" >&2; fail "ps-worker $* exited $rc, want 2"; }
  grep -q "^ps-worker: " "$TMP/err" || fail "ps-worker $* gave no reason"
  echo "ok   rejected: $* -> $(head -1 "$TMP/err")"
}
bad --consistency eventual
bad --consistency ssp:
bad --consistency ssp:x
bad --consistency ssp:-1
bad --consistency ssp:1000001
bad --sparse-opt rowwise_adagrad
bad --dense-opt ftrl
bad --bad-lines ignore
bad --resume
bad --rank 2 --world 2
bad --max-bad-fraction 1.5
bad --shuffle-buffer -1
bad --wire f8
bad --wire F16
bad --lookahead yes
bad --lookahead ON

# Refusals that name a flag (and its path): input paths, the model's shape, the checkpoint
# directory, --holdout (issue 17; each used to fail only after connecting, or not at all).
named() {
  local needle="$1"
  shift
  bad "$@"
  [ "$(wc -l <"$TMP/err")" = 1 ] || fail "ps-worker $* printed more than one line"
  grep -q -- "$needle" "$TMP/err" || fail "ps-worker $*: '$(cat "$TMP/err")' does not name $needle"
}
mkdir -p "$TMP/ck-empty"
named "--train $TMP/none.tsv" --train "$TMP/none.tsv"
named "--train $TMP" --train "$TMP"
named "--test $TMP/none.tsv" --test "$TMP/none.tsv"
# Issue 36, 10: a FIFO or a device as an input hung with no output (open waits for a writer,
# /dev/zero never ends a line); each is refused at once (timeout 20 in bad()).
mkfifo "$TMP/fifo"
# Issue 34: --train may be a FIFO (a stream, read once: not opened by the checks); --test not.
named "--test $TMP/fifo: is a named pipe (FIFO)" --test "$TMP/fifo"
named "--epochs 2: --train $TMP/fifo is a stream" --train "$TMP/fifo" --epochs 2
named "--train /dev/zero: is a character device" --train /dev/zero
named "--test /dev/zero: is a character device" --test /dev/zero
named "--holdout" --holdout 10
named "--servers: server URL '127.0.0.1:1' is not tcp://HOST:PORT or ipc://PATH (no tcp:// or ipc:// scheme)" --servers 127.0.0.1:1
named "--servers: server URL 'tcp://127.0.0.1:99999'" --servers tcp://127.0.0.1:99999
named "--servers" --servers "tcp://127.0.0.1:1,"
named "--summary $TMP/none/s.json" --summary "$TMP/none/s.json"
named "--mlp-bot 12-32-16" --mlp-bot 12-32-16
named "--mlp-bot 14-32-16" --mlp-bot 14-32-16
named "--emb-dim is 16" --mlp-bot 13-32-8
named "--mlp-bot" --mlp-bot 13
named "--mlp-top 32-2" --mlp-top 32-2
named "--mlp-top" --mlp-top 32-x-1
named "--checkpoint-dir /dev/null/x" --checkpoint-dir /dev/null/x
named "--checkpoint-dir $TMP/none" --checkpoint-dir "$TMP/none" --resume
named "no checkpoint" --checkpoint-dir "$TMP/ck-empty" --resume
# --interaction dcn (issue 19): its names and shape, and a dot model's checkpoint refused by a
# DCN run, whether its config records the interaction or predates the flag (then it was dot).
bad --interaction dnc
bad --interaction dcn --dcn-layers 0
named "--dcn-rank 64: want 0 (full rank) or 1 to 53" --interaction dcn --emb-dim 2 --mlp-bot 13-2 \
  --dcn-rank 64
for cfg in "interaction=dot" "emb-dim=16"; do
  mkdir -p "$TMP/ck-dot/step-4"
  echo "step-4" >"$TMP/ck-dot/latest"
  printf '# ps-worker\n%s\n' "$cfg" >"$TMP/ck-dot/step-4/config"
  named "--resume: --interaction is dcn --dcn-layers 3 --dcn-rank 108 but the checkpoint .*step-4 was trained with dot" \
    --interaction dcn --checkpoint-dir "$TMP/ck-dot" --resume
  named "--interaction is dcn --dcn-layers 2 --dcn-rank 0 but" \
    --interaction dcn --dcn-layers 2 --dcn-rank 0 --checkpoint-dir "$TMP/ck-dot" --resume
done
printf 'interaction=dcn --dcn-layers 3 --dcn-rank 64\n' >"$TMP/ck-dot/step-4/config"
named "--interaction is dot but the checkpoint .*step-4 was trained with dcn --dcn-layers 3 --dcn-rank 64" \
  --checkpoint-dir "$TMP/ck-dot" --resume
named "--interaction is dcn --dcn-layers 3 --dcn-rank 32 but" \
  --interaction dcn --dcn-rank 32 --checkpoint-dir "$TMP/ck-dot" --resume

# A device that is not there fails (exit 1) before joining, so the worker takes no rank.
timeout 20 "$W" --servers tcp://127.0.0.1:1 --train "$TMP/empty.tsv" --timeout-ms 500 --device cuda:99 \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc = 1 ] || { cat "$TMP/err" >&2; fail "--device cuda:99 exited $rc, want 1"; }
grep -q "device 'cuda:99'" "$TMP/err" || fail "--device cuda:99: '$(cat "$TMP/err")' does not name it"
! grep -q "joining" "$TMP/err" || fail "--device cuda:99: tried to join first"
echo "ok   --device cuda:99 -> $(grep -o "device 'cuda:99'.*" "$TMP/err")"
echo "PASS"
