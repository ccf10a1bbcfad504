#!/usr/bin/env bash
# test_slurm: deploy/slurm/ember.sbatch on a real single-node Slurm cluster (Debian's munged,
# slurmctld and slurmd, configured here in a temporary directory; see slurm_cluster.sh).
#
#   1. the cluster runs a trivial step (srun hostname)
#   2. ember.sbatch with 2 servers + 2 workers on stand-in binaries (tests/ops/stubs): checks
#      the orchestration exactly — shards 0 and 1 of 2 on distinct ports and node-local data
#      dirs, ranks 0 and 1 of world 2 with the same server list, the servers stopped with
#      SIGTERM after the workers, the summary in the submit directory, the data dir removed,
#      and no process of the job left
#   3. the same with the real ps-server/ps-worker on ps-datagen data: the job's JSON summary
#      has AUC >= AUC_FLOOR (0.80; the planted model's ceiling, ~0.87, is printed for comparison)
#      and no process of the job is left.
# SKIPPED (77) when Slurm cannot start, or (after parts 1-2 passed) when ps-server,
# ps-worker or ps-datagen are not built.
set -uo pipefail
src="${EMBER_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
bin="${EMBER_BIN:-$src/build/bin}"
AUC_FLOOR=0.80
tmp="$(mktemp -d -t ember-slurm.XXXXXX)"
# shellcheck source=slurm_cluster.sh
source "$src/tests/ops/slurm_cluster.sh"

finish() {
  slurm_cluster_stop
  [ "${EMBER_KEEP_TMP:-0}" = 1 ] || rm -rf "$tmp"
}
trap finish EXIT
dump() {
  local f
  for f in "$tmp"/submit*/ember-*.out "$tmp/slurm/log/slurmctld.log" "$tmp/slurm/log/slurmd.log"; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
  done
}
fail() { echo "FAIL: $*"; dump; exit 1; }

slurm_cluster_start "$tmp/slurm" || { echo "SKIPPED: Slurm cannot start here: $SLURM_CLUSTER_REASON"; exit 77; }
echo "slurm: private cluster up (SLURM_CONF=$SLURM_CONF)"

# 1. a trivial step
out="$(timeout 60 srun -n 1 hostname 2>&1)" || fail "srun hostname failed: $out"
[ "$out" = "$(hostname)" ] || fail "srun hostname printed '$out', expected '$(hostname)'"
echo "ok: srun hostname -> $out"

# Processes that belong to job $1 of this private cluster (by the environment Slurm gives
# every task), other than this shell.
job_procs() {
  local id="$1" e p
  for e in /proc/[0-9]*/environ; do
    p="${e#/proc/}"; p="${p%/environ}"
    [ "$p" = "$$" ] && continue
    if tr '\0' '\n' 2>/dev/null < "$e" | grep -qx "SLURM_JOB_ID=$id" &&
       tr '\0' '\n' 2>/dev/null < "$e" | grep -qx "SLURM_CONF=$SLURM_CONF"; then
      echo "$p $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)"
    fi
  done
}

# submit DIR TIMEOUT_S ENV... -- SCRIPT_ARGS...: submits ember.sbatch from DIR, waits (bounded)
# for the job to end; sets JOB_ID, JOB_STATE, JOB_EXIT.
submit() {
  local dir="$1" limit="$2"
  shift 2
  local envs="ALL"
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs="$envs,$1"; shift; done
  shift
  mkdir -p "$dir"
  JOB_ID="$(cd "$dir" && sbatch --parsable --nodes=1 --ntasks=4 --overcommit --export="$envs" \
    "$src/deploy/slurm/ember.sbatch" "$@")" || fail "sbatch refused the job"
  JOB_ID="${JOB_ID%%;*}"
  local t0 info
  t0=$(date +%s)
  while :; do
    info="$(scontrol -o show job "$JOB_ID" 2>/dev/null)"
    JOB_STATE="$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<< "$info")"
    JOB_EXIT="$(sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' <<< "$info")"
    case "$JOB_STATE" in PENDING|RUNNING|CONFIGURING|COMPLETING|"") ;; *) break ;; esac
    if [ $(( $(date +%s) - t0 )) -ge "$limit" ]; then
      scancel "$JOB_ID" 2>/dev/null
      fail "job $JOB_ID still $JOB_STATE after $limit s ($(sed -n 's/.* Reason=\([^ ]*\).*/\1/p' <<< "$info"))"
    fi
    sleep 0.5
  done
  echo "job $JOB_ID: $JOB_STATE exit $JOB_EXIT after $(( $(date +%s) - t0 )) s"
}

