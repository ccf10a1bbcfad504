#!/usr/bin/python3
"""out_bias_fit: how much of an init_pairs.sh comparison the output layer's bias explains (issue 19,
session mhinit; RESULTS-e2e.md "ps-worker's initial draws vs torch's").

Both inits draw the last layer's single bias from N(0, 1) (the DLRM reference's sqrt(1/out)).
This recomputes that draw for each seed without running anything: ps-worker's from
worker/model/ps_dlrm.c's init_params (splitmix64 from seed ^ 0xD1B54A32D192ED03, Box-Muller with
cos, layer by layer W then b; checked equal to a ps-export of seed 1), torch's by building
torch_dlrm.py's DLRM after torch.manual_seed(seed) (its value depends on the number of rows,
i.e. the vocabulary, drawn first). Then, per set and part, it regresses the pairs' differences
A - torch-buf on (A's output bias - torch-buf's): the slope (AUC per unit of bias) and the
intercept (the difference expected at equal biases). Also prints both biases over --bias-seeds.

    out_bias_fit.py OUTDIR SET:ROWS:NSEEDS [SET:ROWS:NSEEDS ...] [--bias-seeds N]
    e.g. out_bias_fit.py /tmp/mhinit m4:465256:22 m8:679464:12 --bias-seeds 30
ROWS: the open vocabulary's size over train + test (len(vocab) of torch_dlrm.py's parser)."""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_dlrm as T  # noqa: E402

G = np.uint64(0x9E3779B97F4A7C15)
SHAPES = [(13, 512), (512, 256), (256, 64), (64, 16), (367, 512), (512, 256), (256, 1)]


def mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def ps_out_bias(seed):
    """ps_dlrm.c's last bias of the default dot model: the draw after every earlier W and b."""
    k = sum(2 * (i * o + o) for i, o in SHAPES)  # splitmix calls of the whole init (2 per normal)
    s0 = np.uint64(seed ^ 0xD1B54A32D192ED03)
    with np.errstate(over="ignore"):
        z = mix(s0 + np.array([k - 1, k], dtype=np.uint64) * G)
    u = ((z >> np.uint64(11)).astype(np.float64) + 0.5) / 9007199254740992.0
    return float(np.float32(math.sqrt(1.0) * math.sqrt(-2 * math.log(u[0])) * math.cos(6.283185307179586 * u[1])))


def torch_out_bias(seed, rows):
    torch.manual_seed(seed)
    m = T.DLRM(rows, 16, [13, 512, 256, 64, 16], [512, 256, 1], 0.01, 26, "sum")
    return float([x for x in m.top if isinstance(x, torch.nn.Linear)][-1].bias[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("sets", nargs="+")
    ap.add_argument("--bias-seeds", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)

    def auc(d, r, s):
        p = os.path.join(a.out, f"{d}-{r}-s{s}.json")
        return json.load(open(p))["auc"] if os.path.exists(p) else None

    xs, ys = [], []
    for spec in a.sets:
        d, rows, n = spec.split(":")
        rows, n = int(rows), int(n)
        P = {s: ps_out_bias(s) for s in range(1, max(n, a.bias_seeds) + 1)}
        B = {s: torch_out_bias(s, rows) for s in range(1, max(n, a.bias_seeds) + 1)}
        if a.bias_seeds:
            g = [P[s] - B[s] for s in range(1, a.bias_seeds + 1)]
            print(f"{d} seeds 1-{a.bias_seeds}: output bias ps-worker mean {np.mean([P[s] for s in range(1, a.bias_seeds + 1)]):+.3f}, "
                  f"torch {np.mean([B[s] for s in range(1, a.bias_seeds + 1)]):+.3f}; difference {np.mean(g):+.3f} ± "
                  f"{np.std(g, ddof=1) / len(g) ** 0.5:.3f}, ps-worker's higher in {sum(x > 0 for x in g)} of {len(g)}")
        for part in ("all", "dense"):
            g, x = [], []
            for s in range(1, n + 1):
                va, vb = auc(d, "rp-" + part, s), auc(d, "torch-buf", s)
                if va is not None and vb is not None:
                    g.append(va - vb)
                    x.append(P[s] - B[s])
            if len(g) < 3:
                continue
            r = stats.linregress(x, g)
            pi = 2 * stats.t.sf(abs(r.intercept / r.intercept_stderr), len(g) - 2)
            print(f"{d} {part}: {len(g)} pairs, A - B {np.mean(g):+.4f} ± {np.std(g, ddof=1) / len(g) ** 0.5:.4f}; "
                  f"slope {r.slope:+.4f} AUC per unit of output bias (p {r.pvalue:.2g}, r {r.rvalue:.2f}); "
                  f"at equal biases {r.intercept:+.4f} ± {r.intercept_stderr:.4f} (p {pi:.3f}); mean bias difference {np.mean(x):+.3f}")
            xs += x
            ys += g
    if len(xs) > 2:
        r = stats.linregress(xs, ys)
        print(f"pooled: slope {r.slope:+.4f} ± {r.stderr:.4f} per unit, r {r.rvalue:.2f}")


if __name__ == "__main__":
    main()
