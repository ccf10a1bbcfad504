#!/usr/bin/python3
"""torch_dlrm: the PyTorch yardstick for ps-worker — the same DLRM on the same Criteo TSV.

Model and data exactly as ps-worker with --hash-buckets N (worker/data/ps_criteo.h,
worker/model/ps_dlrm.h): dense d = log(1 + max(x, 0)) with missing = 0; categorical key
f*N + (int(token, 16) mod N), missing -> bucket 0 of its feature; ONE embedding table of 26*N
rows (so the keys are the parameter server's keys), dim 16, U(-A, A) init, sparse gradients
with torch.optim.Adagrad (eps 1e-10, accumulator 0: the server's adagrad); bottom MLP
13-512-256-64-16 (ReLU everywhere), dot interaction (strict lower triangle of the 27x27 Gram
matrix, concatenated with the bottom output: 16 + 351 = 367), top MLP 367-512-256-1 (ReLU but
the last), BCEWithLogits, dense Adam. Dense init as the DLRM reference (and ps_dlrm.c):
W ~ N(0, sqrt(2/(in+out))), b ~ N(0, sqrt(1/out)). One epoch in file order, no shuffling.

--hash-buckets 0 is ps-worker's open vocabulary (its default): every distinct (feature, token)
gets its own row, missing its own per feature, as ps_criteo_key does (a 64-bit hash there, a
dictionary built over train and test here: the same rows up to hash collisions). --shuffle
draws a seeded permutation of the training rows each epoch (ps-worker: --shuffle-buffer);
--shuffle-buffer N instead trains in exactly the order ps-worker --shuffle-buffer N --seed S
--batch B does (one rank; bench/e2e/ember_order.py), so the two see the same batches.

--schema FILE reads the data as ps-worker --schema FILE does (worker/data/ps_schema.h: tsv or
csv, header, label / dense / categorical / skip columns, log1p or no transform, multi-hot
columns split on their separator into bags with empty items dropped): the model's dense inputs
and embedding bags follow the schema, and a multi-hot bag is pooled by sum (or its column's
"pooling": "mean") with nn.EmbeddingBag, an empty bag pooling to zero, as ps-worker pools. With
--hash-buckets N every categorical value must be 8 hex digits (ps-datagen's): other strings are
hashed by ps-worker with its own hash, which this script does not reproduce.

Key design decision: the whole file is parsed into tensors BEFORE the clock starts, so
samples/s is training compute only (ps-worker's figure includes its pipelined reader).

--bf16 trains and evaluates the MLPs and the interaction under torch.autocast("cpu",
dtype=torch.bfloat16) (the loss on the FP32 logit; embeddings, master weights and optimizer
state stay FP32): PyTorch's mixed precision, the yardstick of ps-worker --precision bf16.

The optimizer defaults below are ps-worker's (--lr 0.001, --sparse-lr 0.02, --emb-init 0.01);
run.sh reads them from `ps-worker --help` and passes them explicitly so the two stay in sync.
"""
import argparse
import csv
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from sklearn.metrics import log_loss, roc_auc_score

import ember_order

NDENSE, NCAT = 13, 26


def parse_tsv(path, n_buckets, vocab=None):
    """Criteo TSV -> (dense float32 [n,13], keys int64 [n,26], labels float32 [n]).
    n_buckets 0: open vocabulary, rows numbered in order of first sight in `vocab`."""
    labels, dense, keys = [], [], []
    offs = [f * n_buckets for f in range(NCAT)]
    if not n_buckets:
        key = lambda f, t: vocab.setdefault((f, t), len(vocab))
    with open(path, "r") as fh:
        for ln, line in enumerate(fh, 1):
            p = line.rstrip("\r\n").split("\t")
            if len(p) != 1 + NDENSE + NCAT:
                sys.exit(f"{path}:{ln}: {len(p)} fields, want 40")
            labels.append(float(p[0]))
            dense.append([math.log1p(max(int(x), 0)) if x else 0.0 for x in p[1:14]])
            keys.append([offs[f] + (int(t, 16) % n_buckets if t else 0)
                         for f, t in enumerate(p[14:])] if n_buckets else
                        [key(f, t) for f, t in enumerate(p[14:])])
    # log1p in double, rounded to float once (as ps_criteo_dense_transform)
    return (torch.tensor(np.asarray(dense, dtype=np.float64).astype(np.float32)),
            torch.tensor(np.asarray(keys, dtype=np.int64)),
            torch.tensor(np.asarray(labels, dtype=np.float32)))


