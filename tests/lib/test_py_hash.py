#!/usr/bin/python3
"""test_py_hash: ember.hash_feature / hash_missing are ps-worker's keys. ps-worker trains
(SGD) on a small Criteo file against a real ps-server; Python then attaches to its table
(id 1, "criteo_emb", the same spec) and pulls: the rows of hash_feature(f, v) for every (f, v) of the
data, and of hash_missing(f) for the empty fields, moved away from their initial values
(pulled from a twin table of the same seed), while the keys of values the data never had are
still at theirs. The array form gives the scalar form's keys."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import BIN, Results, Servers, use_build_package  # noqa: E402

use_build_package()
import ember  # noqa: E402


def main():
    r = Results()
    rng = np.random.default_rng(5)
    n, dim = 256, 8
    vals = rng.integers(0, 2**32, size=(n, 26), dtype=np.uint64) % 7 * 0x1111111  # 7 values a feature
    missing = rng.random((n, 26)) < 0.05
    with tempfile.TemporaryDirectory() as d, Servers(1) as s:
        train = os.path.join(d, "train.tsv")
        with open(train, "w") as f:
            for i in range(n):
                dense = [str(int(x)) for x in rng.integers(0, 100, size=13)]
                cats = ["" if missing[i, j] else "%08x" % vals[i, j] for j in range(26)]
                f.write("\t".join([str(int(rng.random() < 0.3))] + dense + cats) + "\n")
        out = subprocess.run([os.path.join(BIN, "ps-worker"), "--servers", s.urls[0], "--train", train,
                              "--batch", "32", "--sparse-opt", "sgd", "--sparse-lr", "0.5",
                              "--emb-dim", str(dim), "--mlp-bot", f"13-16-{dim}", "--mlp-top", "8-1",
                              "--threads", "1", "--progress-every", "100", "--timeout-ms", "20000"],
                             capture_output=True, text=True, timeout=240)
        r.check("ps-worker trained", out.returncode == 0, out.stderr[-2000:] if out.returncode else "")
        c = ember.Client(s.urls, timeout_ms=20000)
        spec = dict(dim=dim, optimizer="sgd", lr=0.5, init=0.01, seed=1, eps=1e-8,
                    consistency="sync", num_workers=1)
        emb = c.table("criteo_emb", id=1, **spec)
        twin = c.table("twin", id=2, **spec)
        seen = [(f, int(v)) for f in range(26) for v in sorted(set(vals[~missing[:, f], f].tolist()))]
        keys = np.array([ember.hash_feature(f, v) for f, v in seen], np.uint64)
        moved = np.any(emb.pull(keys) != twin.pull(keys), axis=1)
        r.check("every (feature, value) of the data: ps-worker pushed hash_feature's key",
                bool(moved.all()), f"{int((~moved).sum())} of {len(seen)} rows untouched")
        mkeys = np.array([ember.hash_missing(f) for f in range(26) if missing[:, f].any()], np.uint64)
        r.check("hash_missing: ps-worker's key of an empty field",
                len(mkeys) > 0 and bool(np.any(emb.pull(mkeys) != twin.pull(mkeys), axis=1).all()))
        unseen = np.array([ember.hash_feature(f, 0x1111111 * 7 + 1 + f) for f in range(26)] +
                          [ember.hash_feature(f + 1, seen[0][1]) for f in range(25, 26)], np.uint64)
        r.check("values the data never had: rows at their initial values",
                np.array_equal(emb.pull(unseen), twin.pull(unseen)))
        arr = ember.hash_feature(3, np.array([v for f, v in seen if f == 3], np.uint32))
        r.check("the array form equals the scalar form",
                arr.dtype == np.uint64 and arr.tolist() == [ember.hash_feature(3, v) for f, v in seen if f == 3])
        c.close()
    r.finish()


if __name__ == "__main__":
    main()
