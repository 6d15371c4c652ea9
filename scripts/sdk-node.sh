#!/usr/bin/env bash
# The official OpenAI JavaScript SDK (npm `openai`, pinned by scripts/sdk/node/package-lock.json)
# for the memory proxy's tests: crates/engram/tests/it/docs.rs runs the JavaScript snippet of
# docs/integrations.md with it. Uses the machine's Node.js and npm, or Debian's when there are
# none (the SDK's 7.x line needs Node 22; 6.x runs on this machine's Node 20). Idempotent and
# cached in $ENGRAM_CACHE_DIR/sdk-node; `npm ci` runs only when the installed version is not
# the pinned one. Prints the directory holding node_modules on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE_DIR="${ENGRAM_CACHE_DIR:-$HOME/.cache/engram}"
DIR="$CACHE_DIR/sdk-node"
SRC="scripts/sdk/node"
have() { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; }
# Debian's nodejs and npm when the machine has none (as scripts/browser.sh does for Chromium).
have || bash "$(dirname "$0")/apt-install.sh" sdk-node nodejs npm
have || { echo "sdk-node: node or npm still missing after install" >&2; exit 1; }
want="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dependencies"]["openai"])' "$SRC/package.json")"
have="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$DIR/node_modules/openai/package.json" 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
    mkdir -p "$DIR"
    cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/"
    (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
echo "$DIR"
