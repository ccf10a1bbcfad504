"""ps-export --quantize int8 and ps-predict --export (issue 33, part 3): int8 rows for serving.

A model trained by ps-worker (2 servers, through deploy/ember-local) with --checkpoint-dir is
exported twice, float32 and --quantize int8, and:
1. The manifest says row_type f32 / int8 and, for int8, FBGEMM's fused row-wise layout; the
   int8 file is uint8 [rows, dim + 8] with the f32 export's keys in the same order.
2. Independent numpy reference, from the files alone: each row's float32 scale at byte dim is
   (max - min) / 255 of its float32 row and its bias at dim + 4 is the min, and every element
   dequantized (q * scale + bias, in float64) is within its row's scale / 2.
3. ps-predict --export of the f32 export gives ps-predict --checkpoint's scores (also for a DCN
   model, whose cross layers come from the manifest), and reads files re-saved by np.save; of the int8
   export, scores close to them (AUC within 0.001), and equal to docs/examples/predict_torch.py's
   (numpy dequantization, PyTorch model) on the int8 export to 1e-5 relative. int8 bytes per row
   are dim + 8 against 4 * dim.
4. Refused in one line: a truncated int8 values file (exit 1); a manifest whose row_type does
   not match the values file, either way (exit 2); a row type or layout this build does not know
   (exit 2); --export with --checkpoint, neither of them, --quantize int4 (exit 2).
   (Serving shards of an export: test_int8_serve.py.)
Without the feature there is no int8 file and ps-predict has no --export."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
import harness as h

EXAMPLE = os.path.join(h.SRC, "docs", "examples", "predict_torch.py")
SMALL = h.SMALL
r = h.Results()


def predict(args):
    return h.tool("ps-predict", ["--progress-every", "0", "--threads", "1"] + args)


def refusal(name, prog, args, rc_want, text):
    rc, _, se = h.tool(prog, args)
    lines = [l for l in se.splitlines() if l.startswith(prog + ":")]
    r.check(name, rc == rc_want and len(lines) == 1 and text in lines[0],
            f"rc {rc} stderr {se.strip()[-400:]!r}")


def scores(path):
    return np.loadtxt(path, ndmin=1)


with tempfile.TemporaryDirectory() as d:
    train, test, _ = h.datagen(d, 12000, 3000, seed=31)
    ck = os.path.join(d, "ck")
    os.makedirs(ck)
    h.train(2, 1, ["--train", train, "--test", test, "--checkpoint-dir", ck] + SMALL)
    f32, q8 = os.path.join(d, "f32"), os.path.join(d, "int8")
    rc, _, se = h.tool("ps-export", ["--checkpoint", ck, "--out", f32])
    r.check("ps-export (f32) runs", rc == 0, se[-800:])
    rc, _, se = h.tool("ps-export", ["--checkpoint", ck, "--out", q8, "--quantize", "int8"])
    r.check("ps-export --quantize int8 runs", rc == 0, se[-800:])

    # 1. manifest and files
    mf, mq = (json.load(open(os.path.join(x, "manifest.json"))) for x in (f32, q8))
    tf, tq = mf["tables"][0], mq["tables"][0]
    dim = tq["dim"]
    lay = tq.get("layout", {})
    r.check("manifest: row_type f32 and int8, the int8 layout", tf.get("row_type") == "f32" and
            "layout" not in tf and tq.get("row_type") == "int8" and
            lay.get("name") == "fused-rowwise-int8" and lay.get("row_bytes") == dim + 8 and
            lay.get("scale_offset") == dim and lay.get("bias_offset") == dim + 4, json.dumps(tq))
    kf, vf = np.load(os.path.join(f32, tf["keys"])), np.load(os.path.join(f32, tf["values"]))
    kq, vq = np.load(os.path.join(q8, tq["keys"])), np.load(os.path.join(q8, tq["values"]))
    r.check("int8 values: uint8 [rows, dim + 8], the same keys in the same order",
            vq.dtype == np.uint8 and vq.shape == (tq["rows"], dim + 8) and
            np.array_equal(kf, kq) and len(kq) == tf["rows"] > 0, f"{vq.dtype} {vq.shape}")
    r.check("bytes per row: int8 dim + 8, f32 4 * dim",
            vq.itemsize * vq.shape[1] == dim + 8 and vf.itemsize * vf.shape[1] == 4 * dim,
            f"{dim + 8} vs {4 * dim} ({(dim + 8) / (4 * dim):.3f}x)")

    # 2. the numpy reference: scale, bias and the error bound
    scale = vq[:, dim:dim + 4].copy().view("<f4")[:, 0].astype(np.float64)
    bias = vq[:, dim + 4:dim + 8].copy().view("<f4")[:, 0].astype(np.float64)
    x = vf.astype(np.float64)
    lo, hi = x.min(axis=1), x.max(axis=1)
    r.check("scale = float32((max - min) / 255), bias = min, per row",
            np.array_equal(bias, lo) and
            np.array_equal(scale, ((hi - lo) / 255).astype(np.float32).astype(np.float64)))
    deq = vq[:, :dim].astype(np.float64) * scale[:, None] + bias[:, None]
    err = np.abs(deq - x)
    worst = float(np.max(err / np.maximum(scale[:, None] / 2, 1e-300)))
    r.check("every element within its row's scale / 2", bool(np.all(err <= scale[:, None] / 2)),
            f"{x.size} elements, worst error {worst:.4f} of scale/2, mean scale {scale.mean():.3g}")

    # 3. scores
    base, pf, pq = (os.path.join(d, n + ".txt") for n in ("ck", "pf", "pq"))
    sb, sf, sq = (os.path.join(d, n + ".json") for n in ("ck", "pf", "pq"))
    rc0, _, se0 = predict(["--checkpoint", ck, "--input", test, "--out", base, "--summary", sb])
    rc1, _, se1 = predict(["--export", f32, "--input", test, "--out", pf, "--summary", sf])
    rc2, _, se2 = predict(["--export", q8, "--input", test, "--out", pq, "--summary", sq])
    r.check("ps-predict --checkpoint, --export f32 and --export int8 run", rc0 == rc1 == rc2 == 0,
            (se0 + se1 + se2)[-1500:])
    if rc0 == rc1 == rc2 == 0:
        a, b, c = scores(base), scores(pf), scores(pq)
        r.check("--export f32 scores equal --checkpoint's", np.array_equal(a, b),
                f"max diff {np.max(np.abs(a - b)):.3g}")
        js = [json.load(open(p)) for p in (sb, sf, sq)]
        dq = abs(js[2]["auc"] - js[0]["auc"])
        r.check("--export int8: scores close, AUC within 0.001", dq < 0.001 and
                np.max(np.abs(a - c)) < 0.02 and js[2].get("row_type") == "int8",
                f"AUC {js[0]['auc']:.6f} vs {js[2]['auc']:.6f}, max |score diff| "
                f"{np.max(np.abs(a - c)):.2e}, mean {np.mean(np.abs(a - c)):.2e}")
        tout = os.path.join(d, "torch.txt")
        p = subprocess.run(["/usr/bin/python3", EXAMPLE, q8, test, tout], capture_output=True,
                           text=True, timeout=300)
        t = scores(tout) if p.returncode == 0 else np.zeros(0)
        rel = float(np.max(np.abs(t - c) / np.abs(c))) if len(t) == len(c) else float("inf")
        r.check("int8 export: PyTorch example's scores equal ps-predict --export's (1e-5 rel.)",
                rel < 1e-5, f"max relative difference {rel:.2e} {p.stderr[-500:]}")

        # the reader takes NumPy's own .npy writer too (its header, padded to 64 bytes)
        resaved = os.path.join(d, "resaved")
        shutil.copytree(q8, resaved)
        for f in (tq["keys"], tq["values"]):
            np.save(os.path.join(resaved, f), np.load(os.path.join(q8, f)))
        pr = os.path.join(d, "pr.txt")
        rc, _, se = predict(["--export", resaved, "--input", test, "--out", pr])
        r.check("int8 files re-saved by np.save: the same scores",
                rc == 0 and np.array_equal(scores(pr), c), se[-500:])

    # a DCN model (cross layers from the manifest): --export f32 equals --checkpoint, int8 close
    ckd = os.path.join(d, "ckdcn")
    os.makedirs(ckd)
    h.train(1, 1, ["--train", train, "--test", test, "--checkpoint-dir", ckd, "--interaction",
                   "dcn", "--dcn-layers", "2", "--dcn-rank", "4"] + SMALL)
    got = {}
    for kind, src in (("ck", ["--checkpoint", ckd]), ("f32", ["--export", ckd + "_f32"]),
                      ("int8", ["--export", ckd + "_int8"])):
        if kind != "ck":
            h.tool("ps-export", ["--checkpoint", ckd, "--out", ckd + "_" + kind, "--quantize",
                                 "none" if kind == "f32" else "int8"])
        outp, summ = os.path.join(d, f"dcn_{kind}.txt"), os.path.join(d, f"dcn_{kind}.json")
        rc, _, se = predict(src + ["--input", test, "--out", outp, "--summary", summ])
        got[kind] = (scores(outp), json.load(open(summ))["auc"]) if rc == 0 else (None, 0)
    ok = all(v[0] is not None for v in got.values())
    r.check("dcn: --export f32 equals --checkpoint, int8 AUC within 0.001",
            ok and np.array_equal(got["ck"][0], got["f32"][0]) and
            abs(got["int8"][1] - got["f32"][1]) < 0.001,
            f"AUC {got['f32'][1]:.6f} vs {got['int8'][1]:.6f}" if ok else "")

    # 4. refusals
    out = os.path.join(d, "x.txt")
    bad = os.path.join(d, "bad")

    def damaged(src, edit):
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(src, bad)
        man = json.load(open(os.path.join(bad, "manifest.json")))
        edit(man, man["tables"][0])
        json.dump(man, open(os.path.join(bad, "manifest.json"), "w"))
        return ["--export", bad, "--input", test, "--out", out]

    def truncate(man, t):
        p = os.path.join(bad, t["values"])
        os.truncate(p, os.path.getsize(p) - 5)
    refusal("truncated int8 values: exit 1, one line", "ps-predict", damaged(q8, truncate), 1,
            "truncated")
    refusal("f32 values labelled int8: exit 2, one line", "ps-predict", damaged(
        f32, lambda m, t: t.update(row_type="int8", layout=tq["layout"])), 2,
        "the manifest says row_type int8")
    refusal("int8 values labelled f32: exit 2, one line", "ps-predict", damaged(
        q8, lambda m, t: t.update(row_type="f32")), 2, "the manifest says row_type f32")
    refusal("an unknown row type: exit 2, one line", "ps-predict", damaged(
        q8, lambda m, t: t.update(row_type="int4")), 2, "row_type 'int4'")
    refusal("another int8 layout: exit 2, one line", "ps-predict", damaged(
        q8, lambda m, t: t["layout"].update(name="fp8-rowwise")), 2, "layout fp8-rowwise")
    refusal("--export and --checkpoint: exit 2", "ps-predict", ["--export", q8, "--checkpoint",
            ck, "--input", test, "--out", out], 2, "one of --checkpoint")
    refusal("neither: exit 2", "ps-predict", ["--input", test, "--out", out], 2,
            "one of --checkpoint")
    refusal("not an export: exit 2", "ps-predict", ["--export", d, "--input", test, "--out", out],
            2, "not an export")
    refusal("--quantize int4: exit 2", "ps-export", ["--checkpoint", ck, "--out", bad + "2",
            "--quantize", "int4"], 2, "--quantize int4")
r.finish()
