#!/usr/bin/python3
"""test_quickstart: deploy/quickstart.sh's build step, in a copy of the script in a temporary
tree whose commands are stubs (cmake, nvidia-smi, install-deps.sh, ps-datagen, ember-local):
it names the build's log before building and shows the build's progress while it runs (the
stub build waits, bounded, until the test has read its 50% line); the log gets every line of
the build; CUDA is built only where `nvidia-smi -L` lists a GPU (-DEMBER_CUDA=OFF without one
though nvcc is on PATH, AUTO with one) or EMBER_CUDA says so; a failing build exits 1 naming
the log. The real build and training: the README's quickstart, not this test."""
import os
import shutil
import subprocess
import tempfile
import threading
import time

from deploy_checks import SRC, check, finish

STUB_CMAKE = r"""#!/bin/bash
# Records each call; the build prints make-style progress, waiting at 50% (up to 30 s) for
# the test's go-ahead file, which comes once the test saw the 50% line: without it (progress
# held back until the build ends) the build fails.
echo "$*" >> "$STUB_DIR/cmake.args"
[ "$1" = --build ] || exit 0
echo "[  5%] Building C object a.o"
echo "[ 50%] Building C object b.o"
for i in $(seq 300); do [ -e "$STUB_DIR/go" ] && break; sleep 0.1; done
[ -e "$STUB_DIR/go" ] || { echo "stub build: no go-ahead"; exit 3; }
echo "a compiler note, only for the log"
echo "[100%] Built target ps-server"
exit "${STUB_BUILD_RC:-0}"
"""
STUB_ARGFILE = r"""#!/bin/bash
# Writes FILE's JSON where the flag $FLAG points.
while [ $# -gt 0 ]; do [ "$1" = "%s" ] && out="$2"; shift; done
echo '%s' > "$out"
"""
SUMMARY = '{"auc": 0.8, "logloss": 0.4, "accuracy": 0.8, "samples": 10, "samples_per_s": 5, "bad_lines": 0}'


def stub(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def run(tree, stubs, gpu, env_extra):
    """quickstart.sh in tree; returns (rc, stdout, stderr, the configure call's args)."""
    for f in ("cmake.args", "go"):
        if os.path.exists(os.path.join(stubs, f)):
            os.remove(os.path.join(stubs, f))
    stub(os.path.join(stubs, "nvidia-smi"), f"#!/bin/bash\n{'echo GPU 0: H100' if gpu else 'exit 9'}\n")
    env = {k: v for k, v in os.environ.items() if k != "EMBER_CUDA"}
    env.update(PATH=stubs + ":" + env["PATH"], STUB_DIR=stubs, EMBER_JOBS="2", **env_extra)
    p = subprocess.Popen(["bash", os.path.join(tree, "deploy", "quickstart.sh")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=tree)
    out, err = [], []

    def read(f, acc):  # line by line, so that the wait below sees each as it comes
        for line in f:
            acc.append(line)
    readers = [threading.Thread(target=read, args=(f, acc), daemon=True)
               for f, acc in ((p.stdout, out), (p.stderr, err))]
    for t in readers:
        t.start()
    # While the stub build holds at 50%, the terminal must already show it.
    deadline = time.time() + 60
    while not any("built 50%" in ln for ln in out) and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    check(any("built 50%" in ln for ln in out),
          f"no progress line while the build runs: {''.join(out)}")
    open(os.path.join(stubs, "go"), "w").close()
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    for t in readers:
        t.join(timeout=10)
    with open(os.path.join(stubs, "cmake.args")) as f:
        conf = f.readline().strip()
    return p.returncode, "".join(out), "".join(err), conf


def main():
    d = tempfile.mkdtemp(prefix="ember-quickstart.")
    try:
        tree, stubs = os.path.join(d, "tree"), os.path.join(d, "stubs")
        os.makedirs(os.path.join(tree, "deploy"))
        shutil.copy(os.path.join(SRC, "deploy", "quickstart.sh"), os.path.join(tree, "deploy"))
        stub(os.path.join(tree, "deploy", "install-deps.sh"), "echo install-deps: stub\n")
        stub(os.path.join(tree, "deploy", "ember-local"), STUB_ARGFILE % ("--summary", SUMMARY))
        stub(os.path.join(tree, "build", "bin", "ps-datagen"), STUB_ARGFILE % ("--json", '{"test_auc": 0.81}'))
        stub(os.path.join(stubs, "cmake"), STUB_CMAKE)
        stub(os.path.join(stubs, "nvcc"), "#!/bin/bash\nexit 0\n")  # a toolkit, no GPU
        log = os.path.join(tree, "build.quickstart.log")

        rc, out, err, conf = run(tree, stubs, gpu=False, env_extra={})
        check(rc == 0, f"quickstart: rc {rc}: {err[-1000:]}")
        check("-DEMBER_CUDA=OFF" in conf, f"nvcc but no GPU: configured with `{conf}`, not -DEMBER_CUDA=OFF")
        build_line = [ln for ln in out.split("\n") if ln.startswith("== building")]
        check(build_line and log in build_line[0], f"the build's line does not name {log}: {build_line}")
        check("built 5%" in out and "built 100%" in out and "compiler note" not in out,
              f"progress: {out}")
        with open(log) as f:
            text = f.read()
        check("compiler note" in text and "[100%] Built target" in text, f"the log: {text}")
        check("== test AUC 0.8000" in out, f"the run's last line: {out[-300:]}")

        rc, out, err, conf = run(tree, stubs, gpu=True, env_extra={})
        check(rc == 0 and "-DEMBER_CUDA=AUTO" in conf, f"with a GPU: rc {rc}, configured with `{conf}`")
        rc, out, err, conf = run(tree, stubs, gpu=False, env_extra={"EMBER_CUDA": "ON"})
        check(rc == 0 and "-DEMBER_CUDA=ON" in conf, f"EMBER_CUDA=ON: rc {rc}, configured with `{conf}`")

        rc, out, err, conf = run(tree, stubs, gpu=False, env_extra={"STUB_BUILD_RC": "2"})
        check(rc == 1 and f"the build failed, its output: {log}" in err and "== generating" not in out,
              f"a failed build: rc {rc}, stderr {err[-500:]}")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    finish("ok: quickstart names its build log, shows progress, builds CUDA only with a GPU")


if __name__ == "__main__":
    main()
