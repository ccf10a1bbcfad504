"""ps-export (issue 20): the exported files rebuild the model in PyTorch. Models trained by
ps-worker (2 servers, through deploy/ember-local) with --checkpoint-dir, exported with ps-export,
then scored by docs/examples/predict_torch.py (numpy + torch, the example of docs/CHECKPOINTS.md:
its own XXH3 key hashing and initial rows, from the manifest only) on the test file: every score
equals ps-predict's to 1e-5 relative. Five models: Criteo with open-vocabulary keys, Criteo
with --hash-buckets, the DCN interaction at low rank (V, U, bias per cross layer) and at full
rank (W, bias), and a CSV schema without dense columns whose multi-hot columns pool by mean and
by sum.
The test files hold keys the training never stored (checked), so the initial-row rule is used.
Also: the .npy files load with numpy (shapes, dtypes, unique keys, per-layer files equal the
flat parameters at the manifest's offsets), the checkpoint is not written, and a missing
checkpoint is exit 2 with one line. Without ps-export there are no files to rebuild from."""
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
import harness as h

EXAMPLE = os.path.join(h.SRC, "docs", "examples", "predict_torch.py")
r = h.Results()


tool, digest = h.tool, h.tree_digest


def check_model(name, d, ck, test):
    before = digest(ck)
    ex = os.path.join(d, name + "_export")
    rc, _, se = tool("ps-export", ["--checkpoint", ck, "--out", ex])
    r.check(f"{name}: ps-export runs", rc == 0, se[-1500:])
    if rc:
        return
    r.check(f"{name}: the checkpoint is unchanged", digest(ck) == before)
    man = json.load(open(os.path.join(ex, "manifest.json")))
    tab = man["tables"][0]
    keys = np.load(os.path.join(ex, tab["keys"]))
    vals = np.load(os.path.join(ex, tab["values"]))
    r.check(f"{name}: keys u64, values f32 [rows, dim], keys unique",
            keys.dtype == np.uint64 and vals.dtype == np.float32 and
            vals.shape == (tab["rows"], tab["dim"]) == (len(keys), man["model"]["emb_dim"]) and
            len(np.unique(keys)) == len(keys) and len(keys) > 0, f"{keys.shape} {vals.shape}")
    flat = np.load(os.path.join(ex, man["model"]["params"]))
    ok = flat.size == man["model"]["nparams"]
    for l in man["model"]["layers"]:
        w, b = np.load(os.path.join(ex, l["weight"])), np.load(os.path.join(ex, l["bias"]))
        ok &= np.array_equal(w.ravel(), flat[l["weight_offset"]:l["weight_offset"] + w.size])
        ok &= np.array_equal(b, flat[l["bias_offset"]:l["bias_offset"] + b.size])
        ok &= w.shape == (l["out"], l["in"])
    r.check(f"{name}: layer files equal the flat parameters at their offsets", ok)
    cross = man["model"].get("cross", [])
    r.check(f"{name}: cross layers in the manifest exactly for dcn",
            (len(cross) == man["model"].get("dcn_layers", 0)) and
            (len(cross) > 0) == (man["model"]["interaction"] == "dcn"), f"{len(cross)}")
    ok = True
    for c in cross:
        D, R = c["dim"], c["rank"]
        shapes = {"V": (R, D), "U": (D, R), "bias": (D,)} if R else {"W": (D, D), "bias": (D,)}
        ok &= set(shapes) <= set(c) and R == man["model"]["dcn_rank"]
        for k, shape in shapes.items():
            a = np.load(os.path.join(ex, c[k]))
            ok &= a.shape == shape and np.array_equal(
                a.ravel(), flat[c[k + "_offset"]:c[k + "_offset"] + a.size])
    r.check(f"{name}: cross files have their shapes and equal the flat parameters", ok)
    pred = os.path.join(d, name + "_pred.txt")
    rc, _, se = tool("ps-predict", ["--checkpoint", ck, "--input", test, "--out", pred,
                                    "--progress-every", "0"])
    r.check(f"{name}: ps-predict runs", rc == 0, se[-1500:])
    tout = os.path.join(d, name + "_torch.txt")
    p = subprocess.run(["/usr/bin/python3", EXAMPLE, ex, test, tout], capture_output=True,
                       text=True, timeout=300)
    r.check(f"{name}: the PyTorch example runs", p.returncode == 0, p.stderr[-1500:])
    if rc or p.returncode:
        return
    a, b = np.loadtxt(pred, ndmin=1), np.loadtxt(tout, ndmin=1)
    rel = float(np.max(np.abs(a - b) / np.abs(a))) if len(a) == len(b) else float("inf")
    r.check(f"{name}: PyTorch scores equal ps-predict's (1e-5 relative)", rel < 1e-5,
            f"{len(a)} scores, max relative difference {rel:.2e}")
    # keys of the test file with no stored row: the example's initial rows were used
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    import predict_torch as pt
    stored = set(keys.tolist())
    sample = [l for l in open(test).read().split("\n")[1 if man["schema"]["header"] else 0:] if l][:300]
    unseen = 0
    for line in sample:
        fields = line.split("\t") if man["schema"]["format"] == "tsv" else line.split(",")
        for c, v in zip(man["schema"]["columns"], fields):
            if c["type"] != "categorical" or "separator" in c:
                continue
            f, feat = c["index"], man["hashing"]["features"][c["index"]]
            tok = int(v, 16) if v else man["hashing"]["missing_token"]
            k = (feat["base"] + (0 if not v else tok % feat["buckets"]) if feat["buckets"] else
                 int(pt.xxh3_u64([((f << 33) ^ tok)], man["hashing"]["key_seed"])[0]))
            unseen += k not in stored
    r.check(f"{name}: the test file has keys with no stored row", unseen > 0, f"{unseen}")


