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
"""
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from deploy_checks import SRC, check, finish

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
            # a binary the build defines, or one of DESIGN.md's contract binaries (being written)
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


def main():
    tmp = tempfile.mkdtemp(prefix="ember-deploy.")
    try:
        test_systemd(tmp)
        test_docker()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
