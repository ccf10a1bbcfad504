"""ps-worker on a stream (issue 34, item 1), sync, file order (1 worker x 1 server unless said):
(1) the same lines through stdin (a pipe) and through a named pipe train the model the file
    trains: the same dense hash and sample count;
(2) progressive validation: the summary's rolling AUC and logloss equal scikit-learn's (and
    numpy's clipped logloss) over the last --progressive-window scores of --progressive-dump;
    every sample was scored once; /metrics' gauge is sklearn's AUC of the scores up to its
    last refresh;
(3) kill -9 mid-stream on a growing file (--follow-input) with --checkpoint-every-s: the
    checkpoint records the input position (data lines = step x batch, bytes = that line's
    offset in the file), --resume continues exactly there (the lines before it, overwritten
    with bad ones, are never read), trains the remaining lines exactly once and ends with the
    uninterrupted run's dense hash; SIGTERM ends a followed file's run with exit 0, at the
    position its summary records;
(5) deploy/kafka-train with a stand-in kcat: the offset committed is the checkpoint's, and a
    restart trains the rest exactly once (the file's model);
(6) 2 workers: checkpoints by time at positions step x 2 x batch, and a resume from one ends
    with the uninterrupted 2-worker model;
(4) refusals, exit 2 in one line: --epochs 2 or --holdout with a stream, --checkpoint-every-s
    without --checkpoint-dir, --follow-input on a gzip file; a gzip stream fails (exit 1).
Servers and workers are started here (but for (6), through ember-local) to feed stdin, own
the FIFO and kill the worker by its PID."""
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

BATCH = 256
SMALL = ["--mlp-bot", "13-16-8", "--mlp-top", "16-1", "--emb-dim", "8", "--threads", "1",
         "--batch", str(BATCH), "--shuffle-buffer", "0", "--progress-every", "30"]


def start_server(d, name, ckroot=None):
    p, url = h.start_server(["--data-dir", os.path.join(d, name), "--log-level", "warn"] +
                            (["--checkpoint-root", ckroot] if ckroot else []))
    assert url, "server did not start"
    return p, url


stop = h.stop


def worker(url, args, summary, stdin=None, feed=None, timeout=300):
    """ps-worker with --servers url; feed(bytes) is written to its stdin and closed."""
    p = subprocess.Popen([f"{h.BIN}/ps-worker", "--servers", url, "--summary", summary] + SMALL +
                         args, stdin=subprocess.PIPE if feed is not None else stdin,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=False)
    out, _ = p.communicate(input=feed, timeout=timeout)
    out = out.decode(errors="replace")
    js = json.load(open(summary)) if p.returncode == 0 else {}
    return p.returncode, js, out


