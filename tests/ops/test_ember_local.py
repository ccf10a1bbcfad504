"""deploy/ember-local off the README's path (issue 17): --help prints the whole usage, and
--metrics / --metrics-base-port give every process a /metrics port, printed and written to
DATA_DIR/ports.txt.

The servers are the real ps-server; the workers are a stub (--bin points at a directory with
a ps-server link and a ps-worker script) that records its arguments and waits for a go-file,
so the servers stay up while the test scrapes them, whatever ps-worker itself does first."""
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.environ.get("EMBER_BIN", "build/bin")
SRC = os.environ.get("EMBER_SRC", ".")
LOCAL = os.path.join(SRC, "deploy", "ember-local")

STUB = """#!/usr/bin/env bash
# ps-worker stand-in: records its arguments, waits (bounded) for DIR/go, exits 0.
rank=""; prev=""
for a in "$@"; do [ "$prev" = --rank ] && rank="$a"; prev="$a"; done
printf '%s\\n' "$@" > "{d}/worker-$rank.args"
for _ in $(seq 1 300); do [ -e "{d}/go" ] && exit 0; sleep 0.1; done
exit 3
"""

failed = 0


def check(name, cond, detail=""):
    global failed
    print(("ok   " if cond else "FAIL ") + name + (f": {detail}" if detail and not cond else ""))
    if not cond:
        failed += 1


def test_help():
    p = subprocess.run([LOCAL, "--help"], capture_output=True, text=True, timeout=30)
    out = p.stdout
    check("--help exits 0", p.returncode == 0, p.stderr)
    for opt in ["--servers", "--workers", "--data-dir", "--keep-data", "--cache-mb",
                "--server-threads", "--bin", "--metrics", "--metrics-base-port", "-h, --help"]:
        check(f"--help documents {opt}", f"  {opt} " in out, out)
    # Not cut off: the text's last paragraph and example are there.
    check("--help is whole (exit status and example)",
          "exit status" in out and "Example:" in out and out.rstrip().endswith("--test test.tsv"), out)
    p = subprocess.run([LOCAL, "--metrics-base-port", "70000", "--", "x"], capture_output=True,
                       text=True, timeout=30)
    check("--metrics-base-port out of range exits 2 with one line",
          p.returncode == 2 and "--metrics-base-port 70000" in p.stderr, p.stderr)


def scrape(port, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.1)
    return None


def bindable(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def base_port():
    """A base P with P, P+1 (servers) and P+100, P+101 (workers) free at the moment."""
    for _ in range(50):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p + 101 <= 65535 and all(bindable(q) for q in (p, p + 1, p + 100, p + 101)):
            return p
    raise AssertionError("no free base port")


def run_cluster(label, opts):
    with tempfile.TemporaryDirectory() as d:
        stubs = os.path.join(d, "bin")
        data = os.path.join(d, "data")
        os.makedirs(stubs)
        os.symlink(os.path.abspath(os.path.join(BIN, "ps-server")), os.path.join(stubs, "ps-server"))
        with open(os.path.join(stubs, "ps-worker"), "w") as f:
            f.write(STUB.replace("{d}", d))
        os.chmod(os.path.join(stubs, "ps-worker"), 0o755)
        cmd = [LOCAL, "--bin", stubs, "--servers", "2", "--workers", "2", "--data-dir", data] + \
            opts + ["--", "--train", "none.tsv"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            ports_txt = os.path.join(data, "ports.txt")
            end = time.time() + 30
            while time.time() < end and not all(
                    os.path.exists(os.path.join(d, f"worker-{r}.args")) for r in (0, 1)):
                time.sleep(0.1)
            lines = open(ports_txt).read().split("\n") if os.path.exists(ports_txt) else []
            lines = [ln.split() for ln in lines if ln]
            check(f"{label}: ports.txt has 2 servers and 2 workers",
                  [ln[:2] for ln in lines] == [["server", "0"], ["server", "1"],
                                               ["worker", "0"], ["worker", "1"]], lines)
            mports = [int(ln[-1]) for ln in lines]
            check(f"{label}: every process has a metrics port", len(mports) == 4 and all(mports), lines)
            for i in (0, 1):
                body = scrape(mports[i]) if len(mports) == 4 else None
                check(f"{label}: server {i} serves /metrics on {mports[i] if body else '?'}",
                      body is not None and "ember_" in body)
            for r in (0, 1):
                a = os.path.join(d, f"worker-{r}.args")
                args = open(a).read().split("\n") if os.path.exists(a) else []
                want = str(mports[2 + r]) if len(mports) == 4 else "?"
                check(f"{label}: worker {r} gets --metrics-port {want}",
                      "--metrics-port" in args and args[args.index("--metrics-port") + 1] == want, args)
            open(os.path.join(d, "go"), "w").close()
            out, err = p.communicate(timeout=60)
        except BaseException:
            os.killpg(p.pid, 9)
            p.communicate()
            raise
        check(f"{label}: ember-local exits 0", p.returncode == 0, err[-2000:])
        check(f"{label}: the ports are printed", "metrics (also in" in err and "worker 1 metrics" in err,
              err[-2000:])
        return mports


def main():
    test_help()
    run_cluster("--metrics", ["--metrics"])
    base = base_port()
    got = run_cluster("--metrics-base-port", ["--metrics-base-port", str(base)])
    check("--metrics-base-port: server I on P+I, worker R on P+100+R",
          got == [base, base + 1, base + 100, base + 101], f"{got} for P={base}")
    print("FAILED" if failed else "all passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
