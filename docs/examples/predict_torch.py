#!/usr/bin/env python3
"""Rebuild an Ember model in PyTorch from `ps-export`'s files and score a data file with it.

    ps-export --checkpoint CKPT_DIR --out EXPORT_DIR
    python3 predict_torch.py EXPORT_DIR INPUT SCORES

Writes one probability per data line of INPUT (ps-predict's output, to float rounding; a line
this sketch cannot parse stops it). Both interactions: dot, and DCN (the cross layers'
V, U, bias or full-rank W from the manifest's model.cross). Everything comes from
EXPORT_DIR/manifest.json; rows exported as int8 (`ps-export --quantize int8`: FBGEMM's fused
row-wise layout, dim uint8 then a float32 scale and bias per row) are dequantized here,
q * scale + bias, as the manifest's `row_type` and `layout` say; the key
hashing and the initial row of a key the checkpoint has no row for are those of
docs/CHECKPOINTS.md. Needs numpy and torch; categorical values that are not 8 hex digits also
need the `xxhash` module for their token: Debian's python3-xxhash (deploy/install-deps.sh
installs it), or `pip install xxhash` elsewhere."""
import csv
import json
import math
import os
import sys

import numpy as np
import torch

M64 = (1 << 64) - 1


def xxh3_u64(v, seed):
    """XXH3-64 of the 8 little-endian bytes of each uint64 in v (XXH3's 4-to-8-byte path)."""
    v = np.asarray(v, dtype=np.uint64)
    s = seed & M64
    s ^= (int.from_bytes((s & 0xffffffff).to_bytes(4, "little"), "big") << 32)
    bitflip = np.uint64(((0x1cad21f72c81017c ^ 0xdb979083e96dd4de) - s) & M64)
    lo, hi = v & np.uint64(0xffffffff), v >> np.uint64(32)
    h = (hi + (lo << np.uint64(32))) ^ bitflip

    def rotl(x, r):
        return (x << np.uint64(r)) | (x >> np.uint64(64 - r))
    h = h ^ rotl(h, 49) ^ rotl(h, 24)
    h = h * np.uint64(0x9FB21C651E98DF25)
    h = h ^ ((h >> np.uint64(35)) + np.uint64(8))
    h = h * np.uint64(0x9FB21C651E98DF25)
    return h ^ (h >> np.uint64(28))


