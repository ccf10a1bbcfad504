#!/usr/bin/env python3
"""server/'s file-level circles, bounded (issue 35: "no circle of more than 4 files in
server/"). The graph: one node per file of server/; an edge A -> B when A includes B (a
header), or when A calls or names a function that B defines. A header is a leaf unless it
includes another, so circles are the .c files that reach each other through calls. The
largest strongly connected component may have at most MAX_CIRCLE files; a wider circle fails
the test, naming its files.

The bound is issue 35's. At 397a940 the circle was 15 of 31 files; what broke it is in
docs/DESIGN.md ("server/'s layers"). A function reached through a pointer is no edge: the
coordinator's reply interface, the partition threads' finish hook and the memory bounds'
resume table are set by the file above, which names them; the file below calls them without
knowing whose they are.

`--print` prints the largest component and its edges instead of testing. A self-check plants
a circle of five files and requires it to be reported."""
import os
import re
import sys

SRC = os.environ.get("EMBER_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MAX_CIRCLE = 4

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
# A definition at column 0: a return type, the name, its parameters, then a body (not `;`).
DEFN = re.compile(r"^(?!static\b|typedef\b|extern\b|#)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(([^;{]*?)\)\s*\{",
                  re.M | re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def graph(files):
    """files: {name: text}. Returns {file: set(files it uses)}."""
    clean = {n: STRING.sub('""', COMMENT.sub(" ", t)) for n, t in files.items()}
    defined = {}
    for n, t in clean.items():
        if n.endswith(".c"):
            for m in DEFN.finditer(t):
                defined.setdefault(m.group(1), n)
    edges = {n: set() for n in files}
    for n, t in clean.items():
        for inc in INCLUDE.findall(files[n]):
            dst = os.path.basename(inc)
            if dst in files and dst != n:
                edges[n].add(dst)
        if n.endswith(".c"):
            for ident in set(IDENT.findall(t)):
                dst = defined.get(ident)
                if dst and dst != n:
                    edges[n].add(dst)
    return edges


def largest_scc(edges):
    """Tarjan's algorithm, iterative; the largest component, sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return max(out, key=len) if out else []


def server_files():
    d = os.path.join(SRC, "server")
    files = {}
    for name in sorted(os.listdir(d)):
        if name.endswith((".c", ".h")):
            with open(os.path.join(d, name), encoding="utf-8") as f:
                files[name] = f.read()
    return files


def self_check():
    """Five files calling round in a ring, plus bystanders: the ring must be found."""
    ring = {}
    for i in range(5):
        ring["f%d.c" % i] = "void fn%d(void) {\n  fn%d();\n}\n" % (i, (i + 1) % 5)
    ring["g.c"] = "int gx(int a) {\n  fn0();\n  return a;\n}\n"
    ring["h_int.h"] = "void hx(void);\n"
    ring["h.c"] = '#include "h_int.h"\nvoid hx(void) {\n  fn1();\n}\n'
    got = largest_scc(graph(ring))
    assert got == ["f0.c", "f1.c", "f2.c", "f3.c", "f4.c"], got
    # Headers that include each other in a circle are a circle too.
    hh = {"a.h": '#include "b.h"\n', "b.h": '#include "a.h"\n', "c.c": '#include "a.h"\n'}
    assert largest_scc(graph(hh)) == ["a.h", "b.h"], largest_scc(graph(hh))


def main():
    self_check()
    files = server_files()
    edges = graph(files)
    comp = largest_scc(edges)
    nmods = len(edges)
    if "--print" in sys.argv:
        print("files %d, largest circle %d (at most %d): %s"
              % (nmods, len(comp), MAX_CIRCLE, " ".join(comp)))
        for m in comp:
            print("  %s -> %s" % (m, " ".join(sorted(x for x in edges[m] if x in comp))))
        return 0
    if len(comp) > MAX_CIRCLE:
        print("server/: a circle of %d files (at most %d): %s"
              % (len(comp), MAX_CIRCLE, " ".join(comp)))
        return 1
    print("server/: largest circle %d of %d files (at most %d)" % (len(comp), nmods, MAX_CIRCLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
