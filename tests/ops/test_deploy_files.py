#!/usr/bin/python3
"""test_deploy_files: the systemd unit and the Dockerfiles, checked as far as this machine
allows (no systemd as PID 1, no container engine).

systemd: `systemd-analyze verify` accepts ember-server@.service and ember-servers.target
(with ExecStart pointed at an existing stand-in, since ps-server is not installed in
/usr/local/bin); the ExecStart line, expanded the way systemd does (%i, ${VAR} as one word,
$VAR split on spaces) with the example env files for instance 1, runs a stand-in ps-server
whose recorded argv must be shard 1 of EMBER_SHARDS with its own listen URL, metrics port
and data dir.

Dockerfiles: every COPY source exists in the repository; the CPU image's runtime packages
and every package of deploy/install-deps.sh exist in this Debian 12's package index; the
final stage runs as a non-root USER; the default command is one of the binaries the build
defines; every deploy/Dockerfile*.dockerignore excludes build trees.

Grafana (deploy/prometheus/grafana-ember.json): meant for import, so `__inputs` declares the
Prometheus data source the dashboard uses; every metric a panel queries exists, and every
label it groups by, matches on or shows in a legend is a label of that metric, judged against
real /metrics scrapes of a ps-server and of a ps-worker training against it (stopped once
scraped; `job` and `instance` are Prometheus's target labels).
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import urllib.request

from deploy_checks import SRC, check, finish, free_port

DEPLOY = os.path.join(SRC, "deploy")


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            k, _, v = line.partition("=")
            env[k.strip()] = v.strip().strip('"')
    return env


def unit_exec_start(path):
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    m = re.search(r"^ExecStart=(.*)$", text, re.M)
    return m.group(1).strip() if m else None


def expand(cmd, env, instance):
    """systemd's ExecStart rules: specifiers (%i) first; ${VAR} is one argument, $VAR alone
    is split on whitespace into several; an unset variable is empty."""
    cmd = cmd.replace("%i", instance)
    out = []
    for word in shlex.split(cmd):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            out.extend(env.get(m.group(1), "").split())
            continue
        out.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda g: env.get(g.group(1), ""), word))
    return out


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def test_systemd(tmp):
    sd = os.path.join(DEPLOY, "systemd")
    unit = os.path.join(sd, "ember-server@.service")
    stub = os.path.join(tmp, "ps-server")
    with open(stub, "w") as f:
        f.write('#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD"\n')
    os.chmod(stub, 0o755)
    if shutil.which("systemd-analyze"):
        with open(unit) as f:
            text = f.read().replace("/usr/local/bin/ps-server", stub)
        # EnvironmentFile paths need not exist for verify; the unit file name must keep '@'.
        u = os.path.join(tmp, "ember-server@.service")
        with open(u, "w") as f:
            f.write(text)
        shutil.copy(os.path.join(sd, "ember-servers.target"), tmp)
        inst = os.path.join(tmp, "ember-server@1.service")
        os.symlink(u, inst)
        r = subprocess.run(["systemd-analyze", "verify", "--man=no", inst, os.path.join(tmp, "ember-servers.target")],
                           capture_output=True, text=True, timeout=60)
        msgs = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
        check(r.returncode == 0 and not msgs, f"systemd-analyze verify: rc {r.returncode}: {msgs}")
        if r.returncode == 0 and not msgs:
            print("ok: systemd-analyze verify ember-server@1.service ember-servers.target: no findings")
    else:
        print("note: systemd-analyze not installed; unit syntax not verified")
    env = read_env(os.path.join(sd, "server.env"))
    env.update(read_env(os.path.join(sd, "server-1.env")))
    argv = expand(unit_exec_start(unit), env, "1")
    check(argv[0] == "/usr/local/bin/ps-server", f"ExecStart runs {argv[0]}")
    rec = os.path.join(tmp, "argv")
    r = subprocess.run([stub] + argv[1:], env={"RECORD": rec, "PATH": "/usr/bin:/bin"}, timeout=20)
    with open(rec) as f:
        got = f.read().split("\n")[:-1]
    check(flag(got, "--shard") == "1", f"instance 1 got --shard {flag(got, '--shard')}")
    check(flag(got, "--shards") == env["EMBER_SHARDS"], "--shards is not EMBER_SHARDS")
    check(flag(got, "--listen") == env["EMBER_LISTEN"], "--listen is not the instance's EMBER_LISTEN")
    check(flag(got, "--metrics-port") == env["EMBER_METRICS_PORT"], "--metrics-port is not the instance's")
    check(flag(got, "--metrics-bind") == env["EMBER_METRICS_BIND"], "--metrics-bind is not EMBER_METRICS_BIND")
    check(flag(got, "--data-dir") == "/var/lib/ember/shard-1", f"--data-dir {flag(got, '--data-dir')}")
    check("" not in got, f"an empty argument (unset variable in ExecStart?): {got}")
    env0 = read_env(os.path.join(sd, "server.env"))
    env0.update(read_env(os.path.join(sd, "server-0.env")))
    check(env0["EMBER_LISTEN"] != env["EMBER_LISTEN"] and env0["EMBER_METRICS_PORT"] != env["EMBER_METRICS_PORT"],
          "example shards 0 and 1 collide on a port")
    print("ok: ember-server@1 runs: " + " ".join(got))


def dockerfile_stages(path):
    stages = []
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((op, rest.strip()))
    return stages


def apt_exists(pkgs):
    r = subprocess.run(["apt-cache", "policy"] + pkgs, capture_output=True, text=True, timeout=60)
    missing = []
    blocks = re.split(r"^(?=\S+:$)", r.stdout, flags=re.M)
    found = {}
    for b in blocks:
        m = re.match(r"(\S+):\n", b)
        if m:
            cand = re.search(r"Candidate: (\S+)", b)
            found[m.group(1)] = cand and cand.group(1) != "(none)"
    for p in pkgs:
        if not found.get(p):
            missing.append(p)
    return missing


def test_docker():
    targets = set()
    for root, _, files in os.walk(SRC):
        if "/build" in root or "/.git" in root:
            continue
        if "CMakeLists.txt" in files:
            with open(os.path.join(root, "CMakeLists.txt")) as f:
                targets |= set(re.findall(r"ember_binary\((\S+)", f.read()))
    for name in ("Dockerfile", "Dockerfile.cuda"):
        path = os.path.join(DEPLOY, name)
        stages = dockerfile_stages(path)
        check(len(stages) >= 2, f"{name}: expected a build and a runtime stage")
        for st in stages:
            for op, rest in st:
                if op == "COPY" and not rest.startswith("--from"):
                    for src in shlex.split(rest)[:-1]:
                        check(os.path.exists(os.path.join(SRC, src)), f"{name}: COPY source {src} missing")
        final = stages[-1]
        users = [rest for op, rest in final if op == "USER"]
        check(users and not users[-1].startswith(("root", "0")), f"{name}: final stage must run as non-root")
        cmd = [rest for op, rest in final if op == "CMD"]
        if cmd:
            first = re.findall(r'"([^"]+)"', cmd[-1])[0]
            # a binary the build defines, or one of the documented binaries
            contract = {"ps-server", "ps-worker", "ps-bench", "ps-datagen"}
            check(first in targets | contract, f"{name}: CMD runs {first}, not a binary the build defines")
        ign = path + ".dockerignore"
        check(os.path.exists(ign) and "build*/" in open(ign).read(), f"{name}: no .dockerignore excluding build trees")
        if name == "Dockerfile":
            pkgs = []
            for op, rest in final:
                if op == "RUN" and "apt-get install" in rest:
                    seg = rest.split("apt-get install", 1)[1].split("&&")[0]
                    pkgs += [w for w in seg.split() if not w.startswith("-")]
            check(len(pkgs) > 5, f"{name}: runtime packages not found in the final stage")
            missing = apt_exists(pkgs)
            check(not missing, f"{name}: runtime packages not in Debian's index: {missing}")
            print(f"ok: {name}: {len(pkgs)} runtime packages exist in this Debian 12's index; non-root USER {users[-1]}")
        else:
            print(f"ok: {name}: stages, COPY sources, non-root USER {users[-1] if users else '?'} (Ubuntu packages not checkable here)")
    with open(os.path.join(DEPLOY, "install-deps.sh")) as f:
        text = f.read()
    block = text.split("PKGS=(", 1)[1].split("\n)", 1)[0]
    pkgs = [w for line in block.splitlines() for w in line.split("#", 1)[0].split()]
    missing = apt_exists(pkgs)
    check(not missing, f"install-deps.sh: packages not in Debian's index: {missing}")
    print(f"ok: all {len(pkgs)} packages of deploy/install-deps.sh exist in the index")


BIN = os.environ.get("EMBER_BIN", os.path.join(SRC, "build", "bin"))
TARGET_LABELS = {"job", "instance"}


def scrape(port, until, proc, want=""):
    """The first /metrics body (that contains want) before until, or None."""
    while time.time() < until and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                body = r.read().decode()
                if want in body:
                    return body
        except OSError:
            pass
        time.sleep(0.1)
    return None


def families(text):
    """metric name -> label names, from the Prometheus text format; a histogram's _bucket,
    _sum and _count are listed under their own names (as PromQL sees them)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{([^}]*)\})?\s", line)
        if m:
            labels = set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', m.group(3) or ""))
            out.setdefault(m.group(1), set()).update(labels)
    return out


