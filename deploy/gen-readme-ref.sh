#!/usr/bin/env bash
# Regenerates the README's binary reference from each binary's --help output, so the README
# shows the options exactly as the binaries print them. Usage: deploy/gen-readme-ref.sh [BIN_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin}"
ref="$(mktemp)"
for b in ps-server ps-worker ps-datagen ps-bench ps-convert; do
  [ -x "$bin/$b" ] || continue
  { echo; echo "### \`$b\`"; echo; echo '```'; "$bin/$b" --help; echo '```'; } >> "$ref"
done
{ echo; echo "### \`deploy/ember-local\`"; echo; echo '```'; "$root/deploy/ember-local" --help; echo '```'; } >> "$ref"
/usr/bin/python3 - "$root/README.md" "$ref" <<'PY'
import sys
readme, ref = sys.argv[1], open(sys.argv[2]).read()
s = open(readme).read()
a = s.index("<!-- BEGIN BINARY REFERENCE")
a = s.index("\n", a) + 1
b = s.index("<!-- END BINARY REFERENCE -->")
open(readme, "w").write(s[:a] + ref.lstrip("\n") + "\n" + s[b:])
PY
rm -f "$ref"
