#!/usr/bin/env python3
"""The layering of docs/DESIGN.md ("Layering and module map"), enforced: every `#include "x"`
of a product source file must name a header of its own folder or of a folder that its row
may use, and nothing outside tests/ includes from tests/. Fails with one line per crossing.
A self-check plants two crossings in a copy of the rules and requires both to be reported."""
import os
import re
import subprocess
import sys

SRC = os.environ.get("EMBER_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# folder -> folders it may include from (its own and its subfolders always).
MAY_USE = {
    "common": [],
    "proto": ["common"],
    "embedding": ["common"],
    "server": ["embedding", "proto", "common"],
    "kernels": ["common"],
    "worker/client": ["proto", "common"],
    "worker/data": ["common"],
    "worker/model": ["kernels", "common"],
    "worker/collectives": ["common"],
    "worker/predict": ["worker/client", "worker/data", "worker/model", "embedding", "kernels",
                       "common"],
    "worker/lib": ["worker/client", "worker/data", "proto", "common"],
    "worker": ["worker/client", "worker/data", "worker/model", "worker/collectives", "kernels",
               "proto", "common"],
    "bench": ["worker", "embedding", "server", "kernels", "proto", "common"],
}
# Headers the build generates (not in the tree) and the folder that owns them.
GENERATED = {"ember.pb-c.h": "proto"}
EXTS = (".c", ".h", ".cc", ".cu")


def tracked():
    try:
        out = subprocess.run(["git", "-C", SRC, "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = [os.path.relpath(os.path.join(d, f), SRC) for d, _, fs in os.walk(SRC) for f in fs]
    return [p for p in out if p.endswith(EXTS)]


def owner(path):
    """The MAY_USE row of a path: its longest matching folder prefix, or None."""
    best = None
    for folder in MAY_USE:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def crossings(files, rules, texts=None):
    by_name = {}
    for p in files:
        by_name.setdefault(os.path.basename(p), []).append(p)
    bad = []
    for p in files:
        row = None
        for folder in rules:
            if (p.startswith(folder + "/")) and (row is None or len(folder) > len(row)):
                row = folder
        if row is None or p.startswith("tests/"):
            continue
        allowed = [row] + rules[row]
        try:
            text = (texts or {}).get(p) or open(os.path.join(SRC, p), errors="replace").read()
        except OSError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            name = os.path.basename(m.group(1))
            if name in GENERATED:
                homes = [GENERATED[name] + "/" + name]
            else:
                same = os.path.join(os.path.dirname(p), m.group(1))
                homes = [same] if same in files else by_name.get(name, [])
            if not homes:
                continue  # a system or third-party header
            if any(h.startswith("tests/") for h in homes) and not any(
                    not h.startswith("tests/") for h in homes):
                bad.append(f"{p}:{n}: includes {m.group(1)} from tests/")
                continue
            if not any(any(h == a or h.startswith(a + "/") for a in allowed) for h in homes):
                bad.append(f"{p}:{n}: {row}/ may not include {m.group(1)} ({homes[0]})")
    return bad


def main():
    files = tracked()
    # Self-check: with server/ denied embedding/ and a product file including from tests/,
    # both crossings must be found.
    rules = dict(MAY_USE)
    rules["server"] = ["proto", "common"]
    planted = crossings(files, rules)
    if not any(b.startswith("server/") and "ps_store.h" in b for b in planted):
        print("FAIL self-check: a server/ include of ps_store.h was not reported")
        return 1
    fake = "kernels/cuda/layering_selfcheck.c"
    planted = crossings(files + [fake], MAY_USE, {fake: '#include "cuda_test_util.h"\n'})
    if f"{fake}:1: includes cuda_test_util.h from tests/" not in planted:
        print("FAIL self-check: a product include from tests/ was not reported:", planted)
        return 1
    bad = crossings(files, MAY_USE)
    for b in bad:
        print("FAIL", b)
    print(f"{0 if bad else 1} passed, {1 if bad else 0} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
