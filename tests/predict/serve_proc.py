"""Starting a ps-server for the integration tests of tests/predict: its endpoint once it printed
its listening line, its stderr in a log file (read on failure). And ps-serve's: started, asked
(POST /v1/score), its followed `latest` moved, and ps-predict's reference scores."""
import json
import os
import select
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import harness as h


def start(args, log, procs, env=None, timeout=60):
    """ps-server --listen tcp://127.0.0.1:0 ARGS; appends it to procs; returns (process,
    endpoint). log: a file for its stderr, or None (an anonymous one)."""
    err = open(log, "w+") if log else tempfile.TemporaryFile("w+")
    p = subprocess.Popen([f"{h.BIN}/ps-server", "--listen", "tcp://127.0.0.1:0"] + args,
                         stdout=subprocess.PIPE, stderr=err, text=True,
                         start_new_session=True, env=env if env is not None else os.environ)
    procs.append(p)
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready, _, _ = select.select([p.stdout], [], [], 1.0)
        if ready:
            line = p.stdout.readline()
            if "listening on" in line:
                return p, line.split("listening on ")[1].strip()
            if not line:
                break
    err.seek(0)
    raise AssertionError(f"ps-server {args} did not start: {err.read()[-2000:]}")


def predict(ck, lines, d):
    """ps-predict's scores of lines (a list of strings) from checkpoint ck, scored as one batch
    (a batch's size changes the float rounding of the MLPs, so each request size has its own
    reference), with one compute thread as ps-serve's default."""
    inp, out = os.path.join(d, "in.tsv"), os.path.join(d, "out.txt")
    open(inp, "w").write("\n".join(lines) + "\n")
    p = subprocess.run([f"{h.BIN}/ps-predict", "--progress-every", "0", "--threads", "1",
                        "--checkpoint", ck,
                        "--input", inp, "--out", out], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [float(x) for x in open(out).read().split("\n")[:-1]]


def start_serve(args, procs, timeout=60):
    """ps-serve --http 127.0.0.1:0 ARGS, appended to procs; (process, port) once it printed
    where it listens."""
    p = subprocess.Popen([f"{h.BIN}/ps-serve", "--http", "127.0.0.1:0"] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    procs.append(p)
    ready = select.select([p.stdout], [], [], timeout)[0]
    line = p.stdout.readline() if ready else ""
    if "listening on" not in line:
        p.kill()
        raise AssertionError(f"ps-serve {args} did not start: {p.stderr.read()[-2000:]}")
    return p, int(line.strip().rsplit(":", 1)[1])


def post(port, body, ctype="text/plain", timeout=30):
    """(status, parsed JSON reply) of POST /v1/score."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/score", data=body.encode(),
                                 headers={"Content-Type": ctype}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def set_latest(live, name):
    """live/latest := name, renamed in as ps-worker does."""
    with open(os.path.join(live, "latest.tmp"), "w") as f:
        f.write(name + "\n")
    os.rename(os.path.join(live, "latest.tmp"), os.path.join(live, "latest"))


class Load:
    """n clients POSTing body to ps-serve on port in a loop until stop(): a reply counts in seen
    (by step) when it is 200 with want[its step] as scores, else in errors (a failed request,
    or scores that are not its step's: a mixed or mislabelled version)."""

    def __init__(self, port, body, want, n=4):
        self.port, self.body, self.want = port, body, want
        self.seen, self.errors = {}, []
        self._stop = threading.Event()
        self._ths = [threading.Thread(target=self._client) for _ in range(n)]
        for t in self._ths:
            t.start()

    def _client(self):
        while not self._stop.is_set():
            try:
                st, rep = post(self.port, self.body)
            except Exception as e:  # noqa: BLE001 -- any failure is a failed request
                self.errors.append(repr(e))
                continue
            if st != 200 or self.want.get(rep.get("step")) != rep.get("scores"):
                self.errors.append(f"{st} step {rep.get('step')} {str(rep)[:120]}")
            else:
                self.seen[rep["step"]] = self.seen.get(rep["step"], 0) + 1

    def stop(self):
        self._stop.set()
        for t in self._ths:
            t.join()

    def finish(self, r, prefix, nsteps):
        """stop(), then checked in r: no request failed, every reply its step's scores (over 20
        replies), nsteps steps served. Returns seen."""
        self.stop()
        total = sum(self.seen.values())
        r.check(f"{prefix}no request failed, every reply one version's scores (ps-predict's for "
                "its step)", not self.errors and total > 20,
                f"{total} ok, {len(self.errors)} bad {self.errors[:3]}")
        r.check(f"{prefix}{nsteps} steps served", len(self.seen) == nsteps, str(self.seen))
        return self.seen


def kill_all(procs):
    """Every process of procs still running killed (a test's cleanup)."""
    for q in procs:
        if q.poll() is None:
            q.kill()
            q.wait()
