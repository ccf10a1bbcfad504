#!/usr/bin/python3
"""test_lib_install: `cmake --install` into a temporary prefix P puts libember.so.0 (soname,
versioned), include/ember/ember.h, lib/pkgconfig/ember.pc and the Python package under
P/lib/python3/dist-packages/ember; the C example of docs/LIBRARY.md builds with
`pkg-config --cflags --libs ember` alone and runs against a real ps-server (its SGD arithmetic
checked); `import ember` works from the prefix with Debian's Python, finding the library by
itself; the library exports only ember_* symbols."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import BUILD, SRC, Results, Servers  # noqa: E402


def main():
    r = Results()
    p = tempfile.mkdtemp(prefix="ember-lib-install.")
    # The tools run without a sanitizer build's preloaded ASan runtime (tests/lib/CMakeLists.txt);
    # only the example and Python, which load the instrumented library, keep it.
    tool_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    try:
        rc = subprocess.run(["cmake", "--install", BUILD, "--prefix", p], capture_output=True,
                            text=True, timeout=120, env=tool_env)
        r.check("cmake --install", rc.returncode == 0, rc.stderr[-2000:])
        lib = os.path.join(p, "lib")
        real = os.path.realpath(os.path.join(lib, "libember.so"))
        r.check("libember.so -> libember.so.0 -> libember.so.0.1.0",
                os.path.islink(os.path.join(lib, "libember.so")) and
                os.path.islink(os.path.join(lib, "libember.so.0")) and
                re.match(r"libember\.so\.0\.\d+\.\d+$", os.path.basename(real)) is not None, real)
        dyn = subprocess.run(["objdump", "-p", real], capture_output=True, text=True, env=tool_env).stdout
        r.check("soname libember.so.0", re.search(r"SONAME\s+libember\.so\.0\n", dyn) is not None)
        syms = subprocess.run(["nm", "-D", "--defined-only", real], capture_output=True,
                              text=True, env=tool_env).stdout.split("\n")
        names = [ln.split()[-1].split("@")[0] for ln in syms if len(ln.split()) == 3]
        stray = [n for n in names if not re.match(r"ember_[a-z]", n) and n != "EMBER_0"]
        r.check("exports only ember_*", names and not stray, " ".join(stray[:10]))
        r.check("include/ember/ember.h", os.path.exists(os.path.join(p, "include", "ember", "ember.h")))

        # The C example of docs/LIBRARY.md, built with pkg-config alone.
        with open(os.path.join(SRC, "docs", "LIBRARY.md")) as f:
            m = re.search(r"```c\n(/\* pull_push\.c.*?)```", f.read(), re.S)
        r.check("docs/LIBRARY.md has the C example", m is not None)
        src = os.path.join(p, "pull_push.c")
        with open(src, "w") as f:
            f.write(m.group(1))
        env = dict(tool_env, PKG_CONFIG_PATH=os.path.join(lib, "pkgconfig"))
        pc = subprocess.run(["pkg-config", "--cflags", "--libs", "ember"], capture_output=True,
                            text=True, env=env, timeout=30)
        r.check("pkg-config --cflags --libs ember", pc.returncode == 0 and "-lember" in pc.stdout,
                pc.stdout + pc.stderr)
        exe = os.path.join(p, "pull_push")
        cc = subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", src, *pc.stdout.split(), "-o", exe],
                            capture_output=True, text=True, timeout=120, env=tool_env)
        r.check("the example builds", cc.returncode == 0, cc.stderr[-2000:])
        run_env = dict(os.environ, LD_LIBRARY_PATH=lib)
        if os.environ.get("EMBER_ASAN_PRELOAD"):  # a sanitizer build: leak-check the C example
            run_env["ASAN_OPTIONS"] = "detect_leaks=1"
        with Servers(1) as s:
            out = subprocess.run([exe, s.urls[0]], capture_output=True, text=True, timeout=60,
                                 env=run_env)
            r.check("the example runs", out.returncode == 0, out.stderr)
            got = re.findall(r"key (\d+): (\S+) -> (\S+)", out.stdout)
            # SGD lr 0.5, gradient 1 per occurrence: key 7 twice (summed), key 8 once.
            want = {"7": -1.0, "8": -0.5}
            r.check("the example's rows follow SGD",
                    len(got) == 3 and all(abs(float(b) - float(a) - want[k]) < 1e-5
                                          for k, a, b in got), out.stdout)
            bad = subprocess.run([exe, "tcp://127.0.0.1:99999"], capture_output=True, text=True,
                                 timeout=60, env=run_env)
            r.check("a bad URL is one line naming it, exit 1",
                    bad.returncode == 1 and "tcp://127.0.0.1:99999" in bad.stderr and
                    bad.stderr.count("\n") == 1, bad.stderr)

            # Python from the prefix: no EMBER_LIBRARY, the package finds P/lib itself.
            penv = {k: v for k, v in os.environ.items() if k not in ("EMBER_LIBRARY", "LD_LIBRARY_PATH")}
            penv["PYTHONPATH"] = os.path.join(lib, "python3", "dist-packages")
            code = ("import ember, numpy as np, os\n"
                    "assert os.path.dirname(ember.__file__).startswith(%r)\n"
                    "c = ember.Client([%r], timeout_ms=10000)\n"
                    "t = c.table('example', dim=4, id=42, optimizer='sgd', lr=0.5, init=0.01)\n"
                    "print(t.pull(np.array([8], np.uint64))[0, 0])\n" % (p, s.urls[0]))
            py = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                                timeout=60, env=penv)
            r.check("import ember from the prefix, attach to the C example's table",
                    py.returncode == 0 and len(got) == 3 and
                    abs(float(py.stdout.strip() or "nan") - float(got[1][2])) < 1e-5,
                    py.stdout + py.stderr[-1500:])
    finally:
        shutil.rmtree(p, ignore_errors=True)
    r.finish()


if __name__ == "__main__":
    main()
