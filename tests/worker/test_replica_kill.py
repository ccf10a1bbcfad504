"""Replicated shards under ps-worker (issue 23): 2 shards x 2 replicas (ps-server --replica R
--replicas 2 --peers 'U0|U1'), 2 sync workers given --servers 'U00|U01,U10|U11'. Processes are
started here directly (127.0.0.1, free ports), every wait bounded, cleanup by PID.

  - an uninterrupted run: exit 0, its AUC the reference; afterwards both replicas of each shard
    hold the same rows, every row's record compared (repl_rows_cmp);
  - the same run with replica 0 of shard 1 (its primary) killed with SIGKILL mid-training and
    restarted with its data dir after the workers moved on: the job exits 0, its test AUC is
    within 0.001 of the uninterrupted run's, the workers moved to replica 1 once (the failover
    time printed, read from the client's "failover: ... N ms" line), and the restarted replica
    caught up: every row of shard 1's two replicas identical (and shard 0's).

usage: test_replica_kill.py REPL_ROWS_CMP"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

CMP = sys.argv[1]
SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--emb-dim", "16", "--threads", "1",
         "--batch", "256", "--consistency", "sync", "--progress-every", "0.2",
         "--failover-ms", "1000"]
FAILOVER = "1000"


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Cluster:
    """2 shards x 2 replicas; procs[(shard, replica)] = Popen."""

    def __init__(self, root):
        self.root = root
        p = free_ports(4)
        self.url = {(i, r): f"tcp://127.0.0.1:{p[2 * i + r]}" for i in range(2) for r in range(2)}
        self.procs = {}
        self.logs = {}

    def peers(self, i):
        return f"{self.url[(i, 0)]}|{self.url[(i, 1)]}"

    def servers(self):
        return ",".join(self.peers(i) for i in range(2))

    def ddir(self, i, r):
        return os.path.join(self.root, f"s{i}r{r}")

    def start(self, i, r):
        log = open(os.path.join(self.root, f"s{i}r{r}.log"), "a")
        self.logs[(i, r)] = log.name
        cmd = [f"{h.BIN}/ps-server", "--listen", self.url[(i, r)], "--shard", str(i), "--shards",
               "2", "--data-dir", self.ddir(i, r), "--threads", "0", "--cache-mb", "64",
               "--replica", str(r), "--replicas", "2", "--peers", self.peers(i),
               "--failover-ms", FAILOVER,
               # Every pull/push reply held 20 ms: a run long enough (about 3 s) for the kill to
               # fall mid-training on any machine, however fast.
               "--inject-delay-us", "20000"]
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[(i, r)] = p
        port = int(self.url[(i, r)].rsplit(":", 1)[1])
        end = time.time() + 20
        while time.time() < end:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                assert p.poll() is None, f"ps-server {i}/{r} exited: {open(log.name).read()}"
                time.sleep(0.05)
        raise AssertionError(f"ps-server {i}/{r} did not listen")

    def stop_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)

    def kill_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)


def run_job(root, train, test, kill):
    """Returns (summary, worker outputs, failover ms list, cluster)."""
    c = Cluster(root)
    try:
        for i in range(2):
            for r in range(2):
                c.start(i, r)
        summary = os.path.join(root, "summary.json")
        workers, outs = [], ["", ""]
        for rank in range(2):
            cmd = [f"{h.BIN}/ps-worker", "--servers", c.servers(), "--rank", str(rank), "--world",
                   "2", "--train", train, "--test", test] + SMALL
            if rank == 0:
                cmd += ["--summary", summary]
            workers.append(subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True,
                                            start_new_session=True))
        killed = threading.Event()
        moved = threading.Event()

        def reader(rank):
            for line in workers[rank].stdout:
                outs[rank] += line
                m = re.search(r"INFO .*step (\d+)/", line)
                if kill and rank == 0 and m and int(m.group(1)) >= 6 and not killed.is_set():
                    c.procs[(1, 0)].kill()  # the primary of shard 1
                    killed.set()
                if "failover: shard 1" in line:
                    moved.set()

        threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(2)]
        for t in threads:
            t.start()
        if kill:
            assert killed.wait(240), "training never reached step 6:\n" + outs[0][-3000:]
            c.procs[(1, 0)].wait(timeout=5)
            assert moved.wait(60), "no failover line:\n" + outs[0][-3000:] + outs[1][-3000:]
            c.start(1, 0)  # the same data dir: it must catch up from replica 1
        end = time.time() + 400
        for w in workers:
            w.wait(timeout=max(1, end - time.time()))
        for t in threads:
            t.join(timeout=10)
        rcs = [w.returncode for w in workers]
        assert rcs == [0, 0], f"workers exited {rcs}:\n{outs[0][-3000:]}\n{outs[1][-3000:]}"
        fo = [int(m) for o in outs for m in re.findall(r"failover: shard \d .* (\d+) ms after", o)]
        if kill:  # the restarted replica catches up (bounded), then everything stops cleanly
            log = c.logs[(1, 0)]
            end = time.time() + 60
            while time.time() < end and "is backup" not in open(log).read():
                time.sleep(0.1)
        c.stop_all()
        import json
        return json.load(open(summary)), outs, fo, c
    finally:
        c.kill_all()


def same_rows(c, i):
    rc, out = h.run([CMP, c.ddir(i, 0), c.ddir(i, 1)], 120)
    return rc == 0, out.strip().splitlines()[-1] if out.strip() else ""


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    d = os.environ.get("EMBER_KEEP_DIR", d)  # debugging: logs and data dirs left there
    train, test, _ = h.datagen(d, 24000, 4000, seed=11)
    base_dir = os.path.join(d, "base")
    os.makedirs(base_dir)
    base, _, fo0, c0 = run_job(base_dir, train, test, kill=False)
    r.check("uninterrupted run", base["auc"] is not None and fo0 == [], f"auc {base['auc']:.6f}")
    for i in range(2):
        ok, out = same_rows(c0, i)
        r.check(f"uninterrupted: shard {i} replicas identical", ok, out)

    kill_dir = os.path.join(d, "kill")
    os.makedirs(kill_dir)
    got, outs, fo, c1 = run_job(kill_dir, train, test, kill=True)
    r.check("killed run exits 0 with its AUC", got["auc"] is not None,
            f"auc {got['auc']:.6f} (uninterrupted {base['auc']:.6f})")
    r.check("AUC within 0.001 of the uninterrupted run", abs(got["auc"] - base["auc"]) < 0.001,
            f"diff {abs(got['auc'] - base['auc']):.6f}")
    r.check("same samples", got["samples"] == base["samples"], f"{got['samples']}")
    r.check("both workers failed over once", len(fo) == 2, f"failover ms {fo}")
    print(f"failover_ms {max(fo) if fo else -1} (kill -9 of shard 1's primary to the first "
          f"answer of replica 1; --failover-ms {FAILOVER})")
    for i in range(2):
        ok, out = same_rows(c1, i)
        r.check(f"after the kill: shard {i} replicas identical", ok, out)
r.finish()
