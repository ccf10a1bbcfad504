"""ps-server --serve EXPORT (issue 33, part 3): serving shards hold an export's rows as exported,
int8 rows as int8 (dim + 8 bytes), and answer pulls from them. A model is trained (2 servers,
deploy/ember-local) with --checkpoint-dir and exported as float32 and as int8; real ps-server
--serve processes on 127.0.0.1 then serve the exports:

1. ps-predict --servers through 2 int8 shards (one with partition threads) gives every score of
   ps-predict --export on the int8 export, bit for bit (the rows dequantized alike, unseen keys
   the same initial rows); through 3 shards of the same export too (a shard keeps the keys that
   route to it, so an export serves on any count); through 2 f32-export shards every score of
   offline ps-predict on the checkpoint. A scoring host holding only the export's manifest and
   dense files (ps-predict --export HOST --servers) gives the int8 scores too; one whose
   manifest is of another step is refused in one line.
2. Through the library (python/ember, attach by name): f32 pulls of stored keys equal the
   numpy dequantization of the int8 file (q * scale + bias, float64 then rounded: 1 ulp), f16
   pulls equal those rows rounded to f16 by numpy, keys with no row get the f32 export's
   server's rows (the initial rows); a declare of another spec is refused in one line (pushes
   are refused as for a checkpoint: test_serve.py).
3. Memory: the int8 shard holds its rows in (dim + 8) bytes, the f32 one in 4 dim (the log's
   "rows of N bytes"; resident sets: bench/predict/int8.py).
4. The private store directory under $TMPDIR is gone after a SIGTERM.
5. Refused in one line, exit 2: --serve EXPORT --follow; a mislabelled export; exit 1: a
   truncated one.
Before, ps-server --serve took checkpoints only (an export: "not a checkpoint")."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import harness as h
import lib_harness
import serve_proc

SMALL = h.SMALL
r = h.Results()
procs = []


def serve(ex, shard, shards, tmp, threads=0):
    """Starts ps-server --serve EX (TMPDIR tmp); returns (endpoint, process, its log file)."""
    log = os.path.join(os.path.dirname(tmp), f"serve-{len(procs)}.log")
    p, url = serve_proc.start(["--serve", ex, "--shard", str(shard), "--shards", str(shards),
                               "--threads", str(threads)], log, procs,
                              env=dict(os.environ, TMPDIR=tmp))
    return url, p, log


def scores(d, name, args):
    out = os.path.join(d, name + ".txt")
    p = subprocess.run([f"{h.BIN}/ps-predict", "--progress-every", "0", "--threads", "1",
                        "--out", out] + args, capture_output=True, text=True, timeout=300)
    return (open(out).read() if p.returncode == 0 else None), p.stderr


def refused(name, args, rc_want, text, env=None):
    r.refused(name, [f"{h.BIN}/ps-server", "--listen", "tcp://127.0.0.1:0"] + args, rc_want, text,
              env)


try:
    with tempfile.TemporaryDirectory() as d:
        train, test, _ = h.datagen(d, 12000, 3000, seed=41)
        ck = os.path.join(d, "ck")
        os.makedirs(ck)
        h.train(2, 1, ["--train", train, "--test", test, "--checkpoint-dir", ck] + SMALL)
        f32, q8, tmp = os.path.join(d, "f32"), os.path.join(d, "int8"), os.path.join(d, "tmp")
        os.makedirs(tmp)
        for ex, q in ((f32, "none"), (q8, "int8")):
            subprocess.run([f"{h.BIN}/ps-export", "--checkpoint", ck, "--out", ex, "--quantize", q,
                            "--log-level", "warn"], check=True, timeout=120)

        # 1. scores through serving shards of the exports
        offline, se0 = scores(d, "offline", ["--checkpoint", ck, "--input", test])
        local8, se1 = scores(d, "local8", ["--export", q8, "--input", test])
        r.check("offline scores from the checkpoint and the int8 export", offline and local8,
                (se0 + se1)[-1000:])
        a0, pa0, la0 = serve(q8, 0, 2, tmp)
        a1, pa1, la1 = serve(q8, 1, 2, tmp, threads=2)
        got, se = scores(d, "srv8", ["--checkpoint", ck, "--servers", f"{a0},{a1}", "--input", test])
        r.check("2 int8 shards: every score equals ps-predict --export int8", got == local8 and
                got is not None and got != offline, se[-800:])
        # a scoring host with the export's manifest, schema and dense files only
        host = os.path.join(d, "host")
        shutil.copytree(q8, host, ignore=shutil.ignore_patterns("embeddings"))
        got, se = scores(d, "host8", ["--export", host, "--servers", f"{a0},{a1}", "--input",
                                      test])
        r.check("ps-predict --export (no embeddings/) --servers: the same scores",
                got == local8 and not os.path.exists(os.path.join(host, "embeddings")), se[-800:])
        wrong = os.path.join(d, "wrong")
        shutil.copytree(host, wrong)
        mp = os.path.join(wrong, "manifest.json")
        m = json.load(open(mp))
        m["step"] += 1
        json.dump(m, open(mp, "w"))
        p = subprocess.run([f"{h.BIN}/ps-predict", "--export", wrong, "--servers", f"{a0},{a1}",
                            "--input", test, "--out", os.path.join(d, "x.txt")],
                           capture_output=True, text=True, timeout=120)
        lines = [l for l in p.stderr.splitlines() if l.startswith("ps-predict:")]
        r.check("--export of another step than the servers': exit 2, one line",
                p.returncode == 2 and len(lines) == 1 and "--export an export of the step served"
                in lines[0], p.stderr.strip()[-300:])
        three = [serve(q8, i, 3, tmp)[0] for i in range(3)]
        got, se = scores(d, "srv8x3", ["--checkpoint", ck, "--servers", ",".join(three),
                                       "--input", test])
        r.check("3 int8 shards of the same export: the same scores", got == local8, se[-800:])
        f0, pf0, lf0 = serve(f32, 0, 2, tmp)
        f1, _, _ = serve(f32, 1, 2, tmp, threads=2)
        got, se = scores(d, "srv32", ["--checkpoint", ck, "--servers", f"{f0},{f1}", "--input", test])
        r.check("2 f32-export shards: every score equals offline from the checkpoint",
                got == offline and got is not None, se[-800:])

        # 2. through the library
        man = json.load(open(os.path.join(q8, "manifest.json")))["tables"][0]
        keys = np.load(os.path.join(q8, man["keys"]))
        vq = np.load(os.path.join(q8, man["values"]))
        dim = man["dim"]
        deq = (vq[:, :dim].astype(np.float64) * vq[:, dim:dim + 4].copy().view("<f4")
               + vq[:, dim + 4:].copy().view("<f4")).astype(np.float32)
        rng = np.random.default_rng(5)
        pick = rng.choice(len(keys), 2000, replace=False)
        unseen = np.arange(1, 501, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        unseen = unseen[~np.isin(unseen, keys)]
        lib_harness.use_build_package()
        import ember
        c8, c16, c32 = (ember.Client(urls, timeout_ms=20000, wire_f16=f16) for urls, f16 in
                        (([a0, a1], False), ([a0, a1], True), ([f0, f1], False)))
        t8, t16, t32 = (c.table(man["name"]) for c in (c8, c16, c32))
        got = t8.pull(keys[pick])
        ulp = np.max(np.abs(got - deq[pick]) / np.spacing(np.abs(deq[pick]) + 1e-30))
        r.check("f32 pulls of stored keys: the numpy dequantization (1 ulp)", ulp <= 1,
                f"{len(pick)} rows, max {ulp:.1f} ulp")
        g16 = t16.pull(keys[pick])
        r.check("f16 pulls: those rows rounded to f16", np.array_equal(
            g16.astype(np.float16), got.astype(np.float16)), "")
        r.check("keys with no row: the initial rows, as the f32 export's shards give them",
                len(unseen) > 400 and np.array_equal(t8.pull(unseen), t32.pull(unseen)),
                f"{len(unseen)} keys")
        try:
            c8.table(man["name"], dim=8, id=man["id"])
            r.check("a declare of the table with another dim is refused", False, "accepted")
        except ember.EmberError as e:
            r.check("a declare of the table with another dim is refused in one line",
                    "read-only" in str(e) and "\n" not in str(e), str(e))
        for c in (c8, c16, c32):
            c.close()

        # 3. memory
        def held(log):
            l = [x for x in open(log) if "serving the export" in x]
            return l[0].split("rows of ")[1].split(" bytes")[0] if l else "?"

        r.check("rows held as exported: dim + 8 bytes (int8), 4 dim (f32)",
                held(la0) == str(dim + 8) and held(lf0) == str(4 * dim),
                f"{held(la0)} vs {held(lf0)} bytes a row")

        # 4. the private store directory goes at shutdown
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
        r.check("the private store directories are removed at shutdown", os.listdir(tmp) == [],
                str(os.listdir(tmp)))

        # 5. refusals
        env = dict(os.environ, TMPDIR=tmp)
        refused("--serve EXPORT --follow: exit 2", ["--serve", q8, "--follow"], 2,
                "an export never changes", env)
        bad = os.path.join(d, "bad")
        shutil.copytree(f32, bad)
        mp = os.path.join(bad, "manifest.json")
        m = json.load(open(mp))
        m["tables"][0].update(row_type="int8", layout=man["layout"])
        json.dump(m, open(mp, "w"))
        refused("f32 rows labelled int8: exit 2", ["--serve", bad], 2,
                "the manifest says row_type int8", env)
        shutil.rmtree(bad)
        shutil.copytree(q8, bad)
        vp = os.path.join(bad, man["values"])
        os.truncate(vp, os.path.getsize(vp) - 3)
        refused("a truncated int8 export: exit 1", ["--serve", bad], 1, "truncated", env)
        r.check("no private directory left by the refusals", os.listdir(tmp) == [],
                str(os.listdir(tmp)))
finally:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
r.finish()
