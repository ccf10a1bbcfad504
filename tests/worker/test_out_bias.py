"""ps-worker --out-bias-init (issue 19): the output layer's bias at step 0.

DLRM's reference initialisation draws the output layer's single bias from N(0, 1); session 9
found that one draw worth about -0.004 test AUC per unit after training (bench/RESULTS-e2e.md).
--out-bias-init zero (the default since session 10) starts it at 0 and must leave every other
initial value as drawn.

How: ps-worker trains 2 steps with both learning rates 0 (so its checkpoint holds the initial
state) from the same --seed, with draw and with the default; ps-export gives the dense arrays.
With the default (zero), the last top layer's bias is 0 and every other array equals the draw's
bit for bit; with draw, that bias is not 0. A bad value is refused with exit 2 and one line naming the flag."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

BOT, TOP = "13-32-16", "32-8-1"


def initial_dense(d, tag, data, extra):
    ck, ex = os.path.join(d, "ck-" + tag), os.path.join(d, "ex-" + tag)
    rc, out = h.run([h.LOCAL, "--bin", h.BIN, "--servers", "1", "--workers", "1", "--",
                     "--train", data, "--batch", "64", "--max-steps", "2", "--threads", "1",
                     "--seed", "3", "--lr", "0", "--sparse-lr", "0", "--mlp-bot", BOT,
                     "--mlp-top", TOP, "--checkpoint-dir", ck, "--progress-every", "30"] + extra,
                    300)
    assert rc == 0, out[-3000:]
    rc, out = h.run([f"{h.BIN}/ps-export", "-c", ck, "-o", ex, "--log-level", "warn"], 120)
    assert rc == 0, out[-3000:]
    dd = os.path.join(ex, "dense")
    return {f: np.load(os.path.join(dd, f)) for f in os.listdir(dd)}, out


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    data = os.path.join(d, "train.tsv")
    rc, out = h.run([f"{h.BIN}/ps-datagen", "--rows", "256", "--seed", "2", "--out", data,
                     "--log-level", "warn"], 120)
    assert rc == 0, out
    draw, _ = initial_dense(d, "draw", data, ["--out-bias-init", "draw"])
    zero, _ = initial_dense(d, "zero", data, [])  # the default
    last = f"top.{len(TOP.split('-')) - 1}.bias.npy"
    r.check(f"the output bias is one value ({last})", last in draw and draw[last].shape == (1,),
            str(sorted(draw)))
    r.check("draw: the output bias is not 0", float(draw[last][0]) != 0.0, str(draw[last]))
    r.check("zero: the output bias is 0", float(zero[last][0]) == 0.0, str(zero[last]))
    layers = [f for f in draw if f not in (last, "params.npy")]
    same = [f for f in layers if np.array_equal(draw[f], zero[f])]
    r.check(f"zero: every other layer array as drawn ({len(same)} of {len(layers)})",
            sorted(draw) == sorted(zero) and len(same) == len(layers))
    diff = np.flatnonzero(draw["params.npy"] != zero["params.npy"])
    r.check("zero: the flat parameter vector differs in one place, the output bias",
            len(diff) == 1 and zero["params.npy"][diff[0]] == 0.0, str(diff[:5]))
    rc, out = h.run([f"{h.BIN}/ps-worker", "--servers", "tcp://127.0.0.1:1", "--train", data,
                     "--out-bias-init", "half"], 30)
    r.check("a bad value: exit 2, one line naming the flag",
            rc == 2 and "--out-bias-init: 'half'" in out, f"rc {rc}: {out.strip()[:200]}")
r.finish()
