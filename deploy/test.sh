#!/usr/bin/env bash
# Ember's test command (README): installs dependencies, builds and runs every test.
#
#   1. build/       the default build (CUDA on where nvcc exists), all tests
#   2. build-nocuda -DEMBER_CUDA=OFF, built whole, and the tests of what CUDA changes: the
#                   kernel registry, the model, the collectives, the emulated CUDA twins, the
#                   --device flags (labels kernels, model, cuda, backend). Every other test runs
#                   CUDA-off in stage 3 (an ASan build is CUDA-off too) and in stage 1's binaries
#                   on the CPU path, so running all of them here again checked nothing new and
#                   cost ~8 of the ~32 minutes. Skipped where there is no nvcc: then build/
#                   already is the CUDA-off build, with every test.
#   3. build-asan   ASan + UBSan, the tests not labelled "slow"
#   4. build-fuzz   clang libFuzzer targets, a short bounded run of each
#
# Environment: EMBER_TEST_STAGES (default "main nocuda asan fuzz"), EMBER_JOBS (default: nproc).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="${EMBER_JOBS:-$(nproc)}"
stages="${EMBER_TEST_STAGES:-main nocuda asan fuzz}"
t0=$(date +%s)

stamp() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }

stamp "installing dependencies"
bash deploy/install-deps.sh

have_nvcc=0
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then have_nvcc=1; fi

run_build() { # dir, ctest args, cmake args...
  local dir="$1" ctest_args="$2"
  shift 2
  stamp "configure $dir $*"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" > "$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  grep -E "Ember: CUDA" "$dir.configure.log" || true
  stamp "build $dir"
  cmake --build "$dir" -j "$jobs" 2>&1 | grep -vE "^\[ *[0-9]+%\]|^make|^Consolidate|^-- " || true
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "build of $dir failed"; return 1; }
  stamp "test $dir"
  # shellcheck disable=SC2086
  (cd "$dir" && ctest --output-on-failure -j "$jobs" $ctest_args)
}

for stage in $stages; do
  case "$stage" in
    main) run_build build "" ;;
    nocuda)
      if [ "$have_nvcc" -eq 1 ]; then run_build build-nocuda "-L kernels|model|cuda|backend" -DEMBER_CUDA=OFF
      else stamp "no nvcc: build/ was already the CUDA-off build"; fi ;;
    asan)
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        run_build build-asan "-LE slow" -DEMBER_SANITIZE=ON -DEMBER_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo ;;
    fuzz)
      stamp "configure build-fuzz (clang, libFuzzer)"
      CC=clang CXX=clang++ cmake -S . -B build-fuzz -DEMBER_FUZZ=ON -DEMBER_CUDA=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo > build-fuzz.configure.log 2>&1 || { cat build-fuzz.configure.log; exit 1; }
      targets=$(grep -ho 'add_executable(fuzz_[a-z_]*' -r --include=CMakeLists.txt . | sed 's/add_executable(//' | sort -u)
      for t in $targets; do
        cmake --build build-fuzz -j "$jobs" --target "$t" > build-fuzz.build.log 2>&1 ||
          { tail -50 build-fuzz.build.log; exit 1; }
        bin=$(find build-fuzz -type f -name "$t" -perm -u+x | head -n 1)
        stamp "fuzz $t for 30 s"
        "$bin" -max_total_time=30 -print_final_stats=1 2>&1 | grep -E "Done|stat::number_of_executed_units|ERROR|SUMMARY" || true
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzzer $t found a failure"; exit 1; }
      done ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
stamp "all stages passed: $stages"
