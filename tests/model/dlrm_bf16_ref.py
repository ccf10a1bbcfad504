#!/usr/bin/python3
"""PyTorch reference for Ember's bf16 DLRM (ps_dlrm with precision bf16, --precision bf16).

Runs tests/dlrm_ref_driver with precision bf16 (dot interaction, and DCNv2 low rank) and
compares the C model's loss, probabilities, dense gradients and embedding-row gradients with
two references on the same weights and batch (dlrm_ref.py's model, data and error metric:
|c - t| / max(|t|, 0.1 max|t|), the max over a tensor):

1. EMULATION: the model in float64 where every GEMM, forward and backward, takes its two
   inputs rounded to bf16 (float32 first, as the C model holds them, then round to nearest
   even), and everything else (bias, ReLU, dot interaction, pooling, sigmoid-BCE) is exact.
   That is the C model's arithmetic but for its float32 accumulation. Tolerance EMU_TOL = 2^-8:
   float32 accumulation adds at most gamma_k = k 2^-24 / (1 - k 2^-24) of sum |a||b| per GEMM
   (k <= 64 here: < 4e-6), and it can move an activation that lies within that error of a
   bf16 rounding boundary to the other side; such a flip changes that one input by one bf16
   ulp, at most 2u = 2^-7 of it, and so one term of the next sums, far below 2^-8 of the sum in
   the metric above. Also required: C's distance to the emulation is < 1/4 of FP32's (the
   float64 model without rounding) distance to it, so a model that silently ran FP32 fails.

2. torch.autocast("cpu", dtype=torch.bfloat16) on the float32 model, as PyTorch users train
   in bf16. Autocast rounds the same GEMM inputs, but also rounds each GEMM's output to bf16
   (and adds the bias in it), and runs the dot interaction's bmm in bf16; the C model keeps
   those in FP32. Each of these is one more rounding of relative size u = 2^-8 per GEMM on the
   path; to first order they add, so over the L = 7 GEMMs of the forward path (3 bottom, the
   interaction, 3 top), and 2L for gradients (the backward path repeats them), the two differ
   by at most ~4 u L under the metric (4u per stage: the output rounding, the bias add in
   bf16, and <= 2u from re-rounding inputs that the previous stage perturbed). AC_TOL = 4 u L
   for forward values, 8 u L for gradients. Gradients are compared norm-wise,
   ||c - t||_2 / ||t||_2: a gradient entry is a long sum that cancels, and two bf16 runs of it
   have no common digits element-wise (C and autocast differ by ~0.36 under the element-wise
   metric, as FP32 and autocast do), while the first-order argument holds for the norm.

Exit 0 pass, 1 fail, 77 skipped (torch missing, or the CPU has no AVX512_BF16)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import torch
    import dlrm_ref as ref
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}")
    sys.exit(77)

U = 2.0 ** -8
EMU_TOL = U
L_PATH = 7
AC_TOL_FWD = 4 * U * L_PATH
AC_TOL_GRAD = 8 * U * L_PATH
failures = []


def r16(t):
    """float64 -> float32 -> bf16 (round to nearest even) -> float64: one rounding as C does."""
    return t.float().to(torch.bfloat16).double()


class Bf16Linear(torch.autograd.Function):
    """y = r(x) r(W)^T + b; backward dX = r(dY) r(W), dW = r(dY)^T r(x), db = sum dY."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        y = r16(x) @ r16(w).t()
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return r16(dy) @ r16(w), r16(dy).t() @ r16(x), dy.sum(0) if ctx.has_bias else None


def emulate(model):
    """Routes every nn.Linear and the cross layers' functional.linear through Bf16Linear."""
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            mod.forward = (lambda m: lambda x: Bf16Linear.apply(x, m.weight, m.bias))(mod)


