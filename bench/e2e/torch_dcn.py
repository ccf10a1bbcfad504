#!/usr/bin/python3
"""torch_dcn: torch_dlrm.py's PyTorch yardstick with MLPerf DLRMv2's DCNv2 interaction in place
of the dot interaction — what `ps-worker --interaction dcn` trains, on the same data and keys.

The cross network is TorchRec's LowRankCrossNet (CrossNet for --dcn-rank 0), as
torchrec/modules/crossnet.py computes it: x0 = cat(bottom output, the 26 embedding rows)
(D = 27 * dim), x_{l+1} = x0 * (linear(linear(x_l, V_l), U_l) + b_l) + x_l, V_l / U_l (or
W_l) xavier-normal, b_l zero; the top MLP takes x_L (its input width D). Everything else —
parsing, keys, init, optimizers (the cross layers go with the dense Adam), the epoch, the
metrics, the JSON — is torch_dlrm.py's own: this file swaps its model class and runs its main.

    bench/e2e/torch_dcn.py --dcn-layers 3 --dcn-rank -1 [torch_dlrm.py's flags...]
--dcn-rank -1 is ps-worker's default, D/4."""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_dlrm as T  # noqa: E402

SHAPE = {"layers": 3, "rank": -1}


class CrossNet(nn.Module):
    def __init__(self, d, layers, rank):
        super().__init__()
        shapes = [(rank, d), (d, rank)] if rank > 0 else [(d, d)]
        self.mats = nn.ParameterList(
            [nn.Parameter(nn.init.xavier_normal_(torch.empty(*s))) for _ in range(layers) for s in shapes])
        self.bias = nn.ParameterList([nn.Parameter(torch.zeros(d)) for _ in range(layers)])
        self.per = len(shapes)

    def forward(self, x0):
        xl = x0
        for l, b in enumerate(self.bias):
            m = self.mats[l * self.per:(l + 1) * self.per]
            xw = xl
            for w in m:  # V then U (low rank), or W
                xw = nn.functional.linear(xw, w)
            xl = x0 * (xw + b) + xl
        return xl


class DCN(nn.Module):
    """torch_dlrm.DLRM's constructor and forward, with the cross network as the interaction.
    The cross network sits in self.top, so torch_dlrm's dense optimizer (bot + top) trains it."""

    def __init__(self, rows, dim, bot, top, emb_init):
        super().__init__()
        self.emb = nn.Embedding(rows, dim, sparse=True)
        with torch.no_grad():
            self.emb.weight.uniform_(-emb_init, emb_init)
        self.bot = T.mlp(bot, last_relu=True)
        d = (1 + T.NCAT) * dim
        rank = SHAPE["rank"] if SHAPE["rank"] >= 0 else max(1, d // 4)
        self.top = nn.Sequential(CrossNet(d, SHAPE["layers"], rank), T.mlp([d] + top, last_relu=False))

    def forward(self, dense, keys):
        x0 = torch.cat([self.bot(dense).unsqueeze(1), self.emb(keys)], 1).flatten(1)  # [B, D]
        return self.top(x0).squeeze(1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--dcn-layers", type=int, default=3)
    ap.add_argument("--dcn-rank", type=int, default=-1)
    a, rest = ap.parse_known_args()
    SHAPE.update(layers=a.dcn_layers, rank=a.dcn_rank)
    T.DLRM = DCN
    sys.argv = [sys.argv[0]] + rest
    T.main()
