#!/usr/bin/env bash
# run-gpu-tests.sh: on a machine with an NVIDIA GPU, runs every GPU test and GPU benchmark of
# Ember in one go and writes a log, JSON figures and a summary.
#
#   tests       test_cuda_ops (every kernel vs its CPU twin, the DCNv2 cross kernels too),
#               test_cuda_dlrm (a DLRM training step CUDA vs CPU, loss and all gradients to
#               1e-4, dot and DCNv2 interactions), test_nccl (one rank),
#               test_nccl --two-rank (two ranks on two GPUs; SKIPPED with one GPU)
#   end to end  ps-datagen, one ps-server, ps-worker --device cuda then --device cpu on one-hot
#               data (dot and DCNv2 interactions) and multi-hot bags (dot); each CUDA run's
#               test AUC must match its CPU twin's (a counted test, --agree)
#   memcheck    compute-sanitizer --tool memcheck over test_cuda_ops and test_cuda_dlrm
#   benchmarks  ps-gpu-bench (dense step samples/s at batch 2048/16384/65536, FP32 then TF32,
#               cuBLAS share; FP32 again with the row gradients into pageable memory), ps-dense-bench --device cuda (per-operation breakdown, synced),
#               bench/gpu/torch_dense_gpu.py (the same step in PyTorch on the same GPU)
#
# Such a machine may have no package registry. Build on a Debian 12 machine with CUDA on,
# then `tests/gpu/pack-gpu-bundle.sh BUILD_DIR` gathers the binaries and the .deb files of
# the shared libraries they need (libopenblas0-openmp, libgfortran5, libquadmath0, libgomp1,
# libjansson4, libcmocka0 — see BUNDLE/debs/PACKAGES); this script unpacks them with dpkg -x
# into a private prefix and puts it on LD_LIBRARY_PATH. The CUDA libraries (cudart 13,
# cuBLAS/cuBLASLt 13, NCCL 2) are taken from the machine: $CUDA_HOME/lib64, /usr/local/cuda,
# or the nvidia-* wheels installed beside PyTorch.
#
# Usage:
#   run-gpu-tests.sh [--bundle DIR | --build DIR] [--libs PREFIX] [--debs DIR] [--out DIR]
#                    [--seconds S] [--python PY] [--batches LIST] [--e2e-rows N] [--agree TOL]
#                    [--no-sanitize] [--sanitize-timeout S] [--bench-timeout S]
#   --bundle DIR  a folder made by pack-gpu-bundle.sh (bin/, tests/, debs/, src/)
#   --build DIR   a build tree instead (bin/, tests/), e.g. one built on this machine
#   --libs PREFIX an already unpacked prefix (dpkg -x DEB PREFIX for each needed .deb)
#   --debs DIR    .deb files to unpack into a fresh prefix (default: BUNDLE/debs)
#   --out DIR     where the log, JSON files and summary go (default: ./gpu-results)
#   --e2e-rows N  training rows of the one-hot end-to-end data (default 400000; multi-hot N/4)
#   --agree TOL   largest |AUC(cuda) - AUC(cpu)| an end-to-end pair may show (default 0.002)
#   --no-sanitize skip compute-sanitizer memcheck of the CUDA tests (each bounded by
#                 --sanitize-timeout, default 300 s); --bench-timeout bounds each benchmark (300 s)
# Exit status: 0 if no test failed (skips allowed), 1 otherwise, 2 on bad usage.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bundle="" build="" libs="" debs="" out="$PWD/gpu-results" seconds=2 python=python3
batches=2048,16384,65536 e2e_rows=400000 agree_tol=0.002 sanitize=1 sanitize_to=300 bench_to=300
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --libs) libs=$2; shift 2 ;;
    --debs) debs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --e2e-rows) e2e_rows=$2; shift 2 ;;
    --agree) agree_tol=$2; shift 2 ;;
    --no-sanitize) sanitize=0; shift ;;
    --sanitize-timeout) sanitize_to=$2; shift 2 ;;
    --bench-timeout) bench_to=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-gpu-tests: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$bundle" ]; then
  root=$(cd "$bundle" && pwd)
  [ -z "$debs" ] && [ -d "$root/debs" ] && debs=$root/debs
  torch_py=$root/src/torch_dense_gpu.py
