"""deploy/ember-local off the README's path (issue 17): --help prints the whole usage, and
--metrics / --metrics-base-port give every process a /metrics port, printed and written to
DATA_DIR/ports.txt. --replicas K (issue 23): DATA_DIR/servers.txt names every server process
(SHARD REPLICA PID URL; the PIDs are alive ps-servers listening on those URLs, which answer a
pull through ps-bench), the workers' --servers lists a shard's replicas with '|', and a bad
--replicas exits 2 with one line. K=2 runs only where ps-server has --replicas (else SKIPPED,
said why, and ember-local must refuse K=2 with one line).

The servers are the real ps-server; the workers are a stub (--bin points at a directory with
a ps-server link and a ps-worker script) that records its arguments and waits for a go-file,
so the servers stay up while the test scrapes them, whatever ps-worker itself does first."""
import json
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
case " $* " in *" --check "*) exit 0 ;; esac  # ember-local's check before the servers start
rank=""; prev=""
for a in "$@"; do [ "$prev" = --rank ] && rank="$a"; prev="$a"; done
printf '%s\\n' "$@" "OMP_WAIT_POLICY=${OMP_WAIT_POLICY-unset}" > "{d}/worker-$rank.args.tmp"  # renamed whole: the test never reads half of it
mv "{d}/worker-$rank.args.tmp" "{d}/worker-$rank.args"
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
    for opt in ["--servers", "--replicas", "--failover-ms", "--workers", "--data-dir", "--keep-data", "--cache-mb",
                "--server-threads", "--bin", "--metrics", "--metrics-base-port", "-h, --help"]:
        check(f"--help documents {opt}", f"  {opt} " in out, out)
    # Not cut off: the text's last paragraph and example are there.
    check("--help is whole (exit status and example)",
          "exit status" in out and "Example:" in out and out.rstrip().endswith("--test test.tsv"), out)
    p = subprocess.run([LOCAL, "--metrics-base-port", "70000", "--", "x"], capture_output=True,
                       text=True, timeout=30)
    check("--metrics-base-port out of range exits 2 with one line",
          p.returncode == 2 and "--metrics-base-port 70000" in p.stderr, p.stderr)
    # 9: above ps-server's limit (8 replicas of a shard); refused before anything starts.
    for bad in (["0"], ["-1"], ["two"], ["9"], ["101"], ["1" + "0" * 30], [""], []):
        p = subprocess.run([LOCAL, "--bin", BIN, "--replicas"] + bad + ["--", "x"],
                           capture_output=True, text=True, timeout=30)
        lines = p.stderr.strip().split("\n")
        check(f"--replicas {bad[0] if bad else '(missing)'!r} exits 2 with one line naming it",
              p.returncode == 2 and len(lines) == 1 and lines[0].startswith("ember-local: --replicas"),
              f"rc={p.returncode} {p.stderr!r}")


def test_ps_stats_errors():
    """ps-stats: bad arguments exit 2, a shard that does not answer exits 1, one line each."""
    for bad in ([], ["--shard", "1"], ["--timeout-ms", "0"]):
        args = ["--servers", "tcp://127.0.0.1:1"] + bad if bad else []
        p = subprocess.run([os.path.join(BIN, "ps-stats")] + args, capture_output=True, text=True,
                           timeout=30)
        check(f"ps-stats {' '.join(args) or '(no --servers)'} exits 2 with one line",
              p.returncode == 2 and p.stderr.count("\n") == 1, f"rc={p.returncode} {p.stderr!r}")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    rc, docs, err = stats(f"tcp://127.0.0.1:{port}", "--timeout-ms", "300")
    check("ps-stats against no server exits 1 naming the URL",
          rc == 1 and docs == [] and f":{port}" in err and err.count("\n") == 1, f"rc={rc} {err!r}")


def has_replicas():
    """Whether this ps-server takes --replicas (the contract's flags), from its --help."""
    p = subprocess.run([os.path.join(BIN, "ps-server"), "--help"], capture_output=True, text=True,
                       timeout=30)
    return "--replicas" in p.stdout + p.stderr


def answers(servers):
    """A pull through ps-bench (the real client) gets a reply from SERVERS."""
    p = subprocess.run([os.path.join(BIN, "ps-bench"), "--servers", servers, "--op", "pull",
                        "--keys", "4", "--dim", "4", "--closed-loop", "--requests", "3",
                        "--warmup", "0", "--timeout-ms", "5000"],
                       capture_output=True, text=True, timeout=60)
    return p.returncode == 0


