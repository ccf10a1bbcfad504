#!/usr/bin/env bash
# docs/CLI.md must be what the binaries print for --help today: regenerate it into a temporary
# file with deploy/gen-cli-ref.sh and compare.
set -euo pipefail
src="${EMBER_SRC:?}" bin="${EMBER_BIN:?}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
bash "$src/deploy/gen-cli-ref.sh" "$bin" "$tmp/CLI.md"
if ! diff -u "$src/docs/CLI.md" "$tmp/CLI.md" > "$tmp/diff"; then
  cat "$tmp/diff"
  echo "FAIL: docs/CLI.md is stale: build, then run deploy/gen-cli-ref.sh build/bin"
  exit 1
fi
echo "ok: docs/CLI.md matches --help of $(grep -c '^## `' "$tmp/CLI.md") binaries"
