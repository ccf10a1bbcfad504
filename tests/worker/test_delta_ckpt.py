"""Incremental checkpoints (issue 20), end to end through deploy/ember-local (2 servers):

1. Two runs on the same data and seed: A with --checkpoint-full-every 3 (full, delta, delta,
   full, ...), B with --checkpoint-full-every 1 (every checkpoint full). At a step where A's
   shards hold deltas, A's checkpoint composes to exactly B's: ps-export's keys and values and
   dense.bin byte for byte, ps-predict's scores character for character, and through serving
   servers of A's delta (ps-server --serve, ps-predict --servers) too. ps-predict writes
   nothing into A's checkpoint.
2. Resume (fresh servers, so RESTORE composes the chain) from A's delta and from B's full
   checkpoint of the same step: both runs end bit-identical (dense_hash, metrics, the final
   checkpoint's exported rows — the optimizer state the restore brought back shapes every
   later update), and equal to the uninterrupted run B.
3. A broken chain is refused in one line, exit 1: a delta's base removed, a delta's SST file
   damaged — by ps-predict, ps-export, ps-worker --resume and ps-server --serve.
Without incremental checkpoints A's shards are all full snapshots and (1) fails on the kinds."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--emb-dim", "16", "--threads", "1",
         "--batch", "512", "--shuffle-buffer", "0"]
r = h.Results()


def kinds(ck, step):
    out = []
    for m in sorted(glob.glob(os.path.join(ck, f"step-{step}", "shards", "shard-*", "EMBER-SNAPSHOT"))):
        kv = dict(l.split("=", 1) for l in open(m).read().splitlines() if "=" in l and l[0] != "#")
        out.append(kv["kind"])
    return out


def steps(ck):
    return sorted(int(os.path.basename(p)[5:]) for p in glob.glob(os.path.join(ck, "step-*")))


def run_tool(args, timeout=300):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def export(step_dir, out):
    rc, _, err = run_tool([f"{h.BIN}/ps-export", "--checkpoint", step_dir, "--out", out])
    assert rc == 0, err[-2000:]
    keys = np.load(os.path.join(out, "embeddings", "table_1.keys.npy"))
    vals = np.load(os.path.join(out, "embeddings", "table_1.values.npy"))
    o = np.argsort(keys)
    return keys[o], vals[o]


def predict(ck, test, out):
    return run_tool([f"{h.BIN}/ps-predict", "--checkpoint", ck, "--input", test, "--out", out,
                     "--threads", "1", "--progress-every", "0"])


def one_line(name, rc, err, prog, text):
    lines = [l for l in err.splitlines() if l.startswith(prog + ":")]
    r.check(name, rc == 1 and len(lines) == 1 and text in lines[0],
            f"rc {rc} stderr {err.strip()[-400:]!r}")


with tempfile.TemporaryDirectory() as d:
    train, test, _ = h.datagen(d, 14000, 2000, seed=5)
    ca, cb = os.path.join(d, "ca"), os.path.join(d, "cb")
    os.makedirs(ca)
    os.makedirs(cb)
    common = ["--train", train, "--test", test, "--checkpoint-every", "3"] + SMALL
    ra, _ = h.train(2, 1, common + ["--checkpoint-dir", ca, "--checkpoint-full-every", "3"])
    rb, _ = h.train(2, 1, common + ["--checkpoint-dir", cb, "--checkpoint-full-every", "1"])
    sa = steps(ca)
    r.check("same checkpoints in both runs", sa == steps(cb) and len(sa) >= 6, f"{sa}")
    want = ["full" if i % 3 == 0 else "delta" for i in range(len(sa))]
    got = [kinds(ca, s) for s in sa]
    r.check("A: full, delta, delta, full, ... on every shard",
            got == [[k, k] for k in want], f"{got}")
    r.check("B: every checkpoint full", all(kinds(cb, s) == ["full", "full"] for s in sa))
    r.check("same final model", ra["dense_hash"] == rb["dense_hash"])

    # 1. a delta composes to the full checkpoint of the same step
    sd = sa[4]  # full at sa[3], deltas at sa[4], sa[5]
    da, db = os.path.join(ca, f"step-{sd}"), os.path.join(cb, f"step-{sd}")
    ka, va = export(da, os.path.join(d, "ea"))
    kb, vb = export(db, os.path.join(d, "eb"))
    r.check("delta: the same keys as the full checkpoint", np.array_equal(ka, kb), f"{len(ka)} vs {len(kb)}")
    r.check("delta: the same values, bit for bit",
            ka.shape == kb.shape and va.tobytes() == vb.tobytes())
    r.check("delta: the same dense.bin", open(os.path.join(da, "dense.bin"), "rb").read() ==
            open(os.path.join(db, "dense.bin"), "rb").read())
    before = h.tree_digest(ca)
    pa, pb = os.path.join(d, "pa.txt"), os.path.join(d, "pb.txt")
    rc1, _, e1 = predict(da, test, pa)
    rc2, _, e2 = predict(db, test, pb)
    r.check("ps-predict on the delta equals on the full one", rc1 == rc2 == 0 and
            open(pa).read() == open(pb).read(), (e1 + e2)[-1000:])
    r.check("ps-predict wrote nothing into the checkpoint", h.tree_digest(ca) == before)
    # serving servers of the delta answer with the full checkpoint's rows
    urls, procs = [], []
    tmp = os.path.join(d, "tmp")  # where the serving servers compose the chain
    os.makedirs(tmp)
    for shard in (0, 1):
        p, url = h.start_server(["--serve", da, "--shard", str(shard), "--shards", "2",
                                 "--log-level", "warn"], env=dict(os.environ, TMPDIR=tmp))
        procs.append(p)
        urls.append(url)
    ps_ = os.path.join(d, "ps.txt")
    rc3, _, e3 = run_tool([f"{h.BIN}/ps-predict", "--checkpoint", db, "--input", test, "--out", ps_,
                           "--threads", "1", "--progress-every", "0", "--servers", ",".join(urls)])
    composed = len(os.listdir(tmp))
    for p in procs:
        h.stop(p)
    r.check("ps-server --serve of the delta: ps-predict --servers equals offline on the full one",
            all(urls) and rc3 == 0 and open(ps_).read() == open(pb).read(), f"{urls} {e3[-800:]}")
    r.check("the serving servers composed under $TMPDIR and removed it at exit",
            composed == 2 and os.listdir(tmp) == [], f"{composed} then {os.listdir(tmp)}")

    # 2. resume from the delta (A) and from the full checkpoint (B) of step sd
    res = {}
    for name, ck in (("delta", ca), ("full", cb)):
        rck = os.path.join(d, "r" + name)
        shutil.copytree(ck, rck)
        for s in sa:
            if s > sd:
                shutil.rmtree(os.path.join(rck, f"step-{s}"))
        open(os.path.join(rck, "latest"), "w").write(f"step-{sd}\n")
        summ, out = h.train(2, 1, common + ["--checkpoint-dir", rck, "--checkpoint-full-every",
                                            "3", "--resume"])
        r.check(f"resumed from {name} at step {sd}", f"at step {sd}" in out)
        res[name] = (summ, export(os.path.join(rck, f"step-{sa[-1]}"), os.path.join(d, "x" + name)))
    (sd_, (kd, vd)), (sf_, (kf, vf)) = res["delta"], res["full"]
    r.check("resume: delta and full end bit-identical", sd_["dense_hash"] == sf_["dense_hash"] and
            np.array_equal(kd, kf) and vd.tobytes() == vf.tobytes())
    r.check("resume: equal to the uninterrupted run", sd_["dense_hash"] == rb["dense_hash"] and
            sd_["logloss"] == rb["logloss"] and sd_["auc"] == rb["auc"],
            f"{sd_['logloss']} vs {rb['logloss']}")

    # 3. broken chains, refused in one line (exit 1)
    broken = os.path.join(d, "broken")
    shutil.copytree(ca, broken)
    shutil.rmtree(os.path.join(broken, f"step-{sa[3]}", "shards", "shard-1"))
    bd = os.path.join(broken, f"step-{sd}")
    rc, _, err = predict(bd, test, os.path.join(d, "x.txt"))
    one_line("ps-predict: a missing base", rc, err, "ps-predict", "broken checkpoint chain")
    srv = subprocess.run([f"{h.BIN}/ps-server", "--listen", "tcp://127.0.0.1:0", "--serve", bd,
                          "--shard", "1", "--shards", "2"], capture_output=True, text=True,
                         timeout=60)
    r.check("ps-server --serve: a missing base refused, exit 1",
            srv.returncode == 1 and "broken checkpoint chain" in srv.stderr,
            f"rc {srv.returncode} {srv.stderr.strip()[-300:]!r}")
    shutil.rmtree(broken)
    shutil.copytree(ca, broken)
    sst = glob.glob(os.path.join(broken, f"step-{sa[4]}", "shards", "shard-0", "*.sst"))[0]
    b = bytearray(open(sst, "rb").read())
    b[len(b) // 2] ^= 0x40
    open(sst, "wb").write(bytes(b))
    rc, _, err = predict(os.path.join(broken, f"step-{sa[5]}"), test, os.path.join(d, "x.txt"))
    one_line("ps-predict: a damaged delta", rc, err, "ps-predict", "checksum mismatch")
    rc, _, err = run_tool([f"{h.BIN}/ps-export", "--checkpoint", os.path.join(broken, f"step-{sa[5]}"),
                           "--out", os.path.join(d, "xexp")])
    one_line("ps-export: a damaged delta", rc, err, "ps-export", "checksum mismatch")
    open(os.path.join(broken, "latest"), "w").write(f"step-{sa[5]}\n")
    rc, out = h.run([h.LOCAL, "--bin", h.BIN, "--servers", "2", "--workers", "1", "--"] + common +
                    ["--checkpoint-dir", broken, "--resume"], 300)
    r.check("ps-worker --resume: a damaged delta refused", rc != 0 and "checksum mismatch" in out,
            f"rc {rc} {out[-600:]!r}")
r.finish()
