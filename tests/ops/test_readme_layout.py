"""README.md's "Layout" table is the map of the repository: its first column must name every
top-level folder (`NAME/`) and every doc (`docs/NAME.md`), and nothing that does not exist. And
the README's set-up stays the two commands, `bash deploy/quickstart.sh` (the main job) and
`bash deploy/test.sh` (the tests, which .ci/run runs: CI runs the README's test command).

Usage: test_readme_layout.py [ROOT]   check ROOT (default $EMBER_SRC); exit 1 on a missing or
                                      stale row

A top-level folder is one git tracks (or would add) a file under (hidden ones such as .ci/ included) when ROOT
is a git checkout; without git, every folder under ROOT but build*/ and hidden ones."""
import os
import re
import subprocess
import sys


def top_folders(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True,
                             capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
        if files:
            return {f.split("/", 1)[0] for f in files
                    if "/" in f and os.path.isdir(os.path.join(root, f.split("/", 1)[0]))}
    except (OSError, subprocess.CalledProcessError):
        pass
    return {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))
            and not d.startswith(".") and not d.startswith("build")}


def layout_rows(readme):
    """The code span of the first column of every row of the table under '## Layout'."""
    m = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    if not m:
        return None
    rows = []
    for line in m.group(1).splitlines():
        cell = re.match(r"^\|\s*`([^`]+)`\s*\|", line)
        if cell:
            rows.append(cell.group(1))
    return rows


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("EMBER_SRC")
    if not root:
        print("usage: test_readme_layout.py [ROOT] (or EMBER_SRC)", file=sys.stderr)
        return 2
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    rows = layout_rows(readme)
    if rows is None:
        print("FAIL: README.md has no '## Layout' section")
        return 1
    want = {d + "/" for d in top_folders(root)}
    want |= {"docs/" + d for d in os.listdir(os.path.join(root, "docs")) if d.endswith(".md")}
    bad = [f"README.md's Layout table does not list `{w}`" for w in sorted(want - set(rows))]
    bad += [f"README.md's Layout table lists `{r}`, which does not exist"
            for r in rows if not os.path.exists(os.path.join(root, r.rstrip("/")))]
    bad += [f"README.md's Layout table lists `{r}` twice" for r in sorted(set(rows))
            if rows.count(r) > 1]
    lines = readme.splitlines()
    for cmd in ("bash deploy/quickstart.sh", "bash deploy/test.sh"):
        if cmd not in lines:
            bad.append(f"README.md's set-up has no line `{cmd}`")
    with open(os.path.join(root, ".ci", "run"), encoding="utf-8") as f:
        if "bash deploy/test.sh" not in f.read().splitlines():
            bad.append(".ci/run does not run the README's test command `bash deploy/test.sh`")
    for b in bad:
        print(b)
    if bad:
        print(f"FAIL: {len(bad)} problem(s) in README.md: its Layout table has one row per "
              "top-level folder and per docs/*.md; its set-up is the two commands")
        return 1
    print(f"ok: README.md's Layout table lists all {len(want)} top-level folders and docs; "
          "its set-up is the two commands")
    return 0


if __name__ == "__main__":
    sys.exit(main())
