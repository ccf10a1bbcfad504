#!/usr/bin/python3
"""ps-serve latency and throughput (issue 34 item 2): trains the Kaggle-shape DLRM (13-512-256-
64-16, 512-256-1, dim 16) on TRAIN rows with 1 server and a checkpoint, starts ps-serve on it,
and times POST /v1/score with a simple closed-loop client: C connections (keep-alive, one
Python thread each) each sending its next request as soon as the last is answered, for SECS
seconds per case, for 1 and 64 candidate rows per request (text bodies of test lines). The
cases are run ROUNDS times, interleaved; prints each run and the medians as a table and JSON.
The client is Python's http.client: its own time per request (~0.1-0.2 ms) is in the figures.
Usage: bench/serve/run.py [BIN_DIR] [TRAIN_ROWS] [SECS] [ROUNDS]"""
import http.client
import json
import os
import select
import statistics
import subprocess
import tempfile
import threading
import time

import serve_args

bin_dir, train_rows, secs, rounds = serve_args.parse(5)
CASES = [(1, 1), (64, 1), (1, 4), (64, 4)]  # (rows per request, connections)


def run_case(port, body, conns, secs):
    lat, errs = [], [0]
    stop = time.time() + secs

    def client():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        while time.time() < stop:
            t0 = time.perf_counter()
            c.request("POST", "/v1/score", body, {"Content-Type": "text/plain"})
            resp = c.getresponse()
            resp.read()
            mine.append(time.perf_counter() - t0)
            if resp.status != 200:
                errs[0] += 1
        lat.extend(mine)

    t0 = time.time()
    ths = [threading.Thread(target=client) for _ in range(conns)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.time() - t0
    lat.sort()
    return {"p50_ms": lat[len(lat) // 2] * 1e3, "p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
            "rps": len(lat) / wall, "requests": len(lat), "errors": errs[0]}


with tempfile.TemporaryDirectory() as d:
    subprocess.run([f"{bin_dir}/ps-datagen", "--rows", str(train_rows), "--seed", "1", "--out",
                    f"{d}/train.tsv", "--test-rows", "1000", "--test-out", f"{d}/test.tsv",
                    "--json", f"{d}/planted.json"], check=True, capture_output=True)
    os.makedirs(f"{d}/ck")
    subprocess.run([f"{serve_args.ROOT}/deploy/ember-local", "--bin", bin_dir, "--servers", "1", "--workers",
                    "1", "--", "--train", f"{d}/train.tsv", "--checkpoint-dir", f"{d}/ck",
                    "--progress-every", "60", "--log-level", "warn"], check=True,
                   capture_output=True)
    p = subprocess.Popen([f"{bin_dir}/ps-serve", "--checkpoint", f"{d}/ck", "--http",
                          "127.0.0.1:0", "--threads", "4", "--log-level", "warn"],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline() if select.select([p.stdout], [], [], 60)[0] else ""
        port = int(line.strip().rsplit(":", 1)[1])
        lines = open(f"{d}/test.tsv").read().split("\n")
        runs = {c: [] for c in CASES}
        for rnd in range(rounds):
            for rows, conns in CASES:
                res = run_case(port, "\n".join(lines[:rows]) + "\n", conns, secs)
                runs[(rows, conns)].append(res)
                print(f"round {rnd + 1} rows {rows} conns {conns}: p50 {res['p50_ms']:.3f} ms "
                      f"p99 {res['p99_ms']:.3f} ms {res['rps']:.0f} req/s "
                      f"({res['errors']} errors)", flush=True)
    finally:
        p.terminate()
        p.wait()
    out = []
    print("\n| rows/request | connections | p50 ms | p99 ms | requests/s | rows/s |")
    print("|---|---|---|---|---|---|")
    for (rows, conns), rs in runs.items():
        m = {k: statistics.median(r[k] for r in rs) for k in ("p50_ms", "p99_ms", "rps")}
        print(f"| {rows} | {conns} | {m['p50_ms']:.3f} | {m['p99_ms']:.3f} | {m['rps']:.0f} | "
              f"{m['rps'] * rows:.0f} |")
        out.append({"rows": rows, "connections": conns, **m,
                    "errors": sum(r["errors"] for r in rs)})
    print(json.dumps({"bench": "ps-serve", "train_rows": train_rows, "secs": secs,
                      "rounds": rounds, "cases": out}))
