#!/usr/bin/env python3
"""The layering of docs/DESIGN.md ("Layering and module map"), enforced: every `#include "x"`
of a product source file must name a header of its own folder or of a folder that its row
may use, every product source file outside tests/ has a row, nothing outside tests/ includes
from tests/, and no row under worker/ may use embedding/ (Worker -/-> Embedding). Fails with
one line per crossing. A self-check plants crossings (server/ and worker/ including the
store's header, a product file including from tests/, a file with no row) and requires each
to be reported."""
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
    "client": ["proto", "common"],
    "client/lib": ["client", "worker/data", "proto", "common"],
    "worker/data": ["common"],
    "worker/model": ["kernels", "common"],
    "worker/collectives": ["common"],
    "worker": ["client", "worker/data", "worker/model", "worker/collectives", "kernels",
               "proto", "common"],
    "tools": ["client", "worker/data", "worker/model", "embedding", "kernels", "proto",
              "common"],
    "bench": ["client", "worker", "tools", "embedding", "server", "kernels", "proto", "common"],
}
# Worker -/-> Embedding: the trainer reaches the store only through the client and a server.
NEVER = {"worker": "embedding"}
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
        if p.startswith("tests/"):
            continue
        if row is None:
            bad.append(f"{p}: no row of the layering table owns its folder")
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
    # The table itself: no worker/ row may use embedding/.
    for row, uses in MAY_USE.items():
        for top, banned in NEVER.items():
            if (row == top or row.startswith(top + "/")) and any(
                    u == banned or u.startswith(banned + "/") for u in uses):
                print(f"FAIL {row}/ may use {banned}/ in MAY_USE: {top} -/-> {banned}")
                return 1
    # Self-check: with server/ denied embedding/, a server/ include of the store is found; a
    # worker/ file including the store's header, a product file including from tests/ and a
    # file in a folder of no row are each reported.
    rules = dict(MAY_USE)
    rules["server"] = ["proto", "common"]
    planted = crossings(files, rules)
    if not any(b.startswith("server/") and "ps_store.h" in b for b in planted):
        print("FAIL self-check: a server/ include of ps_store.h was not reported")
        return 1
    fakes = {"kernels/cuda/layering_selfcheck.c": '#include "cuda_test_util.h"\n',
             "worker/layering_selfcheck.c": '#include "ps_store.h"\n',
             "nowhere/layering_selfcheck.c": "\n"}
    planted = crossings(files + list(fakes), MAY_USE, fakes)
    for want in ("kernels/cuda/layering_selfcheck.c:1: includes cuda_test_util.h from tests/",
                 "worker/layering_selfcheck.c:1: worker/ may not include ps_store.h",
                 "nowhere/layering_selfcheck.c: no row"):
        if not any(b.startswith(want) for b in planted):
            print("FAIL self-check: not reported:", want, planted)
            return 1
    bad = crossings(files, MAY_USE)
    for b in bad:
        print("FAIL", b)
    print(f"{0 if bad else 1} passed, {1 if bad else 0} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
