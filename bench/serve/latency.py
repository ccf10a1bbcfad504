#!/usr/bin/python3
"""ps-serve's latency against offered rate (issue 34, item 3's figures): p50/p99/p999 from
ps-bench --op score (open loop, latency from each request's intended send time, so no
coordinated omission) for 1, 64 and 512 candidates per request, over HTTP (--http) and over
ZeroMQ (--listen, with CURVE keys as the servers' default), and the knee of each sweep.

Trains the Kaggle-shape DLRM (13-512-256-64-16, 512-256-1, dim 16; ps-worker's defaults) on
TRAIN_ROWS ps-datagen rows with 1 server and a checkpoint, starts one ps-serve --threads 2 with
both ends, and for each (candidates) finds the closed-loop capacity C (one request in flight,
the better of HTTP and ZeroMQ), then sweeps each transport at the rates FRACTIONS x C. The rounds repeat the
whole set interleaved (HTTP and ZeroMQ alternate inside a round; each point at least 40
requests long); the table has the medians of the rounds per point, the knee of each round by
ps-bench's rule (the highest rate achieved to 90 % with p99 within 5x the lightest point's) and
p99 at half of it, and the throughput knee of the medians (the highest rate achieved to 90 %
with every lighter one) with p50/p99 near half of it. Prints the tables and one JSON document.
Usage: bench/serve/latency.py [BIN_DIR] [TRAIN_ROWS] [SECS_PER_POINT] [ROUNDS]"""
import json
import os
import queue
import statistics
import subprocess
import tempfile
import threading

import serve_args

bin_dir, train_rows, secs, rounds = serve_args.parse(2)
CANDIDATES = (1, 64, 512)
FRACTIONS = (0.25, 0.4, 0.55, 0.7, 0.85, 1.0, 1.15)
MIN_REQUESTS = 40  # per point: the lightest point runs long enough for 40 requests


def bench(url, cand, lines, extra, out, dur=None):
    cmd = [f"{bin_dir}/ps-bench", "--op", "score", "--url", url, "--score-lines", lines,
           "--candidates", str(cand), "--warmup", "0.5", "--duration", str(dur or secs),
           "--json", out,
           "--timeout-ms", "5000"] + extra
    q = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if q.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(cmd)}: {q.returncode} {q.stderr[-800:]}")
    return json.load(open(out))


def start_serve(ck, d):
    p = subprocess.Popen([f"{bin_dir}/ps-serve", "--checkpoint", ck, "--http", "127.0.0.1:0",
                          "--listen", "tcp://127.0.0.1:0", "--curve-secret", f"{d}/server.secret",
                          "--curve-clients", f"{d}/clients", "--threads", "2", "--max-body-kb",
                          "4096", "--log-level", "warn"], stdout=subprocess.PIPE, text=True)
    eps, lines = {}, queue.Queue()
    # a thread reads the lines: select() on a buffered pipe misses a second line already read
    threading.Thread(target=lambda: [lines.put(l) for l in p.stdout] + [lines.put("")],
                     daemon=True).start()
    while len(eps) < 2:
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            break
        if not line:
            break
        if "listening on" in line:
            ep = line.split("listening on ")[1].strip()
            eps[ep.split(":")[0]] = ep
    if len(eps) < 2:
        p.kill()
        raise SystemExit("ps-serve did not start")
    return p, eps


