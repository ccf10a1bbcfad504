#!/usr/bin/python3
"""test_lib_doc: docs/LIBRARY.md's Python and PyTorch snippets run as written against an
install: `cmake --install` into a temporary prefix P, real ps-servers on free ports, each
```python block run on its own by Debian's Python with PYTHONPATH=P/lib/python3/dist-packages
(no EMBER_LIBRARY: the package finds the library itself), the only change to its text the
servers' addresses (the docs' tcp://127.0.0.1:5555 and :5556 become the servers' ports); the
one-line `python3 -c` check of the install, with P the prefix. (The C block:
test_lib_install.py; python/examples/dlrm_criteo.py's command: test_dlrm_example.py.)"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import BUILD, SRC, Results, Servers  # noqa: E402

DOC_URLS = ["tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"]


def main():
    r = Results()
    with open(os.path.join(SRC, "docs", "LIBRARY.md")) as f:
        doc = f.read()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    r.check("docs/LIBRARY.md has its Python and PyTorch blocks",
            len(blocks) >= 2 and any("ember.torch" in b for b in blocks), f"{len(blocks)} blocks")
    oneliner = re.search(r"^(PYTHONPATH=P/\S+ /usr/bin/python3 -c .*)$", doc, re.M)
    r.check("docs/LIBRARY.md has the install's one-line check", oneliner is not None)
    # The tools run without a sanitizer build's preloaded ASan runtime (tests/lib/CMakeLists.txt).
    tool_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    p = tempfile.mkdtemp(prefix="ember-lib-doc.")
    try:
        rc = subprocess.run(["cmake", "--install", BUILD, "--prefix", p], capture_output=True,
                            text=True, timeout=120, env=tool_env)
        r.check("cmake --install", rc.returncode == 0, rc.stderr[-2000:])
        penv = {k: v for k, v in os.environ.items() if k not in ("EMBER_LIBRARY", "LD_LIBRARY_PATH")}
        penv["PYTHONPATH"] = os.path.join(p, "lib", "python3", "dist-packages")
        if oneliner:
            cmd = oneliner.group(1).replace("P/", p + "/")
            out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60,
                                 env=penv, cwd=p)
            r.check("the one-line check prints the version",
                    out.returncode == 0 and re.match(r"\d+\.\d+\.\d+$", out.stdout.strip()),
                    out.stdout + out.stderr[-1500:])
        with Servers(2) as s:
            for i, b in enumerate(blocks):
                for doc_url, url in zip(DOC_URLS, s.urls):
                    b = b.replace(doc_url, url)
                script = os.path.join(p, f"block{i}.py")
                with open(script, "w") as f:
                    f.write(b)
                out = subprocess.run(["/usr/bin/python3", script], capture_output=True, text=True,
                                     timeout=120, env=penv, cwd=p)
                first = b.strip().split("\n")[0]
                r.check(f"block {i} ({first}) runs", out.returncode == 0,
                        out.stdout[-500:] + out.stderr[-2000:])
    finally:
        shutil.rmtree(p, ignore_errors=True)
    r.finish()


if __name__ == "__main__":
    main()
