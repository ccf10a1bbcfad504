#!/usr/bin/env bash
# Interleaved Ember vs ps-lite comparison: for each configuration, ROUNDS rounds of
# (ps-net-bench, then ps-lite) back to back, so both see the same machine; prints the medians
# as a markdown table (and the raw lines on stderr).
#   bench/net/pslite/compare.sh EMBER_BUILD_BIN PSLITE_BIN [ROUNDS]
# CONFIGS (env) is a list of "op:dim:servers:inflight", default the Targets' rows.
set -euo pipefail
bin="$1" pl="$2" rounds="${3:-3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
secs="${PB_SECS:-2}"
configs="${CONFIGS:-pull:16:1:1 pull:16:1:8 push:16:1:1 push:16:1:8 pull:64:2:8 push:64:2:8}"
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| op | dim | servers | in flight | Ember Mkeys/s | ps-lite Mkeys/s | Ember / ps-lite | Ember p50 / p99 us | ps-lite p50 / p99 us |"
echo "|---|---|---|---|---|---|---|---|---|"
for c in $configs; do
  IFS=: read -r op dim n q <<<"$c"
  e=() p=()
  for _ in $(seq "$rounds"); do
    e+=("$("$bin/ps-net-bench" --ops "$op" --dims "$dim" --servers "$n" --inflight "$q" \
          --duration "$secs" --no-raw 2>/dev/null | awk '$1=="ember"')")
    p+=("$(PB_SECS="$secs" bash "$here/run.sh" "$pl" "$n" "$op" "$dim" "$q" 2>/dev/null | awk '$1=="pslite"')")
    echo "${e[-1]}" >&2; echo "${p[-1]}" >&2
  done
  col() { printf '%s\n' "$@" | awk -v c="$COL" '{print $c}' | median; }
  em=$(COL=6 col "${e[@]}") pm=$(COL=6 col "${p[@]}")
  e50=$(COL=8 col "${e[@]}") e99=$(COL=9 col "${e[@]}") p50=$(COL=8 col "${p[@]}") p99=$(COL=9 col "${p[@]}")
  ratio=$(awk -v a="$em" -v b="$pm" 'BEGIN {printf "%.2fx", (b > 0 ? a / b : 0)}')
  echo "| $op | $dim | $n | $q | $em | $pm | $ratio | ${e50%.*} / ${e99%.*} | ${p50%.*} / ${p99%.*} |"
done