def stats(servers, *more):
    """ps-stats (tools/): (exit status, [STATS document per line], stderr)."""
    p = subprocess.run([os.path.join(BIN, "ps-stats"), "--servers", servers, *more],
                       capture_output=True, text=True, timeout=60)
    docs = []
    for ln in p.stdout.splitlines():
        try:
            docs.append(json.loads(ln))
        except ValueError:
            docs.append(None)
    return p.returncode, docs, p.stderr


def check_servers_txt(label, data, nserv, nrep, worker_args):
    """servers.txt: one line per server process, shard by shard, replicas in order; each PID a
    live ps-server listening on its URL (and, K > 1, told its replica and peers); the worker's
    --servers is the URLs, shards by ',', replicas by '|', and the servers answer a pull on it."""
    path = os.path.join(data, "servers.txt")
    rows = [ln.split() for ln in open(path).read().split("\n") if ln] if os.path.exists(path) else []
    check(f"{label}: servers.txt has SHARD REPLICA PID URL for {nserv}x{nrep} processes",
          [r[:2] for r in rows] == [[str(i), str(r)] for i in range(nserv) for r in range(nrep)]
          and all(len(r) == 4 for r in rows), rows)
    urls = [r[3] for r in rows]
    check(f"{label}: every URL distinct", len(set(urls)) == len(urls) == nserv * nrep, urls)
    for sh, rep, pid, url in (r for r in rows if len(r) == 4):
        try:
            cmd = open(f"/proc/{pid}/cmdline").read().split("\0")
        except OSError:
            cmd = []
        ok = cmd and os.path.basename(cmd[0]) == "ps-server" and cmd[cmd.index("--listen") + 1] == url
        if ok and nrep > 1:
            peers = "|".join(urls[int(sh) * nrep:(int(sh) + 1) * nrep])
            ok = cmd[cmd.index("--replica") + 1] == rep and cmd[cmd.index("--replicas") + 1] == str(nrep) \
                and cmd[cmd.index("--peers") + 1] == peers
        if ok and nrep == 1:
            ok = not any(a in cmd for a in ("--replica", "--replicas", "--peers"))
        check(f"{label}: PID {pid} is a live ps-server, shard {sh} replica {rep}, on {url}", ok, cmd)
    want = ",".join("|".join(urls[i * nrep:(i + 1) * nrep]) for i in range(nserv))
    got = worker_args[worker_args.index("--servers") + 1] if "--servers" in worker_args else None
    check(f"{label}: the workers' --servers is {want}", got == want, got)
    if nrep == 1:  # each process on its own: STATS from that URL says which shard it is
        for sh, _, pid, url in (r for r in rows if len(r) == 4):
            rc, docs, err = stats(url)
            check(f"{label}: {url} answers STATS as shard {sh} of {nserv} (ps-stats)",
                  rc == 0 and len(docs) == 1 and docs[0] and docs[0].get("shard") == int(sh)
                  and docs[0].get("shards") == nserv, f"rc={rc} {err}")
    rc, docs, err = stats(got or "")
    check(f"{label}: ps-stats on the workers' --servers prints shards 0..{nserv - 1}, one line each",
          rc == 0 and [d and d.get("shard") for d in docs] == list(range(nserv)), f"rc={rc} {err}")
    # A shard takes only the keys that hash to it: ask them all together, as the workers would.
    check(f"{label}: the servers answer a pull through that --servers", bool(got) and answers(got))


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
    """A base P with P..P+3 (servers, 2x2 at most) and P+100, P+101 (workers) free at the moment."""
    for _ in range(50):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p + 101 <= 65535 and all(bindable(q) for q in (p, p + 1, p + 2, p + 3, p + 100, p + 101)):
            return p
    raise AssertionError("no free base port")


def stub_bin(d):
    """D/bin: the real ps-server (a link) and the ps-worker stand-in."""
    stubs = os.path.join(d, "bin")
    os.makedirs(stubs)
    os.symlink(os.path.abspath(os.path.join(BIN, "ps-server")), os.path.join(stubs, "ps-server"))
    with open(os.path.join(stubs, "ps-worker"), "w") as f:
        f.write(STUB.replace("{d}", d))
    os.chmod(os.path.join(stubs, "ps-worker"), 0o755)
    return stubs


