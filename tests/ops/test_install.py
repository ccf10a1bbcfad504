#!/usr/bin/python3
"""test_install: `cmake --install BUILD --prefix P` into a temporary prefix puts every binary of
the build but the tests' (each an ember_binary() of the tree's CMake files) and
deploy/ember-local in P/bin, where they run (--help of each; ember-local finds ps-server and
ps-worker beside itself), and the documents in P/share/doc/ember with every file of the clone's
docs/examples and docs/schemas; the systemd unit runs ps-server from, and documents itself by,
the paths of the default prefix."""
import os
import re
import shutil
import subprocess
import tempfile

from deploy_checks import SRC, check, finish

BIN = os.environ.get("EMBER_BIN", os.path.join(SRC, "build", "bin"))
BUILD = os.path.dirname(os.path.abspath(BIN))


def cache(name):
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        m = re.search(rf"^{name}:\w+=(.*)$", f.read(), re.M)
    return m.group(1) if m else None


def tracked(under):
    """The files of the clone under `under` (git's, so a build dir or stray file counts not)."""
    r = subprocess.run(["git", "-C", SRC, "ls-files", "-z", under], capture_output=True,
                       timeout=30)
    check(r.returncode == 0, f"git ls-files {under}: rc {r.returncode}")
    return [f for f in r.stdout.decode().split("\0") if f]


def product_binaries():
    """The ember_binary() names of the tree outside tests/ that this build made (CMakeLists.txt
    and included *.cmake files)."""
    names = []
    for f in tracked("."):
        if not (f.endswith(".cmake") or os.path.basename(f) == "CMakeLists.txt") or f.startswith("tests/"):
            continue
        with open(os.path.join(SRC, f)) as fh:
            names += re.findall(r"^\s*ember_binary\(\s*([\w-]+)", fh.read(), re.M)
    check("ps-predict" in names, f"no ember_binary(ps-predict) found in the tree: {names}")
    return [n for n in names if os.path.exists(os.path.join(BIN, n))]


def main():
    p = tempfile.mkdtemp(prefix="ember-install.")
    try:
        r = subprocess.run(["cmake", "--install", BUILD, "--prefix", p], capture_output=True,
                           text=True, timeout=120)
        check(r.returncode == 0, f"cmake --install: rc {r.returncode}: {r.stderr[-2000:]}")
        bins = product_binaries()
        for b in ["ps-server", "ps-worker", "ps-convert", "ps-datagen", "ps-bench", "ps-keygen",
                  "ps-predict", "ps-export", "ps-reshard", "ps-stats"]:
            check(b in bins, f"{BIN}/{b}: not built, or no longer an ember_binary()")
        for b in bins + ["ember-local"]:
            check(os.access(os.path.join(p, "bin", b), os.X_OK), f"{p}/bin/{b} not installed")
        check(not os.path.exists(os.path.join(p, "bin", "eval_tool")), "a test tool was installed")
        # The library, its header, pkg-config file and Python package: tests/lib/test_lib_install.py.
        check(os.path.exists(os.path.join(p, "include", "ember", "ember.h")), "include/ember/ember.h not installed")
        for b in [b for b in bins if os.path.exists(os.path.join(p, "bin", b))]:
            r = subprocess.run([os.path.join(p, "bin", b), "--help"], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0 and r.stdout.startswith(f"Usage: {b}"),
                  f"{p}/bin/{b} --help: rc {r.returncode} {r.stdout[:200]} {r.stderr[-500:]}")
        # ember-local, installed, finds its binaries beside itself (no EMBER_BIN, no --bin):
        # one real server and a worker that only prints its --help.
        env = {k: v for k, v in os.environ.items() if k != "EMBER_BIN"}
        r = subprocess.run([os.path.join(p, "bin", "ember-local"), "--", "--help"], capture_output=True,
                           text=True, timeout=60, env=env, cwd=p)
        check(r.returncode == 0 and "Usage: ps-worker" in r.stdout,
              f"installed ember-local: rc {r.returncode}: {r.stderr[-1000:]}")
        docs = os.path.join(p, "share", "doc", "ember")
        for d in ["README.md", "OPERATIONS.md"]:
            check(os.path.exists(os.path.join(docs, d)), f"{docs}/{d} not installed")
        # What the docs link to and run, from the clone: the examples and the schemas.
        extra = tracked("docs/examples") + tracked("docs/schemas")
        check(any(f.endswith(".py") for f in extra) and any(f.endswith(".json") for f in extra),
              f"docs/examples and docs/schemas: {extra}")
        for f in extra:
            check(os.path.isfile(os.path.join(docs, os.path.relpath(f, "docs"))), f"{docs}: {f} not installed")
        check(os.path.exists(os.path.join(p, "share", "ember", "systemd", "ember-server@.service")),
              "the systemd unit is not installed under share/ember/systemd")
        # The unit expects the default prefix's layout.
        prefix = cache("CMAKE_INSTALL_PREFIX") or "/usr/local"
        with open(os.path.join(SRC, "deploy", "systemd", "ember-server@.service")) as f:
            unit = f.read()
        m = re.search(r"^ExecStart=(\S+)", unit, re.M)
        check(m and m.group(1) == f"{prefix}/bin/ps-server",
              f"the unit runs {m and m.group(1)}, cmake --install puts ps-server in {prefix}/bin")
        for doc in re.findall(r"file://(\S+)", unit):
            rel = os.path.relpath(doc, prefix)
            check(os.path.exists(os.path.join(p, rel)), f"the unit's Documentation {doc} is not installed there")
    finally:
        shutil.rmtree(p, ignore_errors=True)
    finish(f"ok: cmake --install puts every binary, ember-local, the docs, examples and schemas "
           f"where the unit expects them")


if __name__ == "__main__":
    main()