def scrape_cluster(tmp):
    """Real /metrics of one ps-server and of one ps-worker training against it."""
    sport, smport, wmport = free_port(), free_port(), free_port()
    procs = []
    try:
        srv = subprocess.Popen([os.path.join(BIN, "ps-server"), "--listen", f"tcp://127.0.0.1:{sport}",
                                "--data-dir", os.path.join(tmp, "srv"), "--metrics-port", str(smport),
                                "--log-level", "warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(srv)
        data = os.path.join(tmp, "train.tsv")
        subprocess.run([os.path.join(BIN, "ps-datagen"), "--rows", "4000", "--out", data, "--log-level", "warn"],
                       check=True, timeout=60, capture_output=True)
        # Many epochs of small batches: training outlasts the scrapes (it is stopped after).
        wrk = subprocess.Popen([os.path.join(BIN, "ps-worker"), "--servers", f"tcp://127.0.0.1:{sport}",
                                "--train", data, "--epochs", "1000", "--batch", "64", "--threads", "1",
                                "--metrics-port", str(wmport), "--log-level", "warn"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(wrk)
        until = time.time() + 40
        wtext = scrape(wmport, until, wrk)
        # the worker's join, declare, pulls and pushes make every per-op server series appear
        stext = scrape(smport, until, srv, "ember_server_request_service_seconds_bucket{")
        if wtext is None or stext is None:
            check(False, f"no /metrics from {'ps-worker' if wtext is None else 'ps-server'} within 40 s")
            return {}
        return {**families(stext), **families(wtext)}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def promql_labels(expr):
    """Label names an expression relies on: grouping (by/without/on/ignoring/group_left/right)
    and matchers inside {...}."""
    used = set()
    for m in re.finditer(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        used |= {w.strip() for w in m.group(1).split(",") if w.strip()}
    for m in re.finditer(r"\{([^}]*)\}", expr):
        used |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(1)))
    return used


def test_grafana(tmp):
    path = os.path.join(DEPLOY, "prometheus", "grafana-ember.json")
    with open(path) as f:
        raw = f.read()
    dash = json.loads(raw)
    ins = dash.get("__inputs") or []
    ds = [i for i in ins if i.get("type") == "datasource" and i.get("pluginId") == "prometheus"]
    check(ds, "grafana-ember.json: __inputs declares no Prometheus data source (needed for import)")
    for i in ds:
        check("${" + i["name"] + "}" in raw, f"grafana-ember.json: input {i['name']} is declared but not used")
    fams = scrape_cluster(tmp)
    if not fams:
        return
    n = 0
    for p in dash["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"]
            metrics = [m for m in re.findall(r"\b((?:ember|process)_[a-z0-9_]+)", expr)]
            have = set(TARGET_LABELS)
            for m in metrics:
                check(m in fams, f"panel '{p['title']}': metric {m} is not served by ps-server or ps-worker")
                have |= fams.get(m, set())
            used = promql_labels(expr) | set(re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}",
                                                         t.get("legendFormat", "")))
            missing = used - have
            check(not missing, f"panel '{p['title']}': label(s) {sorted(missing)} not on {metrics}")
            n += 1
    print(f"ok: grafana-ember.json: __inputs declares {[i['name'] for i in ds]}; the {n} queries use only "
          f"metrics and labels a live ps-server and ps-worker serve")


def main():
    tmp = tempfile.mkdtemp(prefix="ember-deploy.")
    try:
        test_systemd(tmp)
        test_docker()
        test_grafana(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
