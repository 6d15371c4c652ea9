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
if ! have; then
    # Debian's nodejs and npm (as scripts/browser.sh installs Chromium); needs root or sudo.
    SUDO=()
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); else
            echo "sdk-node: node and npm are missing and this user cannot install them (apt-get install nodejs npm)" >&2
            exit 1
        fi
    fi
    echo "sdk-node: installing nodejs and npm from Debian" >&2
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq >&2 || true
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends nodejs npm >&2
fi
have || { echo "sdk-node: node or npm still missing after install" >&2; exit 1; }
want="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dependencies"]["openai"])' "$SRC/package.json")"
have="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$DIR/node_modules/openai/package.json" 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
    mkdir -p "$DIR"
    cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/"
    (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
echo "$DIR"
