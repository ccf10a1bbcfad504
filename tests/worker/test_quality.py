"""ps-worker end to end on ps-datagen data: 2 servers x 2 workers, sync mode; the test AUC must
come within GAP = 0.01 of the planted model's AUC (the ceiling), as issue 8 asks.

The recipe (bench/RESULTS-e2e.md, "Issue 8's 0.01 gap"): the gap is the amount of data, not the
model or the optimizer. One epoch of 200k rows leaves every DLRM recipe tried 0.018-0.03 short
(PyTorch too); 3M rows (still one epoch, as a second epoch overfits) bring the default model to
0.0071 on seed 1. The towers are narrowed to 13-128-16 / 128-64-1 only because they train 3x
faster at the same AUC (gap 0.0072 / 0.0075 / 0.0070 on seeds 1 / 2 / 3); optimizers and
learning rates are ps-worker's defaults, the per-worker batch 2048 its default before issue 19
(now 256). Also checks the summary's contract fields and the CLI's errors.

Multi-hot (issue 19: "a multi-hot planted-data run reaching the planted ceiling within the same
margin as the one-hot runs"): ps-datagen --multi-hot 4 data (every categorical a bag of 1..4
ids) of the same size, read through its schema, the same cluster and towers, ps-worker's
default batch (256), within the same GAP. Bags hold 2.5 ids a feature to learn from the same
rows, so at 200k rows the multi-hot gap is ~0.011 above the one-hot one (PyTorch's ~0.007:
tests/worker/test_multihot_planted.py), at 1M ~0.004 (PyTorch's ~0.003); at 3M rows it is
0.0085 with batch 256 and 0.0107 with batch 2048 (seed 1; bench/RESULTS-e2e.md, session 11)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

r = h.Results()
# CLI: bad options exit 2 with a one-line reason naming the option.
for args, needle in [(["--bogus"], "unknown option"),
                     (["--servers", "tcp://127.0.0.1:1", "--train", "x", "--batch", "0"], "--batch"),
                     (["--servers", "tcp://127.0.0.1:1", "--train", "x", "--consistency", "eventual"], "--consistency"),
                     (["--servers", "tcp://127.0.0.1:1"], "--train")]:
    rc, out = h.run([f"{h.BIN}/ps-worker"] + args, 30)
    r.check(f"cli {' '.join(args)[:40]}", rc == 2 and needle in out, f"rc={rc} {out.strip()[:100]}")

with tempfile.TemporaryDirectory() as d:
    rows = int(os.environ.get("EMBER_QUALITY_ROWS", "3000000"))
    train, test, planted = h.datagen(d, rows, 50000, seed=1)
    s, out = h.train(2, 2, ["--train", train, "--test", test, "--batch", "2048",
                            "--mlp-bot", "13-128-16", "--mlp-top", "128-64-1"], timeout=1200)
    for k in ["auc", "logloss", "accuracy", "samples", "samples_per_s", "bad_lines"]:
        r.check(f"summary has {k}", k in s)
    ceiling = planted["test_auc"]
    print(f"test AUC {s['auc']:.4f}, planted ceiling {ceiling:.4f}, gap {ceiling - s['auc']:.4f}, "
          f"{s['samples_per_s']:.0f} samples/s, {s['train_seconds']:.1f} s of training")
    r.check("all rows trained", s["samples"] == rows, f"{s['samples']}")
    GAP = 0.01
    r.check(f"AUC within {GAP} of the planted ceiling", s["auc"] > ceiling - GAP,
            f"{s['auc']:.4f} vs {ceiling:.4f}")
    # the multi-hot data replaces the one-hot files (one 3M-row set on disk at a time)
    schema = os.path.join(d, "mh.schema.json")
    train, test, planted = h.datagen(d, rows, 50000, seed=1, timeout=300,
                                     flags=["--multi-hot", "4", "--schema-out", schema])
    ceiling = planted["test_auc"]
    s, out = h.train(2, 2, ["--train", train, "--test", test, "--schema", schema,
                            "--mlp-bot", "13-128-16", "--mlp-top", "128-64-1"], timeout=1200)
    print(f"multi-hot: test AUC {s['auc']:.4f}, planted ceiling {ceiling:.4f}, gap "
          f"{ceiling - s['auc']:.4f}, {s['samples_per_s']:.0f} samples/s")
    r.check("multi-hot: all rows trained, no bad line", s["samples"] == rows and s["bad_lines"] == 0,
            f"{s['samples']} {s['bad_lines']}")
    r.check(f"multi-hot: AUC within {GAP} of the planted ceiling", s["auc"] > ceiling - GAP,
            f"{s['auc']:.4f} vs {ceiling:.4f}")
r.finish()
