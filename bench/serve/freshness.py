#!/usr/bin/python3
"""Freshness (issue 34 item 4): how long after a training update ps-serve's replies reflect it.

A stream trains: this script writes ps-datagen lines into a named pipe at a steady RATE, and
ps-worker reads it (--train FIFO, --checkpoint-every-s EVERY, delta checkpoints as by default)
against one ps-server. Once the first checkpoint exists, the serving paths start, following the
checkpoint directory:
  local    ps-serve --checkpoint CK --follow (rows from the checkpoints' snapshots)
  servers  ps-server --serve CK --follow (a serving shard) and ps-serve --checkpoint CK --follow
           --servers SHARD (rows looked up on it)
and one client per path POSTs the same PROBE test lines to /v1/score every PROBE_MS, keeping
each reply's arrival time, its "step" and its scores.

What the delay measures. An update is one training step: step s trains the stream's lines
(s-1)*B+1 .. s*B (B = --batch; one worker, no shuffle buffer: a stream trains in arrival
order, and each checkpoint's recorded input position is checked to be step*B). Its time is
when the script finished writing line s*B into the pipe: the earliest the update can be made,
on a clock the script owns (no worker instrumentation). The worker keeps up with the stream
(it waits for lines) but makes the update one batch later, since its loop reads a batch ahead
of the one it trains (the "vote" part below, B / RATE); the delays count that batch, i.e. they
run from the moment all of the step's data existed, and overstate the delay from the update
itself by that much. A step is served at the arrival of the first reply whose "step" is >= s and
whose scores differ from those of the replies before (a new "step" with unchanged scores would
be a label, not a model: such a transition is counted, and fails --check). Figures:
  update -> served     over every step s trained after the path started: the freshness a
                       user sees. With checkpoints every EVERY s it includes the wait for the
                       next checkpoint (0..EVERY s, EVERY/2 on average).
  last step -> served  per checkpoint N, from its last step (line N*B written): the same
                       without the wait for the checkpoint, i.e. the pipeline alone.
  ckpt done -> served  per checkpoint, from the worker's "checkpoint at step N" log line (after
                       `latest` was renamed; the log's UTC clock is this script's) to the served
                       reply: what the serving side adds (the follow polls, loading, swapping).
and the parts of "last step -> served": vote (last line written -> the checkpoint starts:
mostly the batch the worker reads ahead, B / RATE), write (the checkpoint's own
duration from the log), publish (ckpt done -> served).
A reply's arrival is an upper bound of when the model swapped by up to PROBE_MS plus one
request's latency. p99 over a run of 30 checkpoints is near its maximum: the count is printed.

Usage: bench/serve/freshness.py [--bin DIR] [--secs S] [--rate LINES/S] [--batch B]
         [--every-s S] [--paths local,servers] [--probe N] [--probe-ms MS] [--json FILE]
         [--logs DIR] [--check MAX_S] [-- PS_WORKER_FLAGS...]
--check MAX_S: exit 1 unless every path served at least 2 checkpoints after it started, every
step change came with changed scores, no request failed and the median update -> served delay
is <= MAX_S (the test tests/predict/test_freshness.py runs a short one)."""
import argparse
import bisect
import datetime
import http.client
import itertools
import json
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# A small DLRM on one compute thread, so that the worker keeps up with the stream on a loaded
# 2-core machine (a worker that falls behind shows as a long "vote" part); more flags after --.
MODEL = ["--mlp-bot", "13-64-16", "--mlp-top", "64-1", "--emb-dim", "16", "--threads", "1"]
CKPT_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z .*checkpoint at step (\d+) in "
                       r"(\S+) \(([\d.]+) s\)")