def run_cluster(label, opts, nserv=2, nrep=1, ckpt=False, omp=None):
    """ckpt: the workers get a fresh --checkpoint-dir, which ember-local makes before any server
    starts (each used to warn that its --checkpoint-root did not exist yet). omp: the
    OMP_WAIT_POLICY ember-local is started with (None: unset); the stub records what each
    worker got as its last argument line."""
    with tempfile.TemporaryDirectory() as d:
        stubs = stub_bin(d)
        data = os.path.join(d, "data")
        ckdir = os.path.join(d, "fresh", "ckpt")
        cmd = [LOCAL, "--bin", stubs, "--servers", str(nserv), "--workers", "2", "--data-dir", data] + \
            opts + ["--", "--train", "none.tsv"] + (["--checkpoint-dir", ckdir] if ckpt else [])
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if omp is not None:
            env["OMP_WAIT_POLICY"] = omp
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, env=env)
        try:
            ports_txt = os.path.join(data, "ports.txt")
            end = time.time() + 30
            while time.time() < end and not all(
                    os.path.exists(os.path.join(d, f"worker-{r}.args")) for r in (0, 1)):
                time.sleep(0.1)
            lines = open(ports_txt).read().split("\n") if os.path.exists(ports_txt) else []
            lines = [ln.split() for ln in lines if ln]
            nproc = nserv * nrep
            check(f"{label}: ports.txt has {nserv}x{nrep} servers and 2 workers",
                  [ln[:2] for ln in lines] == [["server", str(i)] for i in range(nserv) for _ in range(nrep)]
                  + [["worker", "0"], ["worker", "1"]], lines)
            mports = [int(ln[ln.index("metrics") + 1]) for ln in lines if "metrics" in ln[:-1]]
            n = nproc + 2
            check(f"{label}: every process has a metrics port", len(mports) == n and all(mports), lines)
            for i in range(nproc):
                body = scrape(mports[i]) if len(mports) == n else None
                check(f"{label}: server process {i} serves /metrics on {mports[i] if body else '?'}",
                      body is not None and "ember_" in body)
            wargs = []
            for r in (0, 1):
                a = os.path.join(d, f"worker-{r}.args")
                args = open(a).read().split("\n") if os.path.exists(a) else []
                wargs.append(args)
                want = str(mports[nproc + r]) if len(mports) == n else "?"
                check(f"{label}: worker {r} gets --metrics-port {want}",
                      "--metrics-port" in args and args[args.index("--metrics-port") + 1] == want, args)
                # Workers share the host's cores with the shards: libgomp's default spin-wait
                # starved them (docs/SIZING.md), so ember-local sets passive unless told.
                omp_want = "OMP_WAIT_POLICY=" + (omp if omp is not None else "passive")
                check(f"{label}: worker {r} runs with {omp_want}", omp_want in args, args[-1:])
            check_servers_txt(label, data, nserv, nrep, wargs[0])
            open(os.path.join(d, "go"), "w").close()
            out, err = p.communicate(timeout=60)
        except BaseException:
            os.killpg(p.pid, 9)
            p.communicate()
            raise
        check(f"{label}: ember-local exits 0", p.returncode == 0, err[-2000:])
        check(f"{label}: the ports are printed", "metrics (also in" in err and "worker 1 metrics" in err,
              err[-2000:])
        if ckpt:
            check(f"{label}: --checkpoint-dir made, no server warns that it does not exist",
                  os.path.isdir(ckdir) and "does not exist" not in err, err[-2000:])
        return mports


def main():
    test_help()
    test_ps_stats_errors()
    run_cluster("--metrics", ["--metrics"], ckpt=True)
    base = base_port()
    got = run_cluster("--metrics-base-port", ["--metrics-base-port", str(base)], omp="active")
    check("--metrics-base-port: server I on P+I, worker R on P+100+R",
          got == [base, base + 1, base + 100, base + 101], f"{got} for P={base}")
    if has_replicas():
        base = base_port()
        got = run_cluster("--replicas 2", ["--replicas", "2", "--metrics-base-port", str(base)], nrep=2)
        check("--replicas 2 --metrics-base-port: replica R of server I on P+I+R*N",
              got == [base, base + 2, base + 1, base + 3, base + 100, base + 101], f"{got} for P={base}")
    else:
        print("SKIPPED --replicas 2: this ps-server has no --replicas (ps-server --help), the replicated "
              "shards of issue 23 are not built in")
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([LOCAL, "--bin", stub_bin(d), "--replicas", "2", "--", "x"],
                               capture_output=True, text=True, timeout=30)
        check("--replicas 2 without a replicating ps-server exits 2 with one line",
              p.returncode == 2 and p.stderr.count("\n") == 1 and "has no --replicas" in p.stderr, p.stderr)
        p = subprocess.run([os.path.join(SRC, "bench", "replica", "run.sh"), tempfile.gettempdir()],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, BIN=os.path.abspath(BIN)))
        check("bench/replica/run.sh without a replicating ps-server exits 2 with one line",
              p.returncode == 2 and p.stderr.count("\n") == 1 and "has no --replicas" in p.stderr, p.stderr)
    print("FAILED" if failed else "all passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
