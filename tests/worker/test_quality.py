"""ps-worker end to end on ps-datagen data: 2 servers x 2 workers, sync mode, defaults;
the test AUC must come within 0.01 of the planted model's AUC (the ceiling). Also checks the
summary's contract fields and the CLI's errors."""
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
    rows = int(os.environ.get("EMBER_QUALITY_ROWS", "200000"))
    train, test, planted = h.datagen(d, rows, 50000, seed=1)
    s, out = h.train(2, 2, ["--train", train, "--test", test], timeout=1200)
    for k in ["auc", "logloss", "accuracy", "samples", "samples_per_s", "bad_lines"]:
        r.check(f"summary has {k}", k in s)
    ceiling = planted["test_auc"]
    print(f"test AUC {s['auc']:.4f}, planted ceiling {ceiling:.4f}, gap {ceiling - s['auc']:.4f}, "
          f"{s['samples_per_s']:.0f} samples/s")
    r.check("all rows trained", s["samples"] == rows, f"{s['samples']}")
    r.check("AUC within 0.01 of the planted ceiling", s["auc"] > ceiling - 0.01,
            f"{s['auc']:.4f} vs {ceiling:.4f}")
r.finish()
