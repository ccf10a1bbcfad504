"""16-bit rows through a checkpoint's every path (issue 33): ps-worker --row-type f16 (and bf16)
trains on 2 servers with Adagrad and checkpoints, full then deltas. Required:
- every shard's checkpoint manifest records the table's row type;
- ps-export writes the rows in their type (f16 as <f2, bf16 as its bits <u2; manifest.json's
  row_type), every value one the row type holds (the rows were not trained in f32);
- ps-reshard to 1 shard moves the rows bit for bit (the same keys, the same 16-bit values);
- ps-predict on the checkpoint gives the trainer's own test logloss;
- ps-server --serve of the checkpoint answers pulls with exactly the exported values, as f32
  and with f16 on the wire (not widened and rounded again);
- ps-server --serve of the 16-bit export does too, holding its rows 16-bit (2 dim bytes a row,
  as its log says; they were widened to f32 at load before);
- resuming with the same row type runs on from the checkpoint; with another it is refused in
  one line naming row_type, before training.
Without row types none of this exists (ps-worker has no --row-type)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import harness as h  # noqa: E402
import lib_harness  # noqa: E402

lib_harness.use_build_package()
import ember  # noqa: E402

SMALL = h.SMALL + ["--sparse-opt", "adagrad"]
DESCR = {"f16": np.dtype("<f2"), "bf16": np.dtype("<u2")}
r = h.Results()
procs = []


def serve(ck, shard, threads):
    """ps-server --serve of shard `shard` of 2 on a free port (a client's requests wait in
    ZeroMQ until it listens); stopped by PID at the end."""
    url = f"tcp://127.0.0.1:{lib_harness.free_port()}"
    procs.append(subprocess.Popen(
        [f"{h.BIN}/ps-server", "--listen", url, "--serve", ck, "--shard", str(shard), "--shards",
         "2", "--threads", str(threads), "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    return url


def serve_export(ex, shard, log):
    """ps-server --serve of an export's shard `shard` of 2, its INFO log into `log` (its private
    store directory under the test's temporary one); stopped by PID at the end."""
    url = f"tcp://127.0.0.1:{lib_harness.free_port()}"
    env = dict(os.environ, TMPDIR=os.path.dirname(log))
    procs.append(subprocess.Popen(
        [f"{h.BIN}/ps-server", "--listen", url, "--serve", ex, "--shard", str(shard), "--shards",
         "2", "--log-level", "info"], stdout=subprocess.DEVNULL, stderr=open(log, "w"),
        start_new_session=True, env=env))
    return url


def held_bytes(log):
    """The bytes a row the export server's log says it holds ('rows of N bytes')."""
    for _ in range(100):
        for x in open(log):
            if "serving the export" in x:
                return int(x.split(" rows of ")[1].split(" bytes")[0])
        time.sleep(0.1)
    return None


def exported(ck, out):
    rc, _, err = h.tool("ps-export", ["--checkpoint", ck, "--out", out, "--log-level", "warn"])
    assert rc == 0, err
    keys = np.load(os.path.join(out, "embeddings", "table_1.keys.npy"))
    vals = np.load(os.path.join(out, "embeddings", "table_1.values.npy"))
    man = json.load(open(os.path.join(out, "manifest.json")))
    order = np.argsort(keys, kind="stable")
    return keys[order], vals[order], man


def widen(rt, v):
    if rt == "f16":
        return v.astype(np.float32)
    return (v.astype(np.uint32) << 16).view(np.float32)


def manifest_row_types(ck):
    """The row type of every table spec in the shards' EMBER-SNAPSHOT manifests (the spec is
    the store's record, hex; its row type is the u32 after its first 144 bytes)."""
    found = []
    for root, _, files in os.walk(os.path.join(ck, "shards")):
        if "EMBER-SNAPSHOT" in files:
            for line in open(os.path.join(root, "EMBER-SNAPSHOT")):
                for tok in line.split():
                    if tok.startswith("spec="):
                        b = bytes.fromhex(tok[5:])
                        found.append(int.from_bytes(b[144:148], "little") if len(b) >= 148 else 0)
    return found


