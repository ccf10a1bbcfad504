#!/usr/bin/python3
"""ps-datagen: same seed -> byte-identical files (plain and .gz), another seed -> different;
the printed/JSON planted AUC equals scikit-learn's AUC of the planted probabilities on the
written labels; CTR ~0.25; every line is valid Criteo format (ps-convert --bad-lines fail
reads all of them); vocabularies and missing rates have the intended shape; the signal is
learnable (a logistic regression on one-hot features gets well above chance, and not above
the planted ceiling by more than noise)."""
import filecmp, json, os, subprocess, sys, tempfile
import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.linear_model import LogisticRegression
import scipy.sparse as sp

BIN = os.environ.get("EMBER_BIN", "build/bin")
fails = []

def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        fails.append(msg)

def gen(d, tag, seed, rows=20000, test=4000, ext=""):
    out, tout, js, pr = (os.path.join(d, "%s%s" % (tag, s)) for s in (".tsv" + ext, "_test.tsv" + ext, ".json", ".probs"))
    r = subprocess.run([BIN + "/ps-datagen", "--rows", str(rows), "--seed", str(seed), "--out", out,
                        "--test-rows", str(test), "--test-out", tout, "--json", js, "--probs-out", pr,
                        "--log-level", "warn"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(1)
    return out, tout, json.load(open(js)), pr, r.stdout

with tempfile.TemporaryDirectory() as d:
    a, at, ja, pa, sa = gen(d, "a", 7)
    b, bt, jb, pb, sb = gen(d, "b", 7)
    c, ct, jc, pc, sc = gen(d, "c", 8)
    check(filecmp.cmp(a, b, shallow=False) and filecmp.cmp(at, bt, shallow=False), "same seed: byte-identical train and test files")
    check(not filecmp.cmp(a, c, shallow=False), "another seed: different file")
    check(not filecmp.cmp(a, at, shallow=False), "test rows differ from train rows")
    g1 = gen(d, "g1", 7, rows=3000, test=100, ext=".gz")[0]
    g2 = gen(d, "g2", 7, rows=3000, test=100, ext=".gz")[0]
    check(filecmp.cmp(g1, g2, shallow=False), ".gz output: byte-identical too")
    check(sa == sb and "planted model AUC: train" in sa, "printed summary: " + sa.strip())

    lines = open(a).read().split("\n")
    check(lines[-1] == "" and len(lines) == 20001, "20000 LF-terminated lines")
    rows = [l.split("\t") for l in lines[:-1]]
    check(all(len(r) == 40 for r in rows), "40 fields per line")
    y = np.array([int(r[0]) for r in rows])
    p = np.loadtxt(pa)
    auc = roc_auc_score(y, p)
    check(abs(auc - ja["train_auc"]) < 1e-9, "JSON train AUC %.6f == sklearn AUC of planted probabilities %.6f" % (ja["train_auc"], auc))
    check(0.75 < ja["train_auc"] < 0.95 and 0.75 < ja["test_auc"] < 0.95, "planted AUC in a realistic range (train %.4f, test %.4f)" % (ja["train_auc"], ja["test_auc"]))
    check(abs(y.mean() - 0.25) < 0.02 and abs(ja["test_ctr"] - 0.25) < 0.03, "CTR ~0.25 (train %.4f, test %.4f)" % (y.mean(), ja["test_ctr"]))
    check(abs(y.mean() - p.mean()) < 0.02, "labels agree with the probabilities (mean %.4f vs %.4f)" % (y.mean(), p.mean()))

    r = subprocess.run([BIN + "/ps-convert", "--in", a, "--out", os.path.join(d, "a.bin"), "--bad-lines", "fail", "--log-level", "warn"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "rows 20000 bad_lines 0" in r.stdout, "ps-convert --bad-lines fail reads every line: " + r.stdout.strip())

    cats = [[r[14 + j] for r in rows] for j in range(26)]
    distinct = [len(set(v for v in col if v)) for col in cats]
    miss = [sum(1 for v in col if not v) / len(col) for col in cats]
    check(distinct[8] == 3 and distinct[19] <= 4, "tiny vocabularies: C9 %d, C20 %d distinct" % (distinct[8], distinct[19]))
    check(distinct[2] > 5000 and distinct[11] > 5000, "large vocabularies: C3 %d, C12 %d distinct in 20k rows" % (distinct[2], distinct[11]))
    top = max(cats[2].count(v) for v in set(cats[2]) if v) / 20000
    check(top > 0.02, "Zipf head: most frequent C3 value in %.3f of rows" % top)
    check(abs(miss[21] - 0.8) < 0.02 and abs(miss[18] - 0.45) < 0.02 and miss[0] == 0, "missing rates C22 %.3f C19 %.3f C1 %.3f" % (miss[21], miss[18], miss[0]))
    dense = [[r[1 + k] for r in rows] for k in range(13)]
    check(abs(sum(1 for v in dense[0] if not v) / 20000 - 0.45) < 0.02, "I1 empty in ~45% of rows")
    check(all(int(v) >= -2 for col in dense for v in col if v) and any(v.startswith("-") for v in dense[1]), "count-like integers (I2 has small negatives)")

    # Learnable: one-hot logistic regression, train on a, evaluate on a's test file.
    def onehot(rr, vocab, build):
        ii, jj = [], []
        for i, r in enumerate(rr):
            for j in range(26):
                t = (j, r[14 + j])
                if build and t not in vocab:
                    vocab[t] = len(vocab)
                k = vocab.get(t)
                if k is not None:
                    ii.append(i); jj.append(k)
        X = sp.csr_matrix((np.ones(len(ii)), (ii, jj)), shape=(len(rr), len(vocab)))
        D = np.array([[np.log1p(max(int(v), 0)) if v else 0.0 for v in r[1:14]] + [float(not v) for v in r[1:14]] for r in rr])
        return sp.hstack([X, sp.csr_matrix(D)]).tocsr()
    vocab = {}
    Xtr = onehot(rows, vocab, True)
    trows = [l.split("\t") for l in open(at).read().split("\n")[:-1]]
    Xte = onehot(trows, vocab, False)
    yte = np.array([int(r[0]) for r in trows])
    m = LogisticRegression(C=0.05, max_iter=300, solver="liblinear").fit(Xtr, y)
    lr_auc = roc_auc_score(yte, m.predict_proba(Xte)[:, 1])
    check(0.70 < lr_auc < ja["test_auc"] + 0.01, "learnable: logistic regression test AUC %.4f vs planted %.4f" % (lr_auc, ja["test_auc"]))

sys.exit(1 if fails else 0)
