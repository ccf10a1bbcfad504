"""ps-worker, sync mode: (1) 2 workers x batch B equal 1 worker x batch 2B on the same data
order (final logloss and AUC within 1e-4; file order, --shuffle-buffer 0: each rank shuffles
its own shard otherwise); (2) a run interrupted after a checkpoint and resumed, with the
shuffle buffer on (the default), ends within 1e-4 of an uninterrupted run's logloss; (3) replicas bit-identical (the
worker fails the run otherwise; the summary's dense_hash is compared across runs too)."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--emb-dim", "16", "--threads", "1"]

r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train, test, _ = h.datagen(d, 24000, 6000, seed=7)
    common = ["--train", train, "--test", test] + SMALL

    one, _ = h.train(1, 1, common + ["--batch", "1024", "--shuffle-buffer", "0"])
    two, _ = h.train(2, 2, common + ["--batch", "512", "--shuffle-buffer", "0"])
    r.check("sync-equivalence logloss", abs(one["logloss"] - two["logloss"]) < 1e-4,
            f"1x1024 {one['logloss']:.6f} vs 2x512 {two['logloss']:.6f}")
    r.check("sync-equivalence auc", abs(one["auc"] - two["auc"]) < 1e-4,
            f"1x1024 {one['auc']:.6f} vs 2x512 {two['auc']:.6f}")
    r.check("same sample count", one["samples"] == two["samples"] == 24000,
            f"{one['samples']} {two['samples']}")

    # Resume: 2 workers, checkpoint every 5 steps, stop after 12 steps (checkpoints at steps 10
    # and 12), then resume from step 10 on the same servers' data dir and run to the end.
    ck = os.path.join(d, "ckpt")
    os.makedirs(ck)
    sdir = os.path.join(d, "servers")
    base = common + ["--batch", "512"]
    full, _ = h.train(2, 2, base)
    part, _ = h.train(2, 2, base + ["--checkpoint-dir", ck, "--checkpoint-every", "5",
                                    "--max-steps", "12"], data_dir=sdir)
    r.check("interrupted run stopped early", part["steps"] == 12, f"steps {part['steps']}")
    # The end of a run has its checkpoint (step 12). A crash after step 12 but before that
    # checkpoint leaves `latest` at step 10 while the shards have applied steps 11 and 12:
    # made so here, resume must roll the shards back.
    r.check("final checkpoint at step 12", open(os.path.join(ck, "latest")).read() == "step-12\n")
    # A crash between the shards' commit of step 12 and the worker's `latest`: step-12 is on
    # disk but `latest` names step 10. A resume that reaches step 12 again replaces it (it
    # failed with "checkpoint .../step-12/shards/shard-0 already exists").
    with open(os.path.join(ck, "latest"), "w") as f:
        f.write("step-10\n")
    again, out = h.train(2, 2, base + ["--checkpoint-dir", ck, "--checkpoint-every", "5",
                                       "--max-steps", "2", "--resume"], data_dir=sdir)
    latest = open(os.path.join(ck, "latest")).read()
    r.check("orphaned step 12 replaced", "replacing it" in out and latest == "step-12\n",
            f"steps {again['steps']}, latest {latest.strip()}")
    with open(os.path.join(ck, "latest"), "w") as f:
        f.write("step-10\n")
    res, out = h.train(2, 2, base + ["--checkpoint-dir", ck, "--checkpoint-every", "5",
                                     "--resume"], data_dir=sdir)
    r.check("resumed from step 10", "at step 10" in out)
    r.check("resume logloss", abs(res["logloss"] - full["logloss"]) < 1e-4,
            f"resumed {res['logloss']:.6f} vs uninterrupted {full['logloss']:.6f}")
    r.check("resume steps", res["steps"] == full["steps"], f"{res['steps']} vs {full['steps']}")
r.finish()
