#!/usr/bin/env bash
# pack-gpu-bundle.sh: on the BUILD machine (Debian 12, with a CUDA-on build), gathers what
# tests/gpu/run-gpu-tests.sh needs on a GPU machine that has no package registry:
#   BUNDLE/bin, BUNDLE/tests   the GPU test and benchmark binaries (our libraries are static),
#                              and ps-datagen/ps-server/ps-worker for an end-to-end run
#   BUNDLE/debs                the Debian packages of every shared library they load that is
#                              not glibc/libstdc++ or CUDA (found with ldd + dpkg -S, fetched
#                              with apt-get download: the .debs, compressed, are far smaller
#                              than the libraries, e.g. OpenBLAS 36 MB -> ~6 MB)
#   BUNDLE/src                 the scripts (bench/gpu/torch_dense_gpu.py and its model
#                              bench/common/torch_dlrm.py, this folder)
# The CUDA libraries (cudart, cuBLAS, cuBLASLt, NCCL: ~800 MB) are NOT carried: the GPU
# machine has them (CUDA toolkit, or the nvidia-* wheels beside PyTorch); run-gpu-tests.sh
# finds them there.
#
# Usage: tests/gpu/pack-gpu-bundle.sh [BUILD_DIR [BUNDLE_DIR]]
#   defaults: BUILD_DIR=build, BUNDLE_DIR=build-gpu-bundle (git-ignored by /build*/)
# Then on the GPU machine: tests/gpu/run-gpu-tests.sh --bundle BUNDLE_DIR
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
bundle=${2:-$src/build-gpu-bundle}
[ -d "$build" ] || { echo "pack-gpu-bundle: no build dir $build" >&2; exit 2; }
[ -x "$build/tests/test_cuda_ops" ] || {
  echo "pack-gpu-bundle: $build has no tests/test_cuda_ops (configure with CUDA on, build the" \
       "targets test_cuda_ops test_cuda_dlrm test_nccl ps-gpu-bench ps-dense-bench)" >&2; exit 2; }
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/tests" "$bundle/debs" "$bundle/src"
bins=()
for t in test_cuda_ops test_cuda_dlrm test_nccl; do
  [ -x "$build/tests/$t" ] && cp "$build/tests/$t" "$bundle/tests/" && bins+=("$bundle/tests/$t")
done
for b in ps-gpu-bench ps-dense-bench ps-datagen ps-server ps-worker; do
  [ -x "$build/bin/$b" ] && cp "$build/bin/$b" "$bundle/bin/" && bins+=("$bundle/bin/$b")
done
cp "$src/bench/gpu/torch_dense_gpu.py" "$src/bench/common/torch_dlrm.py" \
  "$src/tests/gpu/run-gpu-tests.sh" "$bundle/src/"

# Shared libraries -> owning packages, minus what every Linux and every CUDA machine has.
declare -A pkgs=()
for b in "${bins[@]}"; do
  while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) continue ;;
      libcuda*|libcublas*|libnccl*|libnvidia*) continue ;;
    esac
    real=$(readlink -f "$lib")
    owner=$(dpkg -S "$real" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true)
    if [ -z "$owner" ]; then
      echo "pack-gpu-bundle: $lib (needed by $(basename "$b")) belongs to no package; copying it" >&2
      mkdir -p "$bundle/lib" && cp -L "$lib" "$bundle/lib/"
      continue
    fi
    case "${owner%%:*}" in libc6|libgcc-s1|libstdc++6) continue ;; esac # never shadow the system's
    pkgs[${owner%%:*}]=1
  done < <(ldd "$b" | awk '/=> \//{print $3}')
done
echo "pack-gpu-bundle: runtime packages: ${!pkgs[*]}"
(cd "$bundle/debs" && apt-get download "${!pkgs[@]}")
printf '%s\n' "${!pkgs[@]}" | sort > "$bundle/debs/PACKAGES"
du -sh "$bundle"
echo "pack-gpu-bundle: done; on the GPU machine: src/run-gpu-tests.sh --bundle $(basename "$bundle")"