def parse_schema_file(path, schema, n_buckets, vocab):
    """A file as its JSON schema says -> (dense float32 [n, ND], (keys int64 [K], bag offsets
    int64 [n*NC + 1]), labels float32 [n]); bag i*NC + f holds keys[off[i*NC+f]:off[i*NC+f+1]]."""
    cols = schema["columns"]
    cats = [c for c in cols if c["type"] == "categorical"]
    nc = len(cats)
    labels, dense, keys, off = [], [], [], [0]

    def key(f, t):
        if not n_buckets:
            return vocab.setdefault((f, t), len(vocab))
        if t is None:
            return f * n_buckets
        try:
            return f * n_buckets + int(t, 16) % n_buckets if len(t) == 8 else sys.exit(
                f"{path}: --hash-buckets with --schema needs 8-hex-digit values, got {t!r}")
        except ValueError:
            sys.exit(f"{path}: --hash-buckets with --schema needs 8-hex-digit values, got {t!r}")

    with open(path, "r", newline="") as fh:
        lines = (l.rstrip("\r\n") for l in fh)
        rows = csv.reader(lines) if schema.get("format") == "csv" else (l.split("\t") for l in lines)
        for ln, p in enumerate(rows, 1):
            if ln == 1 and schema.get("header"):
                continue
            if len(p) != len(cols):
                sys.exit(f"{path}:{ln}: {len(p)} fields, the schema has {len(cols)}")
            d, f = [], 0
            for c, v in zip(cols, p):
                t = c["type"]
                if t == "label":
                    labels.append(float(v))
                elif t == "dense":
                    x = float(v) if v else 0.0
                    d.append(math.log1p(max(x, 0.0)) if v and c.get("transform", "log1p") == "log1p" else x)
                elif t == "categorical":
                    if "separator" in c:
                        keys.extend(key(f, it) for it in v.split(c["separator"]) if it)
                    else:
                        keys.append(key(f, v if v else None))
                    off.append(len(keys))
                    f += 1
            dense.append(d)
    return (torch.tensor(np.asarray(dense, dtype=np.float64).reshape(len(labels), -1).astype(np.float32)),
            (torch.tensor(np.asarray(keys, dtype=np.int64)), np.asarray(off, dtype=np.int64), nc),
            torch.tensor(np.asarray(labels, dtype=np.float32)))


def bags_of(kb, o):
    """The keys and bag offsets of samples o (a tensor of indices) of (keys, offsets, NC)."""
    keys, off, nc = kb
    idx = (o.numpy()[:, None] * nc + np.arange(nc)).ravel()
    starts, lens = off[idx], off[idx + 1] - off[idx]
    boff = np.concatenate([[0], np.cumsum(lens)[:-1]]) if len(lens) else np.zeros(0, np.int64)
    pos = np.repeat(starts - boff, lens) + np.arange(int(lens.sum()))
    return keys[torch.from_numpy(pos)], torch.from_numpy(boff)


