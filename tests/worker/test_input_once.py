"""--train is read end to end once before step 1 (issue 35 item 4): a text --train is counted
(its rows: the ETA, and --holdout's split) once per ps-worker run. Each count is a debug line
of the worker's log ("counting the rows of --train"), so the test counts those lines of one
ps-worker against a real ps-server: with --holdout it used to be 2 (the holdout check, then the
ETA again), without it 1; --test FILE counts --train once for the ETA too."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

SMALL = ["--mlp-bot", "13-16-8", "--mlp-top", "16-1", "--emb-dim", "8", "--threads", "1",
         "--batch", "256", "--progress-every", "30", "--log-level", "debug"]
r = h.Results()


def counts(url, args):
    rc, out = h.run([f"{h.BIN}/ps-worker", "--servers", url] + SMALL + args, 300)
    n = sum("counting the rows of --train" in l for l in out.splitlines())
    return rc, n, out


with tempfile.TemporaryDirectory() as d:
    tr, te, _ = h.datagen(d, 2000, 300, seed=5)
    cases = [("--holdout 500", ["--holdout", "500"]), ("no evaluation", []),
             ("--test FILE", ["--test", te])]
    for i, (name, args) in enumerate(cases):
        p, url = h.start_server(["--data-dir", os.path.join(d, f"s{i}"), "--log-level", "warn"])
        try:
            rc, n, out = counts(url, ["--train", tr] + args)
        finally:
            h.stop(p)
        r.check(f"{name}: exit 0, --train counted once", rc == 0 and n == 1,
                f"rc {rc}, {n} counts" + ("" if rc == 0 else f"\n{out[-2000:]}"))
r.finish()