def log_time(stamp):
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def pct(xs, q):
    """The q-quantile of xs, nearest rank (None for no data)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * len(s) + 0.5)) - 1))]


def summary(xs):
    return {"n": len(xs), "median_s": statistics.median(xs) if xs else None,
            "p99_s": pct(xs, 0.99), "max_s": max(xs) if xs else None}


def delays(feed, ckpts, replies, batch):
    """The delays of one serving path, from the run's records (all times in seconds, one clock):
    feed: [(lines written so far, time)], in order; ckpts: [{"step", "lines", "t_done",
    "dur"}] from the worker's log and the checkpoints' input files; replies: [(arrival time,
    step, scores tuple)] of the path's probe, in order. Returns the per-step and per-checkpoint
    delays and the checks' counts (see the top of the file)."""
    out = {"update_s": [], "last_step_s": [], "publish_s": [], "vote_s": [], "write_s": [],
           "unchanged_transitions": 0, "same_step_changes": 0, "bad_positions": 0,
           "served_ckpts": 0, "missed_ckpts": 0}
    if not replies:
        return out
    fed_lines = [n for n, _ in feed]

    def t_fed(step):  # when line step*batch was written
        i = bisect.bisect_left(fed_lines, step * batch)
        return feed[i][1] if i < len(feed) else None

    # The first reply of each step change whose scores changed too.
    first = []  # (step, time)
    prev_step, prev_scores = replies[0][1], replies[0][2]
    for t, step, scores in replies[1:]:
        if step != prev_step:
            if scores == prev_scores:
                out["unchanged_transitions"] += 1
            else:
                first.append((step, t))
            prev_step, prev_scores = step, scores
        elif scores != prev_scores:  # the same step must score the same
            out["same_step_changes"] += 1
            prev_scores = scores
    start_step = replies[0][1]

    def served(step):  # the first new model, in time order, of a step >= step
        return next((t for s, t in first if s >= step), None)

    ck = sorted(ckpts, key=lambda c: c["step"])
    prev = start_step
    for c in ck:
        n = c["step"]
        if c.get("lines") is not None and c["lines"] != n * batch:
            out["bad_positions"] += 1
        if n <= start_step:
            continue
        ts = served(n)
        if ts is None:
            out["missed_ckpts"] += 1
            prev = n
            continue
        out["served_ckpts"] += 1
        fed_n = t_fed(n)
        if fed_n is not None:
            out["last_step_s"].append(ts - fed_n)
            out["vote_s"].append(c["t_done"] - c["dur"] - fed_n)
        out["write_s"].append(c["dur"])
        out["publish_s"].append(ts - c["t_done"])
        for s in range(prev + 1, n + 1):
            f = t_fed(s)
            if f is not None:
                out["update_s"].append(served(s) - f)
        prev = n
    return out


# ------------------------------------------------------------------------------- the run


def wait_line(p, what, timeout=60):
    """The first stdout line of p containing what (a process that prints where it listens)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if select.select([p.stdout], [], [], 0.5)[0]:
            line = p.stdout.readline()
            if what in line:
                return line.strip()
            if not line:
                break
    raise RuntimeError(f"{p.args[0]} did not print '{what}'")


class Probe(threading.Thread):
    """POSTs body to port's /v1/score every period s until stop; keeps (arrival, step, scores)."""

    def __init__(self, port, body, period, stop):
        super().__init__(daemon=True)
        self.port, self.body, self.period, self.stop = port, body, period, stop
        self.replies, self.errors = [], 0

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        nxt = time.time()
        while not self.stop.is_set():
            try:
                c.request("POST", "/v1/score", self.body, {"Content-Type": "text/plain"})
                resp = c.getresponse()
                data = resp.read()
                t = time.time()
                if resp.status == 200:
                    j = json.loads(data)
                    self.replies.append((t, j["step"], tuple(j["scores"])))
                else:
                    self.errors += 1
            except (OSError, http.client.HTTPException, ValueError):
                self.errors += 1
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            nxt += self.period
            time.sleep(max(0.0, nxt - time.time()))


