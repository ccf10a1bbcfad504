# bench/common/env.sh: what every benchmark script of bench/ starts from (sourced): src (the
# checkout), BIN (the binaries, default <src>/build/bin), CRITEO (the real Criteo sample, default
# /work/shared/data/criteo_real.tsv) and PY (the Python with numpy, torch and scikit-learn).
# Why a file: each script spelled these four the same way, and a changed default (a build folder,
# the data's place) must change once.
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$src/build/bin}"
CRITEO="${CRITEO:-/work/shared/data/criteo_real.tsv}"
PY=/usr/bin/python3
