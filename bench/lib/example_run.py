#!/usr/bin/python3
"""bench/lib/example_run.py: samples/s and AUC of python/examples/dlrm_criteo.py (with and
without --prefetch) beside ps-worker on the same data and model, interleaved per round.

    bench/lib/example_run.py [BUILD [ROUNDS [ROWS]]]   (build, 3, 600000)

Data: ps-datagen seed 1, ROWS training rows, 20k test rows; model as tests/lib/
test_dlrm_example.py (towers 13-64-16 / 64-1, batch 512, one torch / BLAS thread). Each run
gets a fresh ps-server. samples/s is training only (the example's parsing and ps-worker's
reading are not in it: ps-worker's samples/s includes its data path, which it overlaps)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(SRC, "build"))
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
ROWS = int(sys.argv[3]) if len(sys.argv) > 3 else 600000
os.environ["EMBER_BIN"] = os.path.join(BUILD, "bin")
from lib_harness import BIN, Servers  # noqa: E402

MODEL = ["--batch", "512", "--mlp-bot", "13-64-16", "--mlp-top", "64-1", "--threads", "1"]


def run(kind, train, test, d):
    with Servers(1) as s:
        if kind == "ps-worker":
            summ = os.path.join(d, "s.json")
            subprocess.run([os.path.join(BIN, "ps-worker"), "--servers", s.urls[0], "--train", train,
                            "--test", test, "--summary", summ, "--progress-every", "600", *MODEL],
                           check=True, capture_output=True, timeout=900)
            j = json.load(open(summ))
            return j["samples_per_s"], j["auc"]
        env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"),
                   EMBER_LIBRARY=os.path.join(BUILD, "lib", "libember.so.0"))
        extra = ["--prefetch"] if kind == "example --prefetch" else []
        out = subprocess.run(["/usr/bin/python3", os.path.join(SRC, "python", "examples", "dlrm_criteo.py"),
                              "--servers", s.urls[0], "--train", train, "--test", test, *MODEL, *extra],
                             check=True, capture_output=True, text=True, timeout=900, env=env)
        j = json.loads(out.stdout.strip().splitlines()[-1])
        return j["samples_per_s"], j["auc"]


def main():
    kinds = ["ps-worker", "example", "example --prefetch"]
    res = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as d:
        train, test = os.path.join(d, "train.tsv"), os.path.join(d, "test.tsv")
        subprocess.run([os.path.join(BIN, "ps-datagen"), "--rows", str(ROWS), "--seed", "1", "--out", train,
                        "--test-rows", "20000", "--test-out", test, "--log-level", "warn"], check=True)
        for r in range(ROUNDS):
            for k in (kinds if r % 2 == 0 else kinds[::-1]):
                res[k].append(run(k, train, test, d))
                print(k, res[k][-1], file=sys.stderr)
    print(f"| run ({ROWS} rows, median of {ROUNDS}) | samples/s | AUC | samples/s per round |")
    print("| --- | --- | --- | --- |")
    for k in kinds:
        sps = [x[0] for x in res[k]]
        print(f"| {k} | {statistics.median(sps):.0f} | {statistics.median(x[1] for x in res[k]):.4f} | "
              f"{' '.join(f'{x:.0f}' for x in sps)} |")


if __name__ == "__main__":
    main()
