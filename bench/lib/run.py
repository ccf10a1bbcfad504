#!/usr/bin/python3
"""bench/lib/run.py: pull/push keys/s from Python (the `ember` package) vs C (libember) on the
same workload, interleaved against one ps-server; prints a Markdown table of medians.

    bench/lib/run.py [BUILD [ROUNDS]]      (BUILD default build, ROUNDS default 5)

Each round runs every case once through C and once through Python, the order alternating per
round; the table has the median keys/s and us/call of each side and their ratio, and the
per-call difference of the client process's CPU time (Python - C): the binding's cost per
call, which the machine's load disturbs less than wall time."""
import os
import re
import statistics
import subprocess
import sys

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(SRC, "build"))
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
os.environ["EMBER_BIN"] = os.path.join(BUILD, "bin")
from lib_harness import Servers  # noqa: E402

DIM, SPACE = 16, 100000
CASES = [("pull", 1, 20000), ("pull", 64, 10000), ("pull", 512, 4000), ("pull", 4096, 800),
         ("push", 1, 20000), ("push", 64, 10000), ("push", 512, 4000), ("push", 4096, 800)]


def one(url, side, op, keys, calls):
    if side == "c":
        cmd = [os.path.join(BUILD, "bin", "lib_bench")]
    else:
        cmd = ["/usr/bin/python3", os.path.join(SRC, "bench", "lib", "lib_bench.py")]
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"),
               EMBER_LIBRARY=os.path.join(BUILD, "lib", "libember.so.0"))
    out = subprocess.run(cmd + [url, op, str(keys), str(DIM), str(calls), str(SPACE)],
                         capture_output=True, text=True, timeout=600, env=env)
    if out.returncode:
        raise SystemExit(f"{side} {op}: {out.stderr}")
    m = re.search(r"keys/s=(\S+) us/call=(\S+) cpu_us/call=(\S+)", out.stdout)
    return float(m.group(1)), float(m.group(2)), float(m.group(3))


def main():
    res = {(s, c): [] for s in ("c", "py") for c in CASES}
    with Servers(1) as srv:
        url = srv.urls[0]
        for r in range(ROUNDS):
            for case in CASES:
                for side in (("c", "py") if r % 2 == 0 else ("py", "c")):
                    res[(side, case)].append(one(url, side, *case))
    print(f"| case (dim {DIM}, median of {ROUNDS}) | C keys/s | Python keys/s | Python/C | "
          "C us/call | Python us/call | C CPU us/call | Python CPU us/call | Python - C CPU us/call |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for case in CASES:
        ck = statistics.median(x[0] for x in res[("c", case)])
        pk = statistics.median(x[0] for x in res[("py", case)])
        cu = statistics.median(x[1] for x in res[("c", case)])
        pu = statistics.median(x[1] for x in res[("py", case)])
        cc = statistics.median(x[2] for x in res[("c", case)])
        pc = statistics.median(x[2] for x in res[("py", case)])
        print(f"| {case[0]} {case[1]} keys | {ck:.3g} | {pk:.3g} | {pk / ck:.2f} | {cu:.1f} | "
              f"{pu:.1f} | {cc:.1f} | {pc:.1f} | {pc - cc:+.1f} |")


if __name__ == "__main__":
    main()
