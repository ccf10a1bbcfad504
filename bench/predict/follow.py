#!/usr/bin/env python3
"""Pull latency of a ps-server --serve DIR --follow while it switches versions (issue 20).

A training ps-server gets K rows (ps-bench --prepopulate, table pslat_1, dim 16, the spec
ps-bench declares) and N checkpoints of them into DIR/step-S/shards (the Python library's
two-phase checkpoint, as ps-worker's), rows changed by a ps-bench push run between two. A
--follow server serves DIR. Each round runs ps-bench open loop (pulls of KEYS uniform keys at
RATE/s, SECS s) against it twice, in alternating order: once with `latest` left alone
("steady"), once with `latest` moved to the next checkpoint every SECS/(N-1) s by rename
("switching": every switch opens a snapshot whose hot tier is cold). Prints each run's
latency percentiles, and per column the median over the rounds and the switching/steady ratio.

    bench/predict/follow.py [BIN_DIR] [ROUNDS] [RATE] [SECS]
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
RATE = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
SECS = float(sys.argv[4]) if len(sys.argv) > 4 else 12
K, KEYS, NCK = 200000, 512, 5
os.environ.setdefault("EMBER_LIBRARY", os.path.join(os.path.dirname(BIN), "lib", "libember.so.0"))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import ember  # noqa: E402
import lib_harness  # noqa: E402
from lib_harness import free_port  # noqa: E402

procs = []


def server(args, log):
    url = f"tcp://127.0.0.1:{free_port()}"
    p = subprocess.Popen([f"{BIN}/ps-server", "--listen", url] + args, stdout=subprocess.DEVNULL,
                         stderr=open(log, "w"), start_new_session=True)
    procs.append(p)
    for _ in range(300):
        if "listening on" in open(log).read() or p.poll() is not None:
            break
        time.sleep(0.1)
    return url


def bench(url, extra, out):
    subprocess.run([f"{BIN}/ps-bench", "--servers", url, "--key-space", str(K), "--keys",
                    str(KEYS), "--dim", "16", "--json", out] + extra, check=True,
                   stdout=subprocess.DEVNULL, timeout=600)
    return json.load(open(out))


def set_latest(d, name):
    with open(os.path.join(d, "latest.tmp"), "w") as f:
        f.write(name + "\n")
    os.rename(os.path.join(d, "latest.tmp"), os.path.join(d, "latest"))


def main():
    with tempfile.TemporaryDirectory() as d:
        live = os.path.join(d, "live")
        os.makedirs(live)
        turl = server(["--data-dir", os.path.join(d, "train"), "--checkpoint-root", live,
                       "--threads", "0", "--log-level", "warn"], os.path.join(d, "train.log"))
        bench(turl, ["--prepopulate", "--closed-loop", "--requests", "1"], os.path.join(d, "p.json"))
        c = ember.Client([turl], timeout_ms=60000)
        for s in range(1, NCK + 1):
            if s > 1:
                bench(turl, ["--op", "push", "--closed-loop", "--requests", "400"],
                      os.path.join(d, "p.json"))
            c.current_step = s
            c.checkpoint(os.path.join(live, f"step-{s}", "shards"))
        c.close()
        set_latest(live, "step-1")
        flog = os.path.join(d, "follow.log")
        furl = server(["--serve", live, "--follow", "--log-level", "info"], flog)
        print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
        print(f"{K} rows dim 16, pulls of {KEYS} uniform keys, open loop {RATE}/s, {SECS:.0f} s "
              f"per run; switching: {NCK - 1} switches per run")
        cols = ("p50", "p99", "p999", "max")
        res = {"steady": [], "switching": []}
        cur = [1]
        for rnd in range(ROUNDS):
            for kind in (("steady", "switching") if rnd % 2 == 0 else ("switching", "steady")):
                stop = threading.Event()

                def switch():
                    gap = SECS / NCK
                    for _ in range(NCK - 1):
                        if stop.wait(gap):
                            return
                        cur[0] = cur[0] % NCK + 1
                        set_latest(live, f"step-{cur[0]}")
                th = threading.Thread(target=switch)
                before = open(flog).read().count("now serving step")
                if kind == "switching":
                    th.start()
                j = bench(furl, ["--rate", str(RATE), "--duration", str(SECS), "--warmup", "1"],
                          os.path.join(d, "b.json"))
                stop.set()
                if kind == "switching":
                    th.join()
                time.sleep(1.5)  # the last switch lands before the next run
                n = open(flog).read().count("now serving step") - before
                lat = j["latency_us"]
                res[kind].append(lat)
                print(f"round {rnd + 1} {kind:9s}: " + " ".join(f"{k} {lat[k]:8.0f}" for k in cols)
                      + f" us; errors {j['errors']} timeouts {j['timeouts']}; switches {n}")
        med = {k: {c: statistics.median(x[c] for x in v) for c in cols} for k, v in res.items()}
        for k in med:
            print(f"median {k:9s}: " + " ".join(f"{c} {med[k][c]:8.0f}" for c in cols) + " us")
        print("ratio switching/steady: " + " ".join(
            f"{c} {med['switching'][c] / med['steady'][c]:.2f}" for c in cols))
        print(f"load average at end: {open('/proc/loadavg').read().split()[:3]}")
        if os.environ.get("FOLLOW_LOG"):
            shutil.copy(flog, os.environ["FOLLOW_LOG"])


try:
    main()
finally:
    lib_harness.stop_procs(procs)
