#!/usr/bin/python3
"""dlrm_criteo.py: trains a PyTorch DLRM on Criteo-format data with its embeddings in Ember.

The dense half (bottom MLP, dot interaction, top MLP: dlrm_s_pytorch.py's architecture, the
one ps-worker trains) is an ordinary torch.nn.Module stepped by torch.optim.Adam; the 26
categorical features are rows of one Ember table, reached through ember.torch.EmbeddingBag,
whose backward pushes the row gradients (the server applies Adagrad). Keys are
ember.hash_feature's, i.e. ps-worker's: this script and ps-worker can share a table.

    PYTHONPATH=P/lib/python3/dist-packages python3 dlrm_criteo.py \\
        --servers tcp://127.0.0.1:5555 --train train.tsv --test test.tsv

Defaults follow ps-worker's (batch 2048, Adam 0.001, Adagrad 0.1, rows U(-0.01, 0.01), towers
13-512-256-64-16 / 512-256-1). --prefetch pulls the next batch's rows while this one trains
(one step stale, as ps-worker's pipeline). Prints one JSON line: AUC, logloss, samples/s."""
import argparse
import json
import sys
import time

import numpy as np
import torch

import ember
import ember.torch

NDENSE, NCAT = 13, 26


def read_criteo(path, limit=0):
    """label [n], dense [n, 13] (log(1 + max(x, 0)), missing 0), keys uint64 [n, 26]."""
    labels, dense, cats, miss = [], [], [], []
    with open(path) as f:
        for i, line in enumerate(f):
            if limit and i >= limit:
                break
            p = line.rstrip("\r\n").split("\t")
            if len(p) != 1 + NDENSE + NCAT:
                raise SystemExit(f"dlrm_criteo: {path}:{i + 1}: {len(p)} fields, want 40")
            labels.append(int(p[0]))
            dense.append([max(int(x), 0) if x else 0 for x in p[1:14]])
            cats.append([int(x, 16) if x else 0 for x in p[14:]])
            miss.append([not x for x in p[14:]])
    cats = np.array(cats, dtype=np.uint32).reshape(-1, NCAT)
    miss = np.array(miss, dtype=bool).reshape(-1, NCAT)
    keys = np.empty(cats.shape, dtype=np.uint64)
    for f in range(NCAT):
        keys[:, f] = ember.hash_feature(f, cats[:, f])
        keys[miss[:, f], f] = ember.hash_missing(f)
    d = np.log1p(np.array(dense, dtype=np.float64)).astype(np.float32).reshape(-1, NDENSE)
    return np.array(labels, dtype=np.float32), d, keys


def mlp(widths, last_sigmoid):
    """Linear + ReLU layers (sigmoid last when asked), with the DLRM reference's init (as
    ps-worker's): weights N(0, sqrt(2 / (in + out))), biases N(0, sqrt(1 / out))."""
    layers = []
    for i in range(len(widths) - 1):
        lin = torch.nn.Linear(widths[i], widths[i + 1])
        with torch.no_grad():
            lin.weight.normal_(0.0, (2.0 / (widths[i] + widths[i + 1])) ** 0.5)
            lin.bias.normal_(0.0, (1.0 / widths[i + 1]) ** 0.5)
        layers.append(lin)
        last = i == len(widths) - 2
        layers.append(torch.nn.Sigmoid() if last and last_sigmoid else torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    def __init__(self, table, bot, top):
        super().__init__()
        d = table.dim
        if bot[-1] != d:
            raise SystemExit(f"dlrm_criteo: the bottom MLP ends in {bot[-1]}, the table dim is {d}")
        self.emb = ember.torch.EmbeddingBag(table, mode="sum")
        self.bot = mlp(bot, False)
        n = NCAT + 1
        self.top = mlp([d + n * (n - 1) // 2] + top, True)
        self.li, self.lj = torch.tril_indices(n, n, offset=-1)

    def forward(self, dense, keys):
        x = self.bot(dense)
        b = keys.shape[0]
        e = self.emb(keys.reshape(-1, 1)).view(b, NCAT, -1)  # one bag per (sample, feature)
        t = torch.cat([x.unsqueeze(1), e], dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([x, z], dim=1)).squeeze(1)


def auc_logloss(y, p):
    from sklearn.metrics import log_loss, roc_auc_score
    return float(roc_auc_score(y, p)), float(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7)))


def widths(s):
    return [int(w) for w in s.split("-")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", required=True, help="URL,URL,... in shard order")
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.001, help="Adam, dense half")
    ap.add_argument("--sparse-lr", type=float, default=0.1, help="Adagrad, embeddings")
    ap.add_argument("--emb-init", type=float, default=0.01)
    ap.add_argument("--emb-dim", type=int, default=16)
    ap.add_argument("--mlp-bot", type=widths, default=widths("13-512-256-64-16"))
    ap.add_argument("--mlp-top", type=widths, default=widths("512-256-1"))
    ap.add_argument("--table", default="dlrm_emb", help="Ember table name")
    ap.add_argument("--table-id", type=int, default=2)
    ap.add_argument("--prefetch", action="store_true", help="pull batch i+1 while batch i trains")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="read at most this many training rows")
    a = ap.parse_args()
    if a.batch <= 0 or a.epochs <= 0:
        ap.error("--batch and --epochs must be positive")
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    y, dense, keys = read_criteo(a.train, a.limit)
    ty, tdense, tkeys = read_criteo(a.test)
    try:
        c = ember.Client(a.servers.split(","), timeout_ms=60000)
        table = c.table(a.table, id=a.table_id, dim=a.emb_dim, optimizer="adagrad", lr=a.sparse_lr,
                        init=a.emb_init, eps=1e-10, seed=a.seed)
    except ember.EmberError as e:
        print(f"dlrm_criteo: {e}", file=sys.stderr)
        return 1
    model = DLRM(table, a.mlp_bot, a.mlp_top)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    bce = torch.nn.BCELoss()
    n = len(y)
    t0 = time.monotonic()
    seen = 0
    for _ in range(a.epochs):
        starts = list(range(0, n, a.batch))
        for i, s in enumerate(starts):
            kb = torch.from_numpy(keys[s:s + a.batch].view(np.int64))
            if a.prefetch and i + 1 < len(starts):
                nxt = keys[starts[i + 1]:starts[i + 1] + a.batch].reshape(-1, 1)
            p = model(torch.from_numpy(dense[s:s + a.batch]), kb)
            if a.prefetch and i + 1 < len(starts):
                model.emb.prefetch(nxt.view(np.int64))
            loss = bce(p, torch.from_numpy(y[s:s + a.batch]))
            opt.zero_grad()
            loss.backward()  # pushes the rows' gradients to Ember
            opt.step()
            c.step()
            seen += len(kb)
    train_s = time.monotonic() - t0
    probs = []
    with torch.no_grad():
        for s in range(0, len(ty), 8192):
            probs.append(model(torch.from_numpy(tdense[s:s + 8192]),
                               torch.from_numpy(tkeys[s:s + 8192].view(np.int64))).numpy())
    auc, ll = auc_logloss(ty, np.concatenate(probs))
    print(json.dumps({"auc": auc, "logloss": ll, "samples": seen, "train_seconds": train_s,
                      "samples_per_s": seen / train_s}))
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
