#!/usr/bin/python3
"""deploy/ember-local --auth (issue 18): a 2-server, 2-worker job on small ps-datagen data
trains end to end with CURVE, and to the same model as without it: test AUC, logloss and the
dense parameters' hash equal to every printed digit (the run is deterministic; CURVE changes
the wire, not one bit of what crosses it). The wiring is checked too: the key pairs are in
DATA_DIR/curve with the secrets 0600, the workers' public key is the one listed in
curve/clients, every server says it serves CURVE and none that it is unauthenticated (a
worker left without keys would be refused, and the run would fail), and a second run on the
same data dir keeps the keys. With --replicas 2 too, the replicas of each shard reach each
other (they had no keys, each refused the other, and the primaries ran unreplicated): no
replica is refused or dropped from the live set, and the job trains."""
import json
import os
import shutil
import stat
import subprocess
import tempfile

from deploy_checks import check as _check, finish, free_port

BIN = os.environ.get("EMBER_BIN", "build/bin")
SRC = os.environ.get("EMBER_SRC", ".")
LOCAL = os.path.join(SRC, "deploy", "ember-local")


def check(name, cond, detail=""):
    """deploy_checks' check, with the name of the rule first and its details on failure."""
    return _check(cond, f"{name}: {detail}" if detail else name)


def job(d, name, auth, more=()):
    summary = os.path.join(d, name + ".json")
    args = [LOCAL, "--servers", "2", "--workers", "2", "--data-dir", os.path.join(d, name),
            "--bin", BIN] + (["--auth"] if auth else []) + list(more) + [
        "--", "--train", os.path.join(d, "train.tsv"), "--test", os.path.join(d, "test.tsv"),
        "--summary", summary, "--threads", "1", "--timeout-ms", "20000"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=240)
    check(f"{name}: exit 0", p.returncode == 0, p.stderr[-2000:])
    s = json.load(open(summary)) if os.path.exists(summary) else {}
    return (s.get("auc"), s.get("logloss"), s.get("dense_hash")), p.stderr


def main():
    d = tempfile.mkdtemp(prefix="ember-local-auth-")
    try:
        subprocess.run([f"{BIN}/ps-datagen", "--rows", "20000", "--test-rows", "5000", "--seed", "3",
                        "--out", f"{d}/train.tsv", "--test-out", f"{d}/test.tsv"],
                       check=True, capture_output=True, timeout=120)
        plain, _ = job(d, "plain", False)
        authed, log = job(d, "auth", True)
        check("a model was trained", plain[0] is not None and plain[0] > 0.55, str(plain))
        check("same AUC, logloss and dense hash with --auth", authed == plain,
              f"{authed} vs {plain}")
        cdir = os.path.join(d, "auth", "curve")
        for k in ("server", "worker"):
            check(f"{k}.secret is 0600",
                  stat.S_IMODE(os.stat(f"{cdir}/{k}.secret").st_mode) == 0o600)
        check("curve/clients lists the workers' key",
              open(f"{cdir}/clients/worker.public").read() == open(f"{cdir}/worker.public").read())
        check("both servers serve CURVE", log.count("CURVE: encrypted") == 2, log[-2000:])
        check("no server unauthenticated", "unauthenticated" not in log)
        server_pub = open(f"{cdir}/server.public").read()
        again, _ = job(d, "auth", True)
        check("a second run on the data dir keeps its keys",
              open(f"{cdir}/server.public").read() == server_pub and again[0] is not None)
        repl, log = job(d, "auth-repl", True, ["--replicas", "2"])
        check("--auth --replicas 2 trains", repl[0] is not None and repl[0] > 0.55, str(repl))
        check("--auth --replicas 2: every server serves CURVE", log.count("CURVE: encrypted") == 4,
              log[-2000:])
        check("--auth --replicas 2: no replica refused or dropped",
              "refused a CURVE client" not in log and "dropped from the live set" not in log,
              log[-3000:])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    finish("ok: " + __doc__.split(chr(10))[0])


if __name__ == "__main__":
    main()
