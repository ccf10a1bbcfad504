#!/usr/bin/python3
"""test_py_client: the Python package `ember` against real ps-servers (two shards).

Rows after pushes equal the optimizer formulas computed here in numpy float32 (SGD:
w -= lr * sum(g), fused as torch's add_; Adagrad as torch.optim.Adagrad: acc += g*g, w -= lr * g / (sqrt(acc) + eps)),
over many steps of random keys with duplicates (summed before the optimizer, once per key);
the pipelined pull_start/push_start give the same; a row never pushed is the same on every
pull. Errors raise ember.EmberError with Ember's message (a bad URL, an unknown option, a
conflicting declare, a server that does not answer), bad shapes raise ValueError; another
Python thread runs while a call waits on the network (the GIL is released)."""
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import Results, Servers, free_port, use_build_package  # noqa: E402

use_build_package()
import ember  # noqa: E402

F32 = np.float32
DIM, K, STEPS = 5, 40, 25


def summed(keys, grads):
    """{key: float32 sum of its gradients}, in order of appearance."""
    acc = {}
    for k, g in zip(keys.tolist(), grads):
        acc[k] = (acc[k] + g).astype(F32) if k in acc else g.astype(F32).copy()
    return acc


def run_optimizer(r, c, name, opt, update, pipelined=False, **kw):
    rng = np.random.default_rng(7)
    t = c.table(name, dim=DIM, optimizer=opt, **kw)
    universe = rng.integers(0, 2**63, size=K, dtype=np.uint64)
    w = {k: row for k, row in zip(universe.tolist(), t.pull(universe))}
    state = {}
    worst = 0.0
    for _ in range(STEPS):
        keys = universe[rng.integers(0, K, size=int(rng.integers(K // 2, 2 * K)))]
        grads = (rng.standard_normal((keys.shape[0], DIM)) * 0.5).astype(F32)
        if pipelined:
            t.push_start(keys, grads).wait()
        else:
            t.push(keys, grads)
        c.step()
        for k, g in summed(keys, grads).items():
            w[k], state[k] = update(w[k], g, state.get(k))
        got = t.pull_start(universe).wait() if pipelined else t.pull(universe)
        want = np.stack([w[k] for k in universe.tolist()])
        worst = max(worst, float(np.max(np.abs(got - want) / (np.abs(want) + 1e-3))))
    r.check(f"{name}: rows after {STEPS} steps equal the {opt} formula", worst < 1e-5,
            f"worst relative error {worst:.2e}")


def main():
    r = Results()
    with Servers(2) as s:
        c = ember.Client(s.urls, timeout_ms=20000)
        lr = 0.3

        def sgd(w, g, _):  # torch's add_(g, alpha=-lr): one fused multiply-add (one rounding)
            return (w.astype(np.float64) + float(F32(-lr)) * g.astype(np.float64)).astype(F32), None

        eps, acc0 = F32(1e-10), F32(0.1)

        def adagrad(w, g, acc):
            acc = (np.full(DIM, acc0, F32) if acc is None else acc) + g * g
            return (w + F32(-lr) * (g / (np.sqrt(acc) + eps))).astype(F32), acc.astype(F32)

        run_optimizer(r, c, "sgd_rows", "sgd", sgd, lr=lr, init=0.1)
        run_optimizer(r, c, "adagrad_rows", "adagrad", adagrad, lr=lr, init=0.1, eps=1e-10,
                      initial_accumulator=0.1)
        run_optimizer(r, c, "sgd_pipelined", "sgd", sgd, pipelined=True, lr=lr, init=0.1)

        t = c.table("fresh", dim=3, init=0.5, seed=3)
        k = np.array([11, 12, 11], np.uint64)
        a, b = t.pull(k), t.pull(k[::-1].copy())
        r.check("a row never pushed is its deterministic init",
                np.array_equal(a, b[::-1]) and np.array_equal(a[0], a[2]) and
                np.all(np.abs(a) <= 0.5) and not np.array_equal(a[0], a[1]))
        r.check("pull of uint64 keys -> float32 [n, dim]", a.dtype == np.float32 and a.shape == (3, 3))
        r.check("the step counter advanced once per step()", c.current_step == 3 * STEPS,
                str(c.current_step))
        r.check("id 0 is refused", raises(lambda: c.table("x", dim=2, id=0), ember.EmberError, "id"))
        r.check("a conflicting declare raises with the server's reason",
                raises(lambda: c.table("fresh", dim=4, init=0.5, seed=3), ember.EmberError,
                       "different spec", code=6))
        r.check("an unknown table option raises, naming it",
                raises(lambda: c.table("y", dim=2, bogus=1), ember.EmberError, "bogus"))
        r.check("a bad optimizer raises, naming the known ones",
                raises(lambda: c.table("y", dim=2, optimizer="sgdd"), ember.EmberError, "adagrad"))
        r.check("grads of the wrong shape raise ValueError",
                raises(lambda: t.push(k, np.zeros((3, 2), F32)), ValueError, "(3, 3)"))
        r.check("2-d keys raise ValueError", raises(lambda: t.pull(np.zeros((2, 2))), ValueError))
        c.close()
        r.check("a closed client raises", raises(lambda: t.pull(k), ember.EmberError, "closed"))

    r.check("a bad URL raises, naming it",
            raises(lambda: ember.Client(["tcp://127.0.0.1:0"]), ember.EmberError, "tcp://127.0.0.1:0"))
    r.check("an unknown client option raises",
            raises(lambda: ember.Client(["tcp://127.0.0.1:1"], curve_secret="short"),
                   ember.EmberError, "40 characters"))
    # Nobody listens: the declare fails on its bound, naming the server.
    # Meanwhile another Python thread counts: it runs only if the wait released the GIL.
    url = f"tcp://127.0.0.1:{free_port()}"
    c = ember.Client([url], timeout_ms=1000)
    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.01)
    th = threading.Thread(target=count)
    th.start()
    time.sleep(0.05)
    before = ticks[0]
    t0 = time.monotonic()
    r.check("a server that does not answer: EmberError naming it",
            raises(lambda: c.table("z", dim=2), ember.EmberError, url, code=12))
    during = ticks[0] - before
    stop.set()
    th.join(timeout=10)
    r.check("... within its bound", time.monotonic() - t0 < 30)
    r.check("another thread ran during the wait (the GIL was released)", during >= 20,
            f"{during} ticks of 10 ms in a 1 s wait")
    c.close()
    r.finish()


def raises(fn, exc, text="", code=None):
    try:
        fn()
    except exc as e:
        ok = text in str(e) and (code is None or getattr(e, "code", None) == code)
        if not ok:
            print(f"     raised {type(e).__name__}({getattr(e, 'code', '')}): {e}")
        return ok
    return False


if __name__ == "__main__":
    main()