def main():
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([f"{bin_dir}/ps-datagen", "--rows", str(train_rows), "--seed", "1",
                        "--out", f"{d}/train.tsv", "--test-rows", "5000", "--test-out",
                        f"{d}/test.tsv", "--json", f"{d}/planted.json"], check=True,
                       capture_output=True)
        os.makedirs(f"{d}/ck")
        subprocess.run([f"{serve_args.ROOT}/deploy/ember-local", "--bin", bin_dir, "--servers", "1",
                        "--workers", "1", "--", "--train", f"{d}/train.tsv", "--checkpoint-dir",
                        f"{d}/ck", "--progress-every", "60", "--log-level", "warn"], check=True,
                       capture_output=True)
        for k in ("server", "client"):
            subprocess.run([f"{bin_dir}/ps-keygen", "--out", f"{d}/{k}"], check=True,
                           capture_output=True)
        os.makedirs(f"{d}/clients")
        os.rename(f"{d}/client.public", f"{d}/clients/client.public")
        curve = ["--curve-secret", f"{d}/client.secret", "--curve-server", f"{d}/server.public"]
        p, eps = start_serve(f"{d}/ck", d)
        ends = {"http": (eps["http"], ["--inflight", "64"]), "zmq": (eps["tcp"], curve)}
        load = [os.getloadavg()[0]]
        runs = {}  # (transport, cand) -> [doc per round]
        caps = {}
        try:
            for rnd in range(rounds):
                for cand in CANDIDATES:
                    if cand not in caps:  # the capacity, once: the rates stay the same per round
                        # the best of a closed-loop probe per transport (one request in flight):
                        # on a shared machine one probe can land on a stall of other work
                        caps[cand] = max(bench(ends[t][0], cand, f"{d}/test.tsv", ends[t][1] +
                                               ["--closed-loop", "--inflight", "1"],
                                               f"{d}/cap.json")["points"][0]["achieved_rate"]
                                         for t in ("http", "zmq"))
                    rates = ",".join(f"{f * caps[cand]:.1f}" for f in FRACTIONS)
                    dur = max(secs, MIN_REQUESTS / (FRACTIONS[0] * caps[cand]))
                    order = ("http", "zmq") if rnd % 2 == 0 else ("zmq", "http")
                    for t in order:
                        url, extra = ends[t]
                        doc = bench(url, cand, f"{d}/test.tsv", extra + ["--sweep", rates],
                                    f"{d}/sweep.json", dur)
                        runs.setdefault((t, cand), []).append(doc)
                        k = doc.get("knee") or {}
                        print(f"round {rnd + 1} {t} {cand} candidates: knee "
                              f"{k.get('offered_rate', 0):.0f} req/s, load "
                              f"{os.getloadavg()[0]:.1f}", flush=True)
                        load.append(os.getloadavg()[0])
        finally:
            p.terminate()
            p.wait()
    out = []
    print(f"\nload average (1 min) during the run: {min(load):.1f}..{max(load):.1f}")
    print("| transport | candidates | offered req/s | achieved req/s | p50 ms | p99 ms | p999 ms |")
    print("|---|---|---|---|---|---|---|")
    for (t, cand), docs in runs.items():
        pts = []
        for i in range(len(FRACTIONS)):
            col = [doc["points"][i] for doc in docs]
            m = {"offered": statistics.median(c["offered_rate"] for c in col),
                 "achieved": statistics.median(c["achieved_rate"] for c in col),
                 "errors": sum(c["errors"] + c["timeouts"] for c in col)}
            for q in ("p50", "p99", "p999"):
                m[q + "_ms"] = statistics.median(c["latency_us"][q] for c in col) / 1e3
            pts.append(m)
            print(f"| {t} | {cand} | {m['offered']:.0f} | {m['achieved']:.0f} | "
                  f"{m['p50_ms']:.3f} | {m['p99_ms']:.3f} | {m['p999_ms']:.3f} |")
        knees = [doc["knee"]["offered_rate"] if doc.get("knee") else 0.0 for doc in docs]
        halves = [doc["half_knee"]["p99_us"] / 1e3 for doc in docs if doc.get("half_knee")]
        # The throughput knee of the medians: the highest offered rate achieved to 90 % with
        # every lighter one (ps-bench's knee also needs p99 within 5x the lightest point's,
        # which one stall of the shared machine breaks), and the point nearest half of it.
        sat = -1
        for i, m in enumerate(pts):
            if m["achieved"] < 0.9 * m["offered"] or m["errors"]:
                break
            sat = i
        half = (min(range(len(pts)), key=lambda i: abs(pts[i]["offered"] - pts[sat]["offered"] / 2))
                if sat >= 0 else -1)
        out.append({"transport": t, "candidates": cand, "capacity_closed_loop": caps[cand],
                    "points": pts, "knee_req_s": statistics.median(knees),
                    "knees": knees, "half_knee_p99_ms": statistics.median(halves) if halves else None,
                    "throughput_knee_req_s": pts[sat]["offered"] if sat >= 0 else None,
                    "half_throughput_knee": pts[half] if half >= 0 else None})
    print("\n| transport | candidates | knee req/s (ps-bench rule: median; rounds) | p99 at its "
          "half ms | throughput knee req/s | offered, p50, p99 ms near its half |")
    print("|---|---|---|---|---|---|")
    for o in out:
        hk, tk, ht = o["half_knee_p99_ms"], o["throughput_knee_req_s"], o["half_throughput_knee"]
        hks = "-" if hk is None else f"{hk:.3f}"
        tks = "-" if tk is None else f"{tk:.0f}"
        hts = "-" if ht is None else f"{ht['offered']:.0f}, {ht['p50_ms']:.3f}, {ht['p99_ms']:.3f}"
        print(f"| {o['transport']} | {o['candidates']} | {o['knee_req_s']:.0f} "
              f"({', '.join(f'{k:.0f}' for k in o['knees'])}) | {hks} | {tks} | {hts} |")
    print(json.dumps({"bench": "ps-serve-latency", "train_rows": train_rows, "secs": secs,
                      "rounds": rounds, "load_avg": [min(load), max(load)], "cases": out}))


main()
