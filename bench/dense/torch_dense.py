#!/usr/bin/python3
"""The same dense DLRM step as ps-dense-bench, in PyTorch: forward + backward + optimizer
samples/s for the Kaggle shape (13-512-256-64-16, top 512-256-1, 26 tables, dim 16).

Two variants per batch size:
  full        the same work as ps-dense-bench: 26 one-hot bags gathered from a buffer of
              unique rows (rows[idx], a leaf tensor, so backward scatters row gradients);
  dense_only  the 26 pooled vectors are leaf inputs (no gather) - the "dense-only" yardstick.
--bf16 runs forward (and so backward) under torch.autocast("cpu", dtype=torch.bfloat16), the
loss on the FP32 output: PyTorch's mixed precision, the yardstick of ps-dense-bench
--precision bf16. --mlp-bot / --mlp-top give other towers (widths as ps-dense-bench's).
Prints which BLAS library torch loaded (from /proc/self/maps) and the OpenBLAS core type.
Usage: torch_dense.py [--threads T] [--batch 128,2048,8192] [--seconds S] [--bf16]
                      [--mlp-bot 13-512-256-64-16] [--mlp-top 512-256-1] [--json FILE]"""
import argparse
import ctypes
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from torch_dlrm import DLRM, kaggle_mlps, write_results  # noqa: E402


def blas_loaded():
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            m = re.search(r"(/\S*(?:blas|openblas|mkl)\S*\.so\S*)", line)
            if m:
                libs.add(m.group(1))
    core = None
    for lib in sorted(libs):
        try:
            h = ctypes.CDLL(lib)
            fn = h.openblas_get_corename
            fn.restype = ctypes.c_char_p
            core = fn().decode()
            break
        except (OSError, AttributeError):
            continue
    return sorted(libs), core


def bench(B, S, D, seconds, full, bf16=False, mlps=None):
    torch.manual_seed(0)
    bot, top = mlps or kaggle_mlps(S, D)
    model = DLRM(bot, top)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.BCELoss()
    dense = torch.rand(B, 13) * 5
    y = (torch.rand(B, 1) < 0.25).float()
    if full:
        rows = (torch.rand(B * S, D) - 0.5).mul_(0.1).requires_grad_(True)
        idx = torch.randperm(B * S).view(B, S)  # one-hot bags, sample-major
    else:
        ly_in = [(torch.rand(B, D) - 0.5).mul_(0.1).requires_grad_(True) for _ in range(S)]

    def step():
        opt.zero_grad()
        if full:
            rows.grad = None
            pooled = rows[idx.view(-1)].view(B, S, D)
            ly = list(pooled.unbind(1))
        else:
            ly = ly_in
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(dense, ly)
        loss = loss_fn(out.float(), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    # per-step times; the headline is the median step, as in ps-dense-bench
    dts, t0 = [], time.perf_counter()
    while True:
        a = time.perf_counter()
        step()
        dts.append(time.perf_counter() - a)
        if time.perf_counter() - t0 >= seconds and len(dts) >= 5:
            break
    dts.sort()
    med = dts[len(dts) // 2]
    return B / med, med * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", default="128,2048,8192")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--json")
    ap.add_argument("--bf16", action="store_true", help="torch.autocast bf16 (mixed precision)")
    ap.add_argument("--mlp-bot", default="13-512-256-64-16")
    ap.add_argument("--mlp-top", default="512-256-1")
    a = ap.parse_args()
    bot = [int(x) for x in a.mlp_bot.split("-")]
    mlps = (bot, [bot[-1] + 27 * 26 // 2] + [int(x) for x in a.mlp_top.split("-")])
    torch.set_num_threads(a.threads)
    libs, core = blas_loaded()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; BLAS loaded: "
          f"{', '.join(libs) or 'none found'}; OpenBLAS core: {core}")
    out = {"torch": torch.__version__, "threads": a.threads, "blas": libs, "openblas_core": core,
           "precision": "bf16" if a.bf16 else "fp32", "mlp_bot": a.mlp_bot, "mlp_top": a.mlp_top,
           "results": []}
    for B in [int(x) for x in a.batch.split(",")]:
        r = {"batch": B}
        for full in (True, False):
            sps, ms = bench(B, 26, bot[-1], a.seconds, full, a.bf16, mlps)
            key = "full" if full else "dense_only"
            r[key] = {"samples_per_s": sps, "ms_per_step": ms}
        print(f"batch {B:6d}: full {r['full']['samples_per_s']:10.0f} samples/s   "
              f"dense-only {r['dense_only']['samples_per_s']:10.0f} samples/s")
        out["results"].append(r)
    return write_results(a.json, out)


if __name__ == "__main__":
    sys.exit(main())