def single(data, dtype, mode):
    cfg = data["config"]
    model, S, D = ref.run_once(cfg, data["params"], data["rows"], data["single"], dtype)
    b = data["single"]
    rows = torch.tensor(data["rows"], dtype=dtype).view(-1, D).requires_grad_(True)
    dense = torch.tensor(b["dense"], dtype=dtype).view(-1, 13)
    y = torch.tensor(b["labels"], dtype=dtype).view(-1, 1)
    lin = torch.nn.functional.linear
    if mode == "emulate":
        emulate(model)
        torch.nn.functional.linear = lambda x, w, bias=None: Bf16Linear.apply(x, w, bias)
    try:
        if mode == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(dense, ref.pooled_list(rows, b, S, cfg["pool"]))
            out = out.float()
        else:
            out = model(dense, ref.pooled_list(rows, b, S, cfg["pool"]))
        loss, p = ref.loss_probs(model, out, y)
        loss.backward()
    finally:
        torch.nn.functional.linear = lin
    grads = torch.cat([q.grad.ravel() for q in model.parameters()]).double()
    return {"loss": loss.item(), "probs": p.detach().double().ravel().numpy(),
            "grads": grads.numpy(), "emb_grads": rows.grad.double().numpy().ravel()}


def norm_err(c, t):
    c = np.asarray(c, dtype=np.float64).ravel()
    t = np.asarray(t, dtype=np.float64).ravel()
    return float(np.linalg.norm(c - t) / max(np.linalg.norm(t), 1e-30))


def check(name, c, t, tol, fp32=None, metric=ref.rel_err):
    e = metric(c, t)
    ok = e <= tol
    extra = ""
    if fp32 is not None:  # C must be much nearer the bf16 arithmetic than FP32 is
        e32 = metric(fp32, t)
        extra = f"  (FP32 model: {e32:.2e})"
        ok = ok and e < 0.25 * e32
    print(f"{'ok  ' if ok else 'FAIL'} {name:34s} max rel err {e:.2e} <= {tol:.2e}{extra}")
    if not ok:
        failures.append(name)


def main():
    tests = os.environ.get("EMBER_TESTS", os.path.join(os.path.dirname(__file__), "../../build/tests"))
    driver = os.path.join(tests, "dlrm_ref_driver")
    torch.set_num_threads(1)
    for pool, inter in (("sum", "dot"), ("mixed", "dcn:3:5")):
        with tempfile.TemporaryDirectory() as td:
            out = os.path.join(td, "dlrm.json")
            subprocess.run([driver, out, pool, "2", inter, "bf16"], check=True, timeout=60)
            with open(out) as f:
                data = json.load(f)
        if data["config"]["precision_used"] != "bf16":
            print("SKIP: this CPU has no AVX512_BF16 (the model ran FP32)")
            return 77
        print(f"--- bf16, pooling {pool} {inter}")
        c = data["single"]
        emu = single(data, torch.float64, "emulate")
        f64 = single(data, torch.float64, "fp32")
        for key in ("loss", "probs", "grads", "emb_grads"):
            cv = [c[key]] if key == "loss" else c[key]
            tv = [emu[key]] if key == "loss" else emu[key]
            fv = [f64[key]] if key == "loss" else f64[key]
            check(f"{key} vs bf16 emulation", cv, tv, EMU_TOL, fv)
        if inter == "dot":  # autocast's bmm and DCN's matmul paths differ; the dot one is DLRM's
            ac = single(data, torch.float32, "autocast")
            check("loss vs torch.autocast", [c["loss"]], [ac["loss"]], AC_TOL_FWD)
            check("probs vs torch.autocast", c["probs"], ac["probs"], AC_TOL_FWD)
            check("grads vs torch.autocast (norm)", c["grads"], ac["grads"], AC_TOL_GRAD, None, norm_err)
            check("emb_grads vs torch.autocast (norm)", c["emb_grads"], ac["emb_grads"], AC_TOL_GRAD, None, norm_err)
            print(f"     (for scale: the FP32 model's grads vs autocast, norm {norm_err(f64['grads'], ac['grads']):.2e}, "
                  f"C's element-wise {ref.rel_err(c['grads'], ac['grads']):.2e})")
    return ref.verdict(failures)


if __name__ == "__main__":
    sys.exit(main())
