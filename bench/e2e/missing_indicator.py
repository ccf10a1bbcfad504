#!/usr/bin/python3
"""bench/e2e/missing_indicator.py: what `"missing": "indicator"` (docs/SCHEMA.md) is worth on
data whose dense columns are missing not at random, measured with ps-worker and a logistic
regression on the same files.

The data (seeded, CSV with a header): 4 dense count columns and 3 categorical columns. Each
count is geometric (40% zeros), and the label's logit rises with log1p of every count and with
a per-category effect. Columns n1..n3 are missing NOT at random: a count of 3 or more is left
empty with probability 0.4 (1 or 2: 0.05; 0: never), so an empty field means "large", while
the default reading of an empty field, 0, says "small". n4 is never missing. With --mcar (the
control) n1..n3 are empty as often, but at random: the indicator has nothing to learn. Two schemas read
the same files: one with `"missing": "indicator"` on n1..n3, one without (empty = 0).

Runs: ps-worker through deploy/ember-local (1 server x 1 worker, one compute thread, emb-dim
8, --mlp-bot D-32-8 with D the schema's dense inputs, --mlp-top 32-1, 2 epochs) for each
schema and each of SEEDS (ps-worker --seed: initialisation and shuffle); scikit-learn's
logistic regression on the same parsed features (log1p counts, 0 for empty, plus the
indicators in the one variant, one-hot categories) as a reference. Prints a Markdown table
and the mean paired AUC difference (indicator - without) with its standard error.

    bench/e2e/missing_indicator.py [--rows N] [--test-rows N] [--seeds 1,2,3] [--mcar] [--out DIR]

Environment: BIN (default <src>/build/bin)."""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BIN", os.path.join(SRC, "build", "bin"))
LOCAL = os.path.join(SRC, "deploy", "ember-local")
ND, NC, VOCAB = 4, 3, (50, 200, 1000)
MNAR = (True, True, True, False)


def make_data(path, rows, rng, mcar=False):
    """Writes the CSV; returns (label, counts [rows, ND] with -1 for empty, cats [rows, NC])."""
    counts = rng.geometric(0.4, size=(rows, ND)) - 1  # P(0) = 0.4, mean 1.5
    cats = np.stack([np.minimum(rng.zipf(1.3, size=rows) - 1, v - 1) for v in VOCAB], axis=1)
    eff = [np.random.default_rng(100 + f).normal(0, 0.6, size=v) for f, v in enumerate(VOCAB)]
    logit = -2.0 + 0.9 * np.log1p(counts).sum(axis=1)
    logit += sum(eff[f][cats[:, f]] for f in range(NC))
    y = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(int)
    shown = counts.copy()
    for k in range(ND):
        if not MNAR[k]:
            continue
        p = np.where(counts[:, k] >= 3, 0.4, np.where(counts[:, k] >= 1, 0.05, 0.0))
        if mcar:  # the control: as many empty fields, at random (no signal in them)
            p = np.full(rows, p.mean())
        shown[rng.random(rows) < p, k] = -1
    with open(path, "w") as f:
        f.write("click," + ",".join(f"n{k + 1}" for k in range(ND)) + "," +
                ",".join(f"c{k + 1}" for k in range(NC)) + "\n")
        for i in range(rows):
            f.write(f"{y[i]}," + ",".join("" if v < 0 else str(v) for v in shown[i]) + "," +
                    ",".join(f"v{c}" for c in cats[i]) + "\n")
    return y, shown, cats


def schema(path, indicator):
    cols = [{"name": "click", "type": "label"}]
    for k in range(ND):
        c = {"name": f"n{k + 1}", "type": "dense"}
        if indicator and MNAR[k]:
            c["missing"] = "indicator"
        cols.append(c)
    cols += [{"name": f"c{k + 1}", "type": "categorical"} for k in range(NC)]
    with open(path, "w") as f:
        json.dump({"format": "csv", "header": True, "table": "mnar_emb", "columns": cols}, f)
    return path


def ember(out, sch, nd, train, test, seed):
    """ps-worker's summary (cached in out)."""
    if os.path.exists(out):
        return json.load(open(out))
    cmd = [LOCAL, "--bin", BIN, "--servers", "1", "--workers", "1", "--",
           "--schema", sch, "--train", train, "--test", test, "--seed", str(seed),
           "--threads", "1", "--emb-dim", "8", "--mlp-bot", f"{nd}-32-8", "--mlp-top", "32-1",
           "--epochs", "2", "--summary", out, "--progress-every", "60", "--log-level", "warn"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"ember-local failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.load(open(out))


def lr_auc(tr, te, indicator):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    def feats(d):
        y, shown, cats = d
        x = [np.log1p(np.maximum(shown, 0))]
        if indicator:
            x.append((shown[:, [k for k in range(ND) if MNAR[k]]] < 0).astype(float))
        oh = [np.eye(v)[cats[:, f]] for f, v in enumerate(VOCAB)]
        return np.hstack(x + oh), y

    xtr, ytr = feats(tr)
    xte, yte = feats(te)
    m = LogisticRegression(max_iter=2000, C=1.0).fit(xtr, ytr)
    return roc_auc_score(yte, m.predict_proba(xte)[:, 1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=60000)
    ap.add_argument("--test-rows", type=int, default=20000)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "ember-missing"))
    ap.add_argument("--mcar", action="store_true",
                    help="the control: n1..n3 missing completely at random, as often")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(2026)
    train, test = os.path.join(a.out, "train.csv"), os.path.join(a.out, "test.csv")
    tr = make_data(train, a.rows, rng, a.mcar)
    te = make_data(test, a.test_rows, rng, a.mcar)
    empty = (tr[1][:, :3] < 0).mean()
    print(f"data: {a.rows} train / {a.test_rows} test rows, n1..n3 empty in {100 * empty:.1f}% "
          f"of fields, positives {100 * tr[0].mean():.1f}%")
    variants = {"without": (schema(os.path.join(a.out, "without.json"), False), ND),
                "indicator": (schema(os.path.join(a.out, "indicator.json"), True),
                              ND + sum(MNAR))}
    seeds = [int(s) for s in a.seeds.split(",")]
    auc = {v: [] for v in variants}
    print("| run | seed | AUC | logloss |\n| --- | ---: | ---: | ---: |")
    for s in seeds:
        for v, (sch, nd) in variants.items():
            sm = ember(os.path.join(a.out, f"{v}-s{s}.json"), sch, nd, train, test, s)
            auc[v].append(sm["auc"])
            print(f"| ps-worker, {v} | {s} | {sm['auc']:.4f} | {sm['logloss']:.4f} |")
    lr = {v: lr_auc(tr, te, v == "indicator") for v in variants}
    for v in variants:
        print(f"| logistic regression, {v} | - | {lr[v]:.4f} | |")
    d = np.array(auc["indicator"]) - np.array(auc["without"])
    se = d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
    print(f"\nps-worker: mean AUC without {np.mean(auc['without']):.4f}, with the indicator "
          f"{np.mean(auc['indicator']):.4f}; paired difference {d.mean():+.4f} +- {se:.4f} "
          f"(standard error, {len(d)} seeds)")
    print(f"logistic regression: {lr['indicator'] - lr['without']:+.4f}")


if __name__ == "__main__":
    main()
