#!/usr/bin/env python3
"""int8 rows for serving (issue 33, part 3): bytes per row, and the memory of ps-predict and
of a serving shard, f32 against int8 exports of one checkpoint.

Trains one model (ps-datagen --seed 1 --vocab-scale VS, TRAIN rows, emb dim DIM, 1 server x 1
worker, --checkpoint-dir), exports it twice (ps-export, and --quantize int8) and then, ROUNDS
rounds, each alternating f32 and int8 (the order flipped every round), scores TEST rows with
ps-predict --export --threads 1, recording its peak RSS (the child's ru_maxrss), rows/s and
AUC. Prints the export's rows, the values files' bytes per row, each run, and the medians with
the int8/f32 ratios; the peak-RSS difference per million rows is what the rows held in memory
cost, set against the 4 * DIM - (DIM + 8) bytes a row the layouts differ by. Then, ROUNDS
rounds alternating, one ps-server --serve of each export (--shards 1: every row, loaded at
start) and of the checkpoint itself (rows in the store: RocksDB, and the hot tier once pulled),
each server's VmRSS after start and after every key was pulled once through the Python library
(f32 wire). JSON on the last line.

    bench/predict/int8.py [BIN_DIR] [ROUNDS] [TRAIN] [TEST] [DIM] [VS]
"""
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
TRAIN = int(sys.argv[3]) if len(sys.argv) > 3 else 300000
TEST = int(sys.argv[4]) if len(sys.argv) > 4 else 50000
DIM = int(sys.argv[5]) if len(sys.argv) > 5 else 64
VS = sys.argv[6] if len(sys.argv) > 6 else "10"
os.environ.setdefault("EMBER_LIBRARY", os.path.join(os.path.dirname(BIN), "lib", "libember.so.0"))
sys.path.insert(0, os.path.join(ROOT, "python"))


def vmrss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int([l for l in f if l.startswith("VmRSS")][0].split()[1]) / 1024.0


