#!/usr/bin/python3
"""replay_run: torch_dlrm.py's DLRM trained from ps-worker's own random draws (issue 19).

ps-worker and bench/e2e/torch_dlrm.py take the same steps from the same state in the same order
(tests/worker/test_torch_steps.py), so an AUC gap between them can only come from their random
draws: the initial weights and the order of the rows. This trains the PyTorch model from
ps-worker's initial state (a checkpoint of a run with both learning rates 0 over train and test,
exported by ps-export: the dense weights and the initial row of every key) in ps-worker's
--shuffle-buffer order (ember_order.py), so its AUC is what ps-worker's run of the same --seed
should give, up to float rounding carried through the epoch.

Keys: the runs use --hash-buckets 4294967296 (a 32-bit hex value v of feature f is key
f * 2^32 + v: one row per distinct value, like the open vocabulary, and computable here).

    replay_run.py --train T --test T2 --schema S --init EXPORT --seed S --shuffle-buffer N
                  --batch B --lr LR --sparse-lr SLR [--init-parts PARTS] [--json OUT]

--out-bias B sets the output layer's bias (one N(0, 1) draw in both inits, the DLRM reference's
sqrt(1/out) with out = 1) to B after the init: the seed-to-seed spread it causes (RESULTS-e2e.md,
session mhinit) can be taken out of a comparison of the other draws.

--init-parts (issue 19, session mhinit) takes only some of the export: a comma list of emb (the
embedding rows), bot, top (the bottom / top MLP's weights and biases), or all (the default:
emb,bot,top, the replay above), dense (bot,top), none. What is not taken is torch_dlrm.py's own
init of the same --seed (torch.manual_seed(seed) before the model is built, as torch_dlrm.py
does), so `--init-parts none` is `torch_dlrm.py --shuffle-buffer N --seed S` (RUNS torch-buf
of generalise.sh) and each part can be paired against it with only that part's draws changed.
Design decision: the model, parser and optimizers are torch_dlrm.py's (imported), so this is the
yardstick itself with only the draws replaced."""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
from sklearn.metrics import roc_auc_score

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_order  # noqa: E402
import torch_dlrm as T  # noqa: E402

HB = 1 << 32


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in ("--train", "--test", "--schema"):
        ap.add_argument(f, required=True)
    ap.add_argument("--init", help="ps-export's output of the rates-0 run (not needed with --init-parts none)")
    ap.add_argument("--init-parts", default="all",
                    help="what to take from --init: comma list of emb, bot, top; all, dense, none")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shuffle-buffer", type=int, default=32768)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--sparse-lr", type=float, default=0.1)
    ap.add_argument("--mlp-bot", default="13-512-256-64-16")
    ap.add_argument("--mlp-top", default="512-256-1")
    ap.add_argument("--out-bias", type=float,
                    help="set the top MLP's last bias (the initial logit offset) to this after the init")
    ap.add_argument("--json")
    a = ap.parse_args()
    alias = {"all": ["emb", "bot", "top"], "dense": ["bot", "top"], "none": []}
    parts = set()
    for w in a.init_parts.split(","):
        if w not in alias and w not in ("emb", "bot", "top"):
            ap.error(f"--init-parts: unknown part {w!r} (emb, bot, top, all, dense, none)")
        parts.update(alias.get(w, [w]))
    if parts and not a.init:
        ap.error("--init is needed unless --init-parts none")
    torch.set_num_threads(1)
    schema, vocab = json.load(open(a.schema)), {}
    xtr, ktr, ytr = T.parse_schema_file(a.train, schema, 0, vocab)
    xte, kte, yte = T.parse_schema_file(a.test, schema, 0, vocab)
    nc = ktr[2]
    bot = [int(w) for w in a.mlp_bot.split("-")]
    # torch_dlrm.py's own init of this seed (what a part not taken from --init keeps)
    torch.manual_seed(a.seed)
    m = T.DLRM(len(vocab), bot[-1], bot, [int(w) for w in a.mlp_top.split("-")], 0.01, nc, "sum")
    with torch.no_grad():
        if "emb" in parts:
            keys = np.load(os.path.join(a.init, "embeddings", "table_1.keys.npy"))
            vals = np.load(os.path.join(a.init, "embeddings", "table_1.values.npy"))
            at = {int(k): i for i, k in enumerate(keys)}
            idx = np.array([at[f * HB + int(t, 16)] for (f, t) in vocab], dtype=np.int64)
            m.emb.weight.copy_(torch.from_numpy(vals[idx]))
        for part in ("bot", "top"):
            if part not in parts:
                continue
            for i, l in enumerate(x for x in getattr(m, part) if isinstance(x, nn.Linear)):
                l.weight.copy_(torch.from_numpy(np.load(f"{a.init}/dense/{part}.{i}.weight.npy")))
                l.bias.copy_(torch.from_numpy(np.load(f"{a.init}/dense/{part}.{i}.bias.npy")))
        if a.out_bias is not None:
            [x for x in m.top if isinstance(x, nn.Linear)][-1].bias.fill_(a.out_bias)
    od = torch.optim.Adam(list(m.bot.parameters()) + list(m.top.parameters()), lr=a.lr)
    osp = torch.optim.Adagrad([m.emb.weight], lr=a.sparse_lr, eps=1e-10,
                              initial_accumulator_value=0.0)
    order = torch.tensor(ember_order.shuffle_order(len(ytr), a.batch, a.seed, a.shuffle_buffer))
    lossf = nn.BCEWithLogitsLoss()
    for i in range(0, len(ytr), a.batch):
        o = order[i:i + a.batch]
        loss = lossf(m(xtr[o], T.bags_of(ktr, o)), ytr[o])
        od.zero_grad()
        osp.zero_grad()
        loss.backward()
        od.step()
        osp.step()
    m.eval()
    with torch.no_grad():
        p = torch.sigmoid(m(xte, T.bags_of(kte, torch.arange(len(yte))))).double().numpy()
    res = {"trainer": "torch-replay", "seed": a.seed, "auc": float(roc_auc_score(yte.numpy(), p)),
           "init_parts": sorted(parts), "out_bias": a.out_bias}
    note = "" if parts == set(alias["all"]) else f" (init parts: {','.join(sorted(parts)) or 'none'})"
    print(f"replay_run: seed {a.seed} test AUC {res['auc']:.5f}{note}")
    if a.json:
        json.dump(res, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
