#!/usr/bin/python3
"""AUC / logloss / accuracy of ps_metrics_eval against scikit-learn on random data with
ties (rounded scores), extremes (0 and 1: the clip), constant scores, and across 3 ranks
(merge and allgather must give the same numbers as one accumulator)."""
import json, os, subprocess, sys, tempfile
import numpy as np
from sklearn.metrics import roc_auc_score, log_loss, accuracy_score

tool = os.path.join(os.environ.get("EMBER_TESTS", "build/tests"), "eval_tool")
rng = np.random.default_rng(12345)
EPS = 1e-7
fails = 0

def case(name, p, y):
    global fails
    p = np.asarray(p, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for a, b in zip(p, y):
            f.write("%.9g %d\n" % (a, b))
        path = f.name
    out = subprocess.run([tool, path], capture_output=True, text=True, timeout=60)
    os.unlink(path)
    if out.returncode != 0:
        print("FAIL", name, "eval_tool exit", out.returncode, out.stderr)
        fails += 1
        return
    r = json.loads(out.stdout)
    pd = p.astype(np.float64)
    ref = {
        "auc": roc_auc_score(y, pd) if 0 < y.sum() < len(y) else -1.0,
        "logloss": log_loss(y, np.clip(pd, EPS, 1 - EPS), labels=[0, 1]),
        "accuracy": accuracy_score(y, (p >= 0.5).astype(np.float32)),
    }
    results = [("single", r["single"]), ("merged", r["merged"])] + \
              [("gathered%d" % k, g) for k, g in enumerate(r["gathered"])]
    for who, got in results:
        for key, want in ref.items():
            tol = 1e-12 if key != "logloss" else 1e-9
            if abs(got[key] - want) > tol * max(1.0, abs(want)):
                print("FAIL %s %s %s: got %.15g want %.15g" % (name, who, key, got[key], want))
                fails += 1
        if got["n"] != len(y) or got["positives"] != int(y.sum()):
            print("FAIL %s %s counts" % (name, who))
            fails += 1
    print("ok  %-22s n=%-7d auc %.6f logloss %.6f acc %.4f" % (name, len(y), ref["auc"], ref["logloss"], ref["accuracy"]))

n = 20000
y = (rng.random(n) < 0.3).astype(np.float32)
case("ties-2-decimals", np.round(np.clip(rng.normal(0.3 + 0.2 * y, 0.2), 0, 1), 2), y)
case("ties-1-decimal", np.round(rng.random(n) * 0.5 + 0.3 * y, 1).clip(0, 1), y)
y = (rng.random(200000) < 0.25).astype(np.float32)
case("continuous-200k", 1 / (1 + np.exp(-(rng.normal(size=200000) + 1.5 * y - 1))), y)
y = (rng.random(5000) < 0.5).astype(np.float32)
p = rng.random(5000); p[::7] = 0.0; p[3::11] = 1.0
case("extremes-clipped", p, y)
case("constant-scores", np.full(1000, 0.4), (rng.random(1000) < 0.2).astype(np.float32))
case("perfect", [0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1])
case("inverted", [0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1])
case("one-class", [0.1, 0.5, 0.7], [1, 1, 1])
case("two-rows-tied", [0.5, 0.5], [0, 1])
sys.exit(1 if fails else 0)
