"""ps-reshard (issue 23): a checkpoint taken on 2 shards resumes on 3 and on 1. A run (2 servers,
Adagrad rows, through deploy/ember-local) stops at a checkpoint; the checkpoint is resumed as
is on 2 servers, and rewritten by ps-reshard for 3 and for 1 and resumed there, on the same data
and seeds. Required: every resumed run ends with a test AUC within 0.001 of the 2-server resume
(and the same logloss and dense-parameter hash: the rows' optimizer state moved with them, or
the rows trained after the resume would differ); the rows of the resharded checkpoints, read
back with ps-export, are the original's exactly once each (identical key sets, no key twice,
bit-identical values); the source checkpoint is not written. Also: ps-worker --resume on
another server count is refused before training with exit 2 and the ps-reshard command, and
ps-reshard's bad arguments are exit 2 with one line. Without ps-reshard there is nothing to
resume on 3 or 1 servers (the servers refuse a 2-shard checkpoint)."""
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
import harness as h

SMALL = h.SMALL + ["--sparse-opt", "adagrad"]
r = h.Results()


tool, digest = h.tool, h.tree_digest


def rows(ck, out):
    """(keys sorted, values in that order as uint32 bits) of every row, via ps-export."""
    rc, _, err = tool("ps-export", ["--checkpoint", ck, "--out", out, "--log-level", "warn"])
    assert rc == 0, err
    keys = np.load(os.path.join(out, "embeddings", "table_1.keys.npy"))
    vals = np.load(os.path.join(out, "embeddings", "table_1.values.npy"))
    order = np.argsort(keys, kind="stable")
    return keys[order], vals[order].view(np.uint32)


with tempfile.TemporaryDirectory() as d:
    train, test, _ = h.datagen(d, 24000, 6000, seed=11)
    common = ["--train", train, "--test", test] + SMALL
    ck = os.path.join(d, "ck")
    os.makedirs(ck)
    h.train(2, 1, common + ["--checkpoint-dir", ck, "--checkpoint-every", "10",
                            "--max-steps", "20"])
    r.check("checkpoint on 2 shards", open(os.path.join(ck, "latest")).read() == "step-20\n"
            and sorted(os.listdir(os.path.join(ck, "step-20", "shards"))) ==
            ["shard-0", "shard-0.json", "shard-1", "shard-1.json"])
    before = digest(ck)

    # Another server count without resharding: refused before training, naming ps-reshard.
    wrong = os.path.join(d, "wrong")
    shutil.copytree(ck, wrong)
    rc, out = h.run([h.LOCAL, "--bin", h.BIN, "--servers", "3", "--workers", "1", "--"] +
                    common + ["--checkpoint-dir", wrong, "--resume"], 300)
    line = [l for l in out.splitlines() if "ps-reshard --checkpoint" in l]
    r.check("resume on 3 of a 2-shard checkpoint refused", rc == 2 and len(line) == 1 and
            f"--shards 3 --out {os.path.realpath(wrong)}-3shards" in line[0],
            f"rc {rc}: {line or out[-600:]}")

    resharded = {}
    for m in (3, 1):
        dst = os.path.join(d, f"ck{m}")
        rc, _, err = tool("ps-reshard", ["--checkpoint", ck, "--shards", str(m), "--out", dst])
        r.check(f"ps-reshard to {m}", rc == 0 and "rows/s" in err, f"rc {rc}: {err[-400:]}")
        names = sorted(os.listdir(os.path.join(dst, "step-20", "shards")))
        want = sorted([f"shard-{j}" for j in range(m)] + [f"shard-{j}.json" for j in range(m)])
        r.check(f"{m} shards written", names == want and
                open(os.path.join(dst, "latest")).read() == "step-20\n", str(names))
        for f in ("config", "dense.bin"):
            r.check(f"{m}: {f} copied", open(os.path.join(dst, "step-20", f), "rb").read() ==
                    open(os.path.join(ck, "step-20", f), "rb").read())
        resharded[m] = dst
    r.check("source checkpoint not written", digest(ck) == before)

    # Every row exactly once: the union of rows before and after, bit for bit.
    k2, v2 = rows(ck, os.path.join(d, "e2"))
    for m, dst in resharded.items():
        km, vm = rows(dst, os.path.join(d, f"e{m}"))
        r.check(f"{m} shards: same keys, none twice", len(km) == len(k2) > 1000 and
                np.array_equal(km, k2) and len(np.unique(km)) == len(km),
                f"{len(km)} rows vs {len(k2)}")
        r.check(f"{m} shards: bit-identical values", np.array_equal(vm, v2))

    # Resume on 2 (as taken), 3 and 1: the same run from step 20 on.
    two = os.path.join(d, "ck2")
    shutil.copytree(ck, two)
    base, _ = h.train(2, 1, common + ["--checkpoint-dir", two, "--resume"])
    r.check("resumed on 2 ran on", base["steps"] > 20, f"steps {base['steps']}")
    for m, dst in resharded.items():
        got, out = h.train(m, 1, common + ["--checkpoint-dir", dst, "--resume"])
        r.check(f"resumed on {m} from step 20", "at step 20" in out and
                got["steps"] == base["steps"], f"steps {got['steps']} vs {base['steps']}")
        r.check(f"resume on {m}: AUC within 0.001 of 2", abs(got["auc"] - base["auc"]) < 0.001,
                f"{got['auc']:.6f} vs {base['auc']:.6f}")
        r.check(f"resume on {m}: same logloss and dense state",
                abs(got["logloss"] - base["logloss"]) < 1e-6 and
                got["dense_hash"] == base["dense_hash"],
                f"{got['logloss']:.7f} vs {base['logloss']:.7f}, "
                f"{got['dense_hash']} vs {base['dense_hash']}")
        r.check(f"resume on {m} checkpointed into its directory",
                open(os.path.join(dst, "latest")).read() == f"step-{got['steps']}\n")

    # Bad arguments: exit 2, one line.
    for args, what in ((["--checkpoint", os.path.join(d, "none"), "--shards", "3", "--out",
                         os.path.join(d, "x")], "no such checkpoint"),
                       (["--checkpoint", ck, "--shards", "0", "--out", os.path.join(d, "x")],
                        "0 shards"),
                       (["--checkpoint", ck, "--shards", "3", "--out", resharded[3]],
                        "--out not empty")):
        rc, _, err = tool("ps-reshard", args + ["--log-level", "warn"])
        r.check(f"{what}: exit 2, one line", rc == 2 and len(err.strip().splitlines()) == 1,
                f"rc {rc}: {err.strip()}")
r.finish()