def splitmix64(x):
    x = x + np.uint64(0x9e3779b97f4a7c15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return x ^ (x >> np.uint64(31))


def init_rows(table, keys):
    """The store's initial rows (ps_store_init_row) of keys with no stored row."""
    dim = table["dim"]
    if table["init"] == "zero":
        return np.zeros((len(keys), dim), np.float32)
    if table["init"] != "uniform":
        raise SystemExit(f"initializer {table['init']}: not in this sketch")
    base = xxh3_u64(keys, table["seed"])[:, None]
    j = np.arange(dim, dtype=np.uint64)[None, :]
    r = splitmix64(base + j * np.uint64(0x9e3779b97f4a7c15))
    a, b = float(np.float32(table["init_a"])), float(np.float32(table["init_b"]))
    u = (r >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    v = (a + (b - a) * u).astype(np.float32)
    return np.where(v >= np.float32(b), np.nextafter(np.float32(b), np.float32(a)), v)


def token(value, seed):
    # Exactly 8 hex digits (int() would also take "0x", "+", "_" and spaces: hashed by Ember).
    if len(value) == 8 and all(ch in "0123456789abcdefABCDEF" for ch in value):
        return int(value, 16)
    try:
        import xxhash  # only for values that are not 8 hex digits
    except ImportError:
        raise SystemExit(f"predict_torch.py: value {value!r} is not 8 hex digits: its token needs "
                         "the xxhash module (Debian: apt install python3-xxhash; else pip install xxhash)")
    return xxhash.xxh3_64_intdigest(value.encode(), seed) | (1 << 63)


class Model(torch.nn.Module):
    def __init__(self, man, root):
        super().__init__()
        m = man["model"]
        if m["interaction"] not in ("dot", "dcn"):
            raise SystemExit(f"interaction {m['interaction']}: not in this sketch")
        # DCN (DCNv2, TorchRec's LowRankCrossNet): per layer V [R, D], U [D, R], bias [D], or
        # full rank (R = 0) W [D, D]; x_{l+1} = x0 * (U (V x_l) + b) + x_l
        load = lambda f: torch.from_numpy(np.load(os.path.join(root, f)))
        self.cross = [{k: load(c[k]) for k in ("V", "U", "W", "bias") if k in c}
                      for c in m.get("cross", [])]
        self.layers = torch.nn.ModuleList()
        self.relu, self.nbot = [], len(m["mlp_bot"].split("-")) - 1
        for layer in m["layers"]:
            lin = torch.nn.Linear(layer["in"], layer["out"])
            lin.weight.data = torch.from_numpy(np.load(os.path.join(root, layer["weight"])))
            lin.bias.data = torch.from_numpy(np.load(os.path.join(root, layer["bias"])))
            self.layers.append(lin)
            self.relu.append(layer["relu"])

    def forward(self, dense, pooled):
        x = dense
        for i in range(self.nbot):
            x = self.layers[i](x)
            x = torch.relu(x) if self.relu[i] else x
        if self.cross:                                       # DCN: top input = x_L
            x0 = h = torch.cat([x] + pooled, dim=1)          # [n, (1 + S) * dim]
            for c in self.cross:
                wx = h @ c["W"].T if "W" in c else (h @ c["V"].T) @ c["U"].T
                h = x0 * (wx + c["bias"]) + h
        else:
            t = torch.stack([x] + pooled, dim=1)             # [n, F, dim]
            z = torch.bmm(t, t.transpose(1, 2))
            li, lj = torch.tril_indices(t.shape[1], t.shape[1], offset=-1)
            h = torch.cat([x, z[:, li, lj]], dim=1)          # i > j, row by row
        for i in range(self.nbot, len(self.layers)):
            h = self.layers[i](h)
            h = torch.relu(h) if self.relu[i] else h
        return torch.sigmoid(h[:, 0])


def load_rows(root, table):
    """The table's rows as float32 [rows, dim]: as exported, or dequantized (row_type int8)."""
    values = np.load(os.path.join(root, table["values"]))
    if table.get("row_type", "f32") == "f32":
        return values
    lay, dim = table["layout"], table["dim"]
    assert table["row_type"] == "int8" and lay["name"] == "fused-rowwise-int8", table
    assert values.dtype == np.uint8 and values.shape[1] == lay["row_bytes"] == dim + 8
    scale = values[:, lay["scale_offset"]:lay["scale_offset"] + 4].copy().view("<f4")
    bias = values[:, lay["bias_offset"]:lay["bias_offset"] + 4].copy().view("<f4")
    return (values[:, :dim].astype(np.float32) * scale + bias).astype(np.float32)


def main(root, inp, outp):
    man = json.load(open(os.path.join(root, "manifest.json")))
    sc, hs, table = man["schema"], man["hashing"], man["tables"][0]
    keys = np.load(os.path.join(root, table["keys"]))
    values = load_rows(root, table)
    order = np.argsort(keys)
    keys, values = keys[order], values[order]
    model = Model(man, root)
    feats = hs["features"]

    def key(f, tok):
        n = feats[f]["buckets"]
        if n:
            return feats[f]["base"] + (0 if tok == hs["missing_token"] else tok % n)
        return int(xxh3_u64([((f << 33) ^ tok) & M64], hs["key_seed"])[0])

    cols = sc["columns"]
    lines = open(inp, newline="").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if sc["header"]:
        lines = lines[1:]
    reader = csv.reader(lines) if sc["format"] == "csv" else (l.split("\t") for l in lines)
    dense, bags = [], []
    for fields in reader:
        d = [0.0] * sc["dense"]
        b = [[] for _ in range(sc["categorical"])]
        for c, v in zip(cols, fields):
            if c["type"] == "dense" and v != "":
                x = float(v)
                d[c["index"]] = math.log1p(max(x, 0.0)) if c["transform"] == "log1p" else x
            elif c["type"] == "categorical":
                f = c["index"]
                if "separator" in c:
                    b[f] = [key(f, token(s, hs["token_seed"])) for s in v.split(c["separator"]) if s]
                else:
                    b[f] = [key(f, token(v, hs["token_seed"]) if v else hs["missing_token"])]
        dense.append(d if sc["dense"] else [0.0])
        bags.append(b)
    # the rows of every key used: stored, else the initial row
    used = np.unique(np.array([k for b in bags for bag in b for k in bag] or [0], np.uint64))
    pos = np.clip(np.searchsorted(keys, used), 0, max(len(keys) - 1, 0))
    found = (keys[pos] == used) if len(keys) else np.zeros(len(used), bool)
    rows = init_rows(table, used)
    rows[found] = values[pos[found]]
    emb = torch.from_numpy(rows)
    pooled = []
    mean = {c["index"]: c.get("pooling") == "mean" for c in cols if c["type"] == "categorical"}
    for f in range(sc["categorical"]):
        idx = [int(np.searchsorted(used, np.uint64(k))) for b in bags for k in b[f]]
        offs = np.cumsum([0] + [len(b[f]) for b in bags])[:-1]
        pooled.append(torch.nn.functional.embedding_bag(
            torch.tensor(idx, dtype=torch.long), emb, torch.tensor(offs, dtype=torch.long),
            mode="mean" if mean[f] else "sum"))
    dense = torch.tensor(np.array(dense, np.float64).astype(np.float32))
    with torch.no_grad():
        p = model(dense, pooled).numpy()
    with open(outp, "w") as f:
        f.writelines(f"{x:.9g}\n" for x in p)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