elif [ -n "$build" ]; then
  root=$(cd "$build" && pwd)
  torch_py=$here/../../bench/gpu/torch_dense_gpu.py
else
  echo "run-gpu-tests: give --bundle DIR or --build DIR" >&2; exit 2
fi
mkdir -p "$out"
log=$out/run-gpu-tests.log
: >"$log"
say() { echo "$*" | tee -a "$log"; }

# ---- runtime libraries --------------------------------------------------------------------
if [ -n "$debs" ] && [ -z "$libs" ]; then
  libs=$(mktemp -d /tmp/ember-rt.XXXXXX)
  n=0
  for f in "$debs"/*.deb; do
    [ -e "$f" ] || continue
    dpkg -x "$f" "$libs" && n=$((n + 1))
  done
  say "unpacked $n .deb files from $debs into $libs"
fi
ldp=""
add_dir() { [ -d "$1" ] && ldp="${ldp:+$ldp:}$1"; }
if [ -n "$libs" ]; then
  for d in usr/lib/x86_64-linux-gnu/openblas-openmp lib/x86_64-linux-gnu/openblas-openmp \
           usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu usr/lib lib; do add_dir "$libs/$d"; done
fi
[ -n "$bundle" ] && add_dir "$root/lib"
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  add_dir "$d"
done
# The nvidia-* wheels beside PyTorch (cublas, nccl, cuda_runtime), if torch is there.
wheel_dirs=$("$python" - 2>/dev/null <<'EOF'
import glob, os
try:
    import nvidia
    for base in nvidia.__path__:
        for d in sorted(glob.glob(os.path.join(base, "*", "lib"))) + sorted(glob.glob(os.path.join(base, "cu*", "lib"))):
            print(d)
except Exception:
    pass
EOF
)
for d in $wheel_dirs; do add_dir "$d"; done
export LD_LIBRARY_PATH="${ldp}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMOCKA_MESSAGE_OUTPUT=STDOUT

say "== machine"
say "date: $(date -u +%FT%TZ)  host: $(hostname)  kernel: $(uname -r)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$log"
else
  say "nvidia-smi: not on PATH"
fi
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

bins=()
for t in test_cuda_ops test_cuda_dlrm test_nccl; do [ -x "$root/tests/$t" ] && bins+=("$root/tests/$t"); done
for b in ps-gpu-bench ps-dense-bench; do [ -x "$root/bin/$b" ] && bins+=("$root/bin/$b"); done
missing=0
for b in "${bins[@]}"; do
  nf=$(ldd "$b" 2>&1 | grep 'not found' || true)
  if [ -n "$nf" ]; then
    say "MISSING libraries for $(basename "$b"):"; say "$nf"; missing=1
  fi
done
[ $missing -eq 0 ] || say "some libraries are missing: carry their .debs (pack-gpu-bundle.sh) or pass --libs"

# ---- tests --------------------------------------------------------------------------------
pass=0 skip=0 fail=0 results=()
run_test() { # name, timeout, command...
  local name=$1 to=$2; shift 2
  say "== test $name"
  local t0=$SECONDS
  timeout "$to" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  local verdict=FAIL
  case $rc in 0) verdict=PASS; pass=$((pass + 1)) ;; 77) verdict=SKIPPED; skip=$((skip + 1)) ;; *) fail=$((fail + 1)) ;; esac
  results+=("$(printf '%-22s %-8s rc=%-3s %4ss' "$name" "$verdict" "$rc" $((SECONDS - t0)))")
  say "-- $name: $verdict (rc $rc)"
  last_rc=$rc
}
gpu_ok=0 last_rc=77
for t in test_cuda_ops test_cuda_dlrm test_nccl; do
  if [ -x "$root/tests/$t" ]; then
    run_test "$t" 600 "$root/tests/$t"
    [ "$t" = test_cuda_ops ] && [ "$last_rc" != 77 ] && gpu_ok=1
  else say "== test $t: not built"; fail=$((fail + 1)); results+=("$(printf '%-22s %-8s' "$t" "ABSENT")"); fi
done
[ -x "$root/tests/test_nccl" ] && run_test "test_nccl_two_rank" 300 "$root/tests/test_nccl" --two-rank

# ---- end to end: ps-worker --device cuda against a real ps-server, then --device cpu ------
# Same data, same seeds: the dense math matches to ~1e-6 and the sparse side is identical, so
# each CUDA run's test AUC must agree with its CPU twin's to $agree_tol (a counted test).
# Three data sets: one-hot Criteo layout (dot and DCNv2), and multi-hot bags of 1..20 ids
# (ps-datagen --multi-hot 20, read through its --schema-out), which puts the CUDA pooling of
# variable bags in a real training run.
e2e() { # device interaction data-tag [ps-worker flags...]
  local dev=$1 inter=$2 data=$3 dir=$out/e2e port=$((20000 + RANDOM % 20000)); shift 3
  local tag=$dev-$data-$inter
  mkdir -p "$dir"
  rm -rf "$dir/data-$tag"
  "$root/bin/ps-server" --listen "tcp://127.0.0.1:$port" --shard 0 --shards 1 \
    --data-dir "$dir/data-$tag" >"$dir/server-$tag.log" 2>&1 &
  local spid=$!
  sleep 2
  say "== e2e $tag: ps-worker --device $dev --interaction $inter $* (server pid $spid, port $port)"
  timeout 600 "$root/bin/ps-worker" --servers "tcp://127.0.0.1:$port" --train "$dir/$data.tsv" \
    --test "$dir/${data}_test.tsv" --batch 2048 --device "$dev" --interaction "$inter" \
    --summary "$out/e2e-$tag.json" "$@" 2>&1 |
    grep -vE ' step [0-9]+ ' | tail -5 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  results+=("$(printf '%-22s %-8s rc=%s %s' "e2e-$tag" "$([ "$rc" = 0 ] && echo done || echo "rc $rc")" "$rc" \
    "$(grep -oE '"(auc|logloss|samples_per_s)": [0-9.e+-]+' "$out/e2e-$tag.json" 2>/dev/null | tr '\n' ' ')")")
  [ "$rc" = 0 ] || [ "$dev" = cpu ] || fail=$((fail + 1))
}
agree() { # data-tag interaction: the CUDA run's AUC vs the CPU run's
  local a=$out/e2e-cuda-$1-$2.json b=$out/e2e-cpu-$1-$2.json verdict
  verdict=$("$python" - "$a" "$b" "$agree_tol" 2>&1 <<'PY'
import json, sys
try:
    a, b = (json.load(open(f))["auc"] for f in sys.argv[1:3])
    d = abs(a - b)
    print(("PASS" if d <= float(sys.argv[3]) else "FAIL") + f" cuda {a:.6f} cpu {b:.6f} |diff| {d:.2e}")
except Exception as e:
    print(f"FAIL {e}")
PY
)
  say "== test e2e-agree-$1-$2: $verdict"
  case $verdict in PASS*) pass=$((pass + 1)) ;; *) fail=$((fail + 1)) ;; esac
  results+=("$(printf '%-22s %s' "agree-$1-$2" "$verdict")")
}
if [ -x "$root/bin/ps-worker" ] && [ -x "$root/bin/ps-server" ] && [ -x "$root/bin/ps-datagen" ]; then
  mkdir -p "$out/e2e"
  "$root/bin/ps-datagen" --rows "$e2e_rows" --seed 7 --out "$out/e2e/onehot.tsv" --test-rows $((e2e_rows / 8)) \
    --test-out "$out/e2e/onehot_test.tsv" 2>&1 | tail -1 | tee -a "$log"
  "$root/bin/ps-datagen" --rows $((e2e_rows / 4)) --seed 7 --multi-hot 20 --out "$out/e2e/mh.tsv" \
    --test-rows $((e2e_rows / 32)) --test-out "$out/e2e/mh_test.tsv" --schema-out "$out/e2e/mh.schema.json" \
    2>&1 | tail -1 | tee -a "$log"
  runs=("onehot dot" "onehot dcn" "mh dot")
  for r in "${runs[@]}"; do
    set -- $r
    extra=(); [ "$1" = mh ] && extra=(--schema "$out/e2e/mh.schema.json")
    [ $gpu_ok = 1 ] && e2e cuda "$2" "$1" "${extra[@]}"
    e2e cpu "$2" "$1" "${extra[@]}"
    if [ $gpu_ok = 1 ]; then agree "$1" "$2"; else say "== e2e cuda $1 $2: SKIPPED (no usable GPU)"; fi
  done
  rm -f "$out"/e2e/*.tsv
fi

# ---- compute-sanitizer (memcheck) over the CUDA tests, where the machine has it ----------
if [ $gpu_ok = 1 ] && [ "$sanitize" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for t in test_cuda_ops test_cuda_dlrm; do
    [ -x "$root/tests/$t" ] && run_test "memcheck-$t" "$sanitize_to" \
      compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 "$root/tests/$t"
  done
elif [ "$sanitize" = 1 ]; then
  say "== memcheck: SKIPPED (no usable GPU or no compute-sanitizer on PATH)"
fi

# ---- benchmarks ---------------------------------------------------------------------------
bench() { # name, command...
  local name=$1; shift
  say "== bench $name: $*"
  timeout "$bench_to" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  results+=("$(printf '%-22s %-8s rc=%s' "$name" "$([ "$rc" = 0 ] && echo done || echo "rc $rc")" "$rc")")
}
if [ -x "$root/bin/ps-gpu-bench" ]; then
  bench ps-gpu-bench-fp32 "$root/bin/ps-gpu-bench" --batch "$batches" --seconds "$seconds" --json "$out/ps-gpu-bench-fp32.json"
  bench ps-gpu-bench-tf32 "$root/bin/ps-gpu-bench" --batch "$batches" --seconds "$seconds" --tf32 1 --json "$out/ps-gpu-bench-tf32.json"
  # row gradients into pageable memory (staged), as ps-worker before session 10: the gap is
  # what page-locked host memory (ps_kern_host_alloc) buys
  bench ps-gpu-bench-fp32-pageable "$root/bin/ps-gpu-bench" --batch "$batches" --seconds "$seconds" --pinned 0 --json "$out/ps-gpu-bench-fp32-pageable.json"
fi
if [ -x "$root/bin/ps-dense-bench" ]; then
  bench ps-dense-bench-cuda "$root/bin/ps-dense-bench" --device cuda --batch "$batches" --seconds "$seconds" --json "$out/ps-dense-bench-cuda.json"
fi
if "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  bench torch-fp32 env PYTHONUNBUFFERED=1 "$python" "$torch_py" --batch "$batches" --seconds "$seconds" --json "$out/torch-fp32.json"
  bench torch-tf32 env PYTHONUNBUFFERED=1 "$python" "$torch_py" --batch "$batches" --seconds "$seconds" --tf32 --variants dense,resident --json "$out/torch-tf32.json"
else
  say "== bench torch: $python has no CUDA build of torch; skipped"
fi

# ---- summary ------------------------------------------------------------------------------
{
  echo "== summary: $pass passed, $skip skipped, $fail failed"
  printf '%s\n' "${results[@]}"
} | tee "$out/summary.txt" | tee -a "$log"
[ $fail -eq 0 ]