# no_leftovers ID: bounded wait for every process of the job to be gone.
no_leftovers() {
  local left
  for _ in $(seq 1 100); do
    left="$(job_procs "$1")"
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  fail "processes of job $1 left behind: $left"
}

# 1b. the leftover detector sees a running job's processes, and none once it is cancelled
sleeper="$(sbatch --parsable --output=/dev/null --wrap "sleep 120")" || fail "sbatch --wrap refused"
sleeper="${sleeper%%;*}"
seen=""
for _ in $(seq 1 100); do seen="$(job_procs "$sleeper")"; [ -n "$seen" ] && break; sleep 0.1; done
[ -n "$seen" ] || fail "job_procs found no process of running job $sleeper"
scancel "$sleeper"
no_leftovers "$sleeper"
echo "ok: leftover detector saw job $sleeper's processes ($(wc -l <<< "$seen")) and none after scancel"

# 2. the orchestration, on stand-in binaries
stubs="$tmp/stubs" records="$tmp/records"
mkdir -p "$stubs" "$records"
cp "$src/tests/ops/stubs/ps-server" "$src/tests/ops/stubs/ps-worker" "$stubs/"
# CURVE (issue 18): the job makes its keys with ps-keygen beside the stubs when it is built;
# otherwise the stub job runs with EMBER_AUTH=0 and the key wiring is not checked.
stub_auth=EMBER_AUTH=0
if [ -x "$bin/ps-keygen" ]; then cp "$bin/ps-keygen" "$stubs/"; stub_auth=EMBER_AUTH=1; fi
node_tmp="$tmp/nodelocal"
mkdir -p "$node_tmp"
# Ports free a moment ago can be taken by another test (ctest runs tests in parallel) before
# the job binds them: a job that failed on "Address already in use" is submitted again with
# fresh ports, a few times.
port_taken() { grep -q "Address already in use" "$1/ember-$JOB_ID.out" 2>/dev/null; }
for attempt in 1 2 3; do
  rm -rf "$records" && mkdir -p "$records"
  port0="$(_slurm_free_ports 2)"
  submit "$tmp/submit-stub" 90 EMBER_BIN="$stubs" EMBER_SERVERS=2 EMBER_WORKERS=2 \
    EMBER_PORT="$port0" EMBER_METRICS_PORT=9400 EMBER_WORKER_METRICS_PORT=9500 \
    TMPDIR="$node_tmp" STUB_RECORDS="$records" "$stub_auth" -- --train /data/train.tsv --epochs 1
  [ "$JOB_STATE" = COMPLETED ] || ! port_taken "$tmp/submit-stub" || [ $attempt -eq 3 ] && break
  echo "job $JOB_ID: a port was taken meanwhile (attempt $attempt); again with fresh ports"
done
[ "$JOB_STATE" = COMPLETED ] && [ "$JOB_EXIT" = "0:0" ] || fail "stub job ended $JOB_STATE $JOB_EXIT"
/usr/bin/python3 - "$records" "$tmp/submit-stub/ember-$JOB_ID.json" "$node_tmp/ember-$JOB_ID" "$port0" \
  "$stub_auth" "$tmp/submit-stub/.ember-$JOB_ID-curve" <<'PY' || fail "stub job records wrong"
import json, os, sys
rec, summary, data_root, port0 = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
auth, curve = sys.argv[5] == "EMBER_AUTH=1", sys.argv[6]
def load(n):
    with open(os.path.join(rec, n)) as f: return json.load(f)
