#!/usr/bin/env bash
# bench/e2e/init_pairs.sh: are ps-worker's initial draws worse than PyTorch's? (issue 19,
# session mhinit). Everything is trained by PyTorch (torch_dlrm.py's model and optimizers),
# in ps-worker's own --shuffle-buffer order for the seed, so only the initial weights differ:
#   torch-buf  torch_dlrm.py's own init (generalise.sh RUNS torch-buf: torch.manual_seed(S))
#   rp-all     replay_run.py: ps-worker's initial state of --seed S (embedding rows and dense)
#   rp-emb     replay_run.py --init-parts emb: ps-worker's rows, torch's dense init
#   rp-dense   replay_run.py --init-parts dense: ps-worker's dense init, torch's rows
#   (PARTS adds others: rp-bot, rp-top, rp-none = torch-buf again, a check of the tool)
# RP_EXTRA adds flags to every replay_run.py run, RP_TAG names them (<set>-rp<tag>-<part>-s<S>):
# with RP_EXTRA="--out-bias 0" RP_TAG=-ob0 PARTS="none all", the runs pair rp-ob0-all with
# rp-ob0-none (torch's init with the output bias set to 0) instead of torch-buf.
# ps-worker's initial state of seed S: a run with both learning rates 0 over train + test with
# --hash-buckets 4294967296 (key = f * 2^32 + value, computable in Python), checkpointed and
# exported by ps-export (as RESULTS-e2e.md's mhgap section (c)). Prints, per set, each rp-* run
# paired with torch-buf by seed: mean difference ± its standard error, paired t, Wilcoxon.
#
#   bench/e2e/init_pairs.sh [OUTDIR]            (default /tmp/ember-init-pairs)
#
# Environment: BIN (default <src>/build/bin), SETS (default m4; any set of generalise.sh),
# SEEDS (default 1..15), PARTS (default "all emb dense"), RP_EXTRA, RP_TAG (above). Results are cached in OUTDIR by name
# (<set>-<run>-s<seed>.json), seed by seed, so an interrupted run leaves whole pairs; each
# seed's checkpoint is removed once exported, the export (~30 MB) once its runs are done.
# One compute thread everywhere.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/../common/env.sh"  # src BIN CRITEO PY
out="${1:-/tmp/ember-init-pairs}"
: "${SETS:=m4}" "${SEEDS:=$(seq -s ' ' 1 15)}" "${PARTS:=all emb dense}" "${RP_EXTRA:=}" "${RP_TAG:=}"
# the BLAS kernels generalise.sh gives torch-buf: with other kernels (OpenBLAS's default core
# type) `--init-parts none` is not torch-buf's run (m4 seed 1: 0.82610 against 0.82542)
core=""
if grep -q avx512bw /proc/cpuinfo; then core=SkylakeX; fi
mkdir -p "$out"
SETS="$SETS" BIN="$BIN" "$src/bench/e2e/generalise.sh" --prepare-only "$out"
default_of() { "$BIN/ps-worker" --help | sed -n "s/^ *--$1 [^ ]* .*(default: \([^)]*\)).*/\1/p"; }
flags="--batch $(default_of batch) --lr $(default_of lr) --sparse-lr $(default_of sparse-lr)"
flags="$flags --mlp-bot $(default_of mlp-bot) --mlp-top $(default_of mlp-top)"
flags="$flags --shuffle-buffer $(default_of shuffle-buffer)"
[ "$(default_of emb-init)" = 0.01 ] || { echo "init_pairs: replay_run.py assumes --emb-init 0.01" >&2; exit 2; }

