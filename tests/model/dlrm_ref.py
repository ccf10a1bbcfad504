#!/usr/bin/python3
"""PyTorch reference for Ember's C DLRM (worker/model/ps_dlrm.c).

Runs tests/dlrm_ref_driver, which dumps the C model's initial weights, a fixed batch and its
results, and three 20-step training curves (sgd, adagrad, adam). This script rebuilds the same
model in PyTorch the way the DLRM reference (dlrm_s_pytorch.py) does - nn.Linear + ReLU towers,
interact_features with arch_interaction_op='dot' and interaction_itself=False, sigmoid + BCELoss
- loads the same weights, and compares. The same is done for the DCNv2 interaction
(--interaction dcn), low rank and full rank, with the cross network written as TorchRec's
LowRankCrossNet and CrossNet compute it (torchrec/modules/crossnet.py): x0 = cat(bottom output,
pooled embeddings), x_{l+1} = x0 * (linear(linear(x_l, V_l), W_l) + b_l) + x_l (full rank:
x0 * (kernels_l @ x_l + b_l) + x_l), and the top MLP on x_L; its loss is TorchRec's
DLRMTrain's, BCEWithLogitsLoss on the logit. (sigmoid + BCELoss clamps p(1 - p) at 1e-12, so
its gradient is not the loss's once a logit passes ~28, which DCN's multiplying layers reach in
the Adagrad curve; the C model's fused sigmoid-BCE is the exact gradient, which is what
BCEWithLogitsLoss computes.)

Criterion (documented in bench/RESULTS-dense.md too): the ground truth is torch in float64 on the
same float32 weights and inputs, so the test measures the C float32 error, not torch's. For a
tensor t and the C result c, each element's error is |c - t| / max(|t|, 0.1 * max|t|): relative,
except that entries 10x below the tensor's largest are judged against 10% of that largest (a
float32 sum that cancels down to ~0 has no meaningful relative error). The max over the tensor
must be <= 1e-5. Loss curves: |c - t| <= 1e-4 * max(1, |t|) at every step. Rows that no bag
touched must have exactly zero gradient. Torch float32's own error against float64 is printed
beside ours for scale.

Exit 0 pass, 1 fail, 77 skipped (torch missing)."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e}")
    sys.exit(77)

RTOL = 1e-5
CURVE_TOL = 1e-4
failures = []


def rel_err(c, t):
    c = np.asarray(c, dtype=np.float64).ravel()
    t = np.asarray(t, dtype=np.float64).ravel()
    if c.shape != t.shape:
        return float("inf")
    if t.size == 0:
        return 0.0
    floor = max(0.1 * np.abs(t).max(), 1e-30)
    return float((np.abs(c - t) / np.maximum(np.abs(t), floor)).max())


def check(name, c, t, t32=None):
    e = rel_err(c, t)
    extra = f"  (torch f32: {rel_err(t32, t):.2e})" if t32 is not None else ""
    ok = e <= RTOL
    print(f"{'ok  ' if ok else 'FAIL'} {name:28s} max rel err {e:.2e}{extra}")
    if not ok:
        failures.append(name)


class CrossNet(torch.nn.Module):
    """TorchRec's LowRankCrossNet (rank > 0; its W_kernels are our U) or CrossNet (rank 0).
    Parameters registered per layer in the C layout's order: V_l, U_l, b_l (or W_l, b_l)."""

    def __init__(self, dim, layers, rank, dtype):
        super().__init__()
        self.layers, self.rank = layers, rank
        for l in range(layers):
            if rank > 0:
                self.register_parameter(f"V{l}", torch.nn.Parameter(torch.empty(rank, dim, dtype=dtype)))
                self.register_parameter(f"U{l}", torch.nn.Parameter(torch.empty(dim, rank, dtype=dtype)))
            else:
                self.register_parameter(f"W{l}", torch.nn.Parameter(torch.empty(dim, dim, dtype=dtype)))
            self.register_parameter(f"b{l}", torch.nn.Parameter(torch.empty(dim, dtype=dtype)))

    def forward(self, x0):
        xl = x0
        for l in range(self.layers):
            if self.rank > 0:
                xlw = torch.nn.functional.linear(
                    torch.nn.functional.linear(xl, getattr(self, f"V{l}")), getattr(self, f"U{l}"))
            else:
                xlw = torch.matmul(getattr(self, f"W{l}"), xl.unsqueeze(2)).squeeze(2)
            xl = x0 * (xlw + getattr(self, f"b{l}")) + xl
        return xl


