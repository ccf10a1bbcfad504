#!/usr/bin/env python3
"""Issue 32: how much of a server reply delay a ps-worker step hides, old vs new, interleaved.

Trains the small towers (--mlp-bot 13-32-16 --mlp-top 64-1, batch 256, one thread a worker)
on planted data through deploy/ember-local, with every ps-server given --inject-delay-us D
(each reply leaves D after its store work starts: a network hop and a queue). Variants, one
per (binary directory, ps-worker flags) pair, run in interleaved rounds: in each round every
variant runs once for every D and layout, in an order that rotates with the round, so slow
spells of this shared machine fall on all of them. Prints one line a run, then per layout,
variant and D the median samples/s over the rounds, its ratio to the same variant at D = 0 and
to the first variant at the same D, the median wait share (seconds_rank0.pull + push over the
train seconds), and whether every run of a layout had the same dense hash; the medians as JSON
on the last line.

  bench/e2e/lookahead_delay.py --variant old=/path/to/old/bin: \\
      --variant off=build/bin:--lookahead,off --variant on=build/bin:--lookahead,on

A variant is NAME=BIN_DIR:FLAG,FLAG,... (BIN_DIR up to the first colon; flags comma-separated,
none: nothing after it). An
old binary without a flag cannot take it: give it none."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "64-1", "--batch", "256", "--threads", "1",
         "--progress-every", "60"]


def wrapper_dir(root, bindir, delay):
    """A --bin for ember-local whose ps-server adds --inject-delay-us (ember-local has no flag
    for it); ps-worker is the variant's own."""
    d = os.path.join(root, f"bin-{abs(hash(bindir))}-{delay}")
    if os.path.isdir(d):
        return d
    os.makedirs(d)
    real = os.path.abspath(bindir)
    with open(os.path.join(d, "ps-server"), "w") as f:
        f.write(f'#!/bin/sh\nexec "{real}/ps-server" --inject-delay-us {delay} "$@"\n')
    os.chmod(os.path.join(d, "ps-server"), 0o755)
    os.symlink(os.path.join(real, "ps-worker"), os.path.join(d, "ps-worker"))
    return d


def run_one(root, bindir, flags, delay, servers, workers, train):
    summary = os.path.join(root, "summary.json")
    if os.path.exists(summary):
        os.remove(summary)
    cmd = [os.path.join(SRC, "deploy", "ember-local"), "--bin", wrapper_dir(root, bindir, delay),
           "--servers", str(servers), "--workers", str(workers), "--",
           "--train", train, "--summary", summary] + SMALL + flags
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{(p.stdout + p.stderr)[-3000:]}")
    s = json.load(open(summary))
    tm = s["seconds_rank0"]
    wait = (tm["pull"] + tm["push"]) / s["train_seconds"] if s["train_seconds"] else 0
    return s["samples_per_s"], wait, s["dense_hash"], s.get("rows_refreshed", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", action="append", required=True, help="NAME=BIN_DIR:FLAGS")
    ap.add_argument("--delays", default="0,1000,3000", help="microseconds, comma-separated")
    ap.add_argument("--layouts", default="1x1,2x2", help="SERVERSxWORKERS, comma-separated")
    ap.add_argument("--rows", type=int, default=60000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    variants = []
    for v in a.variant:
        name, rest = v.split("=", 1)
        bindir, _, fl = rest.partition(":")
        variants.append((name, bindir, [x for x in fl.split(",") if x]))
    delays = [int(x) for x in a.delays.split(",")]
    layouts = [tuple(int(y) for y in x.split("x")) for x in a.layouts.split(",")]
    with tempfile.TemporaryDirectory() as root:
        train = os.path.join(root, "train.tsv")
        subprocess.run([os.path.join(variants[-1][1], "ps-datagen"), "--rows", str(a.rows),
                        "--seed", "7", "--out", train], check=True, capture_output=True)
        res = {}
        cases = [(l, d, v) for l in layouts for d in delays for v in range(len(variants))]
        for rnd in range(a.rounds):
            k = rnd % len(variants)
            for (l, d, vi) in cases:
                vi = (vi + k) % len(variants)  # rotate which variant goes first
                name, bindir, flags = variants[vi]
                sps, wait, hsh, refr = run_one(root, bindir, flags, d, l[0], l[1], train)
                res.setdefault((l, name, d), []).append((sps, wait, hsh, refr))
                print(f"round {rnd} {l[0]}x{l[1]} {name:>6} D={d:>5}us: {sps:9.0f} samples/s "
                      f"wait {100 * wait:5.1f}% hash {hsh} refreshed {refr}", flush=True)
    out = {}
    for l in layouts:
        hashes = {r[2] for (ll, _, _), rs in res.items() if ll == l for r in rs}
        print(f"\n{l[0]}x{l[1]}: dense hash {'the same in every run' if len(hashes) == 1 else 'DIFFERS: ' + str(hashes)}")
        for name, _, _ in variants:
            for d in delays:
                rs = res[(l, name, d)]
                med = statistics.median(r[0] for r in rs)
                base = statistics.median(r[0] for r in res[(l, name, delays[0])])
                first = statistics.median(r[0] for r in res[(l, variants[0][0], d)])
                wait = statistics.median(r[1] for r in rs)
                print(f"  {name:>6} D={d:>5}us: {med:9.0f} samples/s  x{med / base:.2f} of D={delays[0]}"
                      f"  x{med / first:.2f} of {variants[0][0]}  wait {100 * wait:4.1f}%"
                      f"  rows refreshed {rs[0][3]}")
                out[f"{l[0]}x{l[1]} {name} D={d}"] = {"samples_per_s": med, "wait_share": wait}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
