#!/usr/bin/env bash
# Installs every Debian package Ember's build, tests and reference comparisons need.
# Idempotent: packages already present are skipped, and `apt-get update` runs only when
# something is missing and the package lists are absent or older than a day.
set -euo pipefail

PKGS=(
  # toolchain
  build-essential cmake pkg-config clang libclang-rt-14-dev
  # transport, storage, serialization, memory
  libzmq3-dev librocksdb-dev libprotobuf-c-dev protobuf-c-compiler libjemalloc-dev
  # compute: OpenBLAS OpenMP build (the fastest here, also for PyTorch's libblas.so.3)
  libopenblas-openmp-dev libopenblas0-openmp
  # compute: oneDNN, the bf16 GEMM (--precision bf16) on AMX / AVX512_BF16
  libdnnl-dev
  # collectives on CPU, JSON, hashing, compression, HTTP metrics
  libgloo-dev libjansson-dev libxxhash-dev zlib1g-dev libmicrohttpd-dev
  # tests and references
  libcmocka-dev python3 python3-numpy python3-torch python3-sklearn
  # docs/examples/predict_torch.py: the token of a categorical value that is not 8 hex digits
  python3-xxhash
  # tools used by tests and benchmarks
  procps psmisc gnuplot-nox
  # operations tests (tests/ops): a real Prometheus server and promtool, a real single-node
  # Slurm cluster, YAML parsing for the Kubernetes manifest check
  prometheus slurmctld slurmd slurm-client munge python3-yaml
)

# kubectl for the Kubernetes manifest checks (tests/ops/test_k8s.py): Debian's
# kubernetes-client (1.20, enough for --dry-run=client and kustomize) only where no kubectl is
# on PATH, since a newer one installed outside dpkg would be shadowed or clash over /usr/bin/kubectl.
command -v kubectl >/dev/null 2>&1 || PKGS+=(kubernetes-client)

if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
lists=/var/lib/apt/lists
if [ -z "$(find "$lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -n 1)" ]; then
  echo "install-deps: apt-get update"
  "${SUDO[@]}" apt-get update -q
fi
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
