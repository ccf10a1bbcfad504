"""ps-worker on data that is not Criteo's shape, trained end to end from its --schema (issue 19),
with real servers through deploy/ember-local:

1. An Avazu-like CSV (header line, id + click + 22 categorical columns of arbitrary strings, some
   quoted with commas and doubled quotes inside, no dense column) with docs/schemas/avazu.json.
   The bottom MLP gets one constant input (--mlp-bot's first width is derived as 1).
2. Multi-hot planted data (2 dense, 2 one-value and 2 multi-hot columns with bags of 0..8 ids,
   empty bags included) whose label follows an additive logit (sum pooling): AUC within 0.02 of
   the planted ceiling, and not below logistic regression on the same features (scikit-learn,
   the right model class for an additive logit) by more than 0.01. The same data converted by
   ps-convert --schema (binary version 2) trains the bit-identical model (dense hash, AUC).
3. Mean pooling runs; the refusals before connecting (exit 2, one line): --mlp-bot against the
   schema, a bad schema naming its column, a header that does not match, --resume with a
   schema that changes what a row means.
Without the schema (before issue 19) ps-worker refused --schema as an unknown option, and the
data of 1 and 2 could not be read at all."""
import csv
import math
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

SCHEMAS = os.path.join(h.SRC, "docs", "schemas")
SMALL = ["--mlp-top", "32-1", "--threads", "1", "--batch", "256", "--progress-every", "30"]
# the multi-hot runs: 2 dense columns; the Avazu-like run keeps the default --mlp-bot, whose
# first width is derived from its schema (1, as it has no dense column)
MH = ["--emb-dim", "8", "--mlp-bot", "2-16-8"]


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def zipf_pick(rng, n):
    """An index in [0, n) with a Zipf(1.1)-like tail."""
    return min(int(rng.paretovariate(1.1)) - 1, n - 1)


def auc(y, p):
    from sklearn.metrics import roc_auc_score
    return roc_auc_score(y, p)


def lr_auc(train_feats, ytr, test_feats, yte, extra_tr=None, extra_te=None):
    from scipy import sparse
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.linear_model import LogisticRegression
    fh = FeatureHasher(n_features=1 << 16, input_type="string", alternate_sign=False)
    xtr, xte = fh.transform(train_feats), fh.transform(test_feats)
    if extra_tr is not None:
        xtr = sparse.hstack([sparse.csr_matrix(extra_tr), xtr]).tocsr()
        xte = sparse.hstack([sparse.csr_matrix(extra_te), xte]).tocsr()
    best = 0
    for c in (0.1, 0.3, 1.0):
        m = LogisticRegression(C=c, solver="liblinear").fit(xtr, ytr)
        best = max(best, auc(yte, m.predict_proba(xte)[:, 1]))
    return best


