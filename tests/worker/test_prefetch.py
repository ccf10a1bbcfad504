"""ps-worker --prefetch N end to end (issue 22, cold tier): a batch's keys are sent as a prefetch
(a PULL with warm set) N steps before its pull, and the server loads their cold rows from
RocksDB into its hot tier meanwhile.

One ps-server with a hot tier far smaller than the table (--cache-mb 3: about 15k of the ~150k
rows the data makes, so rows go cold and come back) and one ps-worker, 2 epochs, run with
--prefetch 0, 2 and 1 (the last against --threads 2, where the warm is split over partition
threads). Checked:
1. The model is the same bit for bit: dense_hash, test AUC and logloss to every digit, samples.
   A prefetch only caches rows, so nothing that is trained may change.
2. The server's counters (/metrics, read once they have settled after the worker exited; the
   order of requests on one worker's connection is fixed, so the counts are deterministic):
   the same number of row lookups (hits + misses: a prefetch is counted apart, in
   ember_store_prefetched_total), prefetched rows only with --prefetch, and with it the pulls
   and pushes miss far less (measured: 422,873 misses off, 235,263 with --prefetch 2, of
   1,369,886 lookups, the same on every run; the misses left are mostly first sightings, keys
   stored nowhere yet, which no prefetch can load).
Without the change ps-worker has no --prefetch (exit 2) and the server no such counter."""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import harness as h
import lib_harness

# --lookahead refresh: the counts below are plain pulls' (the deep lookahead's pulls with state
# read rows without counting them or loading them into the hot tier: docs/PROTOCOL.md)
SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--threads", "1", "--batch", "256",
         "--epochs", "2", "--lookahead", "refresh"]
NAMES = ("ember_store_cache_hits_total", "ember_store_cache_misses_total",
         "ember_store_prefetched_total")


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    vals = {l.split()[0]: float(l.split()[-1]) for l in text.splitlines()
            if l and not l.startswith("#")}
    return {n: int(vals.get(n, -1)) for n in NAMES}


def settled(port, timeout=30):
    """The counters once two reads 0.5 s apart agree (the server publishes every 0.2 s)."""
    last, deadline = None, time.time() + timeout
    while time.time() < deadline:
        m = metrics(port)
        if m == last:
            return m
        last = m
        time.sleep(0.5)
    raise AssertionError(f"server counters did not settle within {timeout}s: {last}")


def run(d, name, common, prefetch, threads):
    port, mport = lib_harness.free_port(), lib_harness.free_port()
    log = os.path.join(d, f"{name}-server.log")
    srv = subprocess.Popen([f"{h.BIN}/ps-server", "--listen", f"tcp://127.0.0.1:{port}",
                            "--data-dir", os.path.join(d, name), "--cache-mb", "3",
                            "--threads", str(threads), "--metrics-port", str(mport)],
                           stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                           start_new_session=True)
    try:
        summary = os.path.join(d, f"{name}.json")
        rc, out = h.run([f"{h.BIN}/ps-worker", "--servers", f"tcp://127.0.0.1:{port}",
                         "--summary", summary, "--progress-every", "30",
                         "--prefetch", str(prefetch)] + common, 300)
        assert rc == 0, f"ps-worker --prefetch {prefetch} exited {rc}:\n{out[-3000:]}"
        m = settled(mport)
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    s = json.load(open(summary))
    print(f"{name}: auc {s['auc']!r} logloss {s['logloss']!r} dense_hash {s['dense_hash']} "
          f"{s['samples_per_s']:.0f} samples/s; {m}")
    return s, m


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train, test, _ = h.datagen(d, 30000, 10000, seed=3)
    common = ["--train", train, "--test", test] + SMALL
    off, m_off = run(d, "off", common, 0, 0)
    on, m_on = run(d, "on", common, 2, 0)
    thr, m_thr = run(d, "threads", common, 1, 2)
    for name, s in (("--prefetch 2", on), ("--prefetch 1, server --threads 2", thr)):
        same = all(s[k] == off[k] for k in ("dense_hash", "auc", "logloss", "samples"))
        r.check(f"{name} trains the same model as --prefetch 0", same,
                f"{s['dense_hash']} {s['auc']!r} vs {off['dense_hash']} {off['auc']!r}")
    lookups = lambda m: m[NAMES[0]] + m[NAMES[1]]
    r.check("the same row lookups with and without prefetch", lookups(m_on) == lookups(m_off),
            f"{lookups(m_on)} vs {lookups(m_off)}")
    r.check("rows went cold (the hot tier holds a fraction of them)",
            m_off[NAMES[1]] > 0.2 * lookups(m_off), str(m_off))
    r.check("no prefetched rows with --prefetch 0", m_off[NAMES[2]] == 0, str(m_off[NAMES[2]]))
    r.check("rows prefetched with --prefetch 2", m_on[NAMES[2]] > 0.2 * m_off[NAMES[1]],
            str(m_on[NAMES[2]]))
    r.check("with --prefetch 2 the pulls and pushes miss far less (<= 70% of the misses)",
            m_on[NAMES[1]] <= 0.7 * m_off[NAMES[1]], f"{m_on[NAMES[1]]} vs {m_off[NAMES[1]]}")
    r.check("prefetch over partition threads loads rows too", m_thr[NAMES[2]] > 0,
            str(m_thr[NAMES[2]]))
r.finish()
