"""ps-serve --follow --servers (issue 34): every reply is one version's, its dense model and its
rows of the step it names, while the serving shards (ps-server --serve DIR --follow) switch
checkpoints on their own, before or after ps-serve, and one shard lags the other.

Two models of different steps are trained on 2 shards (ps-worker through deploy/ember-local,
--checkpoint-dir); ps-predict scores the same 64 lines from each (the references). Each shard
follows a directory of its own, and ps-serve a third, all holding both step directories, so the
test moves each one's `latest` when it wants (renamed in, as ps-worker does): deterministic
lags, no timing luck. Four clients score the 64 lines in a loop throughout; every reply must be
200 with the scores ps-predict gives for the step the reply names:

1. The shards switch to B while ps-serve's latest still names A (shards ahead): ps-serve
   followed latest before and scored A's model with B's rows under step A.
2. Shard 0 switches back to A, shard 1 stays on B for 1 s (a lagging shard), ps-serve's latest
   names A: before, its B model scored shard 0's A rows.
3. Both shards back on B, ps-serve's latest left at A.
Both steps must be served, none failed. Without the fix 1 and 2 give mixed replies. In 2,
ps-serve loads A's model ahead (its latest names A before the shards serve it) and swaps it in
when they do (its log says "loaded ahead")."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
import harness as h
import serve_proc

r = h.Results()
procs = []



try:
    with tempfile.TemporaryDirectory() as d:
        train, test, _ = h.datagen(d, 9000, 200, seed=5)
        cks, names = [], []
        for i, n in enumerate((9000, 5000)):
            ck = os.path.join(d, f"ck{i}")
            os.makedirs(ck)
            part = os.path.join(d, f"train{i}.tsv")
            open(part, "w").writelines(open(train).readlines()[:n])
            h.train(2, 1, ["--train", part, "--checkpoint-dir", ck] + h.SMALL)
            cks.append(ck)
            names.append(open(os.path.join(ck, "latest")).read().strip())
        steps = [int(n.split("-")[1]) for n in names]
        r.check("two models of different steps", steps[0] != steps[1], str(steps))
        lines = open(test).read().split("\n")[:64]
        want = {steps[i]: serve_proc.predict(os.path.join(cks[i], names[i]), lines, d)
                for i in range(2)}

        # three followed directories (shard 0, shard 1, ps-serve), each with both steps
        live = [os.path.join(d, x) for x in ("s0", "s1", "serve")]
        for L in live:
            os.makedirs(L)
            for c, n in zip(cks, names):
                os.symlink(os.path.join(c, n), os.path.join(L, n))
            serve_proc.set_latest(L, names[0])
        urls = []
        for i in range(2):
            _, url = serve_proc.start(["--serve", live[i], "--follow", "--shard", str(i),
                                       "--shards", "2", "--threads", "1"],
                                      os.path.join(d, f"s{i}.log"), procs)
            urls.append(url)
        p, port = serve_proc.start_serve(["--checkpoint", live[2], "--follow", "--servers",
                                          ",".join(urls), "--poll-ms", "50", "--threads", "4"],
                                         procs)
        body = "\n".join(lines) + "\n"
        load = serve_proc.Load(port, body, want)
        time.sleep(0.5)
        # 1. the shards ahead of ps-serve's latest
        serve_proc.set_latest(live[0], names[1])
        serve_proc.set_latest(live[1], names[1])
        time.sleep(1.5)
        mid = dict(load.seen)
        # 2. shard 0 back to A, shard 1 lagging 1 s; ps-serve's latest names A
        serve_proc.set_latest(live[2], names[0])
        serve_proc.set_latest(live[0], names[0])
        time.sleep(1.0)
        serve_proc.set_latest(live[1], names[0])
        time.sleep(1.5)
        # 3. both shards on B again, ps-serve's latest left at A
        serve_proc.set_latest(live[0], names[1])
        serve_proc.set_latest(live[1], names[1])
        time.sleep(1.5)
        load.finish(r, "", 2)
        r.check("the shards' step served while ps-serve's latest lagged",
                mid.get(steps[1], 0) > 0, str(mid))
        p.terminate()
        p.wait(timeout=30)
        log = p.stderr.read()
        r.check("stops on SIGTERM with 0 (every version freed)", p.returncode == 0,
                "" if p.returncode == 0 else log[-1500:])
        # 2: ps-serve's latest named A before the shards served it, so A's model was loaded
        # ahead and swapped in when they did
        r.check("a model loaded ahead of the shards' switch", "loaded ahead" in log, log[-1500:])
finally:
    serve_proc.kill_all(procs)
r.finish()
