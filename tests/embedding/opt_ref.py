#!/usr/bin/python3
"""opt_ref: ps_store's sparse optimizers against independent references, 100 steps, 1e-6 rel.

SGD, Adagrad and Adam: torch.optim on one dense float32 parameter per row, stepped only on the
steps where that row received a gradient (the sparse semantics: Adam's step count is per row).
Row-wise Adagrad and FTRL-Proximal: the published formulas in numpy (float64 intermediates,
float32 storage). Each step pushes a random subset of keys with duplicates; the reference
sums duplicate gradients in float32 in order of appearance, as the store must.
The store is driven by opt_driver (C) twice: with a roomy hot tier and with a tiny one that
sends most rows through RocksDB between steps; both must match.
Exit 77 (SKIPPED) only if torch is missing."""
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
except ImportError:
    print("SKIP: torch not installed")
    sys.exit(77)

torch.set_num_threads(1)
F32 = np.float32
SGD, ADAGRAD, ROWWISE, ADAM, FTRL = 0, 1, 2, 3, 4
UNIFORM, NORMAL = 0, 1
STEPS, K, DIM = 100, 48, 7
RTOL, ATOL = 1e-6, 1e-7


def f32(x):
    return float(F32(x))


def make_steps(rng):
    steps = []
    for _ in range(STEPS):
        n = int(rng.integers(K // 2, K + K // 4))
        idx = rng.integers(0, K, size=n).astype(np.uint32)  # duplicates on purpose
        g = (rng.standard_normal((n, DIM)) * 0.5).astype(F32)
        steps.append((idx, g))
    return steps


def summed(idx, g):
    """Per unique key (first-appearance order) the float32 sum of its gradients."""
    acc = {}
    for i, k in enumerate(idx.tolist()):
        if k in acc:
            acc[k] = (acc[k] + g[i]).astype(F32)
        else:
            acc[k] = g[i].copy()
    return acc


def ref_torch(cfg, init, steps):
    params, opts = [], []
    for r in range(K):
        p = torch.nn.Parameter(torch.tensor(init[r].copy()))
        if cfg["opt"] == SGD:
            o = torch.optim.SGD([p], lr=f32(cfg["lr"]))
        elif cfg["opt"] == ADAGRAD:
            o = torch.optim.Adagrad([p], lr=f32(cfg["lr"]), eps=f32(cfg["eps"]),
                                    initial_accumulator_value=f32(cfg["acc0"]))
        else:
            o = torch.optim.Adam([p], lr=f32(cfg["lr"]), betas=(f32(cfg["b1"]), f32(cfg["b2"])),
                                 eps=f32(cfg["eps"]))
        params.append(p)
        opts.append(o)
    for idx, g in steps:
        for k, gs in summed(idx, g).items():
            params[k].grad = torch.tensor(gs)
            opts[k].step()
    return np.stack([p.detach().numpy() for p in params]).astype(F32)


def ref_rowwise(cfg, init, steps):
    """Row-wise Adagrad (FBGEMM/TorchRec): acc += mean(g^2); w -= lr * g / (sqrt(acc) + eps)."""
    w = init.copy()
    acc = np.full(K, F32(cfg["acc0"]), dtype=F32)
    lr, eps = np.float64(f32(cfg["lr"])), np.float64(f32(cfg["eps"]))
    for idx, g in steps:
        for k, gs in summed(idx, g).items():
            g64 = gs.astype(np.float64)
            acc[k] = F32(np.float64(acc[k]) + np.sum(g64 * g64) / DIM)
            den = np.sqrt(np.float64(acc[k])) + eps
            w[k] = (w[k].astype(np.float64) - lr * g64 / den).astype(F32)
    return w


def ref_ftrl(cfg, init, steps):
    """FTRL-Proximal, McMahan et al. 2013 (Algorithm 1), per coordinate, alpha = lr,
    beta = eps, n^(-lr_power) in place of sqrt(n) (lr_power = -0.5: sqrt)."""
    w = init.copy()
    z = np.zeros((K, DIM), dtype=F32)
    n = np.full((K, DIM), F32(cfg["acc0"]), dtype=F32)
    alpha, beta = np.float64(f32(cfg["lr"])), np.float64(f32(cfg["eps"]))
    l1, l2 = np.float64(f32(cfg["l1"])), np.float64(f32(cfg["l2"]))
    p = -np.float64(f32(cfg["lr_power"]))
    for idx, g in steps:
        for k, gs in summed(idx, g).items():
            g64 = gs.astype(np.float64)
            n_old = n[k].astype(np.float64)
            n_new = n_old + g64 * g64
            sigma = (n_new ** p - n_old ** p) / alpha
            zk = z[k].astype(np.float64) + g64 - sigma * w[k].astype(np.float64)
            z[k] = zk.astype(F32)
            n[k] = n_new.astype(F32)
            wk = -(zk - np.sign(zk) * l1) / ((beta + n_new ** p) / alpha + l2)
            w[k] = np.where(np.abs(zk) <= l1, 0.0, wk).astype(F32)
    return w


def write_input(path, cfg, keys, steps):
    with open(path, "wb") as f:
        f.write(b"EMBO")
        f.write(struct.pack("<II8fI2fQII", cfg["opt"], DIM, cfg["lr"], cfg.get("b1", 0.0),
                            cfg.get("b2", 0.0), cfg.get("eps", 0.0), cfg.get("l1", 0.0),
                            cfg.get("l2", 0.0), cfg.get("lr_power", 0.0), cfg.get("acc0", 0.0),
                            cfg["init"], cfg["init_a"], cfg["init_b"], cfg["seed"], K, STEPS))
        f.write(keys.astype("<u8").tobytes())
        for idx, g in steps:
            f.write(struct.pack("<I", len(idx)))
            f.write(idx.astype("<u4").tobytes())
            f.write(g.astype("<f4").tobytes())


def main():
    tests_dir = os.environ.get("EMBER_TESTS")
    if not tests_dir:
        here = os.path.dirname(os.path.abspath(__file__))
        tests_dir = os.path.join(here, "..", "..", "build", "tests")
    driver = os.path.join(tests_dir, "opt_driver")
    cfgs = [
        dict(name="sgd", opt=SGD, lr=0.1),
        dict(name="adagrad", opt=ADAGRAD, lr=0.05, eps=1e-10, acc0=0.1),
        dict(name="adam", opt=ADAM, lr=0.01, b1=0.9, b2=0.999, eps=1e-8),
        dict(name="rowwise_adagrad", opt=ROWWISE, lr=0.05, eps=1e-8, acc0=0.01),
        dict(name="ftrl", opt=FTRL, lr=0.1, eps=1.0, l1=0.002, l2=0.01, lr_power=-0.5, acc0=0.1),
    ]
    rng = np.random.default_rng(7)
    keys = rng.integers(1, 2**63, size=K, dtype=np.uint64)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="ember-optref-") as tmp:
        for ci, cfg in enumerate(cfgs):
            cfg.update(init=NORMAL if ci % 2 else UNIFORM, init_a=0.1 if ci % 2 else -0.1,
                       init_b=0.1, seed=1000 + ci)
            steps = make_steps(rng)
            inp = os.path.join(tmp, cfg["name"] + ".in")
            write_input(inp, cfg, keys, steps)
            for cache_kb in (4096, 2):
                out = os.path.join(tmp, "%s.%d.out" % (cfg["name"], cache_kb))
                db = os.path.join(tmp, "%s.%d.db" % (cfg["name"], cache_kb))
                r = subprocess.run([driver, "--in", inp, "--out", out, "--dir", db,
                                    "--cache-kb", str(cache_kb)], capture_output=True, text=True,
                                   timeout=120)
                if r.returncode != 0:
                    print("FAIL %s: driver exit %d: %s" % (cfg["name"], r.returncode, r.stderr))
                    failed += 1
                    continue
                data = np.fromfile(out, dtype="<f4").reshape(2, K, DIM)
                init, got = data[0], data[1]
                if cfg["opt"] in (SGD, ADAGRAD, ADAM):
                    want = ref_torch(cfg, init, steps)
                elif cfg["opt"] == ROWWISE:
                    want = ref_rowwise(cfg, init, steps)
                else:
                    want = ref_ftrl(cfg, init, steps)
                err = np.abs(got.astype(np.float64) - want)
                rel = np.max(err / np.maximum(np.abs(want), 1e-30))
                ok = np.all(err <= RTOL * np.abs(want) + ATOL)
                moved = np.max(np.abs(want - init))
                print("%-16s cache %4d KB: max abs err %.3g, max rel err %.3g, max |w - w0| %.3g, "
                      "%s (%s)" % (cfg["name"], cache_kb, err.max(), rel, moved,
                                   "ok" if ok else "FAIL", r.stderr.strip().splitlines()[-1]))
                if not ok or moved < 1e-3:
                    failed += 1
    if failed:
        print("%d comparisons failed" % failed)
        return 1
    print("all optimizer references match (rtol %g, atol %g, %d steps)" % (RTOL, ATOL, STEPS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
