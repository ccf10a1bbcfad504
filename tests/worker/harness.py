"""Shared helpers for ps-worker integration tests: real ps-server / ps-worker processes on
127.0.0.1 started through deploy/ember-local (free ports, cleanup by PID), every wait bounded."""
import json
import os
import signal
import subprocess
import sys
import tempfile

BIN = os.environ.get("EMBER_BIN", "build/bin")
SRC = os.environ.get("EMBER_SRC", ".")
LOCAL = os.path.join(SRC, "deploy", "ember-local")
# The small model that the checkpoint tools' tests (tests/predict) train: seconds per run.
SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--emb-dim", "16", "--threads", "1",
         "--batch", "512"]


def run(cmd, timeout, **kw):
    """Runs cmd in its own process group; kills the whole group on timeout."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, **kw)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise AssertionError(f"timed out after {timeout}s: {' '.join(cmd)}\n{out[-3000:]}")
    return p.returncode, out


def datagen(dirname, rows, test_rows, seed=1, flags=(), timeout=120):
    """ps-datagen into dirname's train.tsv, test.tsv, planted.json (overwriting them); flags
    are extra ps-datagen flags (--multi-hot M --schema-out FILE)."""
    train = os.path.join(dirname, "train.tsv")
    test = os.path.join(dirname, "test.tsv")
    planted = os.path.join(dirname, "planted.json")
    rc, out = run([f"{BIN}/ps-datagen", "--rows", str(rows), "--seed", str(seed), "--out", train,
                   "--test-rows", str(test_rows), "--test-out", test, "--json", planted] +
                  list(flags), timeout)
    assert rc == 0, out
    return train, test, json.load(open(planted))


def multihot_schema(path):
    """Writes the schema of a CSV "y,u,tags,more" with a header: a label, one categorical id
    and two multi-hot bags separated by '|', tags pooled by mean and more by sum."""
    json.dump({"format": "csv", "header": True, "columns": [
        {"name": "y", "type": "label"}, {"name": "u", "type": "categorical"},
        {"name": "tags", "type": "categorical", "separator": "|", "pooling": "mean"},
        {"name": "more", "type": "categorical", "separator": "|", "pooling": "sum"}]},
        open(path, "w"))
    return path

def train(servers, workers, args, timeout=600, data_dir=None):
    """ember-local with N servers and W workers; returns (summary dict, output)."""
    with tempfile.TemporaryDirectory() as d:
        summary = os.path.join(d, "summary.json")
        cmd = [LOCAL, "--bin", BIN, "--servers", str(servers), "--workers", str(workers)]
        if data_dir:
            cmd += ["--data-dir", data_dir]
        cmd += ["--", "--summary", summary, "--progress-every", "30"] + args
        rc, out = run(cmd, timeout)
        assert rc == 0, f"ember-local exited {rc}:\n{out[-4000:]}"
        return json.load(open(summary)), out


def tree_digest(root):
    """{relative path: sha256} of every file under root (to show that nothing was written)."""
    import hashlib
    out = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def check_same_model(r, name, on, off, rows_on, rows_off):
    """Two runs' summaries (on, off) and exported rows ((keys, values) each) give the same
    model bit for bit: dense hash, AUC, logloss and samples, and every embedding row."""
    import numpy as np
    r.check(f"{name}: the same dense model, AUC and logloss",
            all(on[k] == off[k] for k in ("dense_hash", "auc", "logloss", "samples")),
            f"{on['dense_hash']} {on['auc']!r} vs {off['dense_hash']} {off['auc']!r}")
    (ko, vo), (kn, vn) = rows_off, rows_on
    r.check(f"{name}: the same embedding rows (ps-export)",
            np.array_equal(ko, kn) and np.array_equal(vo, vn), f"{len(kn)} vs {len(ko)} keys")


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, cond, detail=""):
        if cond:
            self.passed += 1
            print(f"ok   {name} {detail}")
        else:
            self.failed += 1
            print(f"FAIL {name} {detail}")

    def refused(self, name, cmd, rc_want, text, env=None):
        """Checks that cmd exits rc_want with exactly one line of its own on stderr (the line
        that starts with the program's name), and that line holds text."""
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        prog = os.path.basename(cmd[0]) + ":"
        lines = [l for l in p.stderr.splitlines() if l.startswith(prog)]
        self.check(name, p.returncode == rc_want and len(lines) == 1 and text in lines[0],
                   f"rc {p.returncode} stderr {p.stderr.strip()[-400:]!r}")

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def start_server(args, timeout=60, **kw):
    """ps-server with args (its --listen tcp://127.0.0.1:0 first); returns (process, URL) once
    it says where it listens."""
    import select
    p = subprocess.Popen([f"{BIN}/ps-server", "--listen", "tcp://127.0.0.1:0"] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **kw)
    ready = select.select([p.stdout], [], [], timeout)[0]
    line = p.stdout.readline() if ready else ""
    return p, (line.split("listening on ")[-1].strip() if "listening on" in line else "")


def stop(p):
    """SIGTERM, then SIGKILL after 30 s."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=30)


def tool(name, args, timeout=300):
    """Runs the binary BIN/name with args; returns (exit code, stdout, stderr)."""
    p = subprocess.run([f"{BIN}/{name}"] + args, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def export_latest(ck, out):
    """The embedding rows of the latest checkpoint under --checkpoint-dir ck (ps-export into
    out): keys and values, sorted by key. Needs numpy."""
    import numpy as np
    latest = open(os.path.join(ck, "latest")).read().strip()
    rc, _, err = tool("ps-export", ["--checkpoint", os.path.join(ck, latest), "--out", out])
    assert rc == 0, err[-2000:]
    keys = np.load(os.path.join(out, "embeddings", "table_1.keys.npy"))
    vals = np.load(os.path.join(out, "embeddings", "table_1.values.npy"))
    o = np.argsort(keys)
    return keys[o], vals[o]
