#!/usr/bin/python3
"""test_py_attach: reading a table by name without its training spec (issue 36, friction 12),
against real ps-servers on 127.0.0.1 (two shards).

A client declares a table (adagrad, lr 0.05, dim 6), pushes and checkpoints it. Then:
1. Training servers: another client's `Client.table(name)` (no dim) attaches read-only: the
   servers' id and dim, the same rows as the trainer pulls; a push on it raises, naming
   read-only; an unknown name raises EMBER_EUNKNOWN_TABLE in one line; a declare with another lr
   is refused naming the field ("lr 0.05 vs 0.1"), not two identical name/dim pairs.
2. ps-server --serve of the checkpoint: the same attach gives the checkpoint's rows; a declare of
   the table with another optimizer is refused naming "optimizer adagrad vs sgd"; the serving
   server's unauthenticated WARN says anyone can read every table, not change it."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import BIN, Results, Servers, free_port, stop_procs, use_build_package  # noqa: E402

use_build_package()
import ember  # noqa: E402

DIM, NAME = 6, "clicks_emb"
SPEC = dict(dim=DIM, optimizer="adagrad", lr=0.05, init=0.01, seed=3)


def raises(fn):
    """The EmberError fn raises, or None."""
    try:
        fn()
    except ember.EmberError as e:
        return e
    return None


def check_refusal(r, name, fn, code, text):
    e = raises(fn)
    r.check(name, e is not None and e.code == code and text in str(e) and "\n" not in str(e),
            repr(e))


def main():
    r = Results()
    keys = np.arange(1, 200, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    rng = np.random.default_rng(5)
    ckroot = tempfile.TemporaryDirectory(prefix="ember-attach.")
    ck = os.path.join(ckroot.name, "step-4")
    with ckroot, Servers(2, extra=("--checkpoint-root", ckroot.name)) as srv:
        with ember.Client(srv.urls, timeout_ms=20000) as c:
            t = c.table(NAME, **SPEC)
            for _ in range(4):
                t.push(keys, rng.standard_normal((keys.shape[0], DIM)).astype(np.float32))
                c.step()
            want = t.pull(keys)
            c.checkpoint(os.path.join(ck, "shards"))  # absolute: the layout --serve reads

            # 1. attach by name on the training servers
            with ember.Client(srv.urls, timeout_ms=20000) as c2:
                a = c2.table(NAME)
                r.check("attach by name: the servers' id and dim, read-only",
                        (a.id, a.dim, a.read_only) == (t.id, DIM, True), repr(a))
                r.check("attach by name: the trainer's rows", np.array_equal(a.pull(keys), want))
                check_refusal(r, "a push on an attached table raises, naming read-only",
                              lambda: a.push(keys[:2], np.zeros((2, DIM), np.float32)),
                              1, "attached read-only by name")
                check_refusal(r, "an unknown name: EMBER_EUNKNOWN_TABLE in one line",
                              lambda: c2.table("nope"), 10, "no table named 'nope'")
                check_refusal(r, "a declare with another lr names the field",
                              lambda: c2.table(NAME, **dict(SPEC, lr=0.1)), 6,
                              "lr 0.05 vs 0.1")

        # 2. ps-server --serve of the checkpoint
        urls, procs = [], []
        try:
            for i in range(2):
                urls.append(f"tcp://127.0.0.1:{free_port()}")
                log = open(os.path.join(srv.dir.name, f"serve{i}.log"), "w")
                procs.append(subprocess.Popen(
                    [os.path.join(BIN, "ps-server"), "--listen", urls[-1], "--serve", ck,
                     "--shard", str(i), "--shards", "2", "--threads", "0", "--log-level",
                     "warn"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            with ember.Client(urls, timeout_ms=20000) as c3:
                a = c3.table(NAME)
                r.check("serving: attach by name gives the checkpoint's rows",
                        a.dim == DIM and np.array_equal(a.pull(keys), want))
                check_refusal(r, "serving: a declare with another optimizer names the field",
                              lambda: c3.table(NAME, **dict(SPEC, optimizer="sgd")), 6,
                              "declared vs served optimizer sgd vs adagrad")
            with open(os.path.join(srv.dir.name, "serve0.log")) as f:
                warn = [l for l in f if "unauthenticated" in l]
            r.check("serving: the unauthenticated WARN says read, not change",
                    len(warn) == 1 and "can read (not change: --serve is read-only) every table"
                    in warn[0], repr(warn))
        finally:
            stop_procs(procs)
    r.finish()


if __name__ == "__main__":
    main()
