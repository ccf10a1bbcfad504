"""ps-server --serve DIR --follow (issue 20): a serving server picks up each newly committed
checkpoint of DIR without a restart, and a request sees the old or the new version, never a mix.

A training ps-server (a data dir, --checkpoint-root LIVE) and a --follow server of LIVE
(--threads 2: a pull is split over two partition threads, the case where a switch could tear a
reply) run on 127.0.0.1. The test is the training job: through the Python library it pushes
gradients to every key (so every row changes between checkpoints), commits a checkpoint of the
training server into LIVE/step-N/shards (the two-phase commit ps-worker uses) and then replaces
LIVE/latest by rename, as ps-worker does. The reference rows of step N are the training
server's own, pulled right after the checkpoint. Meanwhile a client of the follow server keeps
four pulls of 20,000 keys in flight, bounded in time, and checks every reply:

1. No pull errs, every reply's rows all equal ONE committed step's (a reply that matches none
   is a mix), the steps seen never go back, and every committed step is served within 15 s;
   the switches happen while pulls are in flight.
2. The server says "now serving step N" once per step, and /metrics ember_server_checkpoint_step
   is N; once no request uses the previous snapshot, the server holds no file of it open. The
   new snapshot's hot tier is warmed with the keys pulled before: the first pull after a
   switch (none in flight meanwhile) is all hits, no RocksDB read (all misses on a second
   follower started with --follow-warm-keys 0).
3. A damaged checkpoint (a snapshot directory with no database) and one of another shard count
   in `latest`: one WARN line each, the server keeps serving the step before (the pulls go on,
   without error), and the next good checkpoint is picked up.
4. A push to the following server is refused with one line naming --serve.
5. Bad input, one line each, exit 2: --follow without --serve; --follow with a step-N dir.
Without --follow, ps-server has no such flag (exit 2 at the first start) and the test fails."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import harness as h
import serve_proc
import lib_harness

r = h.Results()
procs = []
NKEYS, DIM, DEPTH = 20000, 16, 4


def start(args, log):
    """A ps-server; its endpoint once it printed its listening line (stderr to log)."""
    return serve_proc.start(args, log, procs)


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return [float(l.split()[-1]) for l in text.splitlines() if l.startswith(name + " ")]


def open_files(pid, under):
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if t.startswith(under + "/"):
            out.append(t)
    return out


def set_latest(live, name):
    with open(os.path.join(live, "latest.tmp"), "w") as f:
        f.write(name + "\n")
    os.rename(os.path.join(live, "latest.tmp"), os.path.join(live, "latest"))


class Puller:
    """DEPTH pulls of all keys in flight; each reply is matched against the committed steps."""

    def __init__(self, table, keys):
        self.t, self.keys = table, keys
        self.inflight = [table.pull_start(keys) for _ in range(DEPTH)]
        self.replies, self.errors, self.mixed, self.back = 0, [], 0, 0
        self.seen = []  # the step of each reply, in order

    def one(self, expected):
        req = self.inflight.pop(0)
        try:
            rows = req.wait()
        except Exception as e:  # noqa: BLE001 -- every failure is a finding
            self.errors.append(str(e))
            rows = None
        self.inflight.append(self.t.pull_start(self.keys))
        if rows is None:
            return None
        self.replies += 1
        match = [s for s, rows_s in expected.items() if np.array_equal(rows, rows_s)]
        if len(match) != 1:
            self.mixed += 1
            return None
        if self.seen and match[0] < self.seen[-1]:
            self.back += 1
        self.seen.append(match[0])
        return match[0]

    def until(self, expected, want, timeout):
        """Pulls until a reply is of step `want` (True) or the time is up (False)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.one(expected) == want:
                return True
        return False

    def close(self):
        for q in self.inflight:
            try:
                q.wait()
            except Exception:  # noqa: BLE001
                pass


