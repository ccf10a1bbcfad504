#!/usr/bin/env bash
# The README's binary reference must be what the binaries print for --help today: regenerate it
# into a copy of the README with deploy/gen-readme-ref.sh and compare.
set -euo pipefail
src="${EMBER_SRC:?}" bin="${EMBER_BIN:?}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp "$src/README.md" "$tmp/README.md"
bash "$src/deploy/gen-readme-ref.sh" "$bin" "$tmp/README.md"
if ! diff -u "$src/README.md" "$tmp/README.md" > "$tmp/diff"; then
  cat "$tmp/diff"
  echo "FAIL: README.md's binary reference is stale: run deploy/gen-readme-ref.sh"
  exit 1
fi
echo "ok: README.md's binary reference matches --help of $(grep -c '^### `' "$tmp/README.md") binaries"