export_init() { # set seed -> $out/<set>-ex-s<seed>
  local d="$1" sd="$2" ex="$out/$1-ex-s$2" ck="$out/$1-ck-s$2"
  [ -d "$ex/dense" ] && return 0
  [ -s "$out/$d+test.tsv" ] || cat "$out/$d.tsv" "$out/${d}_test.tsv" > "$out/$d+test.tsv"
  rm -rf "$ck" "$ex"
  "$src/deploy/ember-local" --servers 1 --workers 1 --bin "$BIN" -- --train "$out/$d+test.tsv" \
    --schema "$out/$d.schema.json" --hash-buckets 4294967296 --seed "$sd" --lr 0 --sparse-lr 0 \
    --shuffle-buffer 0 --threads 1 --progress-every 600 --checkpoint-dir "$ck" \
    > "$out/$d-ex-s$sd.log" 2>&1 || { echo "init_pairs: $d seed $sd export run failed, see $out/$d-ex-s$sd.log" >&2; return 1; }
  "$BIN/ps-export" -c "$ck" -o "$ex" --log-level warn >> "$out/$d-ex-s$sd.log" 2>&1
  rm -rf "$ck"
}

for sd in $SEEDS; do
  for d in $SETS; do
    # B: the yardstick in ps-worker's order, torch's own init (generalise.sh's definition)
    [ -n "$RP_TAG" ] || SETS="$d" RUNS=torch-buf SEEDS="$sd" BIN="$BIN" "$src/bench/e2e/generalise.sh" "$out" \
      > "$out/$d-torch-buf-s$sd.table" 2>&1
    for p in $PARTS; do
      res="$out/$d-rp$RP_TAG-$p-s$sd.json"
      [ -s "$res" ] && continue
      [ "$p" = none ] || export_init "$d" "$sd"
      OMP_NUM_THREADS=1 OPENBLAS_CORETYPE="$core" $PY "$src/bench/e2e/replay_run.py" --train "$out/$d.tsv" \
        --test "$out/${d}_test.tsv" --schema "$out/$d.schema.json" --init "$out/$d-ex-s$sd" \
        --init-parts "$p" --seed "$sd" $flags $RP_EXTRA --json "$res" > "${res%.json}.log" 2>&1
    done
    rm -rf "$out/$d-ex-s$sd"
  done
done

$PY - "$out" "$SETS" "$PARTS" "$SEEDS" "$RP_TAG" <<'PY'
import json, os, statistics as st, sys
from scipy import stats
out, sets, parts, seeds, tag = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
base = f"rp{tag}-none" if tag else "torch-buf"
parts = [p for p in parts if not (tag and p == "none")]
def auc(d, r, s):
    p = os.path.join(out, f"{d}-{r}-s{s}.json")
    return json.load(open(p))["auc"] if os.path.exists(p) else None
print(f"| data | A (replay_run.py{' ' + tag if tag else ''} --init-parts) | pairs | mean A | mean B = {base} "
      "| A - B ± standard error | paired t (p) | Wilcoxon p | A >= B | sd A / sd B (Pitman-Morgan p) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for d in sets:
    for p in parts:
        ab = [(auc(d, f"rp{tag}-" + p, s), auc(d, base, s)) for s in seeds]
        ab = [(a, b) for a, b in ab if a is not None and b is not None]
        if len(ab) < 2:
            continue
        a, b = [x for x, _ in ab], [y for _, y in ab]
        g = [x - y for x, y in ab]
        t = stats.ttest_rel(a, b)
        w = stats.wilcoxon(a, b).pvalue if any(g) else 1.0
        # Pitman-Morgan: sd A = sd B of paired samples <=> corr(A + B, A - B) = 0
        pm = stats.pearsonr([x + y for x, y in ab], g).pvalue if len(g) > 2 else float("nan")
        print(f"| {d} | {p} | {len(g)} | {st.mean(a):.4f} | {st.mean(b):.4f} | {st.mean(g):+.4f} ± "
              f"{st.stdev(g) / len(g) ** 0.5:.4f} | {t.statistic:+.2f} ({t.pvalue:.3f}) | {w:.3f} | "
              f"{sum(x >= 0 for x in g)} of {len(g)} | {st.stdev(a):.4f} / {st.stdev(b):.4f} ({pm:.3f}) |")
PY