class DLRM(torch.nn.Module):
    def __init__(self, bot, top, dtype, cross=None):
        super().__init__()

        def mlp(ln, sigmoid_layer, last=None):
            layers = []
            for i in range(len(ln) - 1):
                layers.append(torch.nn.Linear(ln[i], ln[i + 1], bias=True, dtype=dtype))
                if i == len(ln) - 2 and last == "logit":
                    break
                layers.append(torch.nn.Sigmoid() if i == sigmoid_layer else torch.nn.ReLU())
            return torch.nn.Sequential(*layers)

        self.logits = cross is not None
        self.bot_l = mlp(bot, -1)
        if cross is not None:  # registered between the towers: the C layout's order
            self.cross = CrossNet(top[0], cross[0], cross[1], dtype)
        self.top_l = mlp(top, len(top) - 2, "logit" if self.logits else None)

    def interact(self, x, ly):
        # dlrm_s_pytorch.py interact_features, 'dot', interaction_itself=False
        (batch_size, d) = x.shape
        T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        _, ni, nj = Z.shape
        li = torch.tensor([i for i in range(ni) for j in range(i)])
        lj = torch.tensor([j for i in range(nj) for j in range(i)])
        Zflat = Z[:, li, lj]
        return torch.cat([x] + [Zflat], dim=1)

    def forward(self, dense, ly):
        x = self.bot_l(dense)
        if hasattr(self, "cross"):  # InteractionDCNArch: cat(dense, sparse) -> crossnet
            return self.top_l(self.cross(torch.cat([x] + ly, dim=1)))
        return self.top_l(self.interact(x, ly))


def loss_probs(model, out, y):
    """(mean loss, probabilities) from the model's output: DLRM's sigmoid + BCELoss, or for
    DCN TorchRec's BCEWithLogitsLoss on the logit."""
    if model.logits:
        return torch.nn.BCEWithLogitsLoss()(out, y), torch.sigmoid(out)
    return torch.nn.BCELoss(reduction="mean")(out, y), out


def load_params(model, flat, dtype):
    flat = torch.tensor(flat, dtype=dtype)
    off = 0
    with torch.no_grad():
        for p in model.parameters():  # bot_l then top_l, W then b: the C layout
            n = p.numel()
            p.copy_(flat[off:off + n].view_as(p))
            off += n
    assert off == flat.numel(), (off, flat.numel())


def pooled_list(rows, batch, S, pool):
    """One [B, D] tensor per sparse feature, bags sample-major (bag = b*S + s)."""
    idx = torch.tensor(batch["idx"], dtype=torch.long)
    off = torch.tensor(batch["offsets"], dtype=torch.long)
    nbags = off.numel() - 1
    lens = off[1:] - off[:-1]
    bag_of = torch.repeat_interleave(torch.arange(nbags), lens)
    pooled = torch.zeros(nbags, rows.shape[1], dtype=rows.dtype).index_add(0, bag_of, rows[idx])
    if pool == "mean":
        pooled = pooled / lens.clamp(min=1).to(rows.dtype).unsqueeze(1)
    elif pool == "mixed":  # the driver's: even features by mean, odd ones by sum
        feat = torch.arange(nbags) % S
        div = torch.where(feat % 2 == 0, lens.clamp(min=1), torch.ones_like(lens))
        pooled = pooled / div.to(rows.dtype).unsqueeze(1)
    B = nbags // S
    pooled = pooled.view(B, S, -1)
    return [pooled[:, s, :] for s in range(S)]


