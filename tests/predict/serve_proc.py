"""Starting a ps-server for the integration tests of tests/predict: its endpoint once it printed
its listening line, its stderr in a log file (read on failure)."""
import os
import select
import subprocess
import tempfile
import time

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


def kill_all(procs):
    """SIGKILL every process of procs still running, and reap it (a test's last word)."""
    for q in procs:
        if q.poll() is None:
            q.kill()
            q.wait()