def mlp(widths, last_relu):
    layers = []
    for i in range(len(widths) - 1):
        lin = nn.Linear(widths[i], widths[i + 1])
        with torch.no_grad():
            lin.weight.normal_(0.0, math.sqrt(2.0 / (widths[i] + widths[i + 1])))
            lin.bias.normal_(0.0, math.sqrt(1.0 / widths[i + 1]))
        layers.append(lin)
        if i < len(widths) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, rows, dim, bot, top, emb_init, ncat=NCAT, pooling=None):
        super().__init__()
        # pooling "sum"/"mean": multi-hot bags (EmbeddingBag over flat keys and offsets)
        self.emb = (nn.EmbeddingBag(rows, dim, mode=pooling, sparse=True) if pooling else
                    nn.Embedding(rows, dim, sparse=True))
        self.ncat, self.dim = ncat, dim
        with torch.no_grad():
            self.emb.weight.uniform_(-emb_init, emb_init)
        self.bot = mlp(bot, last_relu=True)
        f = 1 + ncat
        self.top = mlp([dim + f * (f - 1) // 2] + top, last_relu=False)
        li, lj = torch.tril_indices(f, f, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)

    def forward(self, dense, keys):
        x = self.bot(dense)                                   # [B, d]
        if isinstance(keys, tuple):                           # (flat keys, bag offsets)
            e = self.emb(keys[0], keys[1]).view(-1, self.ncat, self.dim)
        else:
            e = self.emb(keys)
        t = torch.cat([x.unsqueeze(1), e], 1)                 # [B, 1 + NC, d]
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([x, z], 1)).squeeze(1)      # logits [B]


def blas_loaded():
    libs = set()
    with open("/proc/self/maps") as fh:
        for line in fh:
            lib = line.split()[-1]
            # torch's own BLAS, not the copies scipy/sklearn bring along in dist-packages
            if ("blas" in lib.lower() or "mkl" in lib.lower()) and "dist-packages" not in lib:
                libs.add(lib)
    return sorted(libs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--hash-buckets", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=0.001, help="dense Adam (ps-worker --lr)")
    ap.add_argument("--sparse-lr", type=float, default=0.02, help="sparse Adagrad (ps-worker --sparse-lr)")
    ap.add_argument("--emb-init", type=float, default=0.01, help="U(-A, A) (ps-worker --emb-init)")
    ap.add_argument("--emb-dim", type=int, default=16)
    ap.add_argument("--mlp-bot", default="13-512-256-64-16")
    ap.add_argument("--mlp-top", default="512-256-1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--shuffle", action="store_true", help="a seeded permutation of the rows per epoch")
    ap.add_argument("--schema", help="read the data as ps-worker --schema FILE (JSON) does")
    ap.add_argument("--bf16", action="store_true",
                    help="torch.autocast bf16 around the model (ps-worker --precision bf16)")
    ap.add_argument("--shuffle-buffer", type=int, default=0,
                    help="train in ps-worker --shuffle-buffer N's order (bench/e2e/ember_order.py)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.time()
    vocab = {}
    ncat, pooling = NCAT, None
    if a.schema:
        schema = json.load(open(a.schema))
        cats = [c for c in schema["columns"] if c["type"] == "categorical"]
        ncat = len(cats)
        pooling = next((c.get("pooling", "sum") for c in cats if "separator" in c), "sum")
        parse = lambda p: parse_schema_file(p, schema, a.hash_buckets, vocab)
        batch_keys = bags_of
    else:
        parse = lambda p: parse_tsv(p, a.hash_buckets, vocab)
        batch_keys = lambda k, o: k[o]
    xtr, ktr, ytr = parse(a.train)
    xte, kte, yte = parse(a.test)
    parse_s = time.time() - t0

    model = DLRM(ncat * a.hash_buckets if a.hash_buckets else len(vocab), a.emb_dim, [int(w) for w in a.mlp_bot.split("-")],
                 [int(w) for w in a.mlp_top.split("-")], a.emb_init, ncat, pooling)
    dense_params = list(model.bot.parameters()) + list(model.top.parameters())
    opt_d = torch.optim.Adam(dense_params, lr=a.lr)
    opt_s = torch.optim.Adagrad([model.emb.weight], lr=a.sparse_lr, eps=1e-10,
                                initial_accumulator_value=0.0)
    lossf = nn.BCEWithLogitsLoss()

    n = len(ytr)
    t1 = time.time()
    model.train()
    gen = torch.Generator().manual_seed(a.seed)
    for ep in range(a.epochs):
        if a.shuffle_buffer:
            order = torch.tensor(ember_order.shuffle_order(n, a.batch, a.seed, a.shuffle_buffer, epoch=ep))
        else:
            order = torch.randperm(n, generator=gen) if a.shuffle else torch.arange(n)
        for i in range(0, n, a.batch):
            o = order[i:i + a.batch]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                logits = model(xtr[o], batch_keys(ktr, o))
            loss = lossf(logits.float(), ytr[o])
            opt_d.zero_grad()
            opt_s.zero_grad()
            loss.backward()
            opt_d.step()
            opt_s.step()
    n *= a.epochs
    train_s = time.time() - t1

    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
        p = torch.cat([torch.sigmoid(model(xte[i:i + 8192], batch_keys(kte, torch.arange(i, min(i + 8192, len(yte))))).float())
                       for i in range(0, len(yte), 8192)]).double().numpy()
    y = yte.numpy()
    res = {
        "trainer": "torch", "torch": torch.__version__, "blas": blas_loaded(),
        "threads": a.threads, "batch": a.batch, "hash_buckets": a.hash_buckets,
        "precision": "bf16" if a.bf16 else "fp32",
        "lr": a.lr, "sparse_lr": a.sparse_lr, "emb_init": a.emb_init, "epochs": a.epochs,
        "shuffle": a.shuffle, "shuffle_buffer": a.shuffle_buffer, "schema": a.schema,
        "samples": n, "train_seconds": train_s, "samples_per_s": n / train_s,
        "parse_seconds": parse_s, "eval_samples": len(y),
        "auc": float(roc_auc_score(y, p)),
        "logloss": float(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7), labels=[0, 1])),
        "accuracy": float(np.mean((p > 0.5) == (y > 0.5))),
    }
    print(f"torch_dlrm: {n} samples in {train_s:.1f} s ({res['samples_per_s']:.0f} samples/s, "
          f"{a.threads} threads; parse {parse_s:.1f} s); test AUC {res['auc']:.4f} logloss "
          f"{res['logloss']:.4f} accuracy {res['accuracy']:.4f}; BLAS: {', '.join(res['blas']) or 'none found'}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()
