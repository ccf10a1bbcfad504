"""Every relative link in the repository's Markdown (README.md, docs/, bench/RESULTS*.md,
deploy/**/*.md, any other *.md) must name a file or folder of the repository: a link that
leaves the checkout (../shared/DESIGN.md) or names nothing is broken for a user's clone.

Usage: test_doc_links.py [ROOT]        check ROOT (default $EMBER_SRC); exit 1 on a broken link
       test_doc_links.py --self-test   the checker finds what it must in a planted tree

"In the repository" is what git tracks or would add (tracked + untracked not ignored) when ROOT
is a git checkout, so a link into a build folder fails too; without git, what exists under ROOT
outside build*/ and hidden folders. A link's #anchor into a Markdown file (or a pure #anchor, into
its own file) must be one of that file's headings, as GitHub names them (a section moved to
another page breaks the links into it). Links with a scheme (https:, mailto:) are not checked;
code spans and fenced code blocks are not links."""
import os
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); text may hold one level of brackets.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")


def repo_files(root):
    """The set of repository paths (files and their folders), relative to root, '/'-separated."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True, capture_output=True).stdout
        files = [f for f in out.decode().split("\0") if f]
        files = [f for f in files if os.path.lexists(os.path.join(root, f))]  # not deleted
        if files:
            return expand(files)
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for d, subdirs, names in os.walk(root):
        subdirs[:] = [s for s in subdirs if not s.startswith(".") and not s.startswith("build")]
        files += [os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/") for n in names]
    return expand(files)


def expand(files):
    paths = set(files)
    for f in files:
        parts = f.split("/")
        for i in range(1, len(parts)):
            paths.add("/".join(parts[:i]))
    return paths


def links(text):
    """(line number, target) of every link outside code."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = CODE_SPAN.sub("", line)
        for m in INLINE.finditer(line):
            yield n, m.group(1)
        m = REFDEF.match(line)
        if m:
            yield n, m.group(1)


def anchors(text):
    """The anchors GitHub gives the headings of a Markdown text: lower case, punctuation but - and
    _ dropped, spaces to -, the n-th repeat of a name suffixed -n."""
    out, seen, fenced = set(), {}, False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if not m:
            continue
        h = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link: its text
        h = re.sub(r"<[^>]+>", "", h).lower()
        h = re.sub(r"[^\w\- ]", "", h).replace(" ", "-")
        n = seen.get(h, 0)
        seen[h] = n + 1
        out.add(h if n == 0 else f"{h}-{n}")
    return out


def check(root):
    """A list of 'file:line: target: why' for every broken link under root."""
    root = os.path.realpath(root)
    paths = repo_files(root)
    bad = []
    heads = {}

    def has_anchor(md, anchor):
        if md not in heads:
            with open(os.path.join(root, md), encoding="utf-8") as f:
                heads[md] = anchors(f.read())
        return anchor in heads[md]

    for md in sorted(p for p in paths if p.endswith(".md")):
        with open(os.path.join(root, md), encoding="utf-8") as f:
            text = f.read()
        for n, target in links(text):
            t = target[1:-1] if target.startswith("<") else target
            if SCHEME.match(t) or not t:
                continue
            anchor = t.split("#", 1)[1] if "#" in t else None
            if t.startswith("#"):
                if not has_anchor(md, anchor):
                    bad.append(f"{md}:{n}: {target}: no such heading in this file")
                continue
            t = t.split("#", 1)[0].split("?", 1)[0]
            if t.startswith("/"):  # GitHub resolves /x against the repository root
                rel = os.path.normpath(t.lstrip("/"))
            else:
                rel = os.path.normpath(os.path.join(os.path.dirname(md), t))
            rel = rel.replace(os.sep, "/")
            if rel == ".":
                continue
            if rel == ".." or rel.startswith("../"):
                bad.append(f"{md}:{n}: {target}: points outside the repository")
            elif rel not in paths:
                bad.append(f"{md}:{n}: {target}: no such file in the repository")
            elif anchor and rel.endswith(".md") and not has_anchor(rel, anchor):
                bad.append(f"{md}:{n}: {target}: no such heading in {rel}")
    return bad


def self_test():
    """Plant good and bad links in a tree without git; the checker must flag the bad ones only."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        os.makedirs(os.path.join(tmp, "build"))
        for p in ("docs/DESIGN.md", "docs/PROTOCOL.md", "src.c", "build/out.md"):
            with open(os.path.join(tmp, p), "w") as f:
                f.write("# x\n\n## Checkpoints\n\n### `ps-server --serve`: a *served* model\n")
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write("good [d](docs/DESIGN.md) [p](docs/PROTOCOL.md#checkpoints) [s](<src.c>)\n"
                    "[web](https://example.com) [a](#set-up) ![dir](docs/) [root](/src.c)\n"
                    "`[in code](nope.md)`\n```\n[fenced](nope.md)\n```\n"
                    "bad [shared](../shared/DESIGN.md) [gone](server/PROTOCOL.md)\n"
                    "[built](build/out.md)\n[ref]: missing.md\n"
                    "## Set-up\n[moved](docs/PROTOCOL.md#troubleshooting) [own](#layout)\n"
                    "[code](docs/PROTOCOL.md#ps-server---serve-a-served-model) [c](src.c#L3)\n")
        with open(os.path.join(tmp, "docs/DESIGN.md"), "w") as f:
            f.write("[up](../README.md) [here](PROTOCOL.md) [out](../../x.md \"t\")\n")
        got = sorted(check(tmp))
    want = sorted([
        "README.md:7: ../shared/DESIGN.md: points outside the repository",
        "README.md:7: server/PROTOCOL.md: no such file in the repository",
        "README.md:8: build/out.md: no such file in the repository",
        "README.md:9: missing.md: no such file in the repository",
        "README.md:11: docs/PROTOCOL.md#troubleshooting: no such heading in docs/PROTOCOL.md",
        "README.md:11: #layout: no such heading in this file",
        "docs/DESIGN.md:1: ../../x.md: points outside the repository",
    ])
    if got != want:
        print("FAIL: self-test\n got:  %s\n want: %s" % (got, want))
        return 1
    print("ok: self-test: %d planted broken links and anchors found, no good link flagged" % len(want))
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EMBER_SRC")
    if not root:
        print("usage: test_doc_links.py [ROOT] (or EMBER_SRC)", file=sys.stderr)
        return 2
    bad = check(root)
    for b in bad:
        print(b)
    if bad:
        print(f"FAIL: {len(bad)} broken Markdown link(s): link only files inside the repository, "
              "and anchors that are headings of their file")
        return 1
    n = sum(1 for p in repo_files(os.path.realpath(root)) if p.endswith(".md"))
    print(f"ok: every relative link of {n} Markdown files names a file of the repository "
          "(and a heading of it, for an #anchor)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
