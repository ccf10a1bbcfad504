"""ps-server out of file descriptors (issue 36, 12): a shard started with an open-file limit of
64 and sent 200 TCP connections. ZeroMQ cannot accept past the limit and retries by itself
without a word, so the shard's log was silent while its clients timed out; now it logs the
refusal once in a while, naming the limit. Loopback only; the server is killed by PID."""
import os
import socket
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("EMBER_BIN", "build/bin")
with tempfile.TemporaryDirectory() as d:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    log = open(os.path.join(d, "log"), "w+")
    p = subprocess.Popen(["prlimit", "--nofile=64", f"{BIN}/ps-server", "--listen",
                          f"tcp://127.0.0.1:{port}", "--data-dir", os.path.join(d, "data")],
                         stdout=log, stderr=subprocess.STDOUT)
    conns = []
    try:
        t0 = time.time()
        while not conns and time.time() - t0 < 30 and p.poll() is None:  # the server is up
            try:
                conns.append(socket.create_connection(("127.0.0.1", port), timeout=1))
            except OSError:
                time.sleep(0.05)
        for _ in range(200):
            try:
                conns.append(socket.create_connection(("127.0.0.1", port), timeout=1))
            except OSError:
                break  # the backlog is full: the server stopped accepting
        t0 = time.time()
        while time.time() - t0 < 10 and "cannot accept" not in open(log.name).read():
            time.sleep(0.1)
    finally:
        for c in conns:
            c.close()
        p.kill()
        p.wait()
    out = open(log.name).read()
    lines = [l for l in out.splitlines() if "cannot accept a connection" in l]
    ok = bool(lines) and "Too many open files" in lines[0] and "ulimit -n, is 64" in lines[0]
    print(f"{len(conns)} connections; {lines[:1]}")
    print("PASS" if ok else "FAIL: no line names the open-file limit\n" + out[-2000:])
    sys.exit(0 if ok else 1)
