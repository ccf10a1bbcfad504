#!/usr/bin/env python3
"""Pull latency of a ps-server --serve DIR --follow while it switches versions (issue 20).

A training ps-server gets K rows (ps-bench --prepopulate, table pslat_1, dim 16, the spec
ps-bench declares) and N checkpoints of them into DIR/step-S/shards (the Python library's
two-phase checkpoint, as ps-worker's), rows changed by a ps-bench push run between two. Each
run starts a fresh --follow server of DIR (latest = step-1) and runs ps-bench open loop
against it (pulls of KEYS uniform keys at RATE/s, 1 s warm-up, SECS s measured): "steady"
leaves `latest` alone, "switching" moves it to the next checkpoint every SECS/N s by rename
(N-1 switches). Both with the default warm-up (--follow-warm-keys 2^20) and without it
(--follow-warm-keys 0: a switched-to snapshot starts with an empty hot tier). Each round runs
the four in alternating order; prints every run and, per column, the median over the rounds
and the switching/steady ratios.

    bench/predict/follow.py [BIN_DIR] [ROUNDS] [RATE] [SECS]
"""
import json
import os
import re
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
    return json.load(open(out))["points"][0]  # ps-bench --json (docs/BENCH.md)


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
        lib_harness.stop_procs(procs)  # the training server: not needed any more
        procs.clear()
        print(f"load average at start: {open('/proc/loadavg').read().split()[:3]}")
        print(f"{K} rows dim 16, pulls of {KEYS} uniform keys, open loop {RATE}/s, {SECS:.0f} s "
              f"per run; switching: {NCK - 1} switches per run")
        cols = ("p50", "p99", "p999", "max")
        runs = [(w, k) for w in ("warm", "nowarm") for k in ("steady", "switching")]
        res = {run: [] for run in runs}
        for rnd in range(ROUNDS):
            for warm, kind in (runs if rnd % 2 == 0 else runs[::-1]):
                set_latest(live, "step-1")
                flog = os.path.join(d, "follow.log")
                furl = server(["--serve", live, "--follow", "--log-level", "info",
                               "--follow-warm-keys", "0" if warm == "nowarm" else str(1 << 20)],
                              flog)
                stop = threading.Event()

                def switch():
                    time.sleep(1)  # ps-bench's warm-up
                    for s in range(2, NCK + 1):
                        if stop.wait(SECS / NCK):
                            return
                        set_latest(live, f"step-{s}")
                th = threading.Thread(target=switch)
                if kind == "switching":
                    th.start()
                j = bench(furl, ["--rate", str(RATE), "--duration", str(SECS), "--warmup", "1"],
                          os.path.join(d, "b.json"))
                stop.set()
                if kind == "switching":
                    th.join()
                lib_harness.stop_procs(procs)
                procs.clear()
                served = re.findall(r"now serving step .*last (\d+) keys pulled \((\d+) ms\)",
                                    open(flog).read())
                n = len(served)
                lat = j["latency_us"]
                res[(warm, kind)].append(lat)
                print(f"round {rnd + 1} {warm:6s} {kind:9s}: " +
                      " ".join(f"{k} {lat[k]:8.0f}" for k in cols) +
                      f" us; errors {j['errors']} timeouts {j['timeouts']}; switches {n}" +
                      (" (warm-up ms: " + ", ".join(ms for _, ms in served) + ")" if n and
                       warm == "warm" else ""), flush=True)
        med = {run: {c: statistics.median(x[c] for x in v) for c in cols}
               for run, v in res.items()}
        for (warm, kind), m in med.items():
            print(f"median {warm:6s} {kind:9s}: " + " ".join(f"{c} {m[c]:8.0f}" for c in cols)
                  + " us")
        for warm in ("warm", "nowarm"):
            print(f"ratio switching/steady, {warm:6s}: " + " ".join(
                f"{c} {med[(warm, 'switching')][c] / med[(warm, 'steady')][c]:.2f}"
                for c in cols))
        print(f"load average at end: {open('/proc/loadavg').read().split()[:3]}")


try:
    main()
finally:
    lib_harness.stop_procs(procs)