def fresh_run(d, tag, args, **kw):
    srv, url = start_server(d, f"srv-{tag}")
    try:
        return worker(url, args, os.path.join(d, f"{tag}.json"), **kw)
    finally:
        stop(srv)


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train, _, _ = h.datagen(d, 6000, 10, seed=3)
    data = open(train, "rb").read()
    lines = data.splitlines(keepends=True)
    N = len(lines)

    # (1) file, stdin, FIFO: the same model
    rc, ref, out = fresh_run(d, "file", ["--train", train])
    r.check("file run", rc == 0, out[-1500:] if rc else "")
    rc, sin, out = fresh_run(d, "stdin", ["--train", "-"], feed=data)
    r.check("--train - (a pipe on stdin) trains the file's model",
            rc == 0 and sin.get("dense_hash") == ref.get("dense_hash") and sin["samples"] == N,
            out[-1500:] if rc else f"{sin.get('dense_hash')} vs {ref.get('dense_hash')}")
    fifo = os.path.join(d, "train.fifo")
    os.mkfifo(fifo)
    dump = os.path.join(d, "scores.txt")

    def write_fifo():
        with open(fifo, "wb") as f:  # waits for the worker to open it
            for i in range(0, N, 500):
                f.write(b"".join(lines[i:i + 500]))
                f.flush()
    wr = threading.Thread(target=write_fifo, daemon=True)
    wr.start()
    rc, ff, out = fresh_run(d, "fifo", ["--train", fifo, "--progressive-window", "3000",
                                        "--progressive-dump", dump])
    wr.join(timeout=30)
    r.check("--train FIFO trains the file's model",
            rc == 0 and ff.get("dense_hash") == ref.get("dense_hash") and ff["samples"] == N,
            out[-1500:] if rc else f"{ff.get('dense_hash')} vs {ref.get('dense_hash')}")

    # (2) progressive validation against scikit-learn on the dumped scores
    if rc == 0:
        sc = np.loadtxt(dump)
        p, y = sc[-3000:, 0], sc[-3000:, 1]
        auc = roc_auc_score(y, p)
        q = np.clip(p, 1e-7, 1 - 1e-7)
        ll = float(-np.mean(y * np.log(q) + (1 - y) * np.log1p(-q)))
        pr = ff["progressive"]
        r.check("every sample scored once", len(sc) == N and pr["samples"] == 3000,
                f"{len(sc)} scores, window {pr['samples']}")
        r.check("progressive AUC = sklearn's over the window", abs(pr["auc"] - auc) < 1e-9,
                f"{pr['auc']:.12f} vs {auc:.12f}")
        r.check("progressive logloss = numpy's over the window", abs(pr["logloss"] - ll) < 1e-9,
                f"{pr['logloss']:.12f} vs {ll:.12f}")
        r.check("labels dumped are the file's",
                [int(l.split(b"\t")[0]) for l in lines] == [int(v) for v in sc[:, 1]])

    # (3) kill -9 mid-stream on a growing file, then --resume at the recorded position
    grow = os.path.join(d, "grow.tsv")
    ck = os.path.join(d, "ckpt")
    os.makedirs(ck)
    srv, url = start_server(d, "srv-kill", ck)
    try:
        open(grow, "wb").close()
        w = subprocess.Popen([f"{h.BIN}/ps-worker", "--servers", url, "--train", grow,
                              "--follow-input", "--checkpoint-dir", ck, "--checkpoint-every-s",
                              "0.3"] + SMALL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        up = threading.Event()

        def watch():  # the worker is up once it says what it trains on (slow on a busy machine)
            for l in w.stdout:
                if "training on" in l:
                    up.set()
        threading.Thread(target=watch, daemon=True).start()
        latest = os.path.join(ck, "latest")
        step_of = lambda: int(open(latest).read().strip().split("-")[1]) if os.path.exists(latest) else 0
        up.wait(60)
        at, t0 = 0, time.time()
        # a batch every 0.1 s, until half is written and a checkpoint past step 3 exists, never
        # all of it (the rest is written after the kill)
        while at < N - 2 * BATCH and time.time() - t0 < 60 and (at < N // 2 or step_of() < 3):
            with open(grow, "ab") as f:
                f.write(b"".join(lines[at:at + BATCH]))
            at += BATCH
            time.sleep(0.1)
        time.sleep(0.3)
        w.send_signal(signal.SIGKILL)
        w.wait(timeout=30)
        ck_step = step_of()
        with open(grow, "ab") as f:
            f.write(b"".join(lines[at:]))
        pos = {}
        if ck_step:
            for l in open(os.path.join(ck, f"step-{ck_step}", "input")):
                if "=" in l and not l.startswith("#"):
                    k, v = l.strip().split("=", 1)
                    pos[k] = v
        L = int(pos.get("lines", -1))
        r.check("killed mid-stream after a checkpoint", 0 < ck_step and at < N,
                f"checkpoint step {ck_step}, {at} of {N} lines written")
        r.check("the checkpoint records the input position",
                L == ck_step * BATCH and int(pos.get("bytes", -1)) == len(b"".join(lines[:L])),
                f"{pos}, step {ck_step}")
        # The trained lines are overwritten in place by bad ones of the same length: a resume
        # that re-read them (and dropped its batches) would count them as bad.
        if L > 0:
            with open(grow, "r+b") as f:
                f.write(b"".join(b"x" * (len(l) - 1) + b"\n" for l in lines[:L]))
        rc, res, out = worker(url, ["--train", grow, "--follow-input", "--input-idle-s", "1",
                                    "--checkpoint-dir", ck, "--resume"],
                              os.path.join(d, "resumed.json"))
        r.check("resume continues at the recorded line, reading nothing before it",
                rc == 0 and f"continues at data line {L} " in out and res["bad_lines"] == 0,
                out[-1500:] if rc else f"bad lines {res['bad_lines']}")
        r.check("the rest trained exactly once", rc == 0 and res["samples"] == N - L,
                f"{res.get('samples')} samples after line {L} of {N}")
        r.check("resumed model = the uninterrupted run's",
                res.get("dense_hash") == ref.get("dense_hash"),
                f"{res.get('dense_hash')} vs {ref.get('dense_hash')}")
    finally:
        if "w" in dir() and w.poll() is None:
            w.kill()
        stop(srv)

    # SIGTERM ends a followed file's run cleanly at a step: summary written; while it
    # waits for more lines, /metrics shows the progressive figures
    srv, url = start_server(d, "srv-term")
    try:
        summ = os.path.join(d, "term.json")
        sk = socket.socket()
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
        sk.close()
        w = subprocess.Popen([f"{h.BIN}/ps-worker", "--servers", url, "--train", train,
                              "--follow-input", "--summary", summ] + SMALL +
                             ["--metrics-port", str(port), "--progress-every", "0.05",
                              "--progressive-dump", os.path.join(d, "term.txt")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        vals, t0 = {}, time.time()
        # until half the lines trained and the window refreshed (bounded)
        while time.time() - t0 < 60 and w.poll() is None:
            time.sleep(0.2)
            try:
                met = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            except OSError:
                continue
            vals = {l.split()[0]: float(l.split()[1]) for l in met.splitlines()
                    if l.startswith(("ember_worker_progressive_", "ember_worker_samples_total"))}
            if vals.get('ember_worker_samples_total{rank="0"}', 0) >= N // 2 and \
                    vals.get('ember_worker_progressive_auc{rank="0"}', 0) > 0:
                break
        w.send_signal(signal.SIGTERM)
        out, _ = w.communicate(timeout=30)
        # the gauge is the window's AUC at its last refresh: that of the first k scores, k a
        # whole number of batches (the window, 100000, holds them all)
        sc = np.loadtxt(os.path.join(d, "term.txt")) if w.returncode == 0 else np.zeros((0, 2))
        g = vals.get('ember_worker_progressive_auc{rank="0"}', -1)
        ks = [k for k in range(BATCH, len(sc) + 1, BATCH)
              if len(set(sc[:k, 1])) == 2 and abs(roc_auc_score(sc[:k, 1], sc[:k, 0]) - g) < 1e-9]
        r.check("/metrics has the rolling progressive AUC (sklearn's over the scores so far)",
                len(ks) > 0 and 'ember_worker_progressive_logloss{rank="0"}' in vals,
                f"{vals}, = the first {ks[:1]} scores'")
        js = json.load(open(summ)) if w.returncode == 0 else {}
        r.check("SIGTERM ends --follow-input: exit 0, what it trained = the position it records",
                w.returncode == 0 and N // 2 <= js.get("samples", 0) <= N and
                js.get("samples") == js.get("input", {}).get("lines"),
                out[-1500:] if w.returncode else f"{js.get('samples')} {js.get('input')}")
    finally:
        if w.poll() is None:
            w.kill()
        stop(srv)

    # (5) deploy/kafka-train with a stand-in kcat (no broker here) that prints the topic's lines
    # from the -o offset it is given: a run stopped after 10 steps commits offset 10 x batch
    # beside its checkpoint; the restart resumes there and trains the rest exactly once.
    ck2 = os.path.join(d, "ckpt-kafka")
    os.makedirs(ck2)
    fake = os.path.join(d, "kcat")
    kcat_log = os.path.join(d, "kcat.log")
    with open(fake, "w") as f:
        f.write(f'''#!/usr/bin/python3
import sys
a = sys.argv[1:]
off = int(a[a.index("-o") + 1])
open({kcat_log!r}, "a").write(" ".join(a) + "\\n")
try:
    sys.stdout.buffer.writelines(open({train!r}, "rb").readlines()[off:])
    sys.stdout.flush()
except BrokenPipeError:
    pass
''')
    os.chmod(fake, 0o755)
    srv, url = start_server(d, "srv-kafka", ck2)
    try:
        wrap = [os.path.join(h.SRC, "deploy", "kafka-train"), "--brokers", "127.0.0.1:9", "--topic",
                "clicks", "--checkpoint-dir", ck2, "--exit-at-end", "--kcat", fake, "--worker",
                f"{h.BIN}/ps-worker", "--poll-s", "0.2", "--", "--servers", url] + SMALL
        rc1, out1 = h.run(wrap + ["--max-steps", "10", "--summary", os.path.join(d, "k1.json")], 120)
        off1 = open(os.path.join(ck2, "kafka-offset")).read().split() if rc1 == 0 else []
        r.check("kafka-train commits the offset its checkpoint holds",
                off1 == ["clicks", "0", str(10 * BATCH)], out1[-1500:] if off1 == [] else str(off1))
        rc2, out2 = h.run(wrap + ["--summary", os.path.join(d, "k2.json")], 120)
        k2 = json.load(open(os.path.join(d, "k2.json"))) if rc2 == 0 else {}
        starts = [l.split("-o ")[1].split()[0] for l in open(kcat_log)]
        off2 = open(os.path.join(ck2, "kafka-offset")).read().split()
        r.check("kafka-train restarts kcat at the committed offset and ends at the topic's end",
                starts == ["0", str(10 * BATCH)] and off2 == ["clicks", "0", str(N)],
                f"kcat -o {starts}, committed {off2}")
        r.check("kafka-train: every message trained once, the file's model",
                k2.get("samples") == N - 10 * BATCH and k2.get("dense_hash") == ref.get("dense_hash"),
                out2[-1500:] if rc2 else f"{k2.get('samples')} {k2.get('dense_hash')}")
    finally:
        stop(srv)

    # (6) 2 workers: --checkpoint-every-s (rank 0's vote in the allreduce) checkpoints, each at
    # position step x 2 x batch (both ranks read every line), and a resume from a middle one
    # ends with the uninterrupted 2-worker model
    two = ["--train", train] + SMALL[:-6] + ["--batch", "128", "--shuffle-buffer", "0"]
    full2, _ = h.train(1, 2, two)
    ck3, sd3 = os.path.join(d, "ckpt2w"), os.path.join(d, "srv2w")
    part, _ = h.train(1, 2, two + ["--checkpoint-dir", ck3, "--checkpoint-every-s", "0.02",
                                   "--max-steps", "16"], data_dir=sd3)
    steps = sorted(int(n[5:]) for n in os.listdir(ck3) if n.startswith("step-"))
    pos_ok = all(open(os.path.join(ck3, f"step-{k}", "input")).read().count(f"lines={k * 256}\n")
                 for k in steps)
    r.check("2 workers: checkpoints by time, each at step x 2 x batch lines",
            len(steps) >= 2 and pos_ok, f"steps {steps}")
    if steps:
        mid = steps[len(steps) // 2]
        with open(os.path.join(ck3, "latest"), "w") as f:
            f.write(f"step-{mid}\n")
        res2, out = h.train(1, 2, two + ["--checkpoint-dir", ck3, "--resume"], data_dir=sd3)
        r.check("2 workers: resume at the position = the uninterrupted model",
                f"continues at data line {mid * 256} " in out and
                res2["dense_hash"] == full2["dense_hash"] and res2["samples"] == N - mid * 256,
                f"{res2['dense_hash']} vs {full2['dense_hash']}, {res2['samples']} samples")

    # (4) refusals; a gzip stream is refused at its first bytes (exit 1: a run-time failure)
    rc, _, out = fresh_run(d, "gz", ["--train", "-"], feed=gzip.compress(data[:5000]))
    err = [l for l in out.splitlines() if "ERROR" in l]
    r.check("a gzip stream is refused", rc == 1 and "the stream is gzip" in out,
            err[0][-160:] if err else out[-800:])

    def refused(args, want):
        rc, o, e = h.tool("ps-worker", ["--servers", "tcp://127.0.0.1:1"] + args, timeout=30)
        lines_ = e.strip().splitlines()
        return rc == 2 and len(lines_) == 1 and want in e, f"rc {rc}: {e.strip()}"
    r.check("--epochs 2 with a stream", *refused(["--train", "-", "--epochs", "2"], "one epoch"))
    r.check("--holdout with a FIFO", *refused(["--train", fifo, "--holdout", "10"], "--holdout"))
    r.check("--checkpoint-every-s without --checkpoint-dir",
            *refused(["--train", train, "--checkpoint-every-s", "5"], "needs --checkpoint-dir"))
    gz = os.path.join(d, "t.tsv.gz")
    with gzip.open(gz, "wb") as f:
        f.write(data[:1000])
    r.check("--follow-input on gzip", *refused(["--train", gz, "--follow-input"], "plain text"))
r.finish()
