"""ps-server --serve (issue 20): serving servers answer pulls from a committed checkpoint,
read-only, and ps-predict --servers scores through them. A model is trained (2 servers, through
deploy/ember-local) with --checkpoint-dir; then real ps-server --serve processes on 127.0.0.1
(shard 0, shard 1 with partition threads, and a second replica of shard 0) serve it:

1. ps-predict --servers equals offline ps-predict on the same checkpoint and file: every score
   bit for bit (the rows pulled are the snapshot's, unseen keys the same initial rows) and the
   AUC to 1e-6; through the replica of shard 0 too (several read-only opens of one snapshot).
2. A client that trains (ps-worker --servers pointing at the serving servers) has its push
   refused with one line naming --serve; afterwards the scores through the servers are
   unchanged and the checkpoint's files are byte for byte what they were. Through the library
   (python/ember over libember.so): a declare of a table the checkpoint lacks, or of its table
   with another dim, and a CHECKPOINT are refused, each with one line.
3. Bad input, one line each: --shards unlike the checkpoint's, a directory that is no
   checkpoint, --serve with --data-dir, neither (exit 2); ps-predict --servers with another
   number of servers than shards (exit 2).
4. A scoring host needs no snapshot (issue 36): ps-predict --servers on a copy of the checkpoint
   holding only latest, config and dense.bin gives every score of offline ps-predict on the full
   one, and so does a copy whose config predates its table-name line (criteo_emb). Servers that
   do not serve that checkpoint are refused in one line at start, exit 2, with or without the
   snapshots (before, the full step-8 scored silently with step 16's rows, and URLs out of
   order failed mid-run, exit 1): URLs out of shard order, the servers at step 16 and step 8
   given, a table-name they lack, an emb-dim unlike their rows'.
Without --serve none of this exists (ps-server has no such flag)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import harness as h
import lib_harness
import serve_proc

SMALL = h.SMALL
r = h.Results()
procs = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lookups(port):
    """Keys the server with this metrics port was asked for (its statistics are published at
    least every 200 ms: read after 0.5 s)."""
    time.sleep(0.5)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines()
               if l.startswith("ember_server_keys_total") and 'op="pull"' in l)


def serve(ck, shard, shards, threads=0, metrics_port=0):
    """Starts ps-server --serve; returns its endpoint once it printed its listening line."""
    return serve_proc.start(["--serve", ck, "--shard", str(shard), "--shards", str(shards),
                             "--threads", str(threads), "--log-level", "warn", "--metrics-port",
                             str(metrics_port)], None, procs)[1]


def predict(args, timeout=300):
    p = subprocess.run([f"{h.BIN}/ps-predict", "--progress-every", "0", "--threads", "1"] + args,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def scored(d, ck, test, name, extra=()):
    out, summ = os.path.join(d, name + ".txt"), os.path.join(d, name + ".json")
    rc, _, se = predict(["--checkpoint", ck, "--input", test, "--out", out, "--summary", summ]
                        + list(extra))
    if rc != 0:
        return None, None, se
    return open(out).read().split("\n")[:-1], json.load(open(summ)), se


def refused(name, cmd, rc_want, text, prog):
    assert os.path.basename(cmd[0]) == prog
    r.refused(name, cmd, rc_want, text)


try:
    with tempfile.TemporaryDirectory() as d:
        train, test, _ = h.datagen(d, 8000, 2000, seed=13)
        ck = os.path.join(d, "ck")
        os.makedirs(ck)
        h.train(2, 1, ["--train", train, "--test", test, "--checkpoint-dir", ck,
                       "--checkpoint-every", "8"] + SMALL)  # step-8, step-16
        before = h.tree_digest(ck)
        base, bsum, se = scored(d, ck, test, "offline")
        r.check("offline ps-predict runs", base is not None, se[-1500:])

        # 1. through serving servers (and a replica of shard 0)
        s0 = serve(ck, 0, 2)
        s1 = serve(ck, 1, 2, threads=2)
        mport = free_port()
        s0b = serve(ck, 0, 2, metrics_port=mport)
        idle = lookups(mport)
        for name, urls in (("servers", f"{s0},{s1}"), ("replica", f"{s0b},{s1}")):
            got, gsum, se = scored(d, ck, test, name, ["--servers", urls])
            r.check(f"{name}: ps-predict --servers runs", got is not None, se[-1500:])
            if got is None or base is None:
                continue
            r.check(f"{name}: every score equals offline", got == base,
                    f"{sum(a != b for a, b in zip(got, base))} of {len(base)} differ")
            if name == "replica":
                n = lookups(mport) - idle
                r.check("replica: the rows came from the serving server", n > 0, f"{n:.0f}")
            r.check(f"{name}: AUC equals offline (1e-6)", abs(gsum["auc"] - bsum["auc"]) < 1e-6,
                    f"{gsum['auc']:.9f} vs {bsum['auc']:.9f}")

        # 2. a training client's push is refused, and nothing changes
        p = subprocess.run([f"{h.BIN}/ps-worker", "--servers", f"{s0},{s1}", "--train", train,
                            "--progress-every", "30"] + SMALL,
                           capture_output=True, text=True, timeout=120)
        r.check("a push is refused with a line naming --serve",
                p.returncode != 0 and "read-only (ps-server --serve): push refused" in p.stderr,
                f"rc {p.returncode} {p.stderr.strip()[-400:]!r}")
        got, _, se = scored(d, ck, test, "after", ["--servers", f"{s0},{s1}"])
        r.check("after the refused push: the same scores", got is not None and got == base,
                se[-500:])
        r.check("the checkpoint's files are unchanged", h.tree_digest(ck) == before)

        # through the library (python/ember): declares of other tables and a checkpoint refused
        lib_harness.use_build_package()
        import ember
        c = ember.Client([s0, s1], timeout_ms=20000)
        for name, call, text in (
                ("a declare of a table not in the checkpoint", lambda: c.table("other", dim=4),
                 "is not in the checkpoint"),
                ("a declare of the table with another dim",
                 lambda: c.table("criteo_emb", dim=8, id=1), "is not the checkpoint's table"),
                ("a checkpoint", lambda: c.checkpoint(os.path.join(d, "ck2")), "refused")):
            try:
                call()
                r.check(f"{name} is refused", False, "accepted")
            except ember.EmberError as e:
                r.check(f"{name} is refused in one line", text in str(e) and "\n" not in str(e),
                        str(e))
        c.close()

        # 3. refusals
        srv = [f"{h.BIN}/ps-server", "--listen", "tcp://127.0.0.1:0"]
        refused("--shards unlike the checkpoint's: exit 2", srv + ["--serve", ck, "--shards", "3"],
                2, "has 2 shard(s)", "ps-server")
        refused("not a checkpoint: exit 2", srv + ["--serve", d], 2, "is not a checkpoint",
                "ps-server")
        refused("--serve with --data-dir: exit 2", srv + ["--serve", ck, "--data-dir", d], 2,
                "takes no --data-dir", "ps-server")
        refused("neither --serve nor --data-dir: exit 2", srv, 2, "--data-dir DIR is required",
                "ps-server")
        refused("ps-predict --servers: one server for 2 shards: exit 2",
                [f"{h.BIN}/ps-predict", "--checkpoint", ck, "--input", test, "--out",
                 os.path.join(d, "x.txt"), "--servers", s0], 2, "1 server(s), the checkpoint "
                "has 2 shard(s)", "ps-predict")

        # 4. a copy with no snapshot: latest, config, dense.bin (and schema.json when there is one)
        def strip(name, step, edit=None):
            dst = os.path.join(d, name)
            os.makedirs(os.path.join(dst, step))
            with open(os.path.join(dst, "latest"), "w") as f:
                f.write(step + "\n")
            for fn in ("config", "dense.bin", "schema.json"):
                src = os.path.join(ck, step, fn)
                if os.path.exists(src):
                    shutil.copy(src, os.path.join(dst, step, fn))
            if edit:  # a config edited by hand has no checksum line (as an older one)
                cfg = os.path.join(dst, step, "config")
                lines = [l for l in open(cfg).read().splitlines() if not l.startswith("checksum=")]
                open(cfg, "w").write("\n".join(edit(lines)) + "\n")
            return dst

        stripped = strip("stripped", "step-16")
        r.check("the stripped copy has no shards", not os.path.exists(
            os.path.join(stripped, "step-16", "shards")))
        old = strip("old-config", "step-16",
                    lambda ls: [l for l in ls if not l.startswith("table-name=")])
        for name, ckd in (("stripped", stripped), ("old-config", old)):
            got, gsum, se = scored(d, ckd, test, name, ["--servers", f"{s0},{s1}"])
            r.check(f"{name}: ps-predict --servers runs without the snapshots", got is not None,
                    se[-1500:])
            if got is not None and base is not None:
                r.check(f"{name}: every score equals offline on the full checkpoint", got == base,
                        f"{sum(a != b for a, b in zip(got, base))} of {len(base)} differ")
                r.check(f"{name}: the summary names the step", gsum["step"] == 16, gsum)
        pred = [f"{h.BIN}/ps-predict", "--input", test, "--out", os.path.join(d, "x.txt"),
                "--checkpoint"]
        for name, ckd, urls, text in (
                ("URLs out of shard order", stripped, f"{s1},{s0}", "is shard 1: give one URL "
                 "per shard, in shard order"),
                ("URLs out of shard order, the full checkpoint", ck, f"{s1},{s0}",
                 "is shard 1: give one URL per shard, in shard order"),
                ("the full step-8 and servers at step 16", os.path.join(ck, "step-8"),
                 f"{s0},{s1}", "serves step 16"),
                ("the servers at another step", strip("step8", "step-8"), f"{s0},{s1}",
                 "serves step 16, the checkpoint " + os.path.join(d, "step8", "step-8") +
                 " is step 8"),
                ("a table-name the servers lack",
                 strip("other-name", "step-16", lambda ls: [
                     "table-name=other_emb" if l.startswith("table-name=") else l for l in ls]),
                 f"{s0},{s1}", "no table named 'other_emb'"),
                ("an emb-dim unlike the served rows",
                 strip("other-dim", "step-16", lambda ls: [
                     "emb-dim=8" if l.startswith("emb-dim=") else l for l in ls]),
                 f"{s0},{s1}", "has rows of 16 values, the checkpoint's emb-dim is 8")):
            refused(f"ps-predict --servers, {name}: exit 2", pred + [ckd, "--servers", urls], 2,
                    text, "ps-predict")
finally:
    lib_harness.stop_procs(procs)
r.finish()