def opts(argv):
    return {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
servers = [opts(load(f"server-{i}.json")["argv"]) for i in range(2)]
urls = []
for i, s in enumerate(servers):
    assert s["--shard"] == str(i) and s["--shards"] == "2", s
    assert s["--data-dir"] == f"{data_root}/shard-{i}", (s, data_root)
    assert load(f"server-{i}.json")["terminated"], f"server {i} was not stopped with SIGTERM"
    assert s["--metrics-port"] == str(9400 + i), s  # 2 shards on one node: ports 9400, 9401
    assert s["--metrics-bind"] == "0.0.0.0", s  # Prometheus scrapes the nodes from elsewhere
    urls.append(s["--listen"])
    if auth:
        assert s["--curve-secret"] == f"{curve}/server.secret", s
        assert s["--curve-clients"] == f"{curve}/clients", s
    else:
        assert "--curve-secret" not in s, s
assert urls == [f"tcp://127.0.0.1:{port0}", f"tcp://127.0.0.1:{port0 + 1}"], urls
for r in range(2):
    w = opts(load(f"worker-{r}.json")["argv"])
    assert w["--rank"] == str(r) and w["--world"] == "2", w
    assert w["--servers"] == ",".join(urls), (w, urls)
    assert w["--train"] == "/data/train.tsv" and w["--epochs"] == "1", w
    assert w["--summary"] == summary, (w, summary)
    assert w["--metrics-port"] == str(9500 + r), w
    if auth:
        assert w["--curve-secret"] == f"{curve}/worker.secret", w
        assert w["--curve-server"] == f"{curve}/server.public", w
    assert w["--metrics-bind"] == "0.0.0.0", w
with open(summary) as f: js = json.load(f)
assert js["stub"] and js["auc"] == 0.75
assert not os.path.exists(data_root), f"{data_root} left behind"
assert not os.path.exists(curve), f"{curve} left behind"
print("ok: shards 0,1 of 2 on", urls, "; ranks 0,1 of 2; SIGTERM after workers; summary in submit dir")
PY
no_leftovers "$JOB_ID"
echo "ok: no process of job $JOB_ID left"

# 3. the real thing
for b in ps-server ps-worker ps-datagen; do
  if [ ! -x "$bin/$b" ]; then
    echo "SKIPPED: $bin/$b is not built yet, so the real 2+2 job cannot run (parts 1-2, Slurm and the orchestration, passed)"
    exit 77
  fi
done
data="$tmp/data"
mkdir -p "$data"
gen="$("$bin/ps-datagen" --rows 200000 --seed 7 --out "$data/train.tsv" --test-rows 20000 \
  --test-out "$data/test.tsv" 2>&1)" || fail "ps-datagen failed: $gen"
echo "ps-datagen: $(tr '\n' ' ' <<< "$gen")"
for attempt in 1 2 3; do
  port0="$(_slurm_free_ports 2)"
  submit "$tmp/submit-real" 240 EMBER_BIN="$bin" EMBER_SERVERS=2 EMBER_WORKERS=2 \
    EMBER_PORT="$port0" TMPDIR="$node_tmp" "EMBER_SERVER_ARGS=--threads 1" -- \
    --train "$data/train.tsv" --test "$data/test.tsv" --epochs 1 --batch 256 --sparse-lr 0.1 \
    --threads 1 --emb-dim 8 --mlp-bot 13-32-8 --mlp-top 32-1
  [ "$JOB_STATE" = COMPLETED ] || ! port_taken "$tmp/submit-real" || [ $attempt -eq 3 ] && break
  echo "job $JOB_ID: a port was taken meanwhile (attempt $attempt); again with fresh ports"
done
summary="$tmp/submit-real/ember-$JOB_ID.json"
[ "$JOB_STATE" = COMPLETED ] && [ "$JOB_EXIT" = "0:0" ] || fail "job ended $JOB_STATE $JOB_EXIT"
[ -s "$summary" ] || fail "no summary at $summary"
/usr/bin/python3 - "$summary" "$AUC_FLOOR" <<'PY' || fail "summary below the floor or malformed"
import json, sys
with open(sys.argv[1]) as f: s = json.load(f)
for k in ("auc", "logloss", "accuracy", "samples", "samples_per_s", "bad_lines"):
    assert k in s, f"summary lacks {k}: {s}"
floor = float(sys.argv[2])
print(f"summary: auc={s['auc']:.4f} (floor {floor}) logloss={s['logloss']:.4f} samples={s['samples']}")
assert s["auc"] >= floor, f"AUC {s['auc']} below {floor}"
assert s["bad_lines"] == 0
PY
no_leftovers "$JOB_ID"
[ ! -e "$node_tmp/ember-$JOB_ID" ] || fail "node-local data dir left behind"
# EMBER_AUTH defaults to 1: both servers served CURVE, and the job's keys are gone.
out_real="$tmp/submit-real/ember-$JOB_ID.out"
[ "$(grep -c 'CURVE: encrypted' "$out_real")" -eq 2 ] || fail "the servers did not run with CURVE"
! grep -q unauthenticated "$out_real" || fail "a server ran unauthenticated"
[ ! -e "$tmp/submit-real/.ember-$JOB_ID-curve" ] || fail "the job's CURVE keys were left behind"
echo "ok: real 2-server 2-worker job on Slurm; no process left"
