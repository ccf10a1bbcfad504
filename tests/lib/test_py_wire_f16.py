#!/usr/bin/python3
"""test_py_wire_f16: f16 rows on the wire (issue 22), bit for bit against numpy's float16 (an
implementation independent of Ember's), through real ps-servers (two shards).

A client with wire_f16 and a plain f32 client share one SGD table. Pulls: the f16 client gets
exactly numpy's float16 rounding (nearest even) of the f32 rows the f32 client pulls, and most
rows differ from them (the rounding happened, the store's rows are not halves). Pushes: after
the f16 client pushes gradients g (duplicate keys included: summed per key in f32, in order of
appearance, then rounded once), every row is exactly w - lr * float16(sum g) as the f32 client
reads it. lr = 0.25, a power of two, so lr * half(g) is exact in f32 and the server's fused
update rounds once, like numpy's f32 add: the check can be exact, not a tolerance. Gradients
span normal halves, half subnormals (|g| < 2^-14) and values between halves. A push of the same
gradients as f32 moves the rows by a different amount (what the test would see without the
half rounding)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import Results, Servers, use_build_package  # noqa: E402

use_build_package()
import ember  # noqa: E402

F32, F16 = np.float32, np.float16
DIM, K, LR = 7, 300, 0.25  # odd dim: the vector conversion's tail is used on every row


def half(a):
    return a.astype(F32).astype(F16).astype(F32)


def bits_equal(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def summed(keys, grads):
    """{key: f32 sum of its gradients}, in order of first appearance (the client's order)."""
    acc = {}
    for k, g in zip(keys.tolist(), grads):
        acc[k] = (acc[k] + g).astype(F32) if k in acc else g.astype(F32).copy()
    return acc


def main():
    r = Results()
    rng = np.random.default_rng(22)
    with Servers(2) as s:
        c32 = ember.Client(s.urls, timeout_ms=20000)
        c16 = ember.Client(s.urls, timeout_ms=20000, wire_f16=True)
        t32 = c32.table("half_wire", dim=DIM, optimizer="sgd", lr=LR, init=0.7, seed=5)
        t16 = c16.table("half_wire", dim=DIM, optimizer="sgd", lr=LR, init=0.7, seed=5)
        universe = rng.integers(0, 2**63, size=K, dtype=np.uint64)

        w = t32.pull(universe)
        got = t16.pull(universe)
        r.check("f16 pull = numpy float16 of the f32 rows, bit for bit", bits_equal(got, half(w)),
                f"{np.count_nonzero(got != half(w))} values differ")
        r.check("... and the rounding happened", np.count_nonzero(got != w) > w.size // 2,
                f"{np.count_nonzero(got != w)} of {w.size} values changed")

        for step in range(4):
            keys = universe[rng.integers(0, K, size=2 * K)]  # duplicates
            scale = rng.choice(np.array([1.0, 1e-3, 3e-6], F32), size=(keys.shape[0], 1))
            grads = (rng.standard_normal((keys.shape[0], DIM)).astype(F32) * scale).astype(F32)
            before = t32.pull(universe)
            t16.push(keys, grads)
            c16.step()
            after = t32.pull(universe)
            want = before.copy()
            index = {k: i for i, k in enumerate(universe.tolist())}
            for k, g in summed(keys, grads).items():
                want[index[k]] = (before[index[k]] + F32(-LR) * half(g)).astype(F32)
            r.check(f"step {step}: rows = w - lr * float16(sum g), bit for bit",
                    bits_equal(after, want), f"{np.count_nonzero(after != want)} values differ")
            f32_want = before.copy()
            for k, g in summed(keys, grads).items():
                f32_want[index[k]] = (before[index[k]] + F32(-LR) * g).astype(F32)
            r.check(f"step {step}: ... which is not the f32 update",
                    np.count_nonzero(want != f32_want) > want.size // 4)
            sub = np.abs(half(grads)) < 2.0**-14
            r.check(f"step {step}: half subnormal gradients were in the push",
                    np.count_nonzero(sub & (grads != 0)) > 0)

        got = t16.pull(universe)
        r.check("f16 pull after pushes = numpy float16 of the f32 rows",
                bits_equal(got, half(t32.pull(universe))))
        c16.close()
        c32.close()
    r.finish()


if __name__ == "__main__":
    main()
