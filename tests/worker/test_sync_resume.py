"""ps-worker, sync mode: (1) 2 workers x batch B equal 1 worker x batch 2B on the same data
order (final logloss and AUC within 1e-4); (2) a run interrupted after a checkpoint and
resumed ends within 1e-4 of an uninterrupted run's logloss; (3) replicas bit-identical (the
worker fails the run otherwise; the summary's dense_hash is compared across runs too)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--emb-dim", "16", "--threads", "1"]

r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train, test, _ = h.datagen(d, 24000, 6000, seed=7)
    common = ["--train", train, "--test", test] + SMALL

    one, _ = h.train(1, 1, common + ["--batch", "1024"])
    two, _ = h.train(2, 2, common + ["--batch", "512"])
    r.check("sync-equivalence logloss", abs(one["logloss"] - two["logloss"]) < 1e-4,
            f"1x1024 {one['logloss']:.6f} vs 2x512 {two['logloss']:.6f}")
    r.check("sync-equivalence auc", abs(one["auc"] - two["auc"]) < 1e-4,
            f"1x1024 {one['auc']:.6f} vs 2x512 {two['auc']:.6f}")
    r.check("same sample count", one["samples"] == two["samples"] == 24000,
            f"{one['samples']} {two['samples']}")

    # Resume: 2 workers, checkpoint every 5 steps, stop after 12 steps (last checkpoint at
    # step 10), then resume on the same servers' data dir and run to the end.
    ck = os.path.join(d, "ckpt")
    os.makedirs(ck)
    sdir = os.path.join(d, "servers")
    base = common + ["--batch", "512"]
    full, _ = h.train(2, 2, base)
    part, _ = h.train(2, 2, base + ["--checkpoint-dir", ck, "--checkpoint-every", "5",
                                    "--max-steps", "12"], data_dir=sdir)
    r.check("interrupted run stopped early", part["steps"] == 12, f"steps {part['steps']}")
    res, out = h.train(2, 2, base + ["--checkpoint-dir", ck, "--checkpoint-every", "5",
                                     "--resume"], data_dir=sdir)
    r.check("resumed from step 10", "at step 10" in out)
    r.check("resume logloss", abs(res["logloss"] - full["logloss"]) < 1e-4,
            f"resumed {res['logloss']:.6f} vs uninterrupted {full['logloss']:.6f}")
    r.check("resume steps", res["steps"] == full["steps"], f"{res['steps']} vs {full['steps']}")
r.finish()