def run_once(cfg, params, rows0, batch, dtype):
    bot = [int(v) for v in cfg["mlp_bot"].split("-")]
    S, D = cfg["num_sparse"], cfg["emb_dim"]
    dcn = cfg.get("interaction") == "dcn"
    top = [(S + 1) * D if dcn else D + (S + 1) * S // 2] + [int(v) for v in cfg["mlp_top"].split("-")]
    model = DLRM(bot, top, dtype, (cfg["dcn_layers"], cfg["dcn_rank"]) if dcn else None)
    load_params(model, params, dtype)
    return model, S, D


def single(data, dtype):
    cfg = data["config"]
    model, S, D = run_once(cfg, data["params"], data["rows"], data["single"], dtype)
    b = data["single"]
    rows = torch.tensor(data["rows"], dtype=dtype).view(-1, D).requires_grad_(True)
    dense = torch.tensor(b["dense"], dtype=dtype).view(-1, 13)
    y = torch.tensor(b["labels"], dtype=dtype).view(-1, 1)
    loss, p = loss_probs(model, model(dense, pooled_list(rows, b, S, cfg["pool"])), y)
    loss.backward()
    grads = torch.cat([q.grad.ravel() for q in model.parameters()])
    return {"loss": loss.item(), "probs": p.detach().ravel().numpy(),
            "grads": grads.numpy(), "emb_grads": rows.grad.numpy().ravel()}


def curve(data, name, dtype):
    cfg = data["config"]
    c = data["curves"][name]
    model, S, D = run_once(cfg, data["params"], data["rows"], None, dtype)
    rows = torch.tensor(data["rows"], dtype=dtype).view(-1, D).requires_grad_(True)
    lr = c["lr"]
    if name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr)
    elif name == "adagrad":
        opt = torch.optim.Adagrad(model.parameters(), lr=lr)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for b in c["batches"]:
        opt.zero_grad()
        rows.grad = None
        dense = torch.tensor(b["dense"], dtype=dtype).view(-1, 13)
        y = torch.tensor(b["labels"], dtype=dtype).view(-1, 1)
        loss, _ = loss_probs(model, model(dense, pooled_list(rows, b, S, cfg["pool"])), y)
        loss.backward()
        opt.step()
        with torch.no_grad():
            rows -= c["emb_lr"] * rows.grad  # the server's sparse SGD
        losses.append(loss.item())
    return np.array(losses)


def main():
    tests = os.environ.get("EMBER_TESTS", os.path.join(os.path.dirname(__file__), "../../build/tests"))
    driver = os.path.join(tests, "dlrm_ref_driver")
    torch.set_num_threads(1)
    # dot with both poolings; DCNv2 low rank (3 layers of rank 5 on D = 6 x 8 = 48) and full
    # rank (2 layers of W [48, 48])
    for pool, inter in (("sum", "dot"), ("mean", "dot"), ("mixed", "dot"), ("sum", "dcn:3:5"),
                        ("mean", "dcn:2:0"), ("mixed", "dcn:2:5")):
        with tempfile.TemporaryDirectory() as td:
            out = os.path.join(td, "dlrm.json")
            subprocess.run([driver, out, pool, "2", inter], check=True, timeout=60)
            with open(out) as f:
                data = json.load(f)
        pool = f"{pool} {inter}"
        print(f"--- pooling {pool}")
        ref = single(data, torch.float64)
        r32 = single(data, torch.float32)
        c = data["single"]
        check("loss", [c["loss"]], [ref["loss"]], [r32["loss"]])
        check("probabilities", c["probs"], ref["probs"], r32["probs"])
        check("eval probabilities", c["eval_probs"], ref["probs"], r32["probs"])
        # every dense gradient, layer by layer (names as torch's parameters)
        model, _, _ = run_once(data["config"], data["params"], None, None, torch.float64)
        off = 0
        for pname, q in model.named_parameters():
            n = q.numel()
            check(f"grad {pname}", c["grads"][off:off + n], ref["grads"][off:off + n],
                  r32["grads"][off:off + n])
            off += n
        check("embedding-row grads", c["emb_grads"], ref["emb_grads"], r32["emb_grads"])
        D = data["config"]["emb_dim"]
        used = set(c["idx"])
        eg = np.array(c["emb_grads"]).reshape(-1, D)
        untouched_nonzero = [r for r in range(eg.shape[0]) if r not in used and np.any(eg[r] != 0)]
        if untouched_nonzero:
            failures.append(f"{pool}: untouched rows with nonzero grad {untouched_nonzero[:5]}")
        print(f"{'ok  ' if not untouched_nonzero else 'FAIL'} untouched rows ({eg.shape[0] - len(used)}) exactly zero")
        for name in ("sgd", "adagrad", "adam"):
            cl = np.array(data["curves"][name]["losses"])
            tl = curve(data, name, torch.float64)
            err = np.abs(cl - tl) / np.maximum(1.0, np.abs(tl))
            ok = bool(err.max() <= CURVE_TOL) and len(cl) == 20
            print(f"{'ok  ' if ok else 'FAIL'} {name:8s} 20-step loss curve: max err {err.max():.2e} "
                  f"(loss {tl[0]:.4f} -> {tl[-1]:.4f})")
            if not ok:
                failures.append(f"{pool} {name} curve")
    return verdict(failures)


def verdict(failed):
    """Prints the outcome; the exit status (0 pass, 1 fail)."""
    if failed:
        print("FAILED:", ", ".join(failed))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
