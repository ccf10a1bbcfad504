"""ps-worker --shuffle-buffer on a file sorted by label (every 0 before every 1, as a log
exported by outcome would be): in file order the model sees only negatives and then only
positives and its test AUC collapses; with the default shuffle buffer (larger than the file:
a uniform shuffle) it trains as on the unsorted file. Expected: sorted+shuffled within 0.01 of
unsorted+shuffled, and at least 0.05 above sorted in file order."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--threads", "1", "--batch", "256"]

r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train, test, planted = h.datagen(d, 20000, 5000, seed=11)
    lines = open(train).read().splitlines(keepends=True)
    srt = os.path.join(d, "sorted.tsv")
    with open(srt, "w") as f:
        f.writelines(sorted(lines, key=lambda l: l[0]))  # stable: label 0 lines, then label 1
    common = ["--test", test] + SMALL
    base, _ = h.train(1, 1, ["--train", train] + common)
    shuf, out = h.train(1, 1, ["--train", srt] + common)
    plain, _ = h.train(1, 1, ["--train", srt, "--shuffle-buffer", "0"] + common)
    print(f"test AUC: unsorted {base['auc']:.4f}, sorted+shuffle {shuf['auc']:.4f}, "
          f"sorted in file order {plain['auc']:.4f} (planted {planted['test_auc']:.4f})")
    r.check("sorted file, shuffled, trains as the unsorted one", abs(shuf["auc"] - base["auc"]) < 0.01,
            f"{shuf['auc']:.4f} vs {base['auc']:.4f}")
    r.check("shuffling beats file order on the sorted file", shuf["auc"] > plain["auc"] + 0.05,
            f"{shuf['auc']:.4f} vs {plain['auc']:.4f}")
    r.check("same samples", shuf["samples"] == plain["samples"] == 20000)
r.finish()
