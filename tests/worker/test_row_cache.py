"""ps-worker --row-cache-mb (issue 32 item 2): the worker's row cache.

Sync: each configuration trains twice, --row-cache-mb 0 and 1, on the same data in file order
(--lookahead on, the default), 1x1 and 2x2, all-hot and with the server's cold tier
(--cache-mb 1). A 1 MiB cache holds ~13000 rows of 16 floats, fewer than the data's keys, so
rows are also evicted. Checked:
1. The same model bit for bit: the summary's dense_hash, AUC, logloss, samples, and every
   exported embedding row (ps-export of the final checkpoint, keys and values). The cache's
   hits are refreshed with the rows changed since their version: a cache that used its rows as
   they are (no refresh back to their version) trains another model.
2. The cache works: hit rate > 0, and the rows pulled (servers_rank0.rows_pulled, rank 0's
   fetched rows) fewer than without it.
ssp:1, 1x1 and 2x2: a cached row is used only while (step - its version) <= 1: the summary's
cache_max_age (the oldest used, rank 0) is 1 or less, with hits, and the run learns (a bound
off by one reports 2).
Async and sync with --lookahead off refuse the flag (exit 2)."""
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


def train(d, name, servers, workers, local_flags, args):
    summary = os.path.join(d, f"{name}.json")
    cmd = [h.LOCAL, "--bin", h.BIN, "--servers", str(servers), "--workers", str(workers)]
    cmd += local_flags + ["--", "--summary", summary, "--progress-every", "30"] + args
    rc, out = h.run(cmd, 300)
    assert rc == 0, f"{name}: ember-local exited {rc}:\n{out[-4000:]}"
    return json.load(open(summary))


export = h.export_latest


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train_path, test, _ = h.datagen(d, 8192, 2000, seed=5)
    configs = (("1x1 all-hot", 1, 1, []),
               ("2x2 all-hot", 2, 2, []),
               ("1x1 cold tier", 1, 1, ["--cache-mb", "1", "--server-threads", "2"]),
               ("2x2 cold tier", 2, 2, ["--cache-mb", "1"]))
    for name, S, W, local in configs:
        res = {}
        for mb in ("0", "1"):
            tag = f"{name.replace(' ', '_')}-{mb}"
            ck = os.path.join(d, "ck-" + tag)
            s = train(d, tag, S, W, local, ["--train", train_path, "--test", test,
                                            "--checkpoint-dir", ck, "--row-cache-mb", mb] + SMALL)
            res[mb] = (s, export(ck, os.path.join(d, "x-" + tag)))
            w = s["servers_rank0"]
            print(f"{name} --row-cache-mb {mb}: dense_hash {s['dense_hash']} auc {s['auc']!r} "
                  f"pulled/sample {w['pulled_rows_per_sample']:.3f} refreshed/sample "
                  f"{w['refreshed_rows_per_sample']:.3f} hit rate {w['cache_hit_rate']:.3f}")
        (off, (ko, vo)), (on, (kn, vn)) = res["0"], res["1"]
        r.check(f"{name}: the same dense model, AUC and logloss with the cache",
                all(on[k] == off[k] for k in ("dense_hash", "auc", "logloss", "samples")),
                f"{on['dense_hash']} {on['auc']!r} vs {off['dense_hash']} {off['auc']!r}")
        r.check(f"{name}: the same embedding rows (ps-export)",
                np.array_equal(ko, kn) and np.array_equal(vo, vn), f"{len(kn)} vs {len(ko)} keys")
        won, woff = on["servers_rank0"], off["servers_rank0"]
        r.check(f"{name}: hits, and fewer rows pulled",
                won["cache_hits"] > 0 and won["rows_pulled"] < woff["rows_pulled"]
                and woff["cache_lookups"] == 0,
                f"hits {won['cache_hits']} pulled {won['rows_pulled']} vs {woff['rows_pulled']}")

    for S, W in ((1, 1), (2, 2)):
        s = train(d, f"ssp1-{W}", S, W, [], ["--train", train_path, "--test", test,
                                             "--consistency", "ssp:1", "--row-cache-mb", "1"]
                  + SMALL)
        w = s["servers_rank0"]
        print(f"ssp:1 {S}x{W}: cache_max_age {w['cache_max_age']} hit rate "
              f"{w['cache_hit_rate']:.3f} auc {s['auc']!r}")
        r.check(f"ssp:1 {S}x{W}: no cached row older than the bound (max age <= 1), with hits",
                w["cache_max_age"] <= 1 and w["cache_hits"] > 0,
                f"max age {w['cache_max_age']} hits {w['cache_hits']}")
        r.check(f"ssp:1 {S}x{W}: every sample trained, a useful model",
                s["samples"] == 8192 and s["auc"] > 0.65, f"{s['samples']} {s['auc']!r}")

    for bad in (["--consistency", "async"], ["--lookahead", "off"]):
        rc, _, err = h.tool("ps-worker", ["--servers", "tcp://127.0.0.1:1", "--train", train_path,
                                          "--row-cache-mb", "1"] + bad)
        r.check(f"--row-cache-mb with {' '.join(bad)}: exit 2, one line",
                rc == 2 and "--row-cache-mb" in err, f"{rc} {err[-300:]}")
r.finish()
