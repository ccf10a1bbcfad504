#!/usr/bin/python3
"""bench/dense/mh_csv_gen.py: a seeded multi-hot click log in CSV, made independently of
ps-datagen (numpy only), for quality checks on data Ember's own generator did not shape.

Columns (header line; docs/SCHEMA.md schema written beside it): click (label), n1..n4 (counts:
geometric, some empty), site, app, user (single categorical, Zipf-like over 200, 2,000, 50,000
ids), tags and topics (multi-hot, '|'-separated bags of 1..6 and 0..3 ids over 3,000 and 300).
The label's logit: 0.35 log1p of each count, an effect per id of every single column
(N(0, 0.6)), the mean of the tag effects and the sum of the topic effects, and a planted
pairwise term site x topic (a low-rank product of 4-vectors) that only an interaction can
fit, with the intercept set for ~25% positives.

    mh_csv_gen.py --rows N --test-rows N --seed S --out train.csv --test-out test.csv
                  --schema-out schema.json"""
import argparse
import json

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--test-rows", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", required=True)
    ap.add_argument("--test-out", required=True)
    ap.add_argument("--schema-out", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    vocab = {"site": 200, "app": 2000, "user": 50000}
    eff = {c: rng.normal(0, 0.6, v) for c, v in vocab.items()}
    tag_eff, topic_eff = rng.normal(0, 0.8, 3000), rng.normal(0, 0.5, 300)
    site_f, topic_f = rng.normal(0, 0.5, (200, 4)), rng.normal(0, 0.5, (300, 4))

    def zipf(v, n):  # a heavy head, a long tail: rank ~ v * u^3
        return np.minimum((v * rng.random(n) ** 3).astype(int), v - 1)

    n = a.rows + a.test_rows
    counts = rng.geometric(0.15, (n, 4)) - 1
    ids = {c: zipf(v, n) for c, v in vocab.items()}
    logit = 0.35 * np.log1p(counts).sum(1) + sum(eff[c][ids[c]] for c in vocab)
    tags, topics = [], []
    for i in range(n):
        t = zipf(3000, rng.integers(1, 7))
        p = zipf(300, rng.integers(0, 4))
        tags.append(t)
        topics.append(p)
        logit[i] += tag_eff[t].mean() + topic_eff[p].sum() + (site_f[ids["site"][i]] * topic_f[p]).sum()
    logit -= np.quantile(logit, 0.75)  # ~25% positives
    y = rng.random(n) < 1 / (1 + np.exp(-logit))
    empty = rng.random((n, 4)) < 0.1
    header = "click,n1,n2,n3,n4,site,app,user,tags,topics\n"
    for path, lo, hi in ((a.out, 0, a.rows), (a.test_out, a.rows, n)):
        with open(path, "w") as f:
            f.write(header)
            for i in range(lo, hi):
                cnt = ["" if empty[i, j] else str(counts[i, j]) for j in range(4)]
                f.write(",".join([str(int(y[i]))] + cnt + [f"s{ids['site'][i]}", f"a{ids['app'][i]}",
                                                          f"u{ids['user'][i]}",
                                                          "|".join(f"t{t}" for t in tags[i]),
                                                          "|".join(f"p{t}" for t in topics[i])]) + "\n")
    cols = [{"name": "click", "type": "label"}]
    cols += [{"name": f"n{j}", "type": "dense"} for j in range(1, 5)]
    cols += [{"name": c, "type": "categorical"} for c in ("site", "app", "user")]
    cols += [{"name": "tags", "type": "categorical", "separator": "|"},
             {"name": "topics", "type": "categorical", "separator": "|"}]
    with open(a.schema_out, "w") as f:
        json.dump({"format": "csv", "header": True, "table": "mh_emb", "columns": cols}, f)
    print(f"mh_csv_gen: {a.rows} + {a.test_rows} rows, {y.mean():.3f} positive")


if __name__ == "__main__":
    main()
