#!/usr/bin/env bash
# Builds dmlc/ps-lite and bench/net/pslite/pslite_bench.cc outside the repository.
#   bench/net/pslite/build.sh PSLITE_SRC [OUT_DIR]
# PSLITE_SRC: a checkout of https://github.com/dmlc/ps-lite (measured at 15b8adf) or its git
# dir (a bare mirror is exported first). Needs g++, libzmq3-dev, libprotobuf-dev and
# protobuf-compiler (ps-lite's meta.proto); OUT_DIR (default /tmp/pslite) gets pslite-bench.
set -euo pipefail
src="${1:?usage: build.sh PSLITE_SRC [OUT_DIR]}"
out="${2:-/tmp/pslite}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for t in g++ protoc; do command -v "$t" >/dev/null || { echo "build.sh: $t missing (apt-get install g++ protobuf-compiler libprotobuf-dev)" >&2; exit 1; }; done
mkdir -p "$out"
if [ -d "$src/include/ps" ]; then cp -r "$src/include" "$src/src" "$out/"
else git --git-dir="$src" archive HEAD include src | tar -x -C "$out"; fi
cd "$out"
protoc --cpp_out=src --proto_path=src src/meta.proto
objs=()
for f in src/*.cc src/meta.pb.cc "$here/pslite_bench.cc"; do
  o="$(basename "$f" .cc).o"
  [ -f "$o" ] && [ "$o" -nt "$f" ] || g++ -std=c++14 -O3 -march=native -DNDEBUG -Iinclude -Isrc -c "$f" -o "$o" -w
  objs+=("$o")
done
g++ -O3 -o pslite-bench $(printf '%s\n' "${objs[@]}" | sort -u) -lzmq -lprotobuf -lpthread
echo "built $out/pslite-bench"
