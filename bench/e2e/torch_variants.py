#!/usr/bin/python3
"""torch_variants: torch_dlrm.py's DLRM with switches for the issue-8 diagnostics
(bench/RESULTS-e2e.md, "Issue 8's 0.01 gap"): several epochs with a test AUC after each,
soft labels (the planted probabilities instead of the drawn 0/1 labels), rare keys folded into
one row per feature, the noise features dropped, a "wide" per-key scalar term, an L2 penalty on
the embeddings, a nonzero Adagrad accumulator start, linear learning-rate decay, and freezing
the dense or the sparse part after epoch 1. One thread, the model and optimizers exactly as
torch_dlrm.py (sparse Adagrad, dense Adam); the gap is printed against the planted ceiling.

  /usr/bin/python3 bench/e2e/torch_variants.py --train T.tsv --test V.tsv --planted P.json [...]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from sklearn.metrics import roc_auc_score

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_dlrm as T  # noqa: E402

NOISE = [2, 3, 11, 12, 15, 17, 20, 23]  # ps_datagen.c CAT entries with scale 0 (0-based)


def load(path, nb, cache):
    c = f"{path}.{nb}.npz"
    if cache and os.path.exists(c):
        z = np.load(c)
        return torch.tensor(z["x"]), torch.tensor(z["k"]), torch.tensor(z["y"])
    x, k, y = T.parse_tsv(path, nb)
    if cache:
        np.savez(c, x=x.numpy(), k=k.numpy(), y=y.numpy())
    return x, k, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--planted", required=True, help="ps-datagen --json (the ceiling)")
    ap.add_argument("--rows", type=int, default=0, help="first ROWS training rows (0: all)")
    ap.add_argument("--cache", action="store_true", help="keep parsed tensors in FILE.N.npz")
    ap.add_argument("--hash-buckets", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--sparse-lr", type=float, default=0.1)
    ap.add_argument("--emb-init", type=float, default=0.01)
    ap.add_argument("--emb-dim", type=int, default=16)
    ap.add_argument("--mlp-bot", default="13-128-16", help="last width = --emb-dim")
    ap.add_argument("--mlp-top", default="128-64-1")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--soft", metavar="PROBS", help="ps-datagen --probs-out of the train rows")
    ap.add_argument("--min-count", type=int, default=0, help="keys seen fewer times: 1 row/feature")
    ap.add_argument("--drop-noise", action="store_true", help="noise features -> one key each")
    ap.add_argument("--wide", action="store_true", help="add a per-key scalar to the logit")
    ap.add_argument("--l2", type=float, default=0.0, help="L2 on the looked-up embeddings")
    ap.add_argument("--acc0", type=float, default=0.0, help="Adagrad initial accumulator")
    ap.add_argument("--decay", default="", help="d, s or ds: linear lr decay to 0")
    ap.add_argument("--freeze", default="", help="d, s or ds: lr 0 after epoch 1")
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(1)
    nb = a.hash_buckets
    ceiling = json.load(open(a.planted))["test_auc"]
    xtr, ktr, ytr = load(a.train, nb, a.cache)
    xte, kte, yte = load(a.test, nb, a.cache)
    if a.rows:
        xtr, ktr, ytr = xtr[:a.rows], ktr[:a.rows], ytr[:a.rows]
    if a.drop_noise:
        for f in NOISE:
            ktr[:, f] = f * nb
            kte[:, f] = f * nb
    if a.min_count:
        u, inv, cnt = torch.unique(ktr, return_inverse=True, return_counts=True)
        rare_tr = (cnt[inv] < a.min_count).reshape(ktr.shape)
        ktr = torch.where(rare_tr, torch.arange(T.NCAT).repeat(len(ktr), 1) * nb + 1, ktr)
        known = torch.isin(kte, u[cnt >= a.min_count])
        kte = torch.where(known, kte, torch.arange(T.NCAT).repeat(len(kte), 1) * nb + 1)
    if a.soft:
        ytr = torch.tensor(np.loadtxt(a.soft, dtype=np.float32)[:len(ytr)])

    bot = [int(w) for w in a.mlp_bot.split("-")]
    bot[-1] = a.emb_dim
    m = T.DLRM(T.NCAT * nb, a.emb_dim, bot, [int(w) for w in a.mlp_top.split("-")], a.emb_init)
    sparse = [m.emb.weight]
    if a.wide:
        m.w1 = nn.Embedding(T.NCAT * nb, 1, sparse=True)
        nn.init.zeros_(m.w1.weight)
        sparse.append(m.w1.weight)
    opt_d = torch.optim.Adam(list(m.bot.parameters()) + list(m.top.parameters()), lr=a.lr)
    opt_s = torch.optim.Adagrad(sparse, lr=a.sparse_lr, eps=1e-10,
                                initial_accumulator_value=a.acc0)
    lossf = nn.BCEWithLogitsLoss()

    def fwd(x, k):
        o = m(x, k)
        return o + m.w1(k).sum((1, 2)) if a.wide else o

    t0 = time.time()
    n = len(ytr)
    for ep in range(a.epochs):
        m.train()
        for i in range(0, n, a.batch):
            left = 1 - (ep * n + i) / (a.epochs * n)
            for opt, key, lr in ((opt_d, "d", a.lr), (opt_s, "s", a.sparse_lr)):
                f = left if key in a.decay else 1.0
                if ep >= 1 and key in a.freeze:
                    f = 0.0
                for g in opt.param_groups:
                    g["lr"] = lr * f
            k = ktr[i:i + a.batch]
            loss = lossf(fwd(xtr[i:i + a.batch], k), ytr[i:i + a.batch])
            if a.l2:
                loss = loss + a.l2 * m.emb(k).pow(2).sum((1, 2)).mean()
            opt_d.zero_grad()
            opt_s.zero_grad()
            loss.backward()
            opt_d.step()
            opt_s.step()
        m.eval()
        with torch.no_grad():
            p = torch.cat([torch.sigmoid(fwd(xte[i:i + 8192], kte[i:i + 8192]))
                           for i in range(0, len(yte), 8192)]).double().numpy()
        auc = roc_auc_score(yte.numpy(), p)
        print(f"epoch {ep + 1}: test AUC {auc:.4f}, ceiling {ceiling:.4f}, gap {ceiling - auc:.4f}, "
              f"{time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