def serve_rss(src, keys, name):
    """ps-server --serve src (1 shard); its VmRSS after start and after pulling every key."""
    import ember
    p = subprocess.Popen([f"{BIN}/ps-server", "--listen", "tcp://127.0.0.1:0", "--serve", src,
                          "--shard", "0", "--shards", "1", "--log-level", "warn"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url, deadline = None, time.time() + 120
        while not url and time.time() < deadline:
            if select.select([p.stdout], [], [], 1.0)[0]:
                line = p.stdout.readline()
                if not line:
                    break
                if "listening on" in line:
                    url = line.split("listening on ")[1].strip()
        if not url:
            sys.exit("ps-server --serve did not start")
        start = vmrss_mib(p.pid)
        c = ember.Client([url], timeout_ms=60000)
        t = c.table(name)
        for i in range(0, len(keys), 65536):
            t.pull(keys[i:i + 65536])
        c.close()
        return start, vmrss_mib(p.pid)
    finally:
        p.kill()
        p.wait()


def run(cmd):
    """Runs cmd; returns (seconds, peak RSS in MiB of the child)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    p.stderr.close()
    if status != 0:
        sys.exit(f"{cmd[0]} failed ({status}): {err[-2000:]}")
    return time.time() - t0, ru.ru_maxrss / 1024.0


with tempfile.TemporaryDirectory() as d:
    train, test = os.path.join(d, "train.tsv"), os.path.join(d, "test.tsv")
    subprocess.run([f"{BIN}/ps-datagen", "--rows", str(TRAIN), "--test-rows", str(TEST), "--seed",
                    "1", "--vocab-scale", VS, "--out", train, "--test-out", test, "--json",
                    os.path.join(d, "p.json"), "--log-level", "warn"], check=True,
                   stdout=subprocess.DEVNULL)
    ck = os.path.join(d, "ck")
    os.makedirs(ck)
    subprocess.run([os.path.join(ROOT, "deploy", "ember-local"), "--bin", BIN, "--servers", "1",
                    "--workers", "1", "--", "--train", train, "--checkpoint-dir", ck,
                    "--emb-dim", str(DIM), "--mlp-bot", f"13-{DIM}", "--mlp-top", "64-1",
                    "--threads", "1", "--log-level", "warn", "--progress-every", "60"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ex = {}
    for kind in ("f32", "int8"):
        ex[kind] = os.path.join(d, "ex_" + kind)
        subprocess.run([f"{BIN}/ps-export", "--checkpoint", ck, "--out", ex[kind], "--quantize",
                        "none" if kind == "f32" else "int8", "--log-level", "warn"], check=True)
    man = {k: json.load(open(os.path.join(v, "manifest.json")))["tables"][0] for k, v in ex.items()}
    rows = man["f32"]["rows"]
    vbytes = {k: os.path.getsize(os.path.join(ex[k], man[k]["values"])) for k in ex}
    print(f"export: {rows} rows of dim {DIM}; values file bytes per row: f32 "
          f"{vbytes['f32'] / rows:.1f}, int8 {vbytes['int8'] / rows:.1f} "
          f"({vbytes['int8'] / vbytes['f32']:.3f}x)")
    res = {"f32": [], "int8": []}
    for r in range(ROUNDS):
        for kind in (("f32", "int8") if r % 2 == 0 else ("int8", "f32")):
            summ = os.path.join(d, "s.json")
            secs, rss = run([f"{BIN}/ps-predict", "--export", ex[kind], "--input", test, "--out",
                             os.path.join(d, "p.txt"), "--summary", summ, "--threads", "1",
                             "--progress-every", "0", "--log-level", "warn"])
            s = json.load(open(summ))
            res[kind].append({"rss_mib": rss, "rows_per_s": s["rows_per_s"], "auc": s["auc"],
                              "seconds": secs})
            print(f"round {r + 1} {kind:4s}: peak RSS {rss:8.1f} MiB, {s['rows_per_s']:9.0f} "
                  f"rows/s, AUC {s['auc']:.6f}")
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("rss_mib", "rows_per_s", "auc")}
           for k, v in res.items()}
    per_m = (med["f32"]["rss_mib"] - med["int8"]["rss_mib"]) * 2**20 / rows * 1e6 / 2**20
    print(f"median peak RSS: f32 {med['f32']['rss_mib']:.1f} MiB, int8 {med['int8']['rss_mib']:.1f}"
          f" MiB ({med['int8']['rss_mib'] / med['f32']['rss_mib']:.3f}x); difference "
          f"{per_m:.1f} MiB per million rows (layouts differ by {(4 * DIM - DIM - 8) / 2**20 * 1e6:.1f})")
    print(f"median rows/s: f32 {med['f32']['rows_per_s']:.0f}, int8 {med['int8']['rows_per_s']:.0f}"
          f" ({med['int8']['rows_per_s'] / med['f32']['rows_per_s']:.3f}x); AUC f32 "
          f"{med['f32']['auc']:.6f}, int8 {med['int8']['auc']:.6f}")
    keys = np.load(os.path.join(ex["f32"], man["f32"]["keys"]))
    srv = {"ckpt": [], "f32": [], "int8": []}
    for r in range(ROUNDS):
        for kind in (("ckpt", "f32", "int8") if r % 2 == 0 else ("int8", "f32", "ckpt")):
            a, b = serve_rss(ck if kind == "ckpt" else ex[kind], keys, man["f32"]["name"])
            srv[kind].append({"rss_start_mib": a, "rss_pulled_mib": b})
            print(f"round {r + 1} ps-server --serve {kind:4s}: VmRSS {a:7.1f} MiB at start, "
                  f"{b:7.1f} MiB after pulling all {rows} keys")
    smed = {k: {m: statistics.median(x[m] for x in v) for m in ("rss_start_mib", "rss_pulled_mib")}
            for k, v in srv.items()}
    for k in srv:
        print(f"median ps-server --serve {k}: {smed[k]['rss_start_mib']:.1f} MiB at start, "
              f"{smed[k]['rss_pulled_mib']:.1f} MiB after every key pulled "
              f"({smed[k]['rss_pulled_mib'] * 2**20 / rows:.0f} bytes a row, the process's base included)")
    d8 = (smed["f32"]["rss_pulled_mib"] - smed["int8"]["rss_pulled_mib"]) / rows * 1e6
    print(f"serving shard int8 / f32 export: {smed['int8']['rss_pulled_mib'] / smed['f32']['rss_pulled_mib']:.3f}x, "
          f"int8 / checkpoint: {smed['int8']['rss_pulled_mib'] / smed['ckpt']['rss_pulled_mib']:.3f}x; "
          f"f32 - int8 export {d8:.1f} MiB per million rows")
    print(json.dumps({"rows": rows, "dim": DIM, "values_bytes": vbytes, "median": med,
                      "rss_diff_mib_per_million_rows": per_m, "runs": res,
                      "serve_median": smed, "serve_runs": srv}))
