"""ps-worker --lookahead on (issue 32): in sync mode the next batch's rows are pulled before the
step's compute and then refreshed (OP_REFRESH: only the rows the step pushed, by any worker).
One worker in sync takes the deep lookahead instead (test_deep_lookahead.py), so the refresh
path is named here: --lookahead refresh (at 2x2 the same as on).

Each configuration trains twice, --lookahead off and refresh, on the same data in file order
(--shuffle-buffer 0), 1x1 and 2x2, all-hot and with the cold tier (--cache-mb 1, the server
splitting its work over 2 partition threads), and 2x2 with f16 rows on the wire. Checked:
1. The same model bit for bit: the summary's dense_hash, AUC and logloss, and every exported
   embedding row (ps-export of the final checkpoint, keys and values).
2. The refresh carries exactly the changed rows: the summary's rows_refreshed (summed over
   ranks, counted by the clients from the REFRESH replies) equals a count made here from the
   data alone: for every step k >= 1 and rank r, the keys of rank r's batch k that some rank's
   batch k-1 had (every key of a batch is pushed in its step). A key is a (feature, value)
   pair: ps-worker hashes each to its own key (open vocabulary, the missing value one per
   feature). Off: rows_refreshed is 0.
3. Lost requests: 1x1 on a shard of 2 replicas that cuts the connection of every 5th push it
   takes (EMBER_TEST_DROP_REPLY=5; outstanding lookahead PULLs, REFRESHes and pushes are
   re-sent, a push applied once): the undisturbed run's model and rows_refreshed, bit for bit.
4. In ssp:1 and async, --lookahead on keeps pushes in flight and changes no read: at 1x1 the
   model is bit for bit --lookahead off's. --lookahead stale (2x2), which also sends each
   step's pull before the step before it computes, trains every sample to a useful AUC (its
   rows' bound is the shards' deferral of a pull of step t+1 in ssp:K, unchanged).
Without the change ps-worker has no --lookahead (exit 2); with a refresh that carried no rows
the models differ; with one that carried every row the count does."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

B = 256
SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--threads", "1", "--batch", str(B),
         "--shuffle-buffer", "0"]


def train(d, name, servers, workers, local_flags, args, env=None):
    summary = os.path.join(d, f"{name}.json")
    cmd = [h.LOCAL, "--bin", h.BIN, "--servers", str(servers), "--workers", str(workers)]
    cmd += local_flags + ["--", "--summary", summary, "--progress-every", "30"] + args
    rc, out = h.run(cmd, 300, env=env)
    assert rc == 0, f"{name}: ember-local exited {rc}:\n{out[-4000:]}"
    return json.load(open(summary)), out


export = h.export_latest


def expected_refreshed(path, workers):
    """The rows the refreshes must carry, from the data: rank r's batch k is the lines
    k*W*B + [r*B, (r+1)*B) (ps_reader.h; the line count is a multiple of W*B)."""
    rows = [l.rstrip("\n").split("\t") for l in open(path)]
    keys = [{(j, v) for j, v in enumerate(r[14:40])} for r in rows]
    R = workers * B
    assert len(rows) % R == 0
    batch = lambda k, r: set().union(*keys[k * R + r * B:k * R + (r + 1) * B])
    total = 0
    for k in range(1, len(rows) // R):
        prev = set().union(*(batch(k - 1, r) for r in range(workers)))
        total += sum(len(batch(k, r) & prev) for r in range(workers))
    return total


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train_path, test, _ = h.datagen(d, 8192, 2000, seed=3)
    configs = (("1x1 all-hot", 1, 1, [], []),
               ("2x2 all-hot", 2, 2, [], []),
               ("1x1 cold tier", 1, 1, ["--cache-mb", "1", "--server-threads", "2"], []),
               ("2x2 cold tier", 2, 2, ["--cache-mb", "1"], []),
               ("2x2 f16 wire", 2, 2, [], ["--wire", "f16"]))
    want = {w: expected_refreshed(train_path, w) for w in (1, 2)}
    res_by_name = {}
    for name, S, W, local, extra in configs:
        res = {}
        for la in ("off", "refresh"):
            tag = f"{name.replace(' ', '_')}-{la}"
            ck = os.path.join(d, "ck-" + tag)
            s, out = train(d, tag, S, W, local, ["--train", train_path, "--test", test,
                                                 "--checkpoint-dir", ck, "--lookahead", la] +
                           SMALL + extra)
            res[la] = (s, export(ck, os.path.join(d, "x-" + tag)))
            print(f"{name} --lookahead {la}: dense_hash {s['dense_hash']} auc {s['auc']!r} "
                  f"rows_refreshed {s['rows_refreshed']} {s['samples_per_s']:.0f} samples/s")
        (off, rows_off), (on, rows_on) = res["off"], res["refresh"]
        res_by_name[name] = on
        h.check_same_model(r, name, on, off, rows_on, rows_off)
        r.check(f"{name}: rows refreshed = the data's count of rows pushed a step before",
                on["rows_refreshed"] == want[W], f"{on['rows_refreshed']} vs {want[W]}")
        r.check(f"{name}: no refresh with --lookahead off", off["rows_refreshed"] == 0,
                str(off["rows_refreshed"]))
    # Lost requests during lookaheads: every 5th push's connection cut (the lookahead PULLs,
    # REFRESHes and pushes outstanding on it re-sent; with 2 replicas a sync STEP is re-sent
    # too, so the run survives the cuts): the model of the undisturbed run, bit for bit.
    hot = res_by_name["1x1 all-hot"]
    s, out = train(d, "cut", 1, 1, ["--replicas", "2"],
                   ["--train", train_path, "--test", test, "--lookahead", "refresh"] + SMALL,
                   env=dict(os.environ, EMBER_TEST_DROP_REPLY="5"))
    print(f"cuts: dense_hash {s['dense_hash']} auc {s['auc']!r} failovers {s['failovers']}")
    r.check("connections cut under the lookahead (failovers > 0)", s["failovers"] > 0,
            str(s["failovers"]))
    r.check("cut and re-sent requests change nothing: the undisturbed run's model and refreshes",
            all(s[k] == hot[k] for k in ("dense_hash", "auc", "logloss", "rows_refreshed")),
            f"{s['dense_hash']} {s['rows_refreshed']} vs {hot['dense_hash']} {hot['rows_refreshed']}")

    # ssp and async: on keeps pushes in flight and reads what off reads (one worker: the same
    # model bit for bit); stale pulls a step early, within the bound.
    for cons in ("ssp:1", "async"):
        res = {}
        for la in ("off", "on"):
            s, out = train(d, f"{cons}-1x1-{la}", 1, 1, [],
                           ["--train", train_path, "--test", test, "--consistency", cons,
                            "--lookahead", la] + SMALL)
            res[la] = s
        r.check(f"{cons} 1x1: --lookahead on (pushes in flight) trains what off trains",
                all(res["on"][k] == res["off"][k] for k in ("dense_hash", "auc", "samples")),
                f"{res['on']['dense_hash']} {res['on']['auc']!r} vs {res['off']['dense_hash']}")
        s, out = train(d, cons, 2, 2, [], ["--train", train_path, "--test", test,
                                           "--consistency", cons, "--lookahead", "stale"] + SMALL)
        print(f"{cons} --lookahead stale: auc {s['auc']!r} {s['samples_per_s']:.0f} samples/s")
        r.check(f"{cons} --lookahead stale: every sample trained, a useful model",
                s["samples"] == 8192 and s["auc"] > 0.65, f"{s['samples']} {s['auc']!r}")
r.finish()
