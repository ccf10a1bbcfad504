#!/usr/bin/env bash
# Regenerates the README's binary reference from each binary's --help output, so the README
# shows the options exactly as the binaries print them.
# Usage: deploy/gen-readme-ref.sh [BIN_DIR [README]]   (README defaults to the repository's;
# tests/ops/test_readme_ref.sh regenerates a copy and compares)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin}"
readme="${2:-$root/README.md}"
ref="$(mktemp)"
for b in ps-server ps-worker ps-datagen ps-bench ps-convert ps-keygen ps-predict ps-export ps-reshard; do
  [ -x "$bin/$b" ] || continue
  { echo; echo "### \`$b\`"; echo; echo '```'; "$bin/$b" --help; echo '```'; } >> "$ref"
done
{ echo; echo "### \`deploy/ember-local\`"; echo; echo '```'; "$root/deploy/ember-local" --help; echo '```'; } >> "$ref"
/usr/bin/python3 - "$readme" "$ref" <<'PY'
import sys
readme, ref = sys.argv[1], open(sys.argv[2]).read()
s = open(readme).read()
a = s.index("<!-- BEGIN BINARY REFERENCE")
a = s.index("\n", a) + 1
b = s.index("<!-- END BINARY REFERENCE -->")
open(readme, "w").write(s[:a] + ref.lstrip("\n") + "\n" + s[b:])
PY
rm -f "$ref"
