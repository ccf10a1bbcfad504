#!/usr/bin/python3
"""lib_bench.py: the Python half of the Python-vs-C comparison (lib_bench.c is the C half):
the same workload through the `ember` package -- KEYS random keys of KEYSPACE per call, as a
numpy uint64 array, Table.pull / Table.push, one call at a time. The keys of each call are
drawn before the clock (numpy) on both sides' terms: the C half draws them in its loop
(a few ns per key), so the Python figure carries its own array handling, not a Python loop.
Usage: lib_bench.py URL pull|push KEYS DIM CALLS KEYSPACE"""
import sys
import time

import numpy as np

import ember


def main():
    if len(sys.argv) != 7 or sys.argv[2] not in ("pull", "push"):
        print(__doc__.splitlines()[-1], file=sys.stderr)
        return 2
    url, op = sys.argv[1], sys.argv[2]
    nk, dim, calls, space = (int(x) for x in sys.argv[3:])
    c = ember.Client([url], timeout_ms=60000)
    t = c.table("lib_bench", id=77, dim=dim, optimizer="sgd", lr=0.001, init=0.01)
    t.push(np.arange(space, dtype=np.uint64), np.zeros((space, dim), np.float32))
    rng = np.random.default_rng(1)
    batches = rng.integers(0, space, size=(calls, nk), dtype=np.uint64)
    grads = np.zeros((nk, dim), np.float32)
    t0, c0 = time.perf_counter(), time.process_time()
    if op == "pull":
        for i in range(calls):
            t.pull(batches[i])
    else:
        for i in range(calls):
            t.push(batches[i], grads)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    print(f"py {op} keys={nk} dim={dim} calls={calls} keys/s={nk * calls / dt:.4g} "
          f"us/call={1e6 * dt / calls:.2f} cpu_us/call={1e6 * dc / calls:.2f}")
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