try:
    with tempfile.TemporaryDirectory() as d:
        train, test, _ = h.datagen(d, 16000, 2000, seed=33)
        common = ["--train", train, "--test", test] + SMALL
        for rt, code in (("f16", 1), ("bf16", 2)):
            ck = os.path.join(d, f"ck-{rt}")
            os.makedirs(ck)
            trained, _ = h.train(2, 1, common + ["--row-type", rt, "--checkpoint-dir", ck,
                                                 "--checkpoint-every", "5",
                                                 "--checkpoint-full-every", "3",
                                                 "--max-steps", "15"])
            # ps-predict offline on the checkpoint: the trainer's own test figures.
            summ = os.path.join(d, f"predict-{rt}.json")
            rc, _, err = h.tool("ps-predict", ["--checkpoint", ck, "--input", test, "--out",
                                               os.path.join(d, f"p-{rt}.txt"), "--summary", summ,
                                               "--threads", "1", "--log-level", "warn"])
            got = json.load(open(summ)) if rc == 0 else {}
            r.check(f"{rt}: ps-predict on the checkpoint = the trainer's test logloss",
                    rc == 0 and abs(got["logloss"] - trained["logloss"]) < 1e-6,
                    f"rc {rc}: {got.get('logloss')} vs {trained['logloss']} {err[-300:]}")
            step = os.path.join(ck, open(os.path.join(ck, "latest")).read().strip())
            types = manifest_row_types(step)
            r.check(f"{rt}: the shards' manifests record the row type",
                    len(types) >= 2 and all(t == code for t in types), str(types))
            keys, vals, man = exported(ck, os.path.join(d, f"e-{rt}"))
            r.check(f"{rt}: ps-export writes the rows in their type",
                    vals.dtype == DESCR[rt] and len(keys) > 1000 and vals.shape[1] == 16 and
                    json.dumps(man).count(f'"row_type": "{rt}"') >= 1,
                    f"{vals.dtype}, {len(keys)} rows")
            # ps-predict --export of the 16-bit export: the checkpoint's own scores (the rows
            # widened exactly once on load, as the store widens them).
            rc, _, err = h.tool("ps-predict", ["--export", os.path.join(d, f"e-{rt}"), "--input",
                                               test, "--out", os.path.join(d, f"pe-{rt}.txt"),
                                               "--threads", "1", "--log-level", "warn"])
            same = rc == 0 and (open(os.path.join(d, f"pe-{rt}.txt")).read() ==
                                open(os.path.join(d, f"p-{rt}.txt")).read())
            r.check(f"{rt}: ps-predict --export of the {rt} export = its checkpoint's scores",
                    same, f"rc {rc} {err[-300:]}")
            w = widen(rt, vals)
            moved = np.count_nonzero(np.abs(w) > 0.0501)  # beyond --emb-init: trained rows
            r.check(f"{rt}: rows were trained", moved > 100, f"{moved} values")

            # ps-reshard to 1 shard: the same rows, bit for bit, still 16-bit.
            one = os.path.join(d, f"ck1-{rt}")
            rc, _, err = h.tool("ps-reshard", ["--checkpoint", ck, "--shards", "1", "--out", one,
                                               "--log-level", "warn"])
            k1, v1, _ = exported(one, os.path.join(d, f"e1-{rt}"))
            r.check(f"{rt}: ps-reshard moves the 16-bit rows bit for bit", rc == 0 and
                    v1.dtype == DESCR[rt] and np.array_equal(k1, keys) and
                    np.array_equal(v1.view(np.uint16), vals.view(np.uint16)), err[-300:])

            # ps-server --serve: pulls are the exported values (f32 and f16 on the wire).
            urls = [serve(ck, 0, 0), serve(ck, 1, 2)]
            for wire in (False, True):
                c = ember.Client(urls, timeout_ms=20000, wire_f16=wire)
                got = c.table("criteo_emb").pull(keys)
                want = w.astype(np.float16).astype(np.float32) if wire else w
                r.check(f"{rt}: served rows{' (f16 wire)' if wire else ''} = exported, bit for bit",
                        np.array_equal(got.view(np.uint32), want.view(np.uint32)),
                        f"{np.count_nonzero(got != want)} differ")
                c.close()
            lib_harness.stop_procs(procs)
            procs.clear()
            # ps-server --serve of the export: the same rows, held as 16-bit numbers.
            logs = [os.path.join(d, f"serve-e-{rt}-{i}.log") for i in (0, 1)]
            urls = [serve_export(os.path.join(d, f"e-{rt}"), i, logs[i]) for i in (0, 1)]
            c = ember.Client(urls, timeout_ms=20000)
            got = c.table("criteo_emb").pull(keys)
            c.close()
            r.check(f"{rt}: rows served from the {rt} export = exported, bit for bit",
                    np.array_equal(got.view(np.uint32), w.view(np.uint32)),
                    f"{np.count_nonzero(got != w)} differ")
            sizes = [held_bytes(x) for x in logs]
            r.check(f"{rt}: the export's rows are held 16-bit (2 dim = 32 bytes a row)",
                    sizes == [32, 32], f"{sizes} bytes a row")
            lib_harness.stop_procs(procs)
            procs.clear()

            if rt != "f16":
                continue
            # Resume: the same row type runs on; another is refused in one line, from the
            # latest checkpoint (a delta) and from the full one it is based on.
            for kind, latest in (("delta", None), ("full", "step-5\n")):
                wrong = os.path.join(d, f"wrong-{kind}")
                shutil.copytree(ck, wrong)
                if latest:
                    open(os.path.join(wrong, "latest"), "w").write(latest)
                rc, out = h.run([h.LOCAL, "--bin", h.BIN, "--servers", "2", "--workers", "1",
                                 "--"] + common + ["--checkpoint-dir", wrong, "--resume"], 300)
                lines = [l for l in out.splitlines() if "row_type f32 vs f16" in l]
                r.check(f"resume of the {kind} checkpoint with another row type refused in one "
                        "line", rc != 0 and len(lines) == 1 and "resumed from" not in out,
                        f"rc {rc}: {lines or out[-800:]}")
            same = os.path.join(d, "same")
            shutil.copytree(ck, same)
            got, out = h.train(2, 1, common + ["--row-type", "f16", "--checkpoint-dir", same,
                                               "--resume", "--max-steps", "5"])
            r.check("resume with the same row type runs on from the checkpoint",
                    "at step 15" in out and got["steps"] == 20, f"steps {got['steps']}")
finally:
    lib_harness.stop_procs(procs)
r.finish()
