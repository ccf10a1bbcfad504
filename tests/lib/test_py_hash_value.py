#!/usr/bin/python3
"""test_py_hash_value: ember.hash_feature of a str / bytes value is ps-worker's key of that value
under a schema (docs/SCHEMA.md, "Values"). ps-worker trains (SGD) on a small CSV whose
categorical columns hold strings, hex values, empty fields and a multi-hot column, against a
real ps-server; Python declares its table first (ps-worker's id and spec) and pulls before
and after: the rows of hash_feature(f, s) for every value s of the data (each item of a bag
too) and of hash_missing(f) for the empty one-value fields moved, while the keys of strings
the data never had are still at their initial values. "" is the missing key, 8 hex digits
the int's key, bytes the str's key, and an array of strings the scalar form's keys.
docs/examples/predict_torch.py computes the same keys (where xxhash is installed)."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import BIN, SRC, Results, Servers, use_build_package  # noqa: E402

use_build_package()
import ember  # noqa: E402

TOKEN_SEED, KEY_SEED = 0x454d42544f4b, 0x43524954454f  # ps_sample.h's "EMBTOK", ps_criteo.h's "CRITEO"
SCHEMA = {"format": "csv", "header": True,
          "columns": [{"name": "click", "type": "label"},
                      {"name": "price", "type": "dense"},
                      {"name": "site", "type": "categorical"},
                      {"name": "ad", "type": "categorical"},
                      {"name": "tags", "type": "categorical", "separator": "|"}]}


def example_keys(r):
    """docs/examples/predict_torch.py's key of a value (its own token and XXH3, through Debian's
    python3-xxhash) is ember.hash_feature's, "0x" values too (int() would read them as hex)."""
    try:
        import xxhash  # noqa: F401
    except ImportError:
        print("skip predict_torch.py's keys: no xxhash module (deploy/install-deps.sh: python3-xxhash)")
        return
    sys.path.insert(0, os.path.join(SRC, "docs", "examples"))
    import predict_torch as pt
    values = [(0, "site_1"), (3, "München"), (2, "0000abcd"), (1, "0x00abcd"), (4, "+000abcd"), (5, "x")]
    got = [int(pt.xxh3_u64([((f << 33) ^ pt.token(v, TOKEN_SEED)) & pt.M64], KEY_SEED)[0])
           for f, v in values]
    r.check("predict_torch.py's keys are ember.hash_feature's",
            got == [ember.hash_feature(f, v) for f, v in values], str(values))


def main():
    r = Results()
    rng = np.random.default_rng(7)
    n, dim = 256, 8
    sites = [f"site_{i}" for i in range(6)] + ["München", "a,b"]  # UTF-8, a quoted comma
    ads = ["0000abcd", "DEADBEEF", "ad-x", "ad-y", ""]             # hex, strings, missing
    tags = ["news", "sport", "tv"]
    rows = []
    for _ in range(n):
        bag = [t for t in tags if rng.random() < 0.5]
        rows.append((int(rng.random() < 0.3), int(rng.integers(0, 100)), sites[rng.integers(len(sites))],
                     ads[rng.integers(len(ads))], "|".join(bag)))
    with tempfile.TemporaryDirectory() as d, Servers(1) as s:
        schema, train = os.path.join(d, "s.json"), os.path.join(d, "train.csv")
        # s.json trains the table s_emb (a schema names its table: docs/SCHEMA.md)
        with open(schema, "w") as f:
            json.dump(SCHEMA, f)
        with open(train, "w", encoding="utf-8") as f:
            f.write("click,price,site,ad,tags\n")
            for lab, price, site, ad, bag in rows:
                site = f'"{site}"' if "," in site else site
                f.write(f"{lab},{price},{site},{ad},{bag}\n")
        seen = sorted({(0, row[2]) for row in rows} | {(1, row[3]) for row in rows if row[3]} |
                      {(2, t) for row in rows for t in row[4].split("|") if t})
        unseen = [("site_99", 0), ("site_1", 1), ("News", 2), ("0000abce", 1)]
        keys = np.array([ember.hash_feature(f, v) for f, v in seen] + [ember.hash_feature(1, "")] +
                        [ember.hash_feature(f, v) for v, f in unseen], np.uint64)
        # ps-worker's table (id 1, its spec), declared first here: its rows before and after.
        spec = dict(id=1, dim=dim, optimizer="sgd", lr=0.5, init=0.01, seed=1, eps=1e-8,
                    consistency="sync", num_workers=1)
        with ember.Client(s.urls, timeout_ms=20000) as c:
            before = c.table("s_emb", **spec).pull(keys)
        flags = ["--schema", schema, "--batch", "32", "--sparse-opt", "sgd", "--sparse-lr", "0.5",
                 "--emb-dim", str(dim), "--mlp-bot", f"1-16-{dim}", "--mlp-top", "8-1",
                 "--threads", "1", "--timeout-ms", "20000"]
        out = subprocess.run([os.path.join(BIN, "ps-worker"), "--servers", s.urls[0], "--train", train,
                              *flags], capture_output=True, text=True, timeout=240)
        r.check("ps-worker trained", out.returncode == 0, out.stderr[-2000:] if out.returncode else "")
        with ember.Client(s.urls, timeout_ms=20000) as c:
            moved = np.any(c.table("s_emb", **spec).pull(keys) != before, axis=1)
        ns = len(seen)
        r.check("every string, hex and bag item of the data: ps-worker pushed hash_feature's key",
                bool(moved[:ns].all()), f"untouched: {[sv for sv, ok in zip(seen, moved) if not ok]}")
        r.check("an empty field: hash_feature(f, '') is hash_missing(f), ps-worker's key",
                ember.hash_feature(1, "") == ember.hash_missing(1) and bool(moved[ns]))
        r.check("values the data never had (or had in another column): rows at their initial values",
                not moved[ns + 1:].any(), str(moved[ns + 1:]))
        r.check("8 hex digits: the int's key, either case",
                ember.hash_feature(1, "0000abcd") == ember.hash_feature(1, 0xabcd) ==
                ember.hash_feature(1, "0000ABCD"))
        r.check("bytes: the str's UTF-8 key",
                ember.hash_feature(0, "München".encode()) == ember.hash_feature(0, "München"))
        example_keys(r)
        arr = ember.hash_feature(0, np.array([["site_1", "a,b"], ["München", ""]]))
        r.check("an array of strings: the scalar form's keys, its shape",
                arr.dtype == np.uint64 and arr.shape == (2, 2) and
                arr.reshape(-1).tolist() == [ember.hash_feature(0, v) for v in ["site_1", "a,b", "München", ""]])
    r.finish()


if __name__ == "__main__":
    main()
