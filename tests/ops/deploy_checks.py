"""deploy_checks: what the checks of the deployment files (test_k8s.py, test_deploy_files.py)
share: where the source tree is, and a check() that records a failed rule and carries on, so
that one run reports every broken rule; finish() prints them and sets the exit status. Also
free_port(), for the checks (and test_prometheus.py) that start a real process to scrape."""
import os
import socket
import sys

SRC = os.environ.get("EMBER_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


def finish(ok_line=None):
    """Exits 1 after a FAIL line per failed check; otherwise prints ok_line (if any), exits 0."""
    for e in errors:
        print("FAIL:", e)
    if errors:
        sys.exit(1)
    if ok_line:
        print(ok_line)
    sys.exit(0)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
