#!/usr/bin/env python3
"""The dense DLRM step of ps-gpu-bench, in PyTorch on the same GPU: samples/s of forward +
backward + SGD for the Kaggle shape (13-512-256-64-16, top 512-256-1, 26 tables, dim 16),
and the share of GPU time in cuBLAS kernels (torch.profiler).

Variants per batch size, matching ps-gpu-bench's:
  train     the batch (dense, labels, 26*B unique rows, bag indices) comes from pinned host
            memory each step (non_blocking copies) and the row gradients go back to pinned
            host memory, with one torch.cuda.synchronize() per step;
  dense     the same uploads, no row-gradient download, one synchronize at the end;
  resident  everything already on the GPU (the yardstick with no host traffic at all).
FP32 GEMMs (allow_tf32 False, torch's default) unless --tf32. The loss is BCEWithLogits (the
fused sigmoid + BCE, as Ember fuses them). The one-hot bags are a gather rows[idx], whose
backward scatters one gradient row per unique row, as Ember's pooling backward does.

Usage: torch_dense_gpu.py [--batch 2048,16384,65536] [--seconds S] [--tf32] [--json FILE]
Runs with the python3 that has a CUDA build of torch (on the GPU machine: plain python3)."""
import argparse
import os
import re
import sys
import time

import torch

# The model (bench/common/torch_dlrm.py) sits beside this script in a GPU bundle
# (tests/gpu/pack-gpu-bundle.sh), in ../common in the source tree.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.join(_here, "..", "common")]
from torch_dlrm import DLRM, kaggle_mlps, write_results  # noqa: E402


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def pinned(t, dev):
    return t.pin_memory() if dev.type == "cuda" else t


GEMM_RE = re.compile(r"gemm|gemv|splitKreduce|cublas|cutlass", re.I)


def bench(B, S, D, seconds, variant, dev, profile_steps):
    torch.manual_seed(0)
    bot, top = kaggle_mlps(S, D)
    model = DLRM(bot, top, logit=True).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    g = torch.Generator().manual_seed(42)
    dense_h = pinned(torch.rand(B, 13, generator=g) * 5, dev)
    y_h = pinned((torch.rand(B, 1, generator=g) < 0.25).float(), dev)
    rows_h = pinned((torch.rand(B * S, D, generator=g) - 0.5) * 0.1, dev)
    idx_h = pinned(torch.randperm(B * S, generator=g).to(torch.int64), dev)
    grad_h = pinned(torch.empty(B * S, D), dev)
    if variant == "resident":
        res = [t.to(dev) for t in (dense_h, y_h, rows_h, idx_h)]

    def step():
        if variant == "resident":
            dense, y, rows0, idx = res
        else:
            dense = dense_h.to(dev, non_blocking=True)
            y = y_h.to(dev, non_blocking=True)
            rows0 = rows_h.to(dev, non_blocking=True)
            idx = idx_h.to(dev, non_blocking=True)
        rows = rows0.detach().requires_grad_(True)
        opt.zero_grad(set_to_none=True)
        ly = rows[idx].view(B, S, D)
        loss = loss_fn(model(dense, ly), y)
        loss.backward()
        opt.step()
        if variant == "train":
            grad_h.copy_(rows.grad, non_blocking=True)
            sync(dev)

    for _ in range(5):
        step()
    sync(dev)
    steps, t0 = 0, time.perf_counter()
    while True:
        step()
        steps += 1
        if variant != "train" and steps % 8 == 0:
            sync(dev)  # bound the run-ahead, as ps-gpu-bench does
        el = time.perf_counter() - t0
        if el >= seconds and steps >= 3:
            break
    sync(dev)
    el = time.perf_counter() - t0
    out = {"samples_per_s": steps * B / el, "ms_per_step": el * 1e3 / steps}
    if profile_steps and dev.type == "cuda":
        from torch.profiler import ProfilerActivity, profile
        sync(dev)
        t1 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(profile_steps):
                step()
            sync(dev)
        wall_ms = (time.perf_counter() - t1) * 1e3
        gemm_us = total_us = 0.0
        for e in prof.events():  # GPU kernels are the events whose device is CUDA
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            t = e.time_range.elapsed_us()
            total_us += t
            if GEMM_RE.search(e.name):
                gemm_us += t
        out["cublas_ms_per_step"] = gemm_us / 1e3 / profile_steps
        out["gpu_kernel_ms_per_step"] = total_us / 1e3 / profile_steps
        out["cublas_share_of_wall"] = gemm_us / 1e3 / wall_ms if wall_ms else 0.0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="2048,16384,65536")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--variants", default="train,dense,resident")
    ap.add_argument("--profile-steps", type=int, default=10)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run of this script")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_dense_gpu.py: no CUDA device visible to torch", file=sys.stderr)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    dev = torch.device(a.device)
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {name}; "
          f"{'TF32' if a.tf32 else 'FP32'} GEMMs")
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": name,
           "tf32": a.tf32, "results": []}
    for B in [int(x) for x in a.batch.split(",")]:
        r = {"batch": B}
        for v in a.variants.split(","):
            r[v] = bench(B, 26, 16, a.seconds, v, dev, a.profile_steps if v == "dense" else 0)
        line = f"batch {B:6d}:" + "".join(
            f" {v} {r[v]['samples_per_s']:11.0f} samples/s ({r[v]['ms_per_step']:7.3f} ms) |"
            for v in a.variants.split(","))
        if "dense" in r and "cublas_ms_per_step" in r["dense"]:
            d = r["dense"]
            line += (f" cuBLAS {100 * d['cublas_share_of_wall']:.1f}% of wall "
                     f"({d['cublas_ms_per_step']:.3f} ms/step of {d['gpu_kernel_ms_per_step']:.3f}"
                     f" ms of kernels)")
        print(line, flush=True)
        out["results"].append(r)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return write_results(a.json, out)


if __name__ == "__main__":
    sys.exit(main())
