"""Multi-hot planted data end to end (issue 19): ps-datagen --multi-hot M --schema-out S writes
the data and its schema, ps-worker --schema S trains it (1 worker, and 2 workers in sync mode,
with the default shuffle buffer) and must reach the planted ceiling within the margin of a
one-hot run of the same generator (same seed, rows and flags, no --multi-hot): the gap to the
ceiling of each multi-hot run at most the one-hot run's gap + MARGIN. The ceiling is
ps-datagen's planted model on the test rows (an independent reference: the model that drew the
labels). 200k rows (EMBER_MH_ROWS), narrow towers and one compute thread: about 35 s here;
at this size the gap itself is 0.019 one-hot, 0.027 multi-hot (60k rows: 0.034 and 0.046,
the margin exceeded: the bags hold more ids to learn per row), which is why the comparison is
to the one-hot gap of the same rows and not to a fixed figure.
A third run does the same for data of a user schema (ps-datagen --schema FILE: csv with a header,
a skipped column, 3 dense and 30 categorical columns, every third a multi-hot bag): its gap too
within the one-hot gap + MARGIN.
Before this merge ps-datagen had no --multi-hot (main) or ps-worker no --schema (the shuffle
branch): either way the run could not happen; ps-datagen --schema is newer still.
Session 10: the one-hot and the 1-worker multi-hot gaps are means over --seed 1, 2, 3. Measured
per seed (200k rows), multi-hot gap - one-hot gap was +0.0075 / +0.0113 / +0.0109 with the
output bias drawn and +0.0114 / +0.0098 / +0.0107 with it at 0 (ps-worker's default since):
the old single-seed check against 0.01 passed on seed 1's draw alone, so MARGIN is 0.013 on the
means (a broken pooling or reader moves the gap by far more: 60k rows give 0.046).
Session 11: PyTorch (torch_dlrm.py, same setting, seeds 1-10) has the excess too, 0.0070
against ps-worker's 0.0110, and both shrink with rows (1M: 0.0029 and 0.0037), so the excess is
the data's; the one-hot margin itself (0.01 at 3M rows) is checked for multi-hot data in
test_quality.py (bench/RESULTS-e2e.md, "the multi-hot ceiling margin")."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

ROWS, TEST_ROWS, SEED, M = int(os.environ.get("EMBER_MH_ROWS", "200000")), 15000, 3, 4
MARGIN = 0.013
SEEDS = (1, 2, 3)
SMALL = ["--mlp-bot", "13-64-16", "--mlp-top", "64-1", "--threads", "1"]


def gen(d, tag, flags):
    p = {k: os.path.join(d, tag + k) for k in (".tsv", "_test.tsv", ".json", ".schema.json")}
    if "--schema" not in flags:
        flags = flags + ["--schema-out", p[".schema.json"]]
    rc, out = h.run([f"{h.BIN}/ps-datagen", "--rows", str(ROWS), "--test-rows", str(TEST_ROWS),
                     "--seed", str(SEED), "--out", p[".tsv"], "--test-out", p["_test.tsv"],
                     "--json", p[".json"], "--log-level", "warn"] + flags, 120)
    assert rc == 0, out
    return p, json.load(open(p[".json"]))["test_auc"]


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    one, ceil1 = gen(d, "one", [])
    mh, ceilm = gen(d, "mh", ["--multi-hot", str(M)])
    gaps1 = []
    for sd in SEEDS:
        s1, _ = h.train(1, 1, ["--schema", one[".schema.json"], "--train", one[".tsv"],
                               "--test", one["_test.tsv"], "--seed", str(sd)] + SMALL)
        gaps1.append(ceil1 - s1["auc"])
        print(f"one-hot, seed {sd}: AUC {s1['auc']:.4f}, planted {ceil1:.4f}, gap {gaps1[-1]:.4f}")
    margin = sum(gaps1) / len(gaps1) + MARGIN
    margs = ["--schema", mh[".schema.json"], "--train", mh[".tsv"], "--test", mh["_test.tsv"]]
    for workers, batch, seeds in ((1, 256, SEEDS), (2, 128, (1,))):
        gaps = []
        for sd in seeds:
            s, _ = h.train(1, workers, margs + SMALL + ["--batch", str(batch), "--seed", str(sd)])
            gaps.append(ceilm - s["auc"])
            print(f"multi-hot M={M}, {workers} worker(s), seed {sd}: AUC {s['auc']:.6f}, planted "
                  f"{ceilm:.4f}, gap {gaps[-1]:.4f}")
            r.check(f"multi-hot, {workers} worker(s), seed {sd}: every row, no bad line",
                    s["samples"] == ROWS and s["bad_lines"] == 0, f"{s['samples']} {s['bad_lines']}")
        gap = sum(gaps) / len(gaps)
        r.check(f"multi-hot, {workers} worker(s): gap to the ceiling (mean of {len(gaps)} seeds) "
                f"within the one-hot gap (mean of {len(SEEDS)}) + {MARGIN}", gap <= margin,
                f"{gap:.4f} vs {margin:.4f}")
    user = os.path.join(d, "user_schema.json")
    cols = ([{"name": "id", "type": "skip"}, {"name": "click", "type": "label"}] +
            [{"name": f"n{k}", "type": "dense"} for k in range(3)] +
            [dict({"name": f"c{f}", "type": "categorical"}, **({"separator": ";"} if f % 3 == 2 else {}))
             for f in range(30)])
    json.dump({"format": "csv", "header": True, "columns": cols}, open(user, "w"))
    u, ceilu = gen(d, "user", ["--schema", user, "--multi-hot", str(M)])
    s, _ = h.train(1, 1, ["--schema", user, "--train", u[".tsv"], "--test", u["_test.tsv"],
                          "--mlp-bot", "3-64-16"] + SMALL[2:])
    gap = ceilu - s["auc"]
    print(f"user schema: AUC {s['auc']:.4f}, planted {ceilu:.4f}, gap {gap:.4f}")
    r.check("user schema: every row, no bad line", s["samples"] == ROWS and s["bad_lines"] == 0,
            f"{s['samples']} {s['bad_lines']}")
    r.check(f"user schema: gap to the ceiling within the one-hot gap + {MARGIN}", gap <= margin,
            f"{gap:.4f} vs {margin:.4f}")
r.finish()
