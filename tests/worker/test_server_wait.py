"""ps-worker's counters of its wait on servers (issue 32): the summary's seconds_rank0.wait
(pull waits + push/STEP reply waits) and servers_rank0 (wait per step and as a share, pulled and
refreshed rows per sample, the row cache's hit rate), the progress line, and the wait growing
with ps-server --inject-delay-us D: every reply is held D, so each step waits at least D for
its pull and D for its push/STEP replies; the test asks for half of one D per step (a
functional check, not a timing). Small towers, 1 server x 1 worker, a few dozen steps, the
one-step lookahead with its refresh (--lookahead refresh: the deep lookahead hides the delay,
test_deep_lookahead.py)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

STEPS = 30
D_US = 50000


def run(d, train, delay):
    summary = os.path.join(d, f"summary-{delay}.json")
    cmd = [h.LOCAL, "--bin", h.BIN, "--servers", "1", "--workers", "1",
           "--server-args", f"--inject-delay-us {delay}" if delay else "", "--",
           "--train", train, "--batch", "256", "--threads", "1", "--max-steps", str(STEPS),
           "--mlp-bot", "13-32-16", "--mlp-top", "64-1", "--progress-every", "0.2",
           "--summary", summary, "--lookahead", "refresh"]
    rc, out = h.run(cmd, 300)
    assert rc == 0, f"ember-local exited {rc}:\n{out[-4000:]}"
    return json.load(open(summary)), out


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train, _, _ = h.datagen(d, 20000, 100, seed=5)
    s0, out0 = run(d, train, 0)
    s1, out1 = run(d, train, D_US)
    for name, s in (("D=0", s0), (f"D={D_US}", s1)):
        t, w = s["seconds_rank0"], s.get("servers_rank0", {})
        r.check(f"{name}: seconds_rank0 has wait and push_wait",
                "wait" in t and "push_wait" in t, f"{sorted(t)}")
        keys = ["wait_ms_per_step", "wait_share", "pulled_rows_per_sample",
                "refreshed_rows_per_sample", "cache_hit_rate", "rows_pulled", "rows_refreshed",
                "cache_hits", "cache_lookups"]
        r.check(f"{name}: servers_rank0 has {keys}", all(k in w for k in keys), f"{sorted(w)}")
        if "wait" in t and "push_wait" in t:
            r.check(f"{name}: wait = pull + push_wait",
                    abs(t["wait"] - t["pull"] - t["push_wait"]) < 1e-6, f"{t}")
        if all(k in w for k in keys):
            steps, n = s["steps"], s["samples"]
            r.check(f"{name}: wait per step and share agree with wait",
                    abs(w["wait_ms_per_step"] - 1e3 * t["wait"] / steps) < 1e-6 and
                    abs(w["wait_share"] - t["wait"] / s["train_seconds"]) < 1e-6, f"{w}")
            # one-hot rows: 26 categorical features, each its own keys: between 26 unique rows
            # a step and 26 a sample
            r.check(f"{name}: pulled rows within [26 a step, 26 a sample]",
                    26 * steps <= w["rows_pulled"] <= 26 * n and
                    abs(w["pulled_rows_per_sample"] - w["rows_pulled"] / n) < 1e-6, f"{w}")
            # --lookahead on (the default): the refreshes carry some of the pulled rows (those
            # that the step before changed), never more; the row cache is not built (0)
            r.check(f"{name}: refreshed rows in (0, pulled], per sample agree, no cache",
                    0 < w["rows_refreshed"] <= w["rows_pulled"] and
                    abs(w["refreshed_rows_per_sample"] - w["rows_refreshed"] / n) < 1e-6 and
                    w["cache_lookups"] == 0 and w["cache_hit_rate"] == 0, f"{w}")
    bound = 0.5 * D_US / 1e6 * STEPS
    r.check("the wait grows with the injected delay",
            s1["seconds_rank0"].get("wait", 0) > bound > s0["seconds_rank0"].get("wait", 1e9),
            f"D=0 {s0['seconds_rank0'].get('wait')} s, D={D_US} us "
            f"{s1['seconds_rank0'].get('wait')} s, bound {bound} s")
    r.check("the same model at both D (sync)", s0["dense_hash"] == s1["dense_hash"],
            f"{s0['dense_hash']} {s1['dense_hash']}")
    r.check("the progress line says the wait and the rows",
            "ms/step" in out1 and "rows/sample pulled" in out1 and "cache hits" in out1,
            [l for l in out1.splitlines() if "samples/s" in l][-1:])
r.finish()
