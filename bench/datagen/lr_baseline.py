#!/usr/bin/python3
"""Logistic-regression yardstick for ps-datagen data (bench/RESULTS-data.md).

usage: lr_baseline.py TRAIN.tsv TEST.tsv [--crosses] [--min-count N] [--C C]
One-hot categoricals (tokens seen >= N times in TRAIN; a multi-hot value of ps-datagen
--multi-hot, ids separated by '|', counts each id of its bag: the sum pooling of the planted
model), log(1+max(x,0)), its square and missing flags for the integers; --crosses adds the planted field pairs of ps_datagen.c as
crossed tokens. Prints test AUC and logloss (scikit-learn, liblinear)."""
import argparse
from collections import Counter
import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score, log_loss

PAIRS = [(5, 13), (8, 22), (16, 19), (4, 24), (13, 22)]  # ps_datagen.c PAIRS (0-based C index)

ap = argparse.ArgumentParser()
ap.add_argument("train"); ap.add_argument("test")
ap.add_argument("--crosses", action="store_true")
ap.add_argument("--min-count", type=int, default=3)
ap.add_argument("--C", type=float, default=0.05)
a = ap.parse_args()
pairs = PAIRS if a.crosses else []

def load(p):
    rows = [l.rstrip("\n").split("\t") for l in open(p)]
    y = np.array([int(r[0]) for r in rows], dtype=np.float64)
    D = np.array([[float(v) if v != "" else np.nan for v in r[1:14]] for r in rows])
    C = [r[14:40] for r in rows]
    return y, D, C

vocab = {}
def cats(C, build):
    toks = [[(j, t) for j in range(26) for t in (r[j].split("|") if "|" in r[j] else [r[j]])] + [(100 + i, r[x] + "|" + r[z]) for i, (x, z) in enumerate(pairs)] for r in C]
    if build:
        for t, c in Counter(t for r in toks for t in r).items():
            if c >= a.min_count:
                vocab[t] = len(vocab)
    ii, jj = [], []
    for i, r in enumerate(toks):
        for t in r:
            k = vocab.get(t)
            if k is not None:
                ii.append(i); jj.append(k)
    return sp.csr_matrix((np.ones(len(ii)), (ii, jj)), shape=(len(C), len(vocab)))

def dense(D):
    m = np.isnan(D); t = np.log1p(np.maximum(np.nan_to_num(D), 0))
    return sp.csr_matrix(np.hstack([t, t * t / 10, m.astype(float)]))

ytr, Dtr, Ctr = load(a.train); yte, Dte, Cte = load(a.test)
Xtr = sp.hstack([cats(Ctr, True), dense(Dtr)]).tocsr()
Xte = sp.hstack([cats(Cte, False), dense(Dte)]).tocsr()
m = LogisticRegression(C=a.C, max_iter=300, solver="liblinear").fit(Xtr, ytr)
p = m.predict_proba(Xte)[:, 1]
print("LR%s test AUC %.4f logloss %.4f (%d features)" % (" + crosses" if a.crosses else "", roc_auc_score(yte, p), log_loss(yte, p), Xtr.shape[1]))
