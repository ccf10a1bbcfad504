"""Shared helpers of the library tests (tests/lib): real ps-server processes on 127.0.0.1
(free ports, cleanup by PID, every wait bounded) and the import of the `ember` package from
the source tree over the build's libember.so (EMBER_LIBRARY), or from an install prefix."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("EMBER_SRC", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
BIN = os.environ.get("EMBER_BIN", os.path.join(SRC, "build", "bin"))
BUILD = os.path.dirname(os.path.abspath(BIN))


def use_build_package():
    """Makes `import ember` load python/ember over build/lib/libember.so.0."""
    os.environ.setdefault("EMBER_LIBRARY", os.path.join(BUILD, "lib", "libember.so.0"))
    sys.path.insert(0, os.path.join(SRC, "python"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Servers:
    """n ps-servers (shards 0..n-1) in a temporary data dir; .urls in shard order."""

    def __init__(self, n=1, extra=()):
        self.dir = tempfile.TemporaryDirectory(prefix="ember-lib.")
        self.procs, self.urls = [], []
        for i in range(n):
            url = f"tcp://127.0.0.1:{free_port()}"
            log = open(os.path.join(self.dir.name, f"server{i}.log"), "w")
            p = subprocess.Popen([os.path.join(BIN, "ps-server"), "--listen", url, "--shard", str(i),
                                  "--shards", str(n), "--data-dir",
                                  os.path.join(self.dir.name, f"s{i}"), "--threads", "0",
                                  "--log-level", "warn", *extra],
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self.procs.append(p)
            self.urls.append(url)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.time() + 20
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.dir.cleanup()


class Results:
    def __init__(self):
        self.failed = self.passed = 0

    def check(self, name, cond, detail=""):
        print(("ok   " if cond else "FAIL ") + name + (f": {detail}" if detail else ""))
        if cond:
            self.passed += 1
        else:
            self.failed += 1

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed or not self.passed else 0)


def stop_procs(procs, grace=15):
    """SIGTERM to the process group of each still-running Popen (started with
    start_new_session=True), then waits up to `grace` s each before SIGKILL."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
