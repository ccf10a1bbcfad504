"""ps-worker's deep lookahead (issue 32): one worker in sync pulls K batches ahead (a PULL
with_state: rows with their optimizer state) and applies its own updates to the rows it holds
with the servers' arithmetic (common/ps_optim.c), so no server reply is waited for in a step.

Each configuration trains twice on the same data in file order, --lookahead off and on (deep,
--lookahead-depth 3), 1x1, for every sparse optimizer all-hot and for Adagrad and Adam with the
cold tier (--cache-mb 1, 2 partition threads: rows leave the hot tier and come back from
RocksDB, and the pull with state reads them there), and for Adagrad at the default depth (8:
the reader must let the worker hold its 9 batches). Checked:
1. The same model bit for bit: the summary's dense_hash, AUC and logloss, and every exported
   embedding row (ps-export of the final checkpoint, keys and values).
2. The deep path ran: its log line, and pulled rows it replaced by its own updates (> 0: the
   data repeats keys within 3 steps, so a run that ignored the overlay would differ).
3. Lost requests: a shard of 2 replicas that cuts the connection of every 5th push it takes
   (EMBER_TEST_DROP_REPLY=5: the pulls with state and pushes outstanding re-sent, a push applied
   once): the undisturbed run's model, bit for bit.
Without the worker's own updates (the overlay not used) the models differ; without the
shared arithmetic (a different rounding of any optimizer) the rows differ."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

B = 256
SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--threads", "1", "--batch", str(B),
         "--shuffle-buffer", "0"]


def train(d, name, local_flags, args, env=None):
    import json
    summary = os.path.join(d, f"{name}.json")
    cmd = [h.LOCAL, "--bin", h.BIN, "--servers", "1", "--workers", "1"]
    cmd += local_flags + ["--", "--summary", summary, "--progress-every", "30"] + args
    rc, out = h.run(cmd, 300, env=env)
    assert rc == 0, f"{name}: ember-local exited {rc}:\n{out[-4000:]}"
    return json.load(open(summary)), out


def replaced(out):
    m = re.search(r"lookahead: (\d+) pulled rows replaced", out)
    return int(m.group(1)) if m else -1


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train_path, test, _ = h.datagen(d, 4096, 1000, seed=5)
    cold = ["--cache-mb", "1", "--server-threads", "2"]
    configs = [(f"{o} all-hot", [], o, 3) for o in ("sgd", "adagrad", "rowwise-adagrad", "adam",
                                                    "ftrl")]
    configs += [(f"{o} cold tier", cold, o, 3) for o in ("adagrad", "adam")]
    # the default depth (8): 9 batches held at once besides the --prefetch FIFO's
    configs += [("adagrad all-hot, default depth", [], "adagrad", 0)]
    base = {}
    for name, local, opt, depth in configs:
        res = {}
        for la in ("off", "on"):
            tag = f"{name.replace(' ', '_')}-{la}"
            ck = os.path.join(d, "ck-" + tag)
            s, out = train(d, tag, local, ["--train", train_path, "--test", test,
                                           "--checkpoint-dir", ck, "--lookahead", la,
                                           "--lookahead-depth", str(depth), "--sparse-opt", opt]
                           + SMALL)
            res[la] = (s, h.export_latest(ck, os.path.join(d, "x-" + tag)), out)
            print(f"{name} --lookahead {la}: dense_hash {s['dense_hash']} auc {s['auc']!r} "
                  f"{s['samples_per_s']:.0f} samples/s")
        (off, rows_off, _), (on, rows_on, out) = res["off"], res["on"]
        base[name] = on
        r.check(f"{name}: the deep lookahead ran and replaced pulled rows",
                f"lookahead: deep, {depth or 8} batches ahead" in out and replaced(out) > 0,
                str(replaced(out)))
        h.check_same_model(r, name, on, off, rows_on, rows_off)
    # Lost requests: every 5th push's connection cut; pulls with state and pushes re-sent.
    s, out = train(d, "cut", ["--replicas", "2"],
                   ["--train", train_path, "--test", test, "--lookahead", "on",
                    "--lookahead-depth", "3", "--sparse-opt", "adam"] + SMALL,
                   env=dict(os.environ, EMBER_TEST_DROP_REPLY="5"))
    hot = base["adam all-hot"]
    print(f"cuts: dense_hash {s['dense_hash']} auc {s['auc']!r} failovers {s['failovers']}")
    r.check("connections cut under the deep lookahead (failovers > 0)", s["failovers"] > 0,
            str(s["failovers"]))
    r.check("cut and re-sent requests change nothing: the undisturbed run's model",
            all(s[k] == hot[k] for k in ("dense_hash", "auc", "logloss")),
            f"{s['dense_hash']} vs {hot['dense_hash']}")
r.finish()
