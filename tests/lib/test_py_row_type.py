#!/usr/bin/python3
"""test_py_row_type: 16-bit row storage (issue 33, `Client.table(..., row_type="f16")`), bit for
bit against an independent FP32 reference rounded ONCE: numpy's float16 for f16, and a bfloat16
round-to-nearest-even written here on the f32 bits for bf16, through real ps-servers (two
shards, a hot tier of 1 MB so most rows go through RocksDB between steps).

For each row type and for SGD and Adagrad: the initial rows are the f32 table's (same seed)
rounded once; after every push (duplicate keys summed in f32 first) each row is the f32 update
of the widened stored row, rounded once — Adagrad's accumulator kept in f32 (a 16-bit
accumulator would give other rows). lr is a power of two, so numpy's f32 arithmetic is the
server's operation for operation and the check is exact, not a tolerance. A client pulling
with f16 on the wire gets an f16 table's rows exactly (not rounded again), a bf16 table's rows
rounded once from bf16. Redeclaring a table with another row type is refused, naming it. A
server restarted on its data dir serves the same bits."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import Results, Servers, use_build_package  # noqa: E402

use_build_package()
import ember  # noqa: E402
from test_py_wire_f16 import bits_equal, summed  # noqa: E402  (the same f32 sums and bit check)

F32 = np.float32
DIM, K, LR, STEPS = 9, 20000, 0.25, 4  # odd dim: padded rows, conversion tails


def bf16(a):
    """Round to nearest even to bfloat16, returned widened to f32 (exact)."""
    b = np.ascontiguousarray(a, dtype=F32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(F32)


def f16(a):
    return np.asarray(a, dtype=F32).astype(np.float16).astype(F32)


ROUND = {"f16": f16, "bf16": bf16}


def main():
    r = Results()
    rng = np.random.default_rng(33)
    universe = rng.integers(0, 2**63, size=K, dtype=np.uint64)
    index = {k: i for i, k in enumerate(universe.tolist())}
    with Servers(2, extra=("--cache-mb", "1")) as s:
        c = ember.Client(s.urls, timeout_ms=30000)
        c16 = ember.Client(s.urls, timeout_ms=30000, wire_f16=True)
        tabs = []
        for rt in ("f16", "bf16"):
            for opt in ("sgd", "adagrad"):
                kw = dict(dim=DIM, optimizer=opt, lr=LR, init=0.7, seed=5)
                if opt == "adagrad":
                    kw.update(eps=1e-3, initial_accumulator=0.1)
                ref = c.table(f"ref_{rt}_{opt}", **kw)  # f32 rows: the initial values
                t = c.table(f"rows_{rt}_{opt}", row_type=rt, **kw)
                w32 = ref.pull(universe)
                w = t.pull(universe)
                r.check(f"{rt} {opt}: initial rows = f32 rows rounded once", bits_equal(w, ROUND[rt](w32)),
                        f"{np.count_nonzero(w != ROUND[rt](w32))} differ")
                r.check(f"{rt} {opt}: ... and rounding happened", np.count_nonzero(w != w32) > w.size // 2)
                tabs.append((rt, opt, t, w.copy(), np.full((K, DIM), F32(0.1))))
        for step in range(STEPS):
            keys = universe[rng.integers(0, K, size=K)]
            grads = (rng.standard_normal((K, DIM)) * 0.3).astype(F32)
            for rt, opt, t, w, acc in tabs:
                t.push(keys, grads)
                for k, g in summed(keys, grads).items():
                    i = index[k]
                    if opt == "sgd":
                        w[i] = ROUND[rt]((w[i] + F32(-LR) * g).astype(F32))
                    else:  # store_apply_grad's Adagrad: f32 accumulator, one rounding of w
                        acc[i] = (acc[i] + g * g).astype(F32)
                        den = (np.sqrt(acc[i]) + F32(1e-3)).astype(F32)
                        w[i] = ROUND[rt]((w[i] + F32(-LR) * (g / den)).astype(F32))
            c.step()
            for rt, opt, t, w, _ in tabs:
                got = t.pull(universe)
                r.check(f"step {step} {rt} {opt}: rows = f32 update rounded once", bits_equal(got, w),
                        f"{np.count_nonzero(got != w)} of {w.size} differ")
        for rt, opt, t, w, _ in tabs:
            t16 = c16.table(t.name, dim=DIM, optimizer=opt, lr=LR, init=0.7, seed=5, row_type=rt,
                            **({"eps": 1e-3, "initial_accumulator": 0.1} if opt == "adagrad" else {}))
            got = t16.pull(universe)
            r.check(f"{rt} {opt}: an f16 wire pull is the rows {'as stored' if rt == 'f16' else 'rounded once to f16'}",
                    bits_equal(got, f16(w)), f"{np.count_nonzero(got != f16(w))} differ")
        try:
            c.table("rows_f16_sgd", dim=DIM, optimizer="sgd", lr=LR, init=0.7, seed=5, row_type="f32")
            r.check("redeclare with another row type refused", False, "accepted")
        except ember.EmberError as e:
            msg = str(e)
            r.check("redeclare with another row type refused, naming it",
                    "row_type f16 vs f32" in msg and "\n" not in msg, msg)
        c16.close()
        c.close()
    r.finish()


if __name__ == "__main__":
    main()