SMALL = h.SMALL
with tempfile.TemporaryDirectory() as d:
    train, test, _ = h.datagen(d, 10000, 2000, seed=21)
    for name, extra in (("open", []), ("buckets", ["--hash-buckets", "3000"]),
                        ("dcn", ["--interaction", "dcn", "--dcn-layers", "2", "--dcn-rank", "8"]),
                        ("dcn-full", ["--interaction", "dcn", "--dcn-layers", "1",
                                      "--dcn-rank", "0", "--hash-buckets", "3000"])):
        ck = os.path.join(d, "ck_" + name)
        os.makedirs(ck)
        h.train(2, 1, ["--train", train, "--test", test, "--checkpoint-dir", ck] + SMALL + extra)
        check_model(name, d, ck, test)

    # no dense column, multi-hot columns of hex ids pooled by mean (tags) and by sum (more),
    # csv with a header
    rng = random.Random(3)
    w = {i: rng.gauss(0, 1) for i in range(200)}

    def rows(n, seed):
        g = random.Random(seed)
        out = ["y,u,tags,more"]
        for _ in range(n):
            u, tags = g.randrange(3000), [g.randrange(200) for _ in range(g.randrange(0, 4))]
            more = [g.randrange(50) for _ in range(g.randrange(0, 4))]
            logit = (sum(w[t] for t in tags) / max(len(tags), 1) + (u % 5 - 2) * 0.3
                     + sum(w[m] for m in more) * 0.3)
            y = int(g.random() < 1 / (1 + np.exp(-logit)))
            out.append(f"{y},{u * 7919:08x},{'|'.join(f'{t * 104729:08X}' for t in tags)},"
                       + "|".join(f"{m * 15485863 % 2**32:08x}" for m in more))
        return "\n".join(out) + "\n"
    spath = h.multihot_schema(os.path.join(d, "mh.json"))
    mtrain, mtest = os.path.join(d, "mh_train.csv"), os.path.join(d, "mh_test.csv")
    open(mtrain, "w").write(rows(5000, 1))
    open(mtest, "w").write(rows(1000, 2))
    ck = os.path.join(d, "ck_mh")
    os.makedirs(ck)
    h.train(2, 1, ["--train", mtrain, "--test", mtest, "--schema", spath, "--checkpoint-dir", ck,
                   "--emb-dim", "8", "--mlp-bot", "1-8", "--mlp-top", "16-1", "--threads", "1",
                   "--batch", "256"])
    check_model("multi-hot", d, ck, mtest)

    rc, _, se = tool("ps-export", ["--checkpoint", os.path.join(d, "nope"), "--out",
                                   os.path.join(d, "x")])
    lines = [l for l in se.splitlines() if l.startswith("ps-export:")]
    r.check("no checkpoint: exit 2, one line", rc == 2 and len(lines) == 1, se.strip()[-300:])
r.finish()