def avazu_like(d, n_train, n_test, seed=7):
    """Writes train/test CSVs with avazu.json's header; returns (paths, ceiling, LR AUC)."""
    rng = random.Random(seed)
    names = ["id", "click", "hour", "C1", "banner_pos", "site_id", "site_domain", "site_category",
             "app_id", "app_domain", "app_category", "device_id", "device_ip", "device_model",
             "device_type", "device_conn_type", "C14", "C15", "C16", "C17", "C18", "C19", "C20",
             "C21"]
    cats = names[2:]
    vocab = [rng.choice([4, 20, 100, 400]) for _ in cats]
    scale = [rng.choice([0.0, 0.3, 0.8]) for _ in cats]
    weights = [[rng.gauss(0, s) for _ in range(v)] for s, v in zip(scale, vocab)]
    odd = ['a,b', 'say "hi"', '', 'x y', 'ünï', '1fbe01fe']  # quoted, quotes, missing, bytes

    def value(f, k):
        if k < len(odd) and f % 3 == 0:
            return odd[k]
        return f"{cats[f][:3]}-{k:x}"

    paths, ys, ps, feats = [], [], [], []
    for part, n in (("train", n_train), ("test", n_test)):
        p = os.path.join(d, f"avazu_{part}.csv")
        y_part, p_part, f_part = [], [], []
        with open(p, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(names)
            for i in range(n):
                ks = [zipf_pick(rng, v) for v in vocab]
                prob = sigmoid(-1.0 + sum(weights[f][k] for f, k in enumerate(ks)))
                y = 1 if rng.random() < prob else 0
                vals = [value(f, k) for f, k in enumerate(ks)]
                w.writerow([f"{part}{i}", y] + vals)
                y_part.append(y)
                p_part.append(prob)
                f_part.append([f"{f}={v}" for f, v in enumerate(vals)])
        paths.append(p)
        ys.append(y_part)
        ps.append(p_part)
        feats.append(f_part)
    return paths, auc(ys[1], ps[1]), lr_auc(feats[0], ys[0], feats[1], ys[1])


def multi_hot(d, n_train, n_test, seed=11):
    """TSV: label, 2 dense ints, 2 one-value, 2 multi-hot (',' separated) columns."""
    rng = random.Random(seed)
    vocab = [50, 300, 2000, 500]
    weights = [[rng.gauss(0, 0.7) for _ in range(v)] for v in vocab]
    out = []
    for part, n in (("train", n_train), ("test", n_test)):
        p = os.path.join(d, f"mh_{part}.tsv")
        ys, probs, feats, dense = [], [], [], []
        with open(p, "w") as f:
            for _ in range(n):
                x = [int(rng.expovariate(0.2)), int(rng.expovariate(0.05))]
                one = [zipf_pick(rng, vocab[0]), zipf_pick(rng, vocab[1])]
                bags = [[zipf_pick(rng, vocab[2]) for _ in range(rng.randint(0, 8))],
                        [zipf_pick(rng, vocab[3]) for _ in range(rng.randint(0, 8))]]
                logit = -0.8 + 0.4 * math.log1p(x[0]) - 0.2 * math.log1p(x[1])
                logit += weights[0][one[0]] + weights[1][one[1]]
                logit += 0.5 * (sum(weights[2][k] for k in bags[0]) + sum(weights[3][k] for k in bags[1]))
                prob = sigmoid(logit)
                y = 1 if rng.random() < prob else 0
                cols = [str(y), str(x[0]), str(x[1]), f"o{one[0]}", f"p{one[1]}",
                        ",".join(f"t{k}" for k in bags[0]), ",".join(f"g{k}" for k in bags[1])]
                f.write("\t".join(cols) + "\n")
                ys.append(y)
                probs.append(prob)
                dense.append([math.log1p(x[0]), math.log1p(x[1])])
                feats.append([f"a={one[0]}", f"b={one[1]}"] + [f"t={k}" for k in bags[0]] +
                             [f"g={k}" for k in bags[1]])
        out.append((p, ys, probs, feats, np.array(dense)))
    (tr, ytr, _, ftr, dtr), (te, yte, pte, fte, dte) = out
    # FeatureHasher counts repeated ids: the bag-of-ids sum the planted logit uses.
    base = lr_auc(ftr, ytr, fte, yte, dtr / 10, dte / 10)
    return tr, te, auc(yte, pte), base


def schema_file(d, name, pooling):
    cols = ['{"name": "y", "type": "label"}', '{"name": "n1", "type": "dense"}',
            '{"name": "n2", "type": "dense"}', '{"name": "a", "type": "categorical"}',
            '{"name": "b", "type": "categorical"}']
    cols += ['{"name": "%s", "type": "categorical", "separator": ",", "pooling": "%s"}' % (c, pooling)
             for c in ("t", "g")]
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write('{"format": "tsv", "columns": [%s]}\n' % ", ".join(cols))
    return p


def refused(args):
    """ps-worker alone (no server: the refusal comes before connecting)."""
    rc, out = h.run([f"{h.BIN}/ps-worker", "--servers", "tcp://127.0.0.1:1"] + args, 30)
    return rc, out.strip()


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    # 1. Avazu-like CSV, no dense column.
    (atr, ate), ceiling, base = avazu_like(d, 30000, 8000)
    avazu = os.path.join(SCHEMAS, "avazu.json")
    s, out = h.train(1, 1, ["--schema", avazu, "--train", atr, "--test", ate, "--epochs", "2"] + SMALL)
    print(f"avazu-like: ps-worker AUC {s['auc']:.4f}, logistic regression {base:.4f}, "
          f"planted ceiling {ceiling:.4f}")
    r.check("avazu: every row trained, no bad line", s["samples"] == 60000 and s["bad_lines"] == 0,
            f"{s['samples']} {s['bad_lines']}")
    r.check("avazu: AUC within 0.02 of the planted ceiling", s["auc"] > ceiling - 0.02,
            f"{s['auc']:.4f} vs {ceiling:.4f}")
    r.check("avazu: AUC not below logistic regression - 0.01", s["auc"] > base - 0.01,
            f"{s['auc']:.4f} vs {base:.4f}")

    # 2. Multi-hot planted data; text and binary version 2 train the same model.
    tr, te, ceiling, base = multi_hot(d, 40000, 10000)
    sch = schema_file(d, "mh.json", "sum")
    args = ["--schema", sch, "--test", te, "--epochs", "2"] + MH + SMALL
    s, out = h.train(1, 1, ["--train", tr] + args)
    print(f"multi-hot: ps-worker AUC {s['auc']:.4f}, logistic regression {base:.4f}, "
          f"planted ceiling {ceiling:.4f}")
    r.check("multi-hot: AUC within 0.02 of the planted ceiling", s["auc"] > ceiling - 0.02,
            f"{s['auc']:.4f} vs {ceiling:.4f}")
    r.check("multi-hot: AUC not below logistic regression - 0.01", s["auc"] > base - 0.01,
            f"{s['auc']:.4f} vs {base:.4f}")
    binp = os.path.join(d, "mh.bin")
    rc, cout = h.run([f"{h.BIN}/ps-convert", "--schema", sch, "--in", tr, "--out", binp], 120)
    r.check("ps-convert --schema", rc == 0 and "rows 40000 bad_lines 0" in cout, cout.strip()[-200:])
    sb, _ = h.train(1, 1, ["--train", binp] + args)
    r.check("binary version 2 trains the identical model",
            sb["dense_hash"] == s["dense_hash"] and sb["auc"] == s["auc"],
            f"{sb['dense_hash']} {s['dense_hash']} {sb['auc']} {s['auc']}")
    # two workers, sync: the same rows per step as one worker with twice the batch
    half = [a if a != "256" else "128" for a in args]  # --batch 128 per worker
    s2, _ = h.train(1, 2, ["--train", tr] + half)
    r.check("multi-hot, 2 workers: all rows, AUC near", s2["samples"] == 80000 and
            abs(s2["auc"] - s["auc"]) < 0.01, f"{s2['samples']} {s2['auc']:.4f}")

    # 3. Mean pooling runs (the planted logit sums, so only a floor); refusals.
    mean = schema_file(d, "mean.json", "mean")
    sm, _ = h.train(1, 1, ["--schema", mean, "--train", tr, "--test", te] + MH + SMALL)
    r.check("mean pooling trains", sm["auc"] > 0.7, f"{sm['auc']:.4f}")
    rc, msg = refused(["--schema", avazu, "--train", atr, "--mlp-bot", "13-16-8", "--emb-dim", "8"])
    r.check("--mlp-bot against the schema", rc == 2 and "--mlp-bot 13-16-8: the first width must "
            "be 1" in msg and len(msg.splitlines()) == 1, f"rc={rc} {msg}")
    rc, msg = refused(["--schema", sch, "--train", tr, "--mlp-bot", "13-16-8", "--emb-dim", "8"])
    r.check("--mlp-bot names the dense columns", rc == 2 and "must be 2, the dense columns"
            in msg, f"rc={rc} {msg}")
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        f.write('{"columns": [{"name": "y", "type": "label"}, {"name": "c", "type": '
                '"categorical", "seperator": "|"}]}')
    rc, msg = refused(["--schema", bad, "--train", tr])
    r.check("a bad schema names its column", rc == 2 and "column 2 'c': \"seperator\" is not a "
            "key" in msg and len(msg.splitlines()) == 1, f"rc={rc} {msg}")
    hdr = os.path.join(d, "hdr.csv")
    with open(atr) as f, open(hdr, "w") as g:
        g.write(f.readline().replace("site_id", "site"))
        g.write(f.readline())
    rc, msg = refused(["--schema", avazu, "--train", hdr])
    r.check("a header that does not match", rc == 2 and "hdr.csv:1: header column 6 is 'site', "
            "the schema says 'site_id'" in msg, f"rc={rc} {msg}")
    ck = os.path.join(d, "ck")
    h.train(1, 1, ["--schema", sch, "--train", tr, "--max-steps", "2", "--checkpoint-dir", ck]
            + MH + SMALL)
    rc, msg = refused(["--schema", mean, "--train", tr, "--checkpoint-dir", ck, "--resume"] + MH
                      + SMALL)
    r.check("--resume with a schema that pools otherwise", rc == 2 and "--resume: --schema is 2 "
            "dense, 4 categorical" in msg and "it changes what a key or a row means" in msg, msg)
    rc, msg = refused(["--train", binp])
    r.check("a binary file of other counts than the schema", rc == 2 and "holds 2 dense and 4 "
            "categorical features, the schema criteo has 13 and 26" in msg, msg)
    rc, msg = refused(["--schema", os.path.join(d, "none.json"), "--train", tr])
    r.check("a missing schema file", rc == 2 and "none.json: cannot read it" in msg, msg)
r.finish()
