#!/usr/bin/env bash
# bench/net/wire_f16.sh: ps-net-bench with f16 rows on the wire against f32 (issue 22), the two
# interleaved round after round (which goes first alternates), so each round's f16 / f32 ratio
# comes from one minute of this shared machine; prints per-round ratios and their median.
#
#   bench/net/wire_f16.sh [OUTDIR [ROUNDS]]     (defaults /tmp/ember-wire-net, 5)
#
# Environment: BIN (default <src>/build/bin), ARGS (ps-net-bench flags, default
# "--ops pull,push --dims 16,64 --servers 1 --inflight 1,8 --duration 2 --no-raw").
# Results are cached in OUTDIR as net-<f32|f16>-r<round>.json: delete a file to run it again.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # src BIN CRITEO PY
out="${1:-/tmp/ember-wire-net}"
rounds="${2:-5}"
ARGS="${ARGS:---ops pull,push --dims 16,64 --servers 1 --inflight 1,8 --duration 2 --no-raw}"
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="f32 f16"; else order="f16 f32"; fi
  for w in $order; do
    res="$out/net-$w-r$r.json"
    [ -s "$res" ] && continue
    f=""; [ "$w" = f16 ] && f=--f16
    echo "round $r $w $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    # shellcheck disable=SC2086
    "$BIN/ps-net-bench" $ARGS $f --json "$res" > "$out/net-$w-r$r.log" 2>&1 ||
      { echo "wire_f16.sh: round $r $w failed, see $out/net-$w-r$r.log" >&2; exit 1; }
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics as st, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def load(w, r):
    return {(x["op"], x["dim"], x["servers"], x["inflight"]): x
            for x in json.load(open(f"{d}/net-{w}-r{r}.json")) if x["impl"] == "ember"}
R = [(load("f32", r), load("f16", r)) for r in range(1, rounds + 1)]
print("| op | dim | servers | in flight | f32 Mkeys/s (median) | f16 Mkeys/s (median) | "
      "f16 / f32 per round | median ratio | p50 us f32 / f16 (medians) |")
print("|---|---|---|---|---|---|---|---|---|")
for k in R[0][0]:
    a = [x[k]["keys_per_s"] / 1e6 for x, _ in R]
    b = [y[k]["keys_per_s"] / 1e6 for _, y in R]
    ratios = [q / p for p, q in zip(a, b)]
    pa, pb = (st.median(x[k]["p50_us"] for x, _ in R), st.median(y[k]["p50_us"] for _, y in R))
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {st.median(a):.2f} | {st.median(b):.2f} | "
          + ", ".join(f"{r:.2f}" for r in ratios) + f" | **{st.median(ratios):.2f}x** | "
          f"{pa:.0f} / {pb:.0f} |")
PY