def stop_all(procs):
    """SIGTERM to the processes still running; SIGKILL to those not gone 10 s later."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        p.terminate()
    deadline = time.time() + 10
    for p in live:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()


def feed_fifo(path, data, starts, rate, feed, done):
    """Writes data's lines into the pipe path at rate lines a second, in ticks of 10 ms; appends
    (lines written, time) after each write to feed."""
    fd = os.open(path, os.O_WRONLY)  # waits for the worker to open it
    t0, sent, n = time.time(), 0, len(starts) - 1
    try:
        while sent < n:
            due = min(n, int((time.time() - t0) * rate))
            if due > sent:
                view = memoryview(data)[starts[sent]:starts[due]]
                while view:
                    view = view[os.write(fd, view):]
                feed.append((due, time.time()))
                sent = due
            time.sleep(0.01)
    finally:
        os.close(fd)
        done.set()


def run(a):
    b = a.bin
    procs = []
    res = {"bench": "freshness", "secs": a.secs, "rate": a.rate, "batch": a.batch,
           "every_s": a.every_s, "probe": a.probe, "probe_ms": a.probe_ms,
           "loadavg_start": open("/proc/loadavg").read().split()[:3]}
    with tempfile.TemporaryDirectory(prefix="freshness.") as d:
        rows = int(a.rate * a.secs) // a.batch * a.batch
        subprocess.run([f"{b}/ps-datagen", "--rows", str(rows), "--seed", "1", "--out",
                        f"{d}/train.tsv", "--test-rows", str(a.probe), "--test-out",
                        f"{d}/probe.tsv"], check=True, capture_output=True)
        data = open(f"{d}/train.tsv", "rb").read()
        starts = [0] + list(itertools.accumulate(len(x) + 1 for x in data.split(b"\n")[:-1]))
        body = open(f"{d}/probe.tsv").read()
        os.mkfifo(f"{d}/stream")
        ck = f"{d}/ck"
        try:
            srv = subprocess.Popen([f"{b}/ps-server", "--listen", "tcp://127.0.0.1:0",
                                    "--data-dir", f"{d}/srv", "--log-level", "warn"],
                                   stdout=subprocess.PIPE, text=True, start_new_session=True)
            procs.append(srv)
            url = wait_line(srv, "listening on").split("listening on ")[1]
            logs = a.logs or d
            os.makedirs(logs, exist_ok=True)
            wlog = open(f"{logs}/worker.log", "w+")
            wk = subprocess.Popen([f"{b}/ps-worker", "--servers", url, "--train", f"{d}/stream",
                                   "--checkpoint-dir", ck, "--checkpoint-every-s",
                                   str(a.every_s), "--batch", str(a.batch), "--progress-every",
                                   "10", "--log-level", "info"] + MODEL + a.worker_args,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True,
                                  env=dict(os.environ, OMP_WAIT_POLICY="passive"))
            procs.append(wk)
            ckpts = []

            def read_log():
                for line in wk.stderr:
                    wlog.write(line)
                    m = CKPT_LINE.match(line)
                    if m:
                        c = {"step": int(m.group(2)), "t_done": log_time(m.group(1)),
                             "dur": float(m.group(4)), "lines": None}
                        try:
                            kv = dict(x.split("=", 1) for x in
                                      open(os.path.join(m.group(3), "input")).read().split("\n")
                                      if "=" in x)
                            c["lines"] = int(kv["lines"])
                        except (OSError, KeyError, ValueError):
                            pass
                        ckpts.append(c)
            lt = threading.Thread(target=read_log, daemon=True)
            lt.start()
            feed, fed = [], threading.Event()
            ft = threading.Thread(target=feed_fifo, daemon=True,
                                  args=(f"{d}/stream", data, starts, a.rate, feed, fed))
            ft.start()
            deadline = time.time() + 60
            while not os.path.exists(f"{ck}/latest"):
                if time.time() > deadline or wk.poll() is not None:
                    raise RuntimeError("no first checkpoint: see the worker's log")
                time.sleep(0.05)
            ports = {}
            for path in a.paths:
                extra = []
                if path == "servers":
                    sh = subprocess.Popen([f"{b}/ps-server", "--listen", "tcp://127.0.0.1:0",
                                           "--serve", ck, "--follow", "--log-level", "info"],
                                          stdout=subprocess.PIPE, text=True,
                                          stderr=open(f"{logs}/shard.log", "w"),
                                          start_new_session=True)
                    procs.append(sh)
                    extra = ["--servers", wait_line(sh, "listening on").split("listening on ")[1]]
                p = subprocess.Popen([f"{b}/ps-serve", "--checkpoint", ck, "--follow", "--http",
                                      "127.0.0.1:0", "--threads", "2", "--log-level", "info"]
                                     + extra, stdout=subprocess.PIPE, text=True,
                                     stderr=open(f"{logs}/serve-{path}.log", "w"),
                                     start_new_session=True)
                procs.append(p)
                ports[path] = int(wait_line(p, "listening on").rsplit(":", 1)[1])
            stop = threading.Event()
            probes = {k: Probe(port, body, a.probe_ms / 1000, stop) for k, port in ports.items()}
            for pr in probes.values():
                pr.start()
            fed.wait()
            if wk.wait(timeout=120) != 0:
                raise RuntimeError("ps-worker failed: see its log")
            lt.join(timeout=10)
            final = max(c["step"] for c in ckpts)
            deadline = time.time() + 20  # the last checkpoint served by every path, or give up
            while time.time() < deadline and any(
                    not pr.replies or pr.replies[-1][1] < final for pr in probes.values()):
                time.sleep(0.1)
            time.sleep(0.3)
            stop.set()
            for pr in probes.values():
                pr.join(timeout=35)
        except BaseException:
            if "wlog" in locals():
                wlog.seek(0)
                sys.stderr.write(wlog.read()[-3000:])
            raise
        finally:
            stop_all(procs)
        res["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
        res["checkpoints"] = len(ckpts)
        res["paths"] = {}
        for k, pr in probes.items():
            dl = delays(feed, ckpts, pr.replies, a.batch)
            res["paths"][k] = {"requests": len(pr.replies), "errors": pr.errors,
                               "served_ckpts": dl["served_ckpts"],
                               "missed_ckpts": dl["missed_ckpts"],
                               "unchanged_transitions": dl["unchanged_transitions"],
                               "same_step_changes": dl["same_step_changes"],
                               "bad_positions": dl["bad_positions"],
                               **{m: summary(dl[m]) for m in
                                  ("update_s", "last_step_s", "publish_s", "vote_s", "write_s")}}
    return res


def report(res):
    names = [("update_s", "update -> served"), ("last_step_s", "last step -> served"),
             ("vote_s", "  vote (last line -> ckpt start)"), ("write_s", "  checkpoint write"),
             ("publish_s", "  ckpt done -> served")]
    print(f"stream {res['rate']} lines/s, batch {res['batch']}, checkpoint every "
          f"{res['every_s']} s, {res['checkpoints']} checkpoints; probe {res['probe']} lines "
          f"every {res['probe_ms']} ms; load average {' '.join(res['loadavg_start'])} -> "
          f"{' '.join(res['loadavg_end'])}")
    for k, p in res["paths"].items():
        print(f"\npath {k}: {p['requests']} replies, {p['errors']} failed, {p['served_ckpts']} "
              f"checkpoints served ({p['missed_ckpts']} never), {p['unchanged_transitions']} "
              f"step changes without a score change, {p['same_step_changes']} score changes "
              f"within a step")
        print("| delay | n | median s | p99 s | max s |")
        print("|---|---|---|---|---|")
        for m, label in names:
            s = p[m]
            f = (lambda x: "-" if x is None else f"{x:.3f}")
            print(f"| {label} | {s['n']} | {f(s['median_s'])} | {f(s['p99_s'])} | "
                  f"{f(s['max_s'])} |")
    print(json.dumps(res))


def check(res, max_s):
    bad = []
    for k, p in res["paths"].items():
        if p["served_ckpts"] < 2:
            bad.append(f"{k}: {p['served_ckpts']} checkpoints served after the start (< 2)")
        if (p["unchanged_transitions"] or p["same_step_changes"] or p["errors"] or
                p["bad_positions"]):
            bad.append(f"{k}: {p['unchanged_transitions']} step changes without new scores, "
                       f"{p['same_step_changes']} score changes within a step, "
                       f"{p['errors']} failed requests, {p['bad_positions']} bad positions")
        med = p["update_s"]["median_s"]
        if med is None or med > max_s:
            bad.append(f"{k}: median update -> served {med} s (> {max_s})")
    for b in bad:
        print("freshness --check:", b, file=sys.stderr)
    return 1 if bad else 0


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(root, "build", "bin"))
    ap.add_argument("--secs", type=float, default=60, help="seconds of stream")
    ap.add_argument("--rate", type=float, default=1000, help="lines a second into the pipe")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--every-s", type=float, default=2, help="--checkpoint-every-s")
    ap.add_argument("--paths", default="local,servers", help="local, servers or both")
    ap.add_argument("--probe", type=int, default=64, help="probe lines a request")
    ap.add_argument("--probe-ms", type=float, default=20, help="a probe request every MS")
    ap.add_argument("--json", help="also write the JSON here")
    ap.add_argument("--logs", help="keep the worker's, the serving shard's and each ps-serve's "
                    "log (INFO: each swap with its time) in this directory")
    ap.add_argument("--check", type=float, help="exit 1 unless ... (see the top of the file)")
    ap.add_argument("worker_args", nargs="*", help="more ps-worker flags (after --)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the processes are stopped on the way out
    a.paths = [p for p in a.paths.split(",") if p]
    if not a.paths or any(p not in ("local", "servers") for p in a.paths):
        ap.error("--paths: local, servers or local,servers")
    res = run(a)
    report(res)
    if a.json:
        json.dump(res, open(a.json, "w"))
    return check(res, a.check) if a.check is not None else 0


if __name__ == "__main__":
    sys.exit(main())