try:
    lib_harness.use_build_package()
    import ember
    with tempfile.TemporaryDirectory() as d:
        live = os.path.join(d, "live")
        os.makedirs(live)
        _, turl = start(["--data-dir", os.path.join(d, "train"), "--checkpoint-root", live,
                         "--threads", "0", "--log-level", "warn"], os.path.join(d, "train.log"))
        trainer = ember.Client([turl], timeout_ms=30000)
        tt = trainer.table("follow", dim=DIM, id=7, lr=0.5)
        keys = (np.arange(1, NKEYS + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        rng = np.random.default_rng(5)
        expected = {}

        def commit(step):
            """One training step's pushes, then the checkpoint step-`step` and `latest`."""
            tt.push(keys, rng.standard_normal((NKEYS, DIM)).astype(np.float32))
            trainer.current_step = step
            trainer.checkpoint(os.path.join(live, f"step-{step}", "shards"))
            expected[step] = tt.pull(keys)
            set_latest(live, f"step-{step}")

        commit(10)
        mport = lib_harness.free_port()
        flog = os.path.join(d, "follow.log")
        fp, furl = start(["--serve", live, "--follow", "--threads", "2", "--metrics-port",
                          str(mport), "--log-level", "info"], flog)
        # a second follower without the warm-up, for the contrast in the warm-up check
        mport0 = lib_harness.free_port()
        flog0 = os.path.join(d, "follow0.log")
        _, furl0 = start(["--serve", live, "--follow", "--follow-warm-keys", "0", "--threads",
                          "0", "--metrics-port", str(mport0), "--log-level", "info"], flog0)
        client = ember.Client([furl], timeout_ms=30000)
        ft = client.table("follow", dim=DIM, id=7, lr=0.5)
        pull = Puller(ft, keys)

        # 1. new checkpoints land while the client pulls
        r.check("the first checkpoint is served", pull.until(expected, 10, 15),
                f"seen {sorted(set(pull.seen))}")
        steps = [20, 30, 40, 50]
        for step in steps:
            prev = max(s for s in expected)
            commit(step)
            # the rows of every key differ between every two steps: a mix cannot pass as one
            r.check(f"step {step}: every row differs from every earlier step's",
                    all(np.all(np.any(expected[step] != expected[s], axis=1))
                        for s in expected if s != step))
            ok = pull.until(expected, step, 15)
            r.check(f"step {step} is served within 15 s of its commit", ok,
                    f"seen {sorted(set(pull.seen))}")
            # the server closes the previous snapshot once no request uses it
            deadline, held = time.time() + 10, None
            while time.time() < deadline:
                pull.one(expected)
                held = open_files(fp.pid, os.path.join(live, f"step-{prev}"))
                if not held:
                    break
            r.check(f"step {step}: no file of step {prev} is open any more", not held,
                    f"{held[:3]}")
        now = open_files(fp.pid, os.path.join(live, "step-50"))
        r.check("the served snapshot's files are open (the check above can see files)",
                len(now) > 0, f"{now[:3]}")
        for _ in range(20):
            pull.one(expected)
        r.check("no pull erred", not pull.errors, f"{pull.errors[:2]}")
        r.check("every reply's rows all come from one step (no mix)", pull.mixed == 0,
                f"{pull.mixed} of {pull.replies} replies match no single step")
        r.check("the steps seen never go back", pull.back == 0, f"{pull.back}")
        r.check("many replies were checked, of every step", pull.replies >= 20 and
                set(pull.seen) == set(expected), f"{pull.replies} replies, steps "
                f"{sorted(set(pull.seen))}")
        log = open(flog).read()
        served = [int(x) for x in re.findall(r"now serving step (\d+)", log)]
        r.check("'now serving step N' once per new step", served == steps, f"{served}")
        ms = metric(mport, "ember_server_checkpoint_step")
        r.check("ember_server_checkpoint_step is the served step", ms == [50.0], f"{ms}")

        # 3. checkpoints that cannot be served: one WARN each, the old one stays
        bad = os.path.join(live, "step-60")
        os.makedirs(os.path.join(bad, "shards", "shard-0"))
        open(os.path.join(bad, "shards", "shard-0.json"), "w").write('{"step": 60, "shards": 1}')
        other = os.path.join(live, "step-70")
        shutil.copytree(os.path.join(live, "step-50"), other)
        shutil.copytree(os.path.join(other, "shards", "shard-0"),
                        os.path.join(other, "shards", "shard-1"))
        for name, text in (("step-60", "cannot open the snapshot"),
                           ("step-70", "has 2 shard(s)")):
            before = pull.replies
            set_latest(live, name)
            deadline = time.time() + 15
            while time.time() < deadline and name not in open(flog).read():
                pull.one(expected)
            t_end = time.time() + 2.5  # two more looks at `latest`: no second WARN
            while time.time() < t_end:
                pull.one(expected)
            warns = [l for l in open(flog).read().splitlines() if " WARN " in l and name in l]
            r.check(f"{name}: one WARN line naming why ({text})",
                    len(warns) == 1 and text in warns[0] and "still serving step 50" in warns[0],
                    f"{warns}")
            r.check(f"{name}: the pulls go on, of step 50, without error",
                    pull.replies > before and pull.seen[-1] == 50 and not pull.errors and
                    pull.mixed == 0, f"{pull.errors[:1]} {pull.seen[-1:]}")
        ms = metric(mport, "ember_server_checkpoint_step")
        r.check("after the bad checkpoints: still step 50", ms == [50.0], f"{ms}")
        commit(80)
        r.check("the next good checkpoint is served", pull.until(expected, 80, 15),
                f"seen {sorted(set(pull.seen))[-3:]}")
        r.check("no pull erred, no reply mixed, at the end", not pull.errors and
                pull.mixed == 0 and pull.back == 0, f"{pull.errors[:1]} mixed {pull.mixed}")
        pull.close()

        # the new snapshot's hot tier is warmed with the keys pulled before the switch: with no
        # pull in flight, step 90 lands; the next pull of the same keys is all hits (and all
        # misses on the follower started with --follow-warm-keys 0)
        client0 = ember.Client([furl0], timeout_ms=30000)
        ft0 = client0.table("follow", dim=DIM, id=7, lr=0.5)
        ft0.pull(keys)
        commit(90)
        deadline = time.time() + 15
        while time.time() < deadline and not all(
                "now serving step 90" in open(f).read() for f in (flog, flog0)):
            time.sleep(0.1)
        time.sleep(1.0)  # the statistics are published every 200 ms
        before = [metric(p, n) for p in (mport, mport0)
                  for n in ("ember_store_cache_misses_total", "ember_store_cache_hits_total")]
        rows, rows0 = ft.pull(keys), ft0.pull(keys)
        time.sleep(1.0)
        after = [metric(p, n) for p in (mport, mport0)
                 for n in ("ember_store_cache_misses_total", "ember_store_cache_hits_total")]
        delta = [a[0] - b[0] if len(a) == len(b) == 1 else None for a, b in zip(after, before)]
        r.check("after a switch, the first pull gets step 90's rows (both followers)",
                np.array_equal(rows, expected[90]) and np.array_equal(rows0, expected[90]))
        r.check("... all from the warmed hot tier (no miss)", delta[:2] == [0, NKEYS],
                f"misses, hits: {delta[:2]}")
        r.check("... and all misses with --follow-warm-keys 0", delta[2:] == [NKEYS, 0],
                f"misses, hits: {delta[2:]}")
        client0.close()
        warmed = re.findall(r"now serving step 90 .*warmed with the last (\d+) keys", open(flog).read())
        r.check("the log says how many keys warmed it", warmed and int(warmed[0]) > 0, f"{warmed}")

        # 4. pushes refused while following
        try:
            ft.push(keys[:10], np.ones((10, DIM), np.float32))
            r.check("a push is refused", False, "accepted")
        except ember.EmberError as e:
            r.check("a push is refused in one line naming --serve",
                    "read-only (ps-server --serve): push refused" in str(e) and
                    "\n" not in str(e), str(e))
        client.close()
        trainer.close()

        # 5. bad input
        for name, args, text in (
                ("--follow without --serve", ["--data-dir", os.path.join(d, "x"), "--follow"],
                 "--follow follows the checkpoints of --serve DIR"),
                ("--follow with a step-N dir", ["--serve", os.path.join(live, "step-50"),
                                                "--follow"], "has none")):
            p = subprocess.run([f"{h.BIN}/ps-server", "--listen", "tcp://127.0.0.1:0"] + args,
                               capture_output=True, text=True, timeout=60)
            lines = [l for l in p.stderr.splitlines() if l.startswith("ps-server:")]
            r.check(f"{name}: exit 2, one line", p.returncode == 2 and len(lines) == 1 and
                    text in lines[0], f"rc {p.returncode} {p.stderr.strip()[-300:]!r}")
finally:
    lib_harness.stop_procs(procs)
r.finish()
